"""Findings of one dataset: the program call sites (grouped by their launching op) whose run-to-run variability
costs time, ranked, each with what explains it, how sure we are, what to do, and how to check; the step level
first; the per-kernel-name view as a table.

Time above median of a group = sum over its launches of (duration - its call site's median), where positive: the
time spent above the typical launch of the same place in the program. Its interval is a bootstrap over whole steps
(or launches when steps are unknown), seeded. Every analysed group is in the record; the page shows the first
MAX_FINDINGS. A group is:
  stable                 enough launches (MIN_ROWS) and a within-call-site CV below STABLE_CV
  call-site differences  stable within call sites, its spread mostly between them (different places, not noise)
  not compared           too few launches, or one launch per call site (nothing to compare a launch with)
  a finding              otherwise, unless it costs less than MIN_RECOVERABLE_SHARE of the kernel time and nothing
                         explains it (a small cause that is explained is reported: it is true and checkable)
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import DECLINED, EXPLAINED, MIN_ROWS, NOT_EXPLAINED, PARTLY
from gpuvar.findings import advice as A
from gpuvar.findings.decompose import POSITION_SITE, STABLE_CV, Decomposition

BOOTSTRAP = 200
BOOTSTRAP_DRAWS = 1 << 22  # resampling indices held at a time (32 MiB)
MAX_FINDINGS = 10
MAX_KERNEL_ROWS = 15  # kernel names on the page's table (all in findings.json)
MIN_RECOVERABLE_SHARE = 0.001  # of the dataset's kernel time: below this an unexplained spread is not worth a finding
CALL_SITE_DOMINANT = 0.5  # between-call-site share above which the spread is "different calls"

_NAMESPACES = re.compile(
    r"\(anonymous namespace\)::|<unnamed>::|\b(?:at::native::|at::|std::|c10::|templates::|cuda::|binary_internal::)"
)
_DISTINCT = re.compile(r"\b[A-Za-z_]\w*(?:Functor|Impl|Op|Kernel|kernel|_t)\b")


def short_name(kernel: str, width: int = 70) -> str:
    """A kernel name a person can tell apart from its siblings: return type, parameter list and library
    namespaces dropped; when the rest is still long, the function name with the functors or ops inside its
    template arguments (`vectorized_elementwise_kernel[GeluCUDAKernelImpl]`), which is what differs between
    the many instantiations of one ATen kernel."""
    text = kernel.strip()
    if text.startswith("void "):
        text = text[5:]
    text = _strip_parameters(_NAMESPACES.sub("", text))
    if len(text) <= width:
        return text
    base = re.split(r"[<(]", text, maxsplit=1)[0].strip()
    inner = text[len(base) :]
    distinct = [m for m in dict.fromkeys(_DISTINCT.findall(inner)) if m != base]
    label = f"{base}[{', '.join(distinct[:2])}]" if distinct else text
    return label if len(label) <= width else label[: width - 1] + "…"


def _strip_parameters(text: str) -> str:
    """Drop the trailing parameter list '(...)' (balanced), if any."""
    if not text.endswith(")"):
        return text
    depth = 0
    for k in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[k], 0)
        if depth == 0:
            return text[:k].rstrip() or text
    return text


def display_name(group: str, is_op: bool, kernels: dict | None = None) -> str:
    """An op as it is named; a position in the step ('iter#3') with its commonest kernel; a kernel name short."""
    if is_op:
        return group
    if re.match(POSITION_SITE, group) and kernels:
        return f"{group} ({short_name(next(iter(kernels)), 50)})"
    return short_name(group)


_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+")


def distinct_names(display: dict[str, str]) -> dict[str, str]:
    """Display names that tell groups apart: where two groups would show the same short name (two instantiations
    of one templated kernel: vector width 4 or 2, float or Half), each gets the first token of its full name that
    differs from the others' at the same position (`vectorized_elementwise_kernel[...] ‹4›`)."""
    by_name: dict[str, list[str]] = {}
    for group, name in display.items():
        by_name.setdefault(name, []).append(group)
    out = dict(display)
    for name, groups in by_name.items():
        if len(groups) < 2:
            continue
        tokens = {g: _TOKEN.findall(g) for g in groups}
        for g in groups:
            mine, others = tokens[g], [tokens[o] for o in groups if o != g]
            at = next(
                (i for i in range(len(mine)) if any(i >= len(t) or t[i] != mine[i] for t in others)),
                None,
            )
            tag = mine[at] if at is not None else str(sorted(groups).index(g) + 1)
            out[g] = f"{name} ‹{tag}›"
    return out


def percent(x: float | None) -> str:
    """A share as the page and the headlines show it: whole percent, one decimal below 1 %."""
    if x is None:
        return "n/a"
    return f"{100 * x:.0f} %" if abs(x) >= 0.01 or x == 0 else f"{100 * x:.1f} %"


def _sign(s: int) -> str:
    return "+" if s > 0 else "−"


def bootstrap_sums(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The sums of BOOTSTRAP resamples (with replacement) of `values`, drawn BOOTSTRAP_DRAWS indices at a time.

    Why in blocks: one draw of shape (BOOTSTRAP, n) holds 200 indices and 200 values per step, 3.2 GB for a trace
    of a million steps. numpy's generators are streams, so blocks of resamples drawn one after another are the
    draws of the single call, and each resample's sum is the same sum: the same numbers in bounded memory."""
    n = len(values)
    if n == 0:
        return np.zeros(BOOTSTRAP)
    block = max(1, BOOTSTRAP_DRAWS // n)
    sums = np.empty(BOOTSTRAP)
    for lo in range(0, BOOTSTRAP, block):
        k = min(block, BOOTSTRAP - lo)
        sums[lo : lo + k] = values[rng.integers(0, n, size=(k, n))].sum(axis=1)
    return sums


def recoverable_time(excess: np.ndarray, steps: np.ndarray | None, seed: int) -> tuple[float, list]:
    """(time above the call sites' medians, [5 %, 95 %] bootstrap interval over steps, else launches)."""
    value = float(excess.sum())
    rng = np.random.default_rng(seed)
    if steps is not None and len(np.unique(steps)) >= 5:
        keys, inverse = np.unique(steps, return_inverse=True)
        per_step = np.bincount(inverse, weights=excess, minlength=len(keys))
        sums = bootstrap_sums(per_step, rng)
    else:
        sums = bootstrap_sums(excess, rng)
    low, high = np.percentile(sums, [5, 95]) if len(excess) else (0.0, 0.0)
    return value, [float(low), float(high)]


def category_of(dec: Decomposition) -> str:
    if dec.verdict.verdict == DECLINED and (dec.launches < MIN_ROWS or dec.min_site_launches <= 1):
        return "not compared"  # too few launches, or one per call site: nothing to compare a launch with
    if dec.cv_within < STABLE_CV:
        return "call-site differences" if dec.between >= CALL_SITE_DOMINANT else "stable"
    if dec.verdict.verdict in (EXPLAINED, PARTLY) and dec.drivers:
        kinds = {d.kind for d in dec.drivers[:2]}
        if kinds == {"counter"}:
            return "counters"
        if "size" in kinds:
            return "size and context" if "context" in kinds else "size"
        return "context"
    return "unexplained"


def headline_of(dec: Decomposition, name: str) -> str:
    """The finding's one line: its verdict and what explains how much of it (or how much it varies, unexplained)."""
    v = dec.verdict
    if v.verdict == NOT_EXPLAINED:
        return f"{name}: varies {percent(dec.cv_within)} (CV within call sites), not explained by recorded features"
    drivers = ", ".join(f"{d.label} {_sign(d.sign)}" for d in dec.drivers[:2]) or "the recorded features"
    return f"{name}: {v.verdict} {percent(v.share)} by {drivers}"


def what_to_fix(top) -> str | None:
    """What a re-run would hold constant: one input size where the driver is the step's work, an input shape or
    the library's variant (none of which a user sets directly), else the driver itself."""
    if top is None:
        return None
    if top.feature == "step_threads" or top.feature.startswith("op_") or top.feature == "kernel variant":
        return f"one input size ({top.feature} then stays constant)"
    return f"{top.feature} fixed"


def site_medians(d: np.ndarray, sites: np.ndarray) -> np.ndarray:
    """Each launch's call-site median duration (what its excess is measured from)."""
    return pd.Series(d).groupby(sites).transform("median").to_numpy()


def evidence_of(part: pd.DataFrame, sites: np.ndarray, d: np.ndarray, median: np.ndarray, origin: dict) -> dict:
    """Where to look: the longest launch (with its ratio to its call site's median), its time from the trace's
    start and from its step's start (and the profiler's own timestamp), and the steps with most excess."""
    worst = int(np.argmax(d))
    row = part.iloc[worst]
    launch = {
        "call_site": str(sites[worst]),
        "kernel": str(row["kernel_name"]),
        "duration_ns": float(d[worst]),
        "call_site_median_ns": float(median[worst]),
        "ratio": round(float(d[worst] / median[worst]), 4) if median[worst] > 0 else None,
    }
    for column in ("step", "launch_id", "rank"):
        if column in part.columns and pd.notna(row[column]):
            value = row[column]
            launch[column] = value.item() if hasattr(value, "item") else value
    if "start" in part.columns and pd.notna(row["start"]):
        start = int(row["start"])
        launch["start_ns"] = start
        if origin.get("trace") is not None:
            launch["from_trace_start_ns"] = start - origin["trace"]
        step_start = origin.get("steps", {}).get(step_of(row))
        if step_start is not None:
            launch["from_step_start_ns"] = start - step_start
    out = {"slowest_launch": launch}
    if "step" in part.columns and part["step"].notna().any():
        excess = pd.Series(np.maximum(d - median, 0.0), index=part.index)
        by_step = excess.groupby(part["step"]).sum().sort_values(ascending=False, kind="stable")
        out["steps_with_most_excess"] = [int(s) for s in by_step.index[:5]]
    return out


def step_of(row) -> tuple | None:
    if "step" not in row.index or pd.isna(row["step"]):
        return None
    rank = row["rank"] if "rank" in row.index and pd.notna(row["rank"]) else None
    return (rank, int(row["step"]))


def dataset_findings(
    dataset: str,
    kernels,
    decompositions: list[Decomposition],
    pooled: dict,
    seed: int = 0,
    vendor: str = A.UNKNOWN,
    step_record: dict | None = None,
    notes: list[str] | None = None,
) -> dict:
    """The findings record of one dataset (what findings.json holds for it). `kernels`: a DataFrame or a source
    (gpuvar.findings.source), read batch by batch (gpuvar.findings.passes)."""
    from gpuvar.findings.entries import assemble, group_entry, origins
    from gpuvar.findings.passes import Passes

    by_group = {dec.group: dec for dec in decompositions}
    with Passes(kernels, seed) as passes:
        origin = origins(passes.summary)
        listed = [
            group_entry(by_group[name], passes.summary, g, part, seed, vendor, origin)
            for g, name, part, _ in passes.groups()
            if name in by_group
        ]
        return assemble(
            dataset, passes.summary, decompositions, listed, pooled, vendor, step_record, notes, passes.record()
        )
