# `snakemake paper`: the paper's figures from config/paper.yaml (see docs/paper.md). The paper's datasets are
# in the registry (common.smk: one identical to a config/config.yaml dataset is shared; one that differs under
# the same name becomes paper-<name>), so ingest, binning and causal discovery are the ordinary rules; the
# figure rules are the plot rules with the paper's paths and choices (plots.smk).

if REG.paper is not None:
    PAPER = REG.paper
    PAPER_OUTPUTS = plot_paths.paper_outputs(PAPER, PLOT_FORMATS, REG.paper_names)

    rule paper:
        input:
            PAPER_OUTPUTS,

    rule make_paper_perfcounter_demo:
        output:
            files.PAPER_DEMO_TRACE,
        log:
            "logs/make_paper_perfcounter_demo/{name}.log",
        benchmark:
            "benchmarks/make_paper_perfcounter_demo/{name}.tsv"
        wildcard_constraints:
            name=names_regex(PAPER.demo_perfcounter),
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            command="demo-data",
            output=lambda wildcards, output: output[0],
            format="ncu",
            rows=lambda wildcards: PAPER.demo_perfcounter[wildcards.name]["rows"],
            variant=lambda wildcards: PAPER.demo_perfcounter[wildcards.name]["variant"],
            seed=CFG.demo.seed,
        script:
            GPUVAR
