# gpuvar: explain run-to-run performance variability of GPU programs.
#
#   make_demo_data -> ingest_trace -> normalize_columns -> bin_trace (MPI) -> discover_causal_graph -> plots
#   two datasets' ingest + bin + causal outputs -> compare_runs (config `comparisons`)
#   one dataset's findings + a re-run's ingest -> verify_findings (config `verifications`)
#
# One branch per dataset (and per target); see config/config.yaml, README.md and docs/architecture.md.
# common.smk defines what every rule file uses; the rule files after it may come in any order.

import sys

from gpuvar.config import yaml_mapping_problem

# The config: config/config.yaml (the demo's) when no --configfile is given. A --configfile is the whole config
# (keys it leaves out take the defaults of src/gpuvar/config.py), never layered over the demo's, so a user's
# config needs none of the demo's dataset names (comparisons, scaling). `--config key=value` still layers.
if not workflow.overwrite_configfiles:
    # an empty or non-mapping config/config.yaml: say which file and why (Snakemake's message names neither)
    if yaml_mapping_problem("config/config.yaml"):
        sys.exit(f"gpuvar: {yaml_mapping_problem('config/config.yaml')}")

    configfile: "config/config.yaml"


# the report opens on the findings of the run (rendered, figures embedded): results/findings/findings.html
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/demo.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/binning.smk"
include: "workflow/rules/causal.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/scaling.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/verify.smk"


rule all:
    default_target: True
    input:
        REG.analysis_outputs(),
        PLOT_OUTPUTS,
        COMPARE_OUTPUTS,
        VERIFY_OUTPUTS,


onstart:
    refuse_placeholders(workflow.resource_settings.default_resources)


onsuccess:
    print_run_summary(ranks=REG.ranks_datasets)


onerror:
    print_failed_jobs(RUN_STARTED)
