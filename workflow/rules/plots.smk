# Figures: per dataset and target a causal graph per analysis group, parallel coordinates of the top-k
# rows and the variability timeline; and, as its own target `scaling`, a strong-scaling study of the binning job.
# Every figure is written in CFG.plots.formats (byte-identical on rerun) plus its data as CSV; the PNG
# (else the SVG) goes into `snakemake --report`. Included before the stage rules (see Snakefile), so inputs
# are written as paths rather than `rules.<name>.output`. Path helpers: gpuvar/plots/snakemake_helpers.py.

import gpuvar.plots.snakemake_helpers as plot_paths

PLOT_FORMATS = list(CFG.plots.formats)
REPORT_FORMAT = plot_paths.report_format(PLOT_FORMATS)
# lists: `{params.options:q}` quotes each item, so no config value is ever parsed by the shell
PLOT_OPTIONS = ["--formats", ",".join(PLOT_FORMATS), "--dpi", str(CFG.plots.dpi)]
EDGE_FILTERS = [
    "--min-variance-share",
    str(CFG.plots.min_variance_share),
    "--min-probability",
    str(CFG.plots.min_probability),
]
PLOT_OUTPUTS = plot_paths.plot_outputs(ANALYSES, CFG)
SCALING_OUTPUTS = plot_paths.scaling_outputs(CFG, DATASETS)


# `snakemake scaling`: the strong-scaling study of config `scaling` (not in `all`: it measures time, so its
# figure differs on every run, and it occupies the machine).
rule scaling:
    input:
        SCALING_OUTPUTS,


rule plot_causal_graphs:
    input:
        "results/causal/{dataset}/{target}",
    output:
        report(
            directory("results/plots/{dataset}/{target}/causal"),
            patterns=[f"{{group}}.{REPORT_FORMAT}"],
            caption="../report/causal_graph.rst",
            category="{dataset}",
            subcategory="causal graphs: {target}",
            labels={
                "dataset": "{dataset}",
                "target": "{target}",
                "figure": "causal graph",
                "group": "{group}",
            },
        ),
    log:
        "logs/plot_causal_graphs/{dataset}_{target}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        options=PLOT_OPTIONS,
        filters=EDGE_FILTERS,
    shell:
        "gpuvar plot causal {input:q} --output {output:q} {params.options:q} {params.filters:q} > {log:q} 2>&1"


rule plot_parallel_coordinates:
    input:
        rows="results/bin/{dataset}/{target}/topk_rows.parquet",
    output:
        figures=plot_paths.figure_files(
            "results/plots/{dataset}/{target}/parallel",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/parallel.rst",
            category="{dataset}",
            subcategory="parallel coordinates",
            labels={
                "dataset": "{dataset}",
                "target": "{target}",
                "figure": "parallel coordinates",
            },
        ),
        data="results/plots/{dataset}/{target}/parallel.csv",
    log:
        "logs/plot_parallel_coordinates/{dataset}_{target}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        stem=lambda wildcards, output: output.data.removesuffix(".csv"),
        features=",".join(CFG.plots.parallel_features),
        options=PLOT_OPTIONS,
    shell:
        "gpuvar plot parallel {input.rows:q} --output {params.stem:q} --target {wildcards.target:q}"
        " --features {params.features:q} {params.options:q} > {log:q} 2>&1"


rule plot_variability_timeline:
    input:
        bins="results/bin/{dataset}/{target}/bins.parquet",
        report="results/bin/{dataset}/{target}/bin.json",
    output:
        figures=plot_paths.figure_files(
            "results/plots/{dataset}/{target}/timeline",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/timeline.rst",
            category="{dataset}",
            subcategory="variability timeline",
            labels={
                "dataset": "{dataset}",
                "target": "{target}",
                "figure": "variability timeline",
            },
        ),
        data="results/plots/{dataset}/{target}/timeline.csv",
    log:
        "logs/plot_variability_timeline/{dataset}_{target}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        stem=lambda wildcards, output: output.data.removesuffix(".csv"),
        options=PLOT_OPTIONS,
    shell:
        "gpuvar plot timeline {input.bins:q} --bin-json {input.report:q} --output {params.stem:q}"
        " --target {wildcards.target:q} {params.options:q} > {log:q} 2>&1"


rule make_scaling_trace:
    output:
        kernels="resources/scaling/demo-{rows}/kernels.parquet",
        memcpy="resources/scaling/demo-{rows}/memcpy.parquet",
    log:
        "logs/make_scaling_trace/demo-{rows}.log",
    benchmark:
        "benchmarks/make_scaling_trace/demo-{rows}.tsv"
    wildcard_constraints:
        rows=r"\d+",
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        outdir=subpath(output.kernels, parent=True),
        seed=CFG.demo.seed,
    shell:
        "gpuvar demo-data --format canonical --rows {wildcards.rows:q} --seed {params.seed:q}"
        " --workers {threads:q} --output {params.outdir:q} > {log:q} 2>&1"


# One binning run per rank count. threads: more than any machine has, which Snakemake scales down to
# --cores, so locally no other job runs beside it and the timings in bin.json are not disturbed
# (workflow.cores would break `--report` and `-n` without --cores). On Slurm cpus_per_task=1 and
# tasks=ranks size the allocation.
rule bin_scaling_trace:
    input:
        kernels=lambda wildcards: plot_paths.scaling_kernels(wildcards.trace),
    output:
        bins="results/scaling/{trace}/{target}/ranks{ranks}/bins.parquet",
        rows="results/scaling/{trace}/{target}/ranks{ranks}/topk_rows.parquet",
        report="results/scaling/{trace}/{target}/ranks{ranks}/bin.json",
    log:
        "logs/bin_scaling_trace/{trace}_{target}_ranks{ranks}.log",
    benchmark:
        "benchmarks/bin_scaling_trace/{trace}_{target}_ranks{ranks}.tsv"
    wildcard_constraints:
        trace=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
        ranks=r"\d+",
    conda:
        ENV
    threads: 4096
    resources:
        mpi="mpiexec",
        # the Slurm plugin refuses an MPI job of one task: the 1-rank run asks for 2 and starts 1
        tasks=lambda wildcards: max(2, int(wildcards.ranks)),
        cpus_per_task=1,
        mem_mb_per_cpu=2000,
        runtime=30,
    params:
        outdir=subpath(output.report, parent=True),
        memcpy=lambda wildcards, input: Path(input.kernels).with_name("memcpy.parquet"),
        bin_width=CFG.binning.bin_width,
        top_k=CFG.binning.top_k,
        group=CFG.targets.variability_group,
        link=CFG.targets.memcpy_link,
        features=feature_option(CFG.binning.features),
        workers=CFG.binning.workers_per_rank,
    shell:
        "{resources.mpi} -n {wildcards.ranks:q} gpuvar bin {input.kernels:q} --memcpy {params.memcpy:q}"
        " --target {wildcards.target:q} --group {params.group:q} --link {params.link:q}"
        " --bin-width {params.bin_width:q} --top-k {params.top_k:q} --features {params.features:q}"
        " --workers-per-rank {params.workers:q} --output {params.outdir:q} > {log:q} 2>&1"


rule plot_scaling:
    input:
        lambda wildcards: plot_paths.scaling_reports(
            wildcards.trace, wildcards.target, wildcards.ranklist.split("_")
        ),
    output:
        figures=plot_paths.figure_files(
            "results/scaling/{trace}/{target}/ranks_{ranklist}/scaling",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/scaling.rst",
            category="scaling",
            subcategory="binning job: {trace}",
            labels={
                "trace": "{trace}",
                "target": "{target}",
                "ranks": "{ranklist}",
                "figure": "strong scaling",
            },
        ),
        data="results/scaling/{trace}/{target}/ranks_{ranklist}/scaling.csv",
    log:
        "logs/plot_scaling/{trace}_{target}_{ranklist}.log",
    wildcard_constraints:
        trace=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
        ranklist=r"\d+(_\d+)*",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        stem=lambda wildcards, output: output.data.removesuffix(".csv"),
        options=PLOT_OPTIONS,
    shell:
        "gpuvar plot scaling {input:q} --output {params.stem:q} {params.options:q} > {log:q} 2>&1"
