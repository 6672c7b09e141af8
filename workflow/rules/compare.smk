# Comparisons (config `comparisons`): per entry, `gpuvar compare` of two datasets after both are ingested,
# binned and analysed; one DAG branch each. Outputs in results/compare/{comparison}/ (see docs/compare.md);
# the figures go into `snakemake --report` under "Comparisons". Path helpers: gpuvar/compare/workflow.py.

import gpuvar.compare.workflow as compare_paths

COMPARISONS = {c.name: c for c in CFG.comparisons}
COMPARE_OUTPUTS = compare_paths.comparison_outputs(CFG)


rule compare_runs:
    input:
        unpack(
            lambda wildcards: compare_paths.comparison_inputs(
                COMPARISONS[wildcards.comparison], DATASETS
            )
        ),
    output:
        json="results/compare/{comparison}/compare.json",
        kernels="results/compare/{comparison}/kernels.csv",
        diff="results/compare/{comparison}/causal_diff.csv",
        forest=plot_paths.figure_files(
            "results/compare/{comparison}/forest",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_forest.rst",
            category="Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "kernel ratios"},
        ),
        delta_time=plot_paths.figure_files(
            "results/compare/{comparison}/delta_time",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_delta_time.rst",
            category="Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "where the time went"},
        ),
        distributions=plot_paths.figure_files(
            "results/compare/{comparison}/distributions",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_distributions.rst",
            category="Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "distributions"},
        ),
        causal=plot_paths.figure_files(
            "results/compare/{comparison}/causal_diff",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_causal_diff.rst",
            category="Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "causal-graph diff"},
        ),
    log:
        "logs/compare_runs/{comparison}.log",
    benchmark:
        "benchmarks/compare_runs/{comparison}.tsv"
    wildcard_constraints:
        comparison=names_regex(COMPARISONS),
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        args=lambda wildcards, input, output: rule_args.compare_arguments(
            REG,
            COMPARISONS[wildcards.comparison],
            input.baseline_kernels,
            input.candidate_kernels,
            rule_args.folder(output.json),
        ),
    script:
        f"{SCRIPTS}/compare_runs.py"
