# Figures: per dataset and target a causal graph per analysis group, parallel coordinates of the top-k
# rows and the variability timeline; once per config a strong-scaling study of the binning job.
# Every figure is written in CFG.plots.formats (byte-identical on rerun) plus its data as CSV; the PNG
# (else the SVG) goes into `snakemake --report`. Included before the stage rules (see Snakefile), so inputs
# are written as paths rather than `rules.<name>.output`.

PLOT_FORMATS = list(CFG.plots.formats)
REPORT_FORMAT = "png" if "png" in PLOT_FORMATS else PLOT_FORMATS[0]
PLOT_OPTIONS = f"--formats {','.join(PLOT_FORMATS)} --dpi {CFG.plots.dpi}"
EDGE_FILTERS = (
    f"--min-contribution-pct {CFG.plots.min_contribution_pct}"
    f" --min-probability {CFG.plots.min_probability}"
)


def figure_files(stem, caption, category, subcategory, labels):
    """stem.<fmt> for every configured format; the report format is marked for the report."""
    files = [f"{stem}.{fmt}" for fmt in PLOT_FORMATS]
    marked = report(
        f"{stem}.{REPORT_FORMAT}",
        caption=caption,
        category=category,
        subcategory=subcategory,
        labels=labels,
    )
    return [
        marked if fmt == REPORT_FORMAT else path
        for fmt, path in zip(PLOT_FORMATS, files)
    ]


def scaling_trace(dataset, rows):
    """What the scaling study bins: a canonical demo trace of `rows` launches when the dataset is one of
    the embedded demo files (20k launches are too few to time), else the dataset's ingested trace.
    """
    source = str(DATASETS[dataset].source)
    return (
        f"demo-{rows}"
        if CFG.demo.enabled and source.startswith("resources/demo/")
        else dataset
    )


def scaling_kernels(wildcards):
    if re.fullmatch(r"demo-\d+", wildcards.trace):
        return f"resources/scaling/{wildcards.trace}/kernels.parquet"
    return f"results/ingest/{wildcards.trace}/kernels.parquet"


def scaling_figure_stem(trace, target, ranks):
    return f"results/scaling/{trace}/{target}/ranks_{'_'.join(map(str, sorted(ranks)))}/scaling"


def plot_outputs():
    """Everything the plot rules add to `all`."""
    outputs = []
    for dataset, target in ANALYSES:
        base = f"results/plots/{dataset}/{target}"
        outputs.append(f"{base}/causal")
        outputs += [
            f"{base}/{kind}.{ext}"
            for kind in ("parallel", "timeline")
            for ext in PLOT_FORMATS + ["csv"]
        ]
    if CFG.scaling.dataset is not None:
        trace = scaling_trace(CFG.scaling.dataset, CFG.scaling.rows)
        stem = scaling_figure_stem(trace, CFG.scaling.target, CFG.scaling.ranks)
        outputs += [f"{stem}.{ext}" for ext in PLOT_FORMATS + ["csv"]]
    return outputs


rule plot_causal_graphs:
    input:
        "results/causal/{dataset}/{target}",
    output:
        report(
            directory("results/plots/{dataset}/{target}/causal"),
            patterns=["{group}." + REPORT_FORMAT],
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
        "gpuvar plot causal {input:q} --output {output:q} {params.options} {params.filters} > {log} 2>&1"


rule plot_parallel_coordinates:
    input:
        rows="results/bin/{dataset}/{target}/topk_rows.parquet",
    output:
        figures=figure_files(
            "results/plots/{dataset}/{target}/parallel",
            "../report/parallel.rst",
            "{dataset}",
            "parallel coordinates",
            {
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
        "gpuvar plot parallel {input.rows:q} --output {params.stem:q} --target {wildcards.target}"
        " --features {params.features} {params.options} > {log} 2>&1"


rule plot_variability_timeline:
    input:
        bins="results/bin/{dataset}/{target}/bins.parquet",
        report="results/bin/{dataset}/{target}/bin.json",
    output:
        figures=figure_files(
            "results/plots/{dataset}/{target}/timeline",
            "../report/timeline.rst",
            "{dataset}",
            "variability timeline",
            {
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
        " --target {wildcards.target} {params.options} > {log} 2>&1"


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
        "gpuvar demo-data --format canonical --rows {wildcards.rows} --seed {params.seed}"
        " --workers {threads} --output {params.outdir} > {log} 2>&1"


# One binning run per rank count. threads = all local cores, so locally no other job runs beside it and
# the timings in bin.json are not disturbed; on Slurm cpus_per_task=1 and tasks=ranks size the allocation.
rule bin_scaling_trace:
    input:
        kernels=scaling_kernels,
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
    threads: workflow.cores
    resources:
        mpi="mpiexec",
        tasks=lambda wildcards: int(wildcards.ranks),
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
        "{resources.mpi} -n {resources.tasks} gpuvar bin {input.kernels} --memcpy {params.memcpy}"
        " --target {wildcards.target} --group {params.group} --link {params.link}"
        " --bin-width {params.bin_width} --top-k {params.top_k} --features {params.features}"
        " --workers-per-rank {params.workers} --output {params.outdir} > {log} 2>&1"


def scaling_reports(wildcards):
    ranks = [int(r) for r in wildcards.ranklist.split("_")]
    return [
        f"results/scaling/{wildcards.trace}/{wildcards.target}/ranks{r}/bin.json"
        for r in ranks
    ]


rule plot_scaling:
    input:
        scaling_reports,
    output:
        figures=figure_files(
            "results/scaling/{trace}/{target}/ranks_{ranklist}/scaling",
            "../report/scaling.rst",
            "scaling",
            "binning job: {trace}",
            {
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
        "gpuvar plot scaling {input:q} --output {params.stem:q} {params.options} > {log} 2>&1"
