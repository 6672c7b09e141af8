"""How a causal output reads to a person: each analysis group's name and how far to trust its graph.

Why here: the checks table (gpuvar.causal.checks_table), the figures (gpuvar.plots.causal_graph), the comparison
page and the findings all show causal groups side by side; they must name a group alike and say alike whether its
graph can be trusted, so both answers live beside the outputs they describe, below every stage that shows them.
"""

from __future__ import annotations

from gpuvar.kernel_names import label, labels
from gpuvar.layout import ALL_GROUP

# How to read a graph (checks.tsv's `checks` column, the report's label): trusted (its verdict explains the target
# and every check that counts passed), flagged (a check that counts failed: a hypothesis, not a finding), not
# explained (checks passed, but the features explain too little: nothing to act on), skipped (no graph).
TRUSTED, FLAGGED, NOT_EXPLAINED, SKIPPED = "trusted", "flagged", "not explained", "skipped"
WHOLE_DATASET = "All kernels (whole dataset)"


def graph_status(record: dict) -> str:
    """trusted, flagged, not explained or skipped, from a group's causal.json or summary.json entry."""
    if record.get("status", "ok") != "ok":
        return SKIPPED
    verdict = record.get("verdict") or None
    failed = verdict.get("failed_checks") if verdict else record.get("warnings")
    if failed:
        return FLAGGED
    return NOT_EXPLAINED if record.get("trusted") is False else TRUSTED


def group_names(groups: list[str], width: int = 60) -> list[str]:
    """group_name of each group, those that would read alike told apart (gpuvar.kernel_names.labels): the
    names a list of figures or a table shows side by side."""
    kernels = [g for g in groups if g not in (ALL_GROUP, "all")]
    named = dict(zip(kernels, labels(kernels, [None] * len(kernels), width), strict=True))
    return [named.get(g, WHOLE_DATASET) for g in groups]


def group_name(group: str, width: int = 60) -> str:
    """A group as people name it: "All kernels (whole dataset)" for the whole dataset, a kernel by its
    readable name (gpuvar.kernel_names: no `void`, namespaces or parameter lists; too long: cut from the
    left, keeping the template arguments that tell kernels apart)."""
    if group in (ALL_GROUP, "all"):
        return WHOLE_DATASET
    return label(str(group), None, width)
