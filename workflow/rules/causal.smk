rule discover_causal_graph:
    input:
        rows=rules.bin_trace.output.rows,
        sample=rules.bin_trace.output.sample,
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
        prior=CFG.causal.prior_knowledge,
        threshold=CFG.causal.collinear_threshold,
        selection=lambda wildcards, input: causal_rows_options(CFG, input),
    shell:
        "gpuvar causal {params.selection:q} --target {wildcards.target:q} --group-by {params.group_by:q}"
        " --features {params.features:q} --min-rows {params.min_rows:q} --bootstrap {params.bootstrap:q}"
        " --workers {threads:q} --seed {params.seed:q} --engine {params.engine:q} --prior {params.prior:q}"
        " --collinear-threshold {params.threshold:q} --output {output:q} > {log:q} 2>&1"


rule summarise_causal_checks:
    input:
        [f"results/causal/{dataset}/{target}" for dataset, target in ANALYSES],
    output:
        "results/causal/checks.tsv",
    log:
        "logs/summarise_causal_checks/checks.log",
    benchmark:
        "benchmarks/summarise_causal_checks/checks.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    shell:
        "gpuvar causal-checks {input:q} --output {output:q} > {log:q} 2>&1"
