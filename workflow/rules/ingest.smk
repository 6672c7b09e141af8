# Ingest, in two steps (docs/architecture.md): ingest_trace reads the profiler file and writes its tables as
# read (raw Parquet, the vendor's column names); normalize_columns applies Table 1 and the canonical schema.
# Editing the mapping reruns only normalize_columns, never the slow read. A merged dataset (merge: true,
# several rank files) gets ingest_rank + normalize_rank per file, then merge_ranks adds a rank column.
# Each rule names the `gpuvar` command it runs and every option it passes in `params:`.
# priority 1 (also bin_trace): Snakemake starts every dataset's ingest and binning, which hold 2 cores, before the
# 1-core causal and plot jobs; otherwise a 2-core job waited for a lone causal job and a core idled (demo 140 -> 126 s).
SINGLE_DATASETS = names_regex(REG.names(merged=False))
MERGED_DATASETS = names_regex(REG.names(merged=True))


rule ingest_trace:
    input:
        REG.source,
    output:
        directory(f"{files.INGEST_DIR}/{files.RAW_FOLDER}"),
    log:
        "logs/ingest_trace/{dataset}.log",
    benchmark:
        "benchmarks/ingest_trace/{dataset}.tsv"
    wildcard_constraints:
        dataset=SINGLE_DATASETS,
    priority: 1
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=REG.ingest_mb,  # the whole trace for most formats (gpuvar.workflow.memory)
        runtime=30,
    params:
        command="read",
        positional=lambda wildcards, input: list(input),
        output=lambda wildcards, output: output[0],
        format=lambda wildcards: DATASETS[wildcards.dataset].format,
        keep_vendor_columns=CFG.ingest.keep_vendor_columns,
    script:
        GPUVAR


rule normalize_columns:
    input:
        raw=f"{files.INGEST_DIR}/{files.RAW_FOLDER}",
        mapping=files.mapping_files(),
    output:
        kernels=files.ingest_file(files.KERNELS_TABLE),
        memcpy=files.ingest_file(files.MEMCPY_TABLE),
        report=files.ingest_file(files.INGEST_REPORT),
    log:
        "logs/normalize_columns/{dataset}.log",
    benchmark:
        "benchmarks/normalize_columns/{dataset}.tsv"
    wildcard_constraints:
        dataset=SINGLE_DATASETS,
    priority: 1
    conda:
        ENV
    threads: 1 + CFG.ingest.workers
    resources:
        mem_mb=REG.ingest_mb,
        runtime=20,
    params:
        command="normalize",
        positional=lambda wildcards, input: input.raw,
        output=lambda wildcards, output: files.folder(output.report),
        # an export in pieces: its worker processes, the cores Snakemake gave the job but one
        workers=lambda wildcards, threads: threads - 1,
    script:
        GPUVAR


use rule ingest_trace as ingest_rank with:
    input:
        REG.rank_source,
    output:
        directory(f"{files.RANK_INGEST_DIR}/{files.RAW_FOLDER}"),
    log:
        "logs/ingest_rank/{dataset}/{rank}.log",
    benchmark:
        "benchmarks/ingest_rank/{dataset}/{rank}.tsv"
    wildcard_constraints:
        dataset=MERGED_DATASETS,
        rank=r"\d+",
    resources:
        mem_mb=REG.rank_ingest_mb,
        runtime=30,


use rule normalize_columns as normalize_rank with:
    input:
        raw=f"{files.RANK_INGEST_DIR}/{files.RAW_FOLDER}",
        mapping=files.mapping_files(),
    output:
        kernels=files.ingest_file(files.KERNELS_TABLE, files.RANK_INGEST_DIR),
        memcpy=files.ingest_file(files.MEMCPY_TABLE, files.RANK_INGEST_DIR),
        report=files.ingest_file(files.INGEST_REPORT, files.RANK_INGEST_DIR),
    log:
        "logs/normalize_rank/{dataset}/{rank}.log",
    benchmark:
        "benchmarks/normalize_rank/{dataset}/{rank}.tsv"
    wildcard_constraints:
        dataset=MERGED_DATASETS,
        rank=r"\d+",
    resources:
        mem_mb=REG.rank_ingest_mb,
        runtime=20,


rule merge_ranks:
    input:
        REG.rank_reports,
    output:
        kernels=files.ingest_file(files.KERNELS_TABLE),
        memcpy=files.ingest_file(files.MEMCPY_TABLE),
        report=files.ingest_file(files.INGEST_REPORT),
    log:
        "logs/merge_ranks/{dataset}.log",
    benchmark:
        "benchmarks/merge_ranks/{dataset}.tsv"
    wildcard_constraints:
        dataset=MERGED_DATASETS,
    priority: 1
    conda:
        ENV
    threads: 2  # beyond 16 ranks, two merges of 16 into scratch files at once (threads: --jobs)
    resources:
        mem_mb=lambda wildcards, input: merge_mb(input),  # a row group of the widest table (gpuvar.workflow.memory)
        runtime=30,
    params:
        command="ingest-merge",
        positional=lambda wildcards, input: [files.folder(report) for report in input],
        output=lambda wildcards, output: files.folder(output.report),
        jobs=lambda wildcards, threads: threads,
    script:
        GPUVAR
