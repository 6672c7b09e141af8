"""The bins selected for the causal step: how many random bins the workflow samples beside the top-k, and what
bin.json says when the selection is empty or suspicious: why no row has the target (so the causal step can record
a skip with a reason) and a warning when no kernel linked to a copy (a broken device or stream mapping makes
memory_stall silently empty)."""

from __future__ import annotations

import logging

from gpuvar import targets as T

log = logging.getLogger("gpuvar.binning")


def sample_bin_count(binning, causal) -> int:
    """`gpuvar bin --sample-bins` for the config's `binning` and `causal` sections (gpuvar.config): the random
    bins the causal step compares the top-k bins with, as many as the top-k (causal.rows top_k or random), or
    every bin (-1) when it analyses all. The one place this is decided: the rule bin_trace, workflow_arguments
    and `gpuvar explain` call it."""
    return -1 if causal.rows == "all" else binning.top_k


def explain_selection(report: dict) -> dict:
    """{'warnings': [...], 'empty_selection': reason or None} for a bin.json report; warnings are also logged."""
    target, rows_in, binned = report["target"], report["rows_in"], report["rows_binned"]
    links_copies = T.target(target).links_copies
    dropped = report["rows_without_target"]
    no_link = sum(n for reason, n in dropped.items() if reason in T.NO_LINK_REASON.values())
    warnings, why = [], None
    if links_copies and no_link and binned == 0:
        where = "device and stream" if report.get("link") == "stream" else "device"
        warnings.append(
            f"0 rows linked: none of the {rows_in} kernels has an earlier copy on the same {where}, so "
            f"{target} is empty (check device_id/stream_id of the kernel and memcpy tables, or try "
            "link: device)"
        )
    if rows_in == 0:
        why = "the kernel table has no rows"
    elif binned == 0 and links_copies and no_link == sum(dropped.values()):
        reason = T.NO_LINK_REASON[report.get("link") or "stream"]
        why = f"no kernel linked to a copy ({no_link} of {rows_in} kernels: {reason})"
    elif binned == 0:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])))
        why = f"no row has a {target} value ({reasons})"
    elif report.get("top_k_rows", 1) == 0:
        why = "the top-k bins hold no row"
    for text in warnings:
        log.warning("%s", text)
    if why:
        log.warning("empty selection: %s", why)
    return {"warnings": warnings, "empty_selection": why}
