# The embedded demo (config `demo`): deterministic synthetic traces in real profiler formats.
if CFG.demo.enabled:

    rule make_demo_data:
        output:
            expand(f"{files.DEMO_DIR}/{{file}}", file=files.DEMO_FILES),
        log:
            "logs/make_demo_data/demo.log",
        benchmark:
            "benchmarks/make_demo_data/demo.tsv"
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            command="demo-data",
            output=lambda wildcards, output: files.folder(output[0]),
            seed=CFG.demo.seed,
            rows=CFG.demo.rows,
        script:
            GPUVAR
