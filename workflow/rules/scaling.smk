# `snakemake scaling`: a strong-scaling study of the binning job (config `scaling`): bin_scaling_trace
# (binning.smk: bin_trace once per rank count) on the dataset's ingested trace or, for an embedded demo
# dataset, on the bigger canonical trace made here (20k launches are too few to time); plot_scaling
# (plots.smk) draws it. Not in `all`: it measures time, so its figure differs on every run.

SCALING_OUTPUTS = plot_paths.scaling_outputs(CFG, DATASETS)


rule scaling:
    input:
        SCALING_OUTPUTS,


rule make_scaling_trace:
    output:
        kernels=f"{files.SCALING_TRACE_DIR}/{files.KERNELS_TABLE}",
        memcpy=f"{files.SCALING_TRACE_DIR}/{files.MEMCPY_TABLE}",
    log:
        "logs/make_scaling_trace/demo-{rows}.log",
    benchmark:
        "benchmarks/make_scaling_trace/demo-{rows}.tsv"
    wildcard_constraints:
        rows=r"\d+",
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        command="demo-data",
        output=lambda wildcards, output: files.folder(output.kernels),
        format="canonical",
        rows=lambda wildcards: wildcards.rows,
        seed=CFG.demo.seed,
        workers=lambda wildcards, threads: threads,
    script:
        GPUVAR
