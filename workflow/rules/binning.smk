rule bin_trace:
    input:
        kernels=rules.ingest_trace.output.kernels,
    output:
        bins="results/bin/{dataset}/{target}/bins.parquet",
        rows="results/bin/{dataset}/{target}/topk_rows.parquet",
        sample="results/bin/{dataset}/{target}/sample_rows.parquet",
        report="results/bin/{dataset}/{target}/bin.json",
    log:
        "logs/bin_trace/{dataset}_{target}.log",
    benchmark:
        "benchmarks/bin_trace/{dataset}_{target}.tsv"
    conda:
        ENV
    threads: CFG.binning.ranks
    resources:
        mpi="mpiexec",
        tasks=CFG.binning.ranks,
        cpus_per_task=1,
        mem_mb_per_cpu=2000,
        runtime=30,
    params:
        outdir=subpath(output.report, parent=True),
        memcpy=lambda wildcards, input: Path(input.kernels).with_name("memcpy.parquet"),
        bin_width=CFG.binning.bin_width,
        launch_bin_width=CFG.binning.launch_bin_width,
        top_k=CFG.binning.top_k,
        group=CFG.targets.variability_group,
        link=CFG.targets.memcpy_link,
        features=feature_option(CFG.binning.features),
        workers=CFG.binning.workers_per_rank,
        sample_bins=sample_bins_option(CFG),
        seed=CFG.causal.seed,
    shell:
        "{resources.mpi} -n {resources.tasks} gpuvar bin {input.kernels:q}"
        " $(test -f {params.memcpy:q} && echo --memcpy {params.memcpy:q})"
        " --target {wildcards.target:q} --group {params.group:q} --link {params.link:q}"
        " --bin-width {params.bin_width:q} --launch-bin-width {params.launch_bin_width:q} --top-k {params.top_k:q} --features {params.features:q}"
        " --workers-per-rank {params.workers:q} --sample-bins {params.sample_bins:q} --sample-seed {params.seed:q}"
        " --output {params.outdir:q} > {log:q} 2>&1"
