# Comparisons (config `comparisons`): per entry, `gpuvar compare` of two datasets after both are ingested,
# binned and analysed; one DAG branch each. Outputs in results/compare/{comparison}/ (see docs/compare.md);
# the page and its figures go into `snakemake --report` under "3 Comparisons". Path helpers: gpuvar/workflow/compare.py.

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
        json=f"{files.COMPARE_DIR}/{files.COMPARE_RECORD}",
        page=report(
            f"{files.COMPARE_DIR}/{files.COMPARE_PAGE_HTML}",
            caption="../report/compare_page.rst",
            category="3 Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "the comparison page"},
        ),
        kernels=f"{files.COMPARE_DIR}/{files.COMPARE_KERNELS}",
        diff=f"{files.COMPARE_DIR}/{files.COMPARE_CAUSAL_DIFF}",
        forest=plot_paths.figure_files(
            f"{files.COMPARE_DIR}/forest",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_forest.rst",
            category="3 Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "kernel ratios"},
        ),
        delta_time=plot_paths.figure_files(
            f"{files.COMPARE_DIR}/delta_time",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_delta_time.rst",
            category="3 Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "where the time went"},
        ),
        distributions=plot_paths.figure_files(
            f"{files.COMPARE_DIR}/distributions",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_distributions.rst",
            category="3 Comparisons",
            subcategory="{comparison}",
            labels={"comparison": "{comparison}", "figure": "distributions"},
        ),
        causal=plot_paths.figure_files(
            f"{files.COMPARE_DIR}/causal_diff",
            PLOT_FORMATS,
            REPORT_FORMAT,
            caption="../report/compare_causal_diff.rst",
            category="3 Comparisons",
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
        command="compare",
        positional=lambda wildcards, input: [
            input.baseline_kernels,
            input.candidate_kernels,
        ],
        output=lambda wildcards, output: files.folder(output.json),
        names=lambda wildcards: compare_paths.names(COMPARISONS[wildcards.comparison]),
        key=lambda wildcards: COMPARISONS[wildcards.comparison].key,
        min_effect=lambda wildcards: COMPARISONS[wildcards.comparison].min_effect,
        # per target both datasets analyse: its binning and causal folders
        baseline_bin=lambda wildcards, input: compare_paths.folders(input.baseline_bins),
        baseline_causal=lambda wildcards, input: input.baseline_causal,
        candidate_bin=lambda wildcards, input: compare_paths.folders(
            input.candidate_bins
        ),
        candidate_causal=lambda wildcards, input: input.candidate_causal,
        seed=CFG.causal.seed,
        min_probability=CFG.plots.min_probability,
        formats=PLOT_FORMATS,
        dpi=CFG.plots.dpi,
    script:
        GPUVAR
