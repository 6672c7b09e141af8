"""The site values a cluster profile must carry before a real run (profiles/slurm: slurm_account, slurm_partition).

Why: profiles/slurm ships with `EDIT-ME-...` placeholders. Submitted as they are, every job fails in sbatch with
an error about an unknown account, after Snakemake has planned the run, and a dry run says nothing at all. A dry
run (which users do first, to see the DAG) gets one line saying where to set them; a real run is refused in one
line before any job is submitted.
"""

from __future__ import annotations

import sys

PLACEHOLDER = "EDIT-ME"
WHERE = "profiles/slurm/config.yaml, default-resources (or a --workflow-profile of your own)"
_noted: set[tuple[str, ...]] = set()  # Snakemake may parse the Snakefile twice in one process: say it once


def placeholders(default_resources) -> list[str]:
    """The `key=value` default resources still holding the placeholder (Snakemake's Resources.args), sorted."""
    args = getattr(default_resources, "args", None) or []
    return sorted(str(arg) for arg in args if PLACEHOLDER in str(arg))


def note_placeholders(default_resources) -> None:
    """At parse time (dry runs included): one line on stderr, so stdout (a --rulegraph or --dag) stays clean."""
    found = placeholders(default_resources)
    if found and tuple(found) not in _noted:
        _noted.add(tuple(found))
        print(f"gpuvar: before a real run, set {', '.join(found)} in {WHERE}", file=sys.stderr)


def refuse_placeholders(default_resources) -> None:
    """At the start of a real run (Snakemake's onstart): exit in one line before any job is submitted."""
    found = placeholders(default_resources)
    if found:
        sys.exit(f"gpuvar: the cluster profile still has the placeholder {', '.join(found)}: set it in {WHERE}")
