# Definitions every rule file uses, built once before any rule: the typed config, the dataset registry
# (config/config.yaml's datasets plus config/paper.yaml's), the `{dataset}` and `{target}` wildcards, and the
# file layout (gpuvar.layout). Rule files only read these, so they can be included in any order.

import sys
import time
from pathlib import Path

import gpuvar.layout as files
import gpuvar.workflow.compare as compare_paths
import gpuvar.workflow.figures as plot_paths
from gpuvar.binning.selection import sample_bin_count
from gpuvar.errors import ConfigError
from gpuvar.options import comma_list
from gpuvar.targets import TARGETS
from gpuvar.workflow.env import put_own_bin_first_on_path
from gpuvar.workflow.failures import print_failed_jobs
from gpuvar.workflow.launcher import mpi_launcher
from gpuvar.workflow.memory import merge_mb
from gpuvar.workflow.registry import build_registry, names_regex, print_run_summary
from gpuvar.workflow.site import note_placeholders, refuse_placeholders

put_own_bin_first_on_path()
# profiles/slurm's EDIT-ME values: a line here (dry runs), a refusal when a real run starts (Snakefile onstart)
note_placeholders(workflow.resource_settings.default_resources)
# job logs written after this are this run's (onerror: print_failed_jobs)
RUN_STARTED = time.time()

try:
    REG = build_registry(
        config, Path.cwd(), Path(workflow.basedir) / "config" / "paper.yaml"
    )
except ConfigError as error:
    sys.exit(f"gpuvar: {error}")

CFG = REG.cfg
DATASETS = REG.datasets
ANALYSES = REG.analyses
ENV = "../../envs/gpuvar.yaml"
# every rule but the MPI job: `gpuvar <params.command>` with the options its params name (gpuvar.workflow.script)
GPUVAR = "../scripts/gpuvar_command.py"


wildcard_constraints:
    dataset=names_regex(DATASETS),
    target=names_regex(TARGETS),


# Figures: every one in plots.formats (byte-identical on rerun) plus its data as CSV; the PNG (else the SVG)
# goes into `snakemake --report`. Path helpers: gpuvar/workflow/figures.py.
PLOT_FORMATS = list(CFG.plots.formats)
REPORT_FORMAT = plot_paths.report_format(PLOT_FORMATS)
