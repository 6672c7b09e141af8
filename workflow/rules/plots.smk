# Figures per dataset and target: a causal graph per analysis group, parallel coordinates of the top-k rows
# and the variability timeline; the scaling study's figure; the paper's figures. Each rule runs the
# `gpuvar plot ...` its params name, with the plots settings by name.

PLOT_OUTPUTS = plot_paths.plot_outputs(ANALYSES, CFG)


rule plot_causal_graphs:
    input:
        files.CAUSAL_DIR,
    output:
        report(
            directory(f"{files.PLOT_DIR}/{files.PLOTS_CAUSAL}"),
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
    benchmark:
        "benchmarks/plot_causal_graphs/{dataset}_{target}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        command="plot causal",
        positional=lambda wildcards, input: input[0],
        output=lambda wildcards, output: output[0],
        which="all",
        formats=PLOT_FORMATS,
        dpi=CFG.plots.dpi,
        min_variance_share=CFG.plots.min_variance_share,
        min_probability=CFG.plots.min_probability,
    script:
        GPUVAR


rule plot_parallel_coordinates:
    input:
        rows=files.bin_file(files.TOPK_ROWS),
    output:
        figures=plot_paths.figure_files(
            f"{files.PLOT_DIR}/{files.PARALLEL_FIGURE}",
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
        data=files.figure_data(f"{files.PLOT_DIR}/{files.PARALLEL_FIGURE}"),
    log:
        "logs/plot_parallel_coordinates/{dataset}_{target}.log",
    benchmark:
        "benchmarks/plot_parallel_coordinates/{dataset}_{target}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        command="plot parallel",
        positional=lambda wildcards, input: input.rows,
        output=lambda wildcards, output: files.stem(output.data),
        target=lambda wildcards: wildcards.target,
        features=CFG.plots.parallel_features,
        formats=PLOT_FORMATS,
        dpi=CFG.plots.dpi,
    script:
        GPUVAR


rule plot_variability_timeline:
    input:
        bins=files.bin_file(files.BINS_TABLE),
        report=files.bin_file(files.BIN_REPORT),
    output:
        figures=plot_paths.figure_files(
            f"{files.PLOT_DIR}/{files.TIMELINE_FIGURE}",
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
        data=files.figure_data(f"{files.PLOT_DIR}/{files.TIMELINE_FIGURE}"),
    log:
        "logs/plot_variability_timeline/{dataset}_{target}.log",
    benchmark:
        "benchmarks/plot_variability_timeline/{dataset}_{target}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        command="plot timeline",
        positional=lambda wildcards, input: input.bins,
        bin_json=lambda wildcards, input: input.report,
        output=lambda wildcards, output: files.stem(output.data),
        target=lambda wildcards: wildcards.target,
        formats=PLOT_FORMATS,
        dpi=CFG.plots.dpi,
    script:
        GPUVAR


rule plot_scaling:
    input:
        lambda wildcards: plot_paths.scaling_reports(
            wildcards.trace, wildcards.target, wildcards.ranklist.split("_")
        ),
    output:
        figures=plot_paths.figure_files(
            files.SCALING_FIGURE,
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
        data=files.figure_data(files.SCALING_FIGURE),
    log:
        "logs/plot_scaling/{trace}_{target}_{ranklist}.log",
    benchmark:
        "benchmarks/plot_scaling/{trace}_{target}_{ranklist}.tsv"
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
        command="plot scaling",
        positional=lambda wildcards, input: input,
        output=lambda wildcards, output: files.stem(output.data),
        formats=PLOT_FORMATS,
        dpi=CFG.plots.dpi,
    script:
        GPUVAR


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
                directory(f"{files.PAPER_FIGURE_DIR}/{{dataset}}_{{target}}"),
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
        benchmark:
            "benchmarks/plot_paper_causal_graphs/{fig}_{dataset}_{target}.tsv"
        wildcard_constraints:
            fig=plot_paths.figure_names(REG.paper, "causal"),
        params:
            which=lambda wildcards: REG.paper.figures[wildcards.fig].groups,

    use rule plot_parallel_coordinates as plot_paper_parallel_coordinates with:
        output:
            figures=plot_paths.figure_files(
                f"{files.PAPER_FIGURE_DIR}/{{dataset}}_{{target}}",
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
            data=files.figure_data(f"{files.PAPER_FIGURE_DIR}/{{dataset}}_{{target}}"),
        log:
            "logs/plot_paper_parallel_coordinates/{fig}_{dataset}_{target}.log",
        benchmark:
            "benchmarks/plot_paper_parallel_coordinates/{fig}_{dataset}_{target}.tsv"
        wildcard_constraints:
            fig=plot_paths.figure_names(REG.paper, "parallel"),
        params:
            features=lambda wildcards: REG.paper.figures[wildcards.fig].features
            or CFG.plots.parallel_features,

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
                f"{files.PAPER_FIGURE_DIR}/{files.SCALING_STEM}",
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
            data=files.figure_data(f"{files.PAPER_FIGURE_DIR}/{files.SCALING_STEM}"),
        log:
            "logs/plot_paper_scaling/{fig}.log",
        benchmark:
            "benchmarks/plot_paper_scaling/{fig}.tsv"
        wildcard_constraints:
            fig=plot_paths.figure_names(REG.paper, "scaling"),
