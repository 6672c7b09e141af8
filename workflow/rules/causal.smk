# Causal discovery per dataset and target (one graph per kernel group and one for the whole dataset), then
# one table of every graph's assumption checks (results/causal/checks.tsv, summarised after the run; as a page,
# checks.html, the report's overview of which graphs are trusted and which flagged).


rule discover_causal_graph:
    input:
        rows=files.bin_file(files.TOPK_ROWS),
        sample=files.bin_file(files.SAMPLE_ROWS),
    output:
        directory(files.CAUSAL_DIR),
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
        command="causal",
        # causal.rows: the top-k bins' rows, compared with the random bins' (--random-rows); or the random rows
        positional=lambda wildcards, input: REG.causal_rows(input),
        random_rows=lambda wildcards, input: REG.random_rows(input),
        output=lambda wildcards, output: output[0],
        target=lambda wildcards: wildcards.target,
        group_by=lambda wildcards: REG.group_by(wildcards.dataset),
        features=lambda wildcards: DATASETS[wildcards.dataset].features,
        min_rows=CFG.causal.min_rows,
        bootstrap=CFG.causal.bootstrap,
        seed=CFG.causal.seed,
        engine=CFG.causal.engine,
        prior=CFG.causal.prior_knowledge,
        collinear_threshold=CFG.causal.collinear_threshold,
        # the bootstrap's workers: the threads Snakemake gave the job (causal.workers, scaled to --cores)
        workers=lambda wildcards, threads: threads,
    script:
        GPUVAR


rule summarise_causal_checks:
    input:
        [files.CAUSAL_DIR.format(dataset=d, target=t) for d, t in ANALYSES],
    output:
        table=files.CHECKS_TABLE,
        page=report(
            files.CHECKS_OVERVIEW,
            caption="../report/checks.rst",
            category="4 Causal graphs: which to trust",
            labels={"page": "every causal graph, trusted or flagged"},
        ),
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
    params:
        command="causal-checks",
        positional=lambda wildcards, input: input,
        output=lambda wildcards, output: output.table,
        html=lambda wildcards, output: output.page,
    script:
        GPUVAR
