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
        kernels=f"resources/scaling/demo-{{rows}}/{files.KERNELS_TABLE}",
        memcpy=f"resources/scaling/demo-{{rows}}/{files.MEMCPY_TABLE}",
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
        args=lambda wildcards, output, threads: rule_args.scaling_trace_arguments(
            REG, wildcards.rows, threads, output.kernels
        ),
    script:
        f"{SCRIPTS}/make_demo_data.py"
