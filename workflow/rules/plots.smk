# Figures per dataset and target: a causal graph per analysis group, parallel coordinates of the top-k rows
# and the variability timeline; the scaling study's figure; the paper's figures. Each rule's script runs
# `gpuvar plot ...` (workflow/scripts/plot.py).

PLOT_OUTPUTS = plot_paths.plot_outputs(ANALYSES, CFG)


rule plot_causal_graphs:
    input:
        files.CAUSAL_DIR,
    output:
        report(
            directory(f"{files.PLOT_DIR}/causal"),
            patterns=[f"{{group}}.{REPORT_FORMAT}"],
            caption="../report/causal_graph.rst",
            category="{dataset}",
            subcategory="causal graphs: {target}",
            labels=plot_paths.causal_labels(
                dataset="{dataset}", target="{target}", figure="causal graph"
            ),
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
        args=lambda wildcards, input, output: rule_args.causal_figure_arguments(
            REG, input[0], output[0]
        ),
    script:
        f"{SCRIPTS}/plot.py"


rule plot_parallel_coordinates:
    input:
        rows=files.bin_file(files.TOPK_ROWS),
    output:
        figures=plot_paths.figure_files(
            f"{files.PLOT_DIR}/parallel",
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
        data=f"{files.PLOT_DIR}/parallel.csv",
    log:
        "logs/plot_parallel_coordinates/{dataset}_{target}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        args=lambda wildcards, input, output: rule_args.parallel_arguments(
            REG, input.rows, output.data, wildcards.target
        ),
    script:
        f"{SCRIPTS}/plot.py"


rule plot_variability_timeline:
    input:
        bins=files.bin_file(files.BINS_TABLE),
        report=files.bin_file(files.BIN_REPORT),
    output:
        figures=plot_paths.figure_files(
            f"{files.PLOT_DIR}/timeline",
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
        data=f"{files.PLOT_DIR}/timeline.csv",
    log:
        "logs/plot_variability_timeline/{dataset}_{target}.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        args=lambda wildcards, input, output: rule_args.timeline_arguments(
            REG, input.bins, input.report, output.data, wildcards.target
        ),
    script:
        f"{SCRIPTS}/plot.py"


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
        trace=plot_paths.SCALING_TRACE,
        ranklist=r"\d+(_\d+)*",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        args=lambda wildcards, input, output: rule_args.scaling_arguments(
            REG, input, output.data
        ),
    script:
        f"{SCRIPTS}/plot.py"


# The paper's figures (`snakemake paper`, paper.smk): the rules above with the paper's paths and choices.
if REG.paper is not None:
    PAPER_SCALING = REG.paper.config.scaling
    PAPER_SCALING_TRACE = (
        plot_paths.scaling_trace(
            DATASETS[REG.paper_names[PAPER_SCALING.dataset]],
            PAPER_SCALING.rows,
            CFG.demo.enabled,
        )
        if PAPER_SCALING.dataset
        else None
    )

    use rule plot_causal_graphs as plot_paper_causal_graphs with:
        output:
            report(
                directory("results/paper/{fig}/{dataset}_{target}"),
                patterns=[f"{{group}}.{REPORT_FORMAT}"],
                caption="../report/paper_causal.rst",
                category="paper",
                subcategory="{fig}",
                labels=plot_paths.causal_labels(
                    figure="{fig}", dataset="{dataset}", target="{target}"
                ),
            ),
        log:
            "logs/plot_paper_causal_graphs/{fig}_{dataset}_{target}.log",
        wildcard_constraints:
            fig=plot_paths.figure_names(REG.paper, "causal"),
        params:
            args=lambda wildcards, input, output: rule_args.causal_figure_arguments(
                REG, input[0], output[0], REG.paper.figures[wildcards.fig].groups
            ),

    use rule plot_parallel_coordinates as plot_paper_parallel_coordinates with:
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
            fig=plot_paths.figure_names(REG.paper, "parallel"),
        params:
            args=lambda wildcards, input, output: rule_args.parallel_arguments(
                REG,
                input.rows,
                output.data,
                wildcards.target,
                REG.paper.figures[wildcards.fig].features,
            ),

    use rule plot_scaling as plot_paper_scaling with:
        input:
            (
                plot_paths.scaling_reports(
                    PAPER_SCALING_TRACE, PAPER_SCALING.target, PAPER_SCALING.ranks
                )
                if PAPER_SCALING_TRACE
                else []
            ),
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
            fig=plot_paths.figure_names(REG.paper, "scaling"),
