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


# The rank analysis is an MPI job like bin_trace (`shell:` for mpiexec/srun, every value quoted, the launcher only
# through params.launcher): each process reads its share of the ranks (gpuvar.ranks.job), binning.ranks processes
# at most, one per rank file. Its inputs: each rank's ingest folder; for Kineto rank files also the traces (--traces),
# whose host collectives each folder keeps (--ingested: the traces are not read again).


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
    threads: CFG.binning.ranks
    resources:
        mpi="mpiexec",
        # the Slurm plugin refuses an MPI job of one task: a 1-process run asks for 2 and starts 1
        tasks=lambda wildcards: max(2, REG.ranks_processes(wildcards)),
        cpus_per_task=1,
        mem_mb_per_cpu=2000,
        runtime=15,
    params:
        processes=REG.ranks_processes,
        launcher=mpi_launcher,
        traces=lambda wildcards, input: ["--traces"] if "traces" in input.keys() else [],
        inputs=lambda wildcards, input: input.get("traces")
        or [files.folder(report) for report in input.reports],
        ingested=lambda wildcards, input: (
            ["--ingested", *(files.folder(report) for report in input.reports)]
            if "traces" in input.keys()
            else []
        ),
        seed=CFG.causal.seed,
    shell:
        "{params.launcher:q} -n {params.processes:q} gpuvar ranks {params.inputs:q} {params.traces:q}"
        " {params.ingested:q} --seed {params.seed:q} --output {output:q} > {log:q} 2>&1"
