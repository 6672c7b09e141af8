# The embedded demo (config `demo`): deterministic synthetic traces in real profiler formats.
DEMO_FILES = [f"rank{rank}.sqlite" for rank in range(4)] + [
    "perfcounter_ncu.csv",
    "amd_rocprof.csv",
    "pair_baseline.sqlite",
    "pair_candidate.sqlite",
    "kineto_rank0.json.gz",
    "kineto_rank1.json.gz",
    "demo.json",
]


if CFG.demo.enabled:

    rule make_demo_data:
        output:
            expand("resources/demo/{file}", file=DEMO_FILES),
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
            args=rule_args.demo_arguments(REG, "resources/demo"),
        script:
            f"{SCRIPTS}/make_demo_data.py"
