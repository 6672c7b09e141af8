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
