rule discover_causal_graph:
    input:
        rows=rules.bin_trace.output.rows,
    output:
        directory("results/causal/{dataset}/{target}"),
    log:
        "logs/discover_causal_graph/{dataset}_{target}.log",
    benchmark:
        "benchmarks/discover_causal_graph/{dataset}_{target}.tsv"
    conda:
        ENV
    threads: CFG.causal.workers
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        group_by=lambda wildcards: (
            DATASETS[wildcards.dataset].group_by if CFG.causal.per_group else "none"
        ),
        features=lambda wildcards: feature_option(DATASETS[wildcards.dataset].features),
        min_rows=CFG.causal.min_rows,
        bootstrap=CFG.causal.bootstrap,
        seed=CFG.causal.seed,
        engine=CFG.causal.engine,
    shell:
        "gpuvar causal {input.rows:q} --target {wildcards.target:q} --group-by {params.group_by:q}"
        " --features {params.features:q} --min-rows {params.min_rows:q} --bootstrap {params.bootstrap:q}"
        " --workers {threads:q} --seed {params.seed:q} --engine {params.engine:q}"
        " --output {output:q} > {log:q} 2>&1"
