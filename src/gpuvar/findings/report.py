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
from gpuvar.findings.decompose import POSITION_SITE, STABLE_CV, Decomposition, call_sites, groups_of

BOOTSTRAP = 200
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


def _three_digits(x: float) -> str:
    """x to three significant digits (trailing zeros dropped), or its whole part where that would take
    exponent notation (3833.1 -> 3833, 999.6 -> 1000, 0.1142 -> 0.114)."""
    text = f"{x:.3g}"
    return f"{x:.0f}" if "e" in text else text


def duration_text(ns: float) -> str:
    """A duration a reader takes in at a glance: µs below 0.1 ms, ms below 1 s, else s; three significant
    digits, never exponent notation (a launch 3.8 s into a trace read '3.83e+03 ms')."""
    a = abs(ns)
    if a >= 1e9:
        return f"{_three_digits(ns / 1e9)} s"
    return f"{_three_digits(ns / 1e6)} ms" if a >= 1e5 else f"{_three_digits(ns / 1e3)} µs"


def _sign(s: int) -> str:
    return "+" if s > 0 else "−"


def _recoverable(excess: np.ndarray, steps: np.ndarray | None, seed: int) -> tuple[float, list]:
    """(time above the call sites' medians, [5 %, 95 %] bootstrap interval over steps, else launches)."""
    value = float(excess.sum())
    rng = np.random.default_rng(seed)
    if steps is not None and len(np.unique(steps)) >= 5:
        keys, inverse = np.unique(steps, return_inverse=True)
        per_step = np.bincount(inverse, weights=excess, minlength=len(keys))
        sums = per_step[rng.integers(0, len(keys), size=(BOOTSTRAP, len(keys)))].sum(axis=1)
    else:
        sums = excess[rng.integers(0, len(excess), size=(BOOTSTRAP, len(excess)))].sum(axis=1)
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


def _headline(dec: Decomposition, name: str) -> str:
    v = dec.verdict
    if v.verdict == NOT_EXPLAINED:
        return f"{name}: varies {percent(dec.cv_within)} (CV within call sites), not explained by recorded features"
    drivers = ", ".join(f"{d.label} {_sign(d.sign)}" for d in dec.drivers[:2]) or "the recorded features"
    return f"{name}: {v.verdict} {percent(v.share)} by {drivers}"


def _what_to_fix(top) -> str | None:
    """What a re-run would hold constant: one input size where the driver is the step's work, an input shape or
    the library's variant (none of which a user sets directly), else the driver itself."""
    if top is None:
        return None
    if top.feature == "step_threads" or top.feature.startswith("op_") or top.feature == "kernel variant":
        return f"one input size ({top.feature} then stays constant)"
    return f"{top.feature} fixed"


def _medians(d: np.ndarray, sites: np.ndarray) -> np.ndarray:
    return pd.Series(d).groupby(sites).transform("median").to_numpy()


def _evidence(part: pd.DataFrame, sites: np.ndarray, d: np.ndarray, median: np.ndarray, origin: dict) -> dict:
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
        step_start = origin.get("steps", {}).get(_step_of(row))
        if step_start is not None:
            launch["from_step_start_ns"] = start - step_start
    out = {"slowest_launch": launch}
    if "step" in part.columns and part["step"].notna().any():
        excess = pd.Series(np.maximum(d - median, 0.0), index=part.index)
        by_step = excess.groupby(part["step"]).sum().sort_values(ascending=False, kind="stable")
        out["steps_with_most_excess"] = [int(s) for s in by_step.index[:5]]
    return out


def _step_of(row) -> tuple | None:
    if "step" not in row.index or pd.isna(row["step"]):
        return None
    rank = row["rank"] if "rank" in row.index and pd.notna(row["rank"]) else None
    return (rank, int(row["step"]))


def _origins(rows: pd.DataFrame) -> dict:
    """The trace's first kernel start and each (rank, step)'s first kernel start."""
    if "start" not in rows.columns or rows["start"].isna().all():
        return {}
    start = pd.to_numeric(rows["start"], errors="coerce")
    out = {"trace": int(start.min())}
    if "step" in rows.columns and rows["step"].notna().any():
        rank = rows["rank"] if "rank" in rows.columns else pd.Series(None, index=rows.index)
        frame = pd.DataFrame({"rank": rank.where(rank.notna(), None), "step": rows["step"], "start": start})
        frame = frame[frame["step"].notna()]
        firsts = frame.groupby(["rank", "step"], dropna=False)["start"].min()
        out["steps"] = {(r if pd.notna(r) else None, int(s)): int(v) for (r, s), v in firsts.items()}
    return out


def kernel_table(rows: pd.DataFrame, sites: pd.Series, groups: pd.Series, total_ns: float) -> list[dict]:
    """The per-kernel-name view: every kernel name with its launches, time, spread and launching ops."""
    d = pd.to_numeric(rows["duration"]).astype(np.float64)
    names = rows["kernel_name"].astype("string").fillna("?").astype(object)
    site_median = d.groupby(sites.to_numpy()).transform("median")
    excess = (d - site_median).clip(lower=0)
    frame = pd.DataFrame({"name": names, "d": d, "site": sites.to_numpy(), "group": groups.to_numpy(), "x": excess})
    out = []
    for name, part in frame.groupby("name", sort=False):
        within = part["d"] - part.groupby("site")["d"].transform("mean")
        mean = float(part["d"].mean())
        ops = part["group"].value_counts()
        out.append(
            {
                "kernel": str(name),
                "short_name": short_name(str(name)),
                "launches": int(len(part)),
                "total_ns": round(float(part["d"].sum()), 3),
                "share_of_kernel_time": round(float(part["d"].sum()) / total_ns, 6) if total_ns > 0 else 0.0,
                "cv": round(float(part["d"].std(ddof=0) / mean), 6) if mean > 0 else 0.0,
                "cv_within_call_site": round(float(np.sqrt((within**2).mean()) / mean), 6) if mean > 0 else 0.0,
                "call_sites": int(part["site"].nunique()),
                "above_median_ns": round(float(part["x"].sum()), 3),
                "groups": [str(g) for g in ops.index[:3]],
            }
        )
    out.sort(key=lambda e: (-e["total_ns"], e["kernel"]))
    return out


def dataset_findings(
    dataset: str,
    kernels: pd.DataFrame,
    decompositions: list[Decomposition],
    pooled: dict,
    seed: int = 0,
    vendor: str = A.UNKNOWN,
    step_record: dict | None = None,
    notes: list[str] | None = None,
) -> dict:
    """The findings record of one dataset (what findings.json holds for it)."""
    from gpuvar.findings.features import STEP_THREADS, step_threads
    from gpuvar.findings.predict import finding_prediction

    threads = step_threads(kernels) if STEP_THREADS not in kernels.columns else None
    if threads is not None:
        kernels = kernels.assign(**{STEP_THREADS: threads})
    d_all = pd.to_numeric(kernels["duration"], errors="coerce")
    total_ns = float(d_all.sum())
    rows = kernels[d_all.notna()]
    sites = call_sites(rows)
    groups = groups_of(rows)
    is_op = rows["launch_op"].notna().to_numpy() if "launch_op" in rows.columns else np.zeros(len(rows), dtype=bool)
    index_of = groups.groupby(groups, sort=False).indices
    op_groups = set(groups[is_op].unique()) if is_op.any() else set()
    steps = pd.to_numeric(rows["step"], errors="coerce") if "step" in rows.columns else None
    origin = _origins(rows)
    entries, stable, call_site_only, not_compared, small = [], [], [], [], []
    for dec in decompositions:
        idx = index_of.get(dec.group)
        if idx is None:
            continue
        part = rows.iloc[idx]
        d = pd.to_numeric(part["duration"]).to_numpy(dtype=np.float64)
        s = sites.iloc[idx].to_numpy()
        median = _medians(d, s)
        excess = np.maximum(d - median, 0.0)
        step_values = steps.iloc[idx].to_numpy() if steps is not None and steps.iloc[idx].notna().all() else None
        recoverable, interval = _recoverable(excess, step_values, seed)
        name = display_name(dec.group, bool(is_op[idx].all()), dec.kernels)
        category = category_of(dec)
        brief = {
            "group": dec.group,
            "short_name": name,
            "launches": dec.launches,
            "call_sites": dec.call_sites,
            "cv": round(dec.cv, 6),
            "cv_within": round(dec.cv_within, 6),
            "recoverable_ns": round(recoverable, 3),
        }
        if category == "stable":
            stable.append(brief)
            continue
        if category == "call-site differences":
            call_site_only.append(brief | {"between_call_sites": round(dec.between, 6)})
            continue
        if category == "not compared":
            not_compared.append(brief | {"reason": dec.verdict.reason})
            continue
        cheap = total_ns > 0 and recoverable < MIN_RECOVERABLE_SHARE * total_ns
        if cheap and dec.verdict.verdict not in (EXPLAINED, PARTLY):
            small.append(brief)
            continue
        collective = A.is_collective(dec.group, list(dec.kernels))
        top = dec.drivers[0] if dec.drivers else None
        key = A.advice_key(
            category if dec.verdict.verdict != NOT_EXPLAINED else "unexplained",
            top.feature if top and dec.verdict.verdict != NOT_EXPLAINED else None,
            collective,
        )
        remain = percent(dec.unexplained / max(1e-12, 1 - dec.between)) if dec.between < 1 else "0 %"
        site_excess = (
            pd.DataFrame({"site": s, "x": excess})
            .groupby("site")["x"]
            .sum()
            .sort_values(ascending=False, kind="stable")
        )
        entries.append(
            dec.record()
            | {
                "kernel": next(iter(dec.kernels)),
                "short_name": name,
                "is_op": bool(is_op[idx].all()),
                "category": category,
                "collective": collective,
                "headline": _headline(dec, name),
                "recoverable_ns": round(recoverable, 3),
                "recoverable_interval_ns": [round(v, 3) for v in interval],
                "recoverable_share_of_kernel_time": round(recoverable / total_ns, 6) if total_ns > 0 else 0.0,
                "top_call_sites": [
                    {"call_site": str(k), "excess_ns": round(float(v), 3)} for k, v in site_excess[:3].items()
                ],
                "advice": key,
                "verify": A.check_text(key, _what_to_fix(top), vendor, percent(dec.cv_within), remain),
                "evidence": _evidence(part, s, d, median, origin),
            }
        )
        entries[-1]["prediction"] = finding_prediction(entries[-1], part, s)
    names = distinct_names(
        {e["group"]: e["short_name"] for e in (*entries, *stable, *call_site_only, *not_compared, *small)}
    )
    for listing in (entries, stable, call_site_only, not_compared, small):
        for e in listing:
            if names[e["group"]] != e["short_name"]:
                e["headline"] = (
                    e["headline"].replace(e["short_name"], names[e["group"]], 1) if "headline" in e else None
                )
                e["short_name"] = names[e["group"]]
                if e["headline"] is None:
                    del e["headline"]
    entries.sort(key=lambda e: (-e["recoverable_ns"], e["group"]))
    for rank, entry in enumerate(entries, 1):
        entry["rank"] = rank
    for listing in (stable, call_site_only, not_compared, small):
        listing.sort(key=lambda e: (-e["recoverable_ns"], e["group"]))
    shared = A.shared_advice(vendor)
    used = sorted({e["advice"] for e in entries})
    if step_record is not None:  # the step level names groups as the findings do
        names = {dec.group: display_name(dec.group, dec.group in op_groups, dec.kernels) for dec in decompositions}
        for op in step_record.get("ops", []):
            op["name"] = names.get(op["group"], op["group"])
    return {
        "dataset": dataset,
        "vendor": vendor,
        "launches": int(len(rows)),
        "groups": len(decompositions),
        "kernel_names": int(rows["kernel_name"].nunique()),
        "kernel_time_ns": round(total_ns, 3),
        "steps": int(steps.nunique()) if steps is not None and steps.notna().any() else None,
        "call_sites": int(sites.nunique()),
        "unit": "launching op" if is_op.any() else "kernel name",
        "notes": list(notes or []),
        "step_level": step_record,
        "pooled_shares": {k: round(v, 6) for k, v in pooled.items()},
        "findings": entries,
        "page_findings": min(len(entries), MAX_FINDINGS),
        "shared_advice": {k: shared[k] for k in used},
        "stable": stable,
        "call_site_differences": call_site_only,
        "not_compared": not_compared,
        "below_time_floor": small,
        "kernels": kernel_table(rows, sites, groups, total_ns),
        "nothing_actionable": not entries,
    }
