# Findings per dataset (every launch: variance decomposition, verdicts, ranked actionable kernels), then one
# page over all datasets: results/findings/findings.md, the first thing a user reads (docs/causal.md#findings).


rule find_actionable_kernels:
    input:
        unpack(REG.findings_inputs),
    output:
        directory(files.DATASET_FINDINGS_DIR),
    log:
        "logs/find_actionable_kernels/{dataset}.log",
    benchmark:
        "benchmarks/find_actionable_kernels/{dataset}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        command="findings",
        positional=lambda wildcards, input: files.folder(input.kernels),
        output=lambda wildcards, output: output[0],
        name=lambda wildcards: wildcards.dataset,
        causal=lambda wildcards, input: input.get("causal"),  # when kernel_variability is analysed
        seed=CFG.causal.seed,
    script:
        GPUVAR


rule summarise_findings:
    input:
        [files.DATASET_FINDINGS_DIR.format(dataset=d) for d in REG.findings_datasets],
    output:
        html=report(
            f"{files.FINDINGS_DIR}/{files.FINDINGS_HTML}",
            caption="../report/findings.rst",
            category="1 Findings (read first)",
            labels={"page": "findings of every dataset"},
        ),
        page=f"{files.FINDINGS_DIR}/{files.FINDINGS_PAGE}",
        landing=f"{files.FINDINGS_DIR}/{files.FINDINGS_FRAGMENT}",
        record=f"{files.FINDINGS_DIR}/{files.FINDINGS_RECORD}",
    log:
        "logs/summarise_findings/findings.log",
    benchmark:
        "benchmarks/summarise_findings/findings.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        command="findings",
        positional=lambda wildcards, input: [
            f"{folder}/{files.FINDINGS_RECORD}" for folder in input
        ],
        output=lambda wildcards, output: files.folder(output.record),
        combine=True,
    script:
        GPUVAR


rule analyse_ranks:
    input:
        unpack(REG.ranks_inputs),
    output:
        report(
            directory(files.RANKS_DIR),
            patterns=["{page}.html"],  # ranks.html: ranks.md with its figures embedded
            caption="../report/ranks.rst",
            category="2 Ranks",
            subcategory="{dataset}",
            labels={"dataset": "{dataset}", "page": "which rank is late and why"},
        ),
    log:
        "logs/analyse_ranks/{dataset}.log",
    benchmark:
        "benchmarks/analyse_ranks/{dataset}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        command="ranks",
        # the original traces (--traces), else the merged ingest folder
        positional=lambda wildcards, input: input.get("traces")
        or files.folder(input.kernels),
        traces=lambda wildcards, input: "traces" in input.keys(),
        output=lambda wildcards, output: output[0],
        seed=CFG.causal.seed,
    script:
        GPUVAR
