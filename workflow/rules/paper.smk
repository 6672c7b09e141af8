# `snakemake paper`: the paper's figures from config/paper.yaml (see docs/paper.md).
# The paper's datasets join DATASETS (a dataset identical to one of config/config.yaml is shared; one that
# differs under the same name becomes paper-<name>), so ingest, binning and causal discovery are the
# ordinary rules; only the figure rules below are paper-only.

from gpuvar.plots.paper import load_paper_config, merge_datasets

PAPER_YAML = Path(workflow.basedir) / "config" / "paper.yaml"

if PAPER_YAML.is_file():
    try:
        PAPER = load_paper_config(PAPER_YAML, Path(workflow.basedir))
    except ConfigError as error:
        sys.exit(f"gpuvar: {error}")
    PAPER_NAMES = merge_datasets(PAPER, DATASETS)

    # Widen {dataset} for the rules defined after this file (ingest, binning, causal, the paper's figures);
    # Snakefile includes this file right after common.smk for that reason.
    wildcard_constraints:
        dataset="|".join(re.escape(name) for name in DATASETS),

    PAPER_FIGURES = PAPER.figures
    PAPER_SCALING = PAPER.config.scaling
    PAPER_OUTPUTS = plot_paths.paper_outputs(PAPER, PLOT_FORMATS, PAPER_NAMES)
    PAPER_SCALING_TRACE = (
        plot_paths.scaling_trace(
            DATASETS[PAPER_NAMES[PAPER_SCALING.dataset]],
            PAPER_SCALING.rows,
            CFG.demo.enabled,
        )
        if PAPER_SCALING.dataset
        else None
    )

    rule paper:
        input:
            PAPER_OUTPUTS,

    rule make_paper_perfcounter_demo:
        output:
            "resources/paper/{name}_ncu.csv",
        log:
            "logs/make_paper_perfcounter_demo/{name}.log",
        wildcard_constraints:
            name="|".join(map(re.escape, PAPER.demo_perfcounter)) or "(?!)",
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
            "gpuvar demo-data --format ncu --rows {params.rows:q} --variant {params.variant:q}"
            " --seed {params.seed:q} --output {output:q} > {log:q} 2>&1"

    rule plot_paper_causal_graphs:
        input:
            "results/causal/{dataset}/{target}",
        output:
            report(
                directory("results/paper/{fig}/{dataset}_{target}"),
                patterns=[f"{{group}}.{REPORT_FORMAT}"],
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
            fig=plot_paths.figure_names(PAPER, "causal"),
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
            "gpuvar plot causal {input:q} --output {output:q} --which {params.which:q}"
            " {params.options:q} {params.filters:q} > {log:q} 2>&1"

    rule plot_paper_parallel_coordinates:
        input:
            rows="results/bin/{dataset}/{target}/topk_rows.parquet",
        output:
            figures=plot_paths.figure_files(
                "results/paper/{fig}/{dataset}_{target}",
                PLOT_FORMATS,
                REPORT_FORMAT,
                caption="../report/paper_parallel.rst",
                category="paper",
                subcategory="{fig}",
                labels={
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
            fig=plot_paths.figure_names(PAPER, "parallel"),
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
            "gpuvar plot parallel {input.rows:q} --output {params.stem:q} --target {wildcards.target:q}"
            " --features {params.features:q} {params.options:q} > {log:q} 2>&1"

    rule plot_paper_scaling:
        input:
            plot_paths.scaling_reports(
                PAPER_SCALING_TRACE, PAPER_SCALING.target, PAPER_SCALING.ranks
            )
            if PAPER_SCALING_TRACE
            else [],
        output:
            figures=plot_paths.figure_files(
                "results/paper/{fig}/scaling",
                PLOT_FORMATS,
                REPORT_FORMAT,
                caption="../report/scaling.rst",
                category="paper",
                subcategory="{fig}",
                labels={
                    "figure": "{fig}",
                    "dataset": str(PAPER_SCALING.dataset),
                    "target": PAPER_SCALING.target,
                    "group": "scaling",
                },
            ),
            data="results/paper/{fig}/scaling.csv",
        log:
            "logs/plot_paper_scaling/{fig}.log",
        wildcard_constraints:
            fig=plot_paths.figure_names(PAPER, "scaling"),
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
