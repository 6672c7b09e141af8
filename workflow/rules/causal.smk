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
        args=lambda wildcards, input, output, threads: rule_args.causal_arguments(
            REG,
            wildcards.dataset,
            wildcards.target,
            input.rows,
            input.sample,
            output[0],
            threads,
        ),
    script:
        f"{SCRIPTS}/discover_causal_graph.py"


rule summarise_causal_checks:
    input:
        [files.CAUSAL_DIR.format(dataset=d, target=t) for d, t in ANALYSES],
    output:
        table=files.CHECKS_TABLE,
        page=report(
            files.CHECKS_OVERVIEW,
            caption="../report/checks.rst",
            category="2 Causal graphs: which to trust",
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
    script:
        f"{SCRIPTS}/summarise_causal_checks.py"
