# `snakemake paper`: the paper's figures from config/paper.yaml (see docs/paper.md).
# The paper's datasets join DATASETS (a name shared with config/config.yaml must mean the same trace), so
# ingest, binning and causal discovery are the ordinary rules; only the figure rules below are paper-only.

from gpuvar.plots.paper import load_paper_config, same_dataset

PAPER_YAML = Path(workflow.basedir) / "config" / "paper.yaml"

if PAPER_YAML.is_file():
    try:
        PAPER = load_paper_config(PAPER_YAML, Path(workflow.basedir))
    except ConfigError as error:
        sys.exit(f"gpuvar: {error}")
    for _dataset in PAPER.config.datasets:
        if _dataset.name in DATASETS and not same_dataset(
            DATASETS[_dataset.name], _dataset
        ):
            sys.exit(
                f"gpuvar: {PAPER_YAML}: dataset {_dataset.name!r} differs from the one of the same name in the "
                "main config (source, format, group_by or features); rename it in config/paper.yaml"
            )
        DATASETS.setdefault(_dataset.name, _dataset)

    # Widen {dataset} for the rules defined after this file (ingest, binning, causal, the paper's figures);
    # Snakefile includes this file right after common.smk for that reason.
    wildcard_constraints:
        dataset="|".join(re.escape(name) for name in DATASETS),

    PAPER_FIGURES = PAPER.figures
    PAPER_SCALING = PAPER.config.scaling

    def paper_outputs():
        """Every file of `snakemake paper`: results/paper/<figure>/..."""
        outputs = []
        for fig in PAPER_FIGURES.values():
            if fig.kind == "causal":
                for dataset in fig.datasets:
                    outputs += [
                        f"results/paper/{fig.name}/{dataset}_{t}"
                        for t in fig.targets
                    ]
            elif fig.kind == "parallel":
                for dataset in fig.datasets:
                    outputs += [
                        f"results/paper/{fig.name}/{dataset}_{t}.{ext}"
                        for t in fig.targets
                        for ext in PLOT_FORMATS + ["csv"]
                    ]
            else:
                outputs += [
                    f"results/paper/{fig.name}/scaling.{ext}"
                    for ext in PLOT_FORMATS + ["csv"]
                ]
        return outputs

    rule paper:
        input:
            paper_outputs(),

    rule make_paper_perfcounter_demo:
        output:
            "resources/paper/{name}_ncu.csv",
        log:
            "logs/make_paper_perfcounter_demo/{name}.log",
        wildcard_constraints:
            name="|".join(re.escape(name) for name in PAPER.demo_perfcounter) or "(?!)",
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            rows=lambda wildcards: PAPER.demo_perfcounter[wildcards.name]["rows"],
            variant=lambda wildcards: PAPER.demo_perfcounter[wildcards.name]["variant"],
            seed=CFG.demo.seed,
        shell:
            "gpuvar demo-data --format ncu --rows {params.rows} --variant {params.variant}"
            " --seed {params.seed} --output {output:q} > {log} 2>&1"

    rule plot_paper_causal_graphs:
        input:
            "results/causal/{dataset}/{target}",
        output:
            report(
                directory("results/paper/{fig}/{dataset}_{target}"),
                patterns=["{group}." + REPORT_FORMAT],
                caption="../report/paper_causal.rst",
                category="paper",
                subcategory="{fig}",
                labels={
                    "figure": "{fig}",
                    "dataset": "{dataset}",
                    "target": "{target}",
                    "group": "{group}",
                },
            ),
        log:
            "logs/plot_paper_causal_graphs/{fig}_{dataset}_{target}.log",
        wildcard_constraints:
            fig="|".join(f.name for f in PAPER_FIGURES.values() if f.kind == "causal")
            or "(?!)",
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            which=lambda wildcards: PAPER_FIGURES[wildcards.fig].groups,
            options=PLOT_OPTIONS,
            filters=EDGE_FILTERS,
        shell:
            "gpuvar plot causal {input:q} --output {output:q} --which {params.which}"
            " {params.options} {params.filters} > {log} 2>&1"

    rule plot_paper_parallel_coordinates:
        input:
            rows="results/bin/{dataset}/{target}/topk_rows.parquet",
        output:
            figures=figure_files(
                "results/paper/{fig}/{dataset}_{target}",
                "../report/paper_parallel.rst",
                "paper",
                "{fig}",
                {
                    "figure": "{fig}",
                    "dataset": "{dataset}",
                    "target": "{target}",
                    "group": "top-k rows",
                },
            ),
            data="results/paper/{fig}/{dataset}_{target}.csv",
        log:
            "logs/plot_paper_parallel_coordinates/{fig}_{dataset}_{target}.log",
        wildcard_constraints:
            fig="|".join(
                f.name for f in PAPER_FIGURES.values() if f.kind == "parallel"
            )
            or "(?!)",
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            stem=lambda wildcards, output: output.data.removesuffix(".csv"),
            features=lambda wildcards: ",".join(PAPER_FIGURES[wildcards.fig].features),
            options=PLOT_OPTIONS,
        shell:
            "gpuvar plot parallel {input.rows:q} --output {params.stem:q} --target {wildcards.target}"
            " --features {params.features} {params.options} > {log} 2>&1"

    rule plot_paper_scaling:
        input:
            lambda wildcards: [
                f"results/scaling/{scaling_trace(PAPER_SCALING.dataset, PAPER_SCALING.rows)}"
                f"/{PAPER_SCALING.target}/ranks{r}/bin.json"
                for r in PAPER_SCALING.ranks
            ],
        output:
            figures=figure_files(
                "results/paper/{fig}/scaling",
                "../report/scaling.rst",
                "paper",
                "{fig}",
                {
                    "figure": "{fig}",
                    "dataset": PAPER_SCALING.dataset or "",
                    "target": PAPER_SCALING.target,
                    "group": "scaling",
                },
            ),
            data="results/paper/{fig}/scaling.csv",
        log:
            "logs/plot_paper_scaling/{fig}.log",
        wildcard_constraints:
            fig="|".join(f.name for f in PAPER_FIGURES.values() if f.kind == "scaling")
            or "(?!)",
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
