# Datasets of one file are ingested by ingest_trace. A merged dataset (merge: true, several rank files) gets one
# ingest_rank job per file, then merge_ranks combines them into the same outputs, with a rank column.
SINGLE_DATASETS = names_regex(n for n, d in DATASETS.items() if not d.merge)
MERGED_DATASETS = names_regex(n for n, d in DATASETS.items() if d.merge)


rule ingest_trace:
    input:
        dataset_source,
    output:
        kernels="results/ingest/{dataset}/kernels.parquet",
        report="results/ingest/{dataset}/ingest.json",
    log:
        "logs/ingest_trace/{dataset}.log",
    benchmark:
        "benchmarks/ingest_trace/{dataset}.tsv"
    wildcard_constraints:
        dataset=SINGLE_DATASETS,
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        format=dataset_format,
        vendor=(
            "--keep-vendor-columns"
            if CFG.ingest.keep_vendor_columns
            else "--no-keep-vendor-columns"
        ),
        outdir=subpath(output.kernels, parent=True),
    shell:
        "gpuvar ingest {input:q} --output {params.outdir:q} --format {params.format:q} {params.vendor:q} > {log:q} 2>&1"


rule ingest_rank:
    input:
        rank_source,
    output:
        kernels="results/ingest/{dataset}/ranks/{rank}/kernels.parquet",
        report="results/ingest/{dataset}/ranks/{rank}/ingest.json",
    log:
        "logs/ingest_rank/{dataset}/{rank}.log",
    benchmark:
        "benchmarks/ingest_rank/{dataset}/{rank}.tsv"
    wildcard_constraints:
        dataset=MERGED_DATASETS,
        rank=r"\d+",
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        format=dataset_format,
        vendor=(
            "--keep-vendor-columns"
            if CFG.ingest.keep_vendor_columns
            else "--no-keep-vendor-columns"
        ),
        outdir=subpath(output.kernels, parent=True),
    shell:
        "gpuvar ingest {input:q} --output {params.outdir:q} --format {params.format:q} {params.vendor:q} > {log:q} 2>&1"


rule merge_ranks:
    input:
        rank_reports,
    output:
        kernels="results/ingest/{dataset}/kernels.parquet",
        report="results/ingest/{dataset}/ingest.json",
    log:
        "logs/merge_ranks/{dataset}.log",
    benchmark:
        "benchmarks/merge_ranks/{dataset}.tsv"
    wildcard_constraints:
        dataset=MERGED_DATASETS,
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        parts=lambda wildcards, input: [str(Path(p).parent) for p in input],
        outdir=subpath(output.kernels, parent=True),
    shell:
        "gpuvar ingest-merge {params.parts:q} --output {params.outdir:q} > {log:q} 2>&1"
