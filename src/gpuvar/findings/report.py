"""Findings of one dataset: the kernels whose run-to-run variability costs time, ranked, each with what
explains it, how sure we are, what to do, and how to check.

Recoverable time of a kernel = sum over its launches of (duration - its call site's median), where positive:
the time spent above the typical launch of the same call. Its interval is a bootstrap over whole steps (or
launches when steps are unknown), seeded. A kernel whose within-call-site CV is below STABLE_CV is *stable*
and not a finding; a kernel whose spread is mostly between call sites is reported as call-site differences,
not as variability. When no kernel qualifies the page says "nothing actionable".
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from gpuvar.findings.decompose import STABLE_CV, Decomposition, call_sites
from gpuvar.findings.verdict import DECLINED, EXPLAINED, NOT_EXPLAINED, PARTLY

BOOTSTRAP = 200
MAX_FINDINGS = 10
MIN_RECOVERABLE_SHARE = 0.001  # of the dataset's kernel time: below this a kernel is not worth a finding
CALL_SITE_DOMINANT = 0.5  # between-call-site share above which the name's spread is "different calls"


_NAMESPACES = re.compile(
    r"\(anonymous namespace\)::|\b(?:at::native::|at::|std::|c10::|templates::|cuda::|binary_internal::)"
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


def _recoverable(d: np.ndarray, sites: np.ndarray, steps: np.ndarray | None, seed: int) -> tuple[float, list]:
    """(recoverable ns, [5 %, 95 %] bootstrap interval)."""
    frame = pd.DataFrame({"d": d, "site": sites})
    median = frame.groupby("site")["d"].transform("median").to_numpy()
    excess = np.maximum(d - median, 0.0)
    value = float(excess.sum())
    rng = np.random.default_rng(seed)
    if steps is not None and len(np.unique(steps)) >= 5:
        keys, inverse = np.unique(steps, return_inverse=True)
        per_step = np.bincount(inverse, weights=excess, minlength=len(keys))
        draws = rng.integers(0, len(keys), size=(BOOTSTRAP, len(keys)))
        sums = per_step[draws].sum(axis=1)
    else:
        draws = rng.integers(0, len(excess), size=(BOOTSTRAP, len(excess)))
        sums = excess[draws].sum(axis=1)
    low, high = np.percentile(sums, [5, 95]) if len(excess) else (0.0, 0.0)
    return value, [float(low), float(high)]


def percent(x: float | None) -> str:
    """A share as the page and the headlines show it: whole percent, one decimal below 1 %."""
    if x is None:
        return "n/a"
    return f"{100 * x:.0f} %" if abs(x) >= 0.01 or x == 0 else f"{100 * x:.1f} %"


def duration_text(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms" if ns >= 1e5 else f"{ns / 1e3:.3g} µs"


def _sign(s: int) -> str:
    return "+" if s > 0 else "−"


def category_of(dec: Decomposition) -> str:
    if dec.cv_within < STABLE_CV:
        return "call-site differences" if dec.between >= CALL_SITE_DOMINANT else "stable"
    verdict = dec.verdict.verdict
    if verdict in (EXPLAINED, PARTLY) and dec.drivers:
        kinds = {d.kind for d in dec.drivers[:2]}
        return "context" if kinds == {"context"} else ("size" if "context" not in kinds else "size and context")
    if verdict == DECLINED:
        return "declined"
    return "unexplained"


def _headline(dec: Decomposition, short: str) -> str:
    v = dec.verdict
    if v.verdict == DECLINED:
        return f"{short}: declined ({v.reason})"
    if v.verdict == NOT_EXPLAINED:
        return f"{short}: varies {percent(dec.cv_within)} (CV within call sites), not explained by recorded features"
    drivers = ", ".join(f"{d.label} {_sign(d.sign)}" for d in dec.drivers[:2]) or "the recorded features"
    return f"{short}: {v.verdict} {percent(v.share)} by {drivers}"


def _action(dec: Decomposition) -> tuple[str, str, list[str]]:
    """(suggested action, verification experiment, what else could explain it)."""
    top = dec.drivers[0] if dec.drivers else None
    remain = percent(dec.unexplained / max(1e-12, 1 - dec.between)) if dec.between < 1 else "0 %"
    if dec.verdict.verdict in (EXPLAINED, PARTLY) and top is not None and top.kind == "context":
        feature = top.feature
        if feature.startswith("ctx_copy"):
            return (
                "Launches that overlap a memory copy on the same GPU are slower (bandwidth contention): issue the "
                "copy outside this phase of the step, or make it smaller / pinned and asynchronous earlier.",
                f"Re-run with the concurrent copies removed or moved; expect this kernel's CV within call sites to "
                f"fall from {percent(dec.cv_within)} towards the unexplained remainder ({remain} of its variance).",
                ["anything else that happens in the same steps as the copies (inputs, allocator activity)"],
            )
        if feature.startswith("ctx_kernels"):
            return (
                "Launches that share the GPU with kernels on other streams are slower: serialise the streams "
                "around this kernel or give it stream priority.",
                "Re-run with the other streams' work moved before/after; expect the slow launches to disappear.",
                ["the concurrent kernels' own inputs vary with the step"],
            )
        if feature.startswith("ctx_gap"):
            return (
                "Launch-to-launch gaps on the stream move with this kernel's time (host-bound phases, clocks "
                "dropping while idle): remove host synchronisation before it or capture the step in a CUDA graph.",
                "Re-run with a CUDA graph or without the synchronisation; expect the gap and the spread to shrink.",
                ["GPU clock changes after idle periods (check clocks with nvidia-smi)"],
            )
        if feature.startswith("rank="):
            return (
                "One rank's launches of this kernel differ from the others': compare that rank's GPU, clocks and "
                "inputs.",
                "Swap the ranks' GPUs or inputs; expect the difference to follow the cause.",
                ["different data per rank", "a different GPU model or clock on that rank"],
            )
        return (
            f"Launches vary with {feature}: remove that source of interference.",
            f"Re-run with {feature} held constant; expect the CV within call sites to drop.",
            [],
        )
    if dec.verdict.verdict in (EXPLAINED, PARTLY) and top is not None:
        return (
            f"The spread follows problem size ({top.label} {_sign(top.sign)}): it is the workload, not noise. "
            "To make steps predictable, bucket or pad sizes to a few fixed shapes; to make it faster, tune "
            "this kernel for the sizes that cost most.",
            f"Re-run with {top.feature} fixed (one input size); expect the CV within call sites to fall from "
            f"{percent(dec.cv_within)} to about the unexplained remainder ({remain} of its variance).",
            [
                "anything that scales with the same size (memory traffic, the kernel variant the library picks)",
                "unrecorded causes of the remainder (clocks, contention)",
            ],
        )
    return (
        "No recorded launch parameter or context explains it: check GPU clocks and throttling, other processes "
        "on the GPU, and collect counters for this kernel (Nsight Compute) to see which unit stalls.",
        "Re-run with locked clocks (nvidia-smi -lgc) and nothing else on the GPU; if the CV within call sites "
        f"({percent(dec.cv_within)}) stays, profile the slowest launches with Nsight Compute.",
        ["clock or power changes", "other work on the GPU or the host", "data-dependent control flow"],
    )


def _evidence(part: pd.DataFrame, sites: np.ndarray, d: np.ndarray) -> dict:
    """Where to look: the slowest launch against its call site's median, and the steps with most excess."""
    frame = pd.DataFrame({"d": d, "site": sites}, index=part.index)
    median = frame.groupby("site")["d"].transform("median")
    ratio = (frame["d"] / median.where(median > 0)).fillna(1.0)
    worst = ratio.idxmax()
    out = {
        "slowest_launch": {
            "call_site": str(frame.at[worst, "site"]),
            "duration_ns": float(frame.at[worst, "d"]),
            "call_site_median_ns": float(median.at[worst]),
            "ratio": round(float(ratio.at[worst]), 4),
        }
    }
    for column in ("start", "step", "launch_id", "rank"):
        if column in part.columns and pd.notna(part.at[worst, column]):
            value = part.at[worst, column]
            out["slowest_launch"][column] = value.item() if hasattr(value, "item") else value
    if "step" in part.columns and part["step"].notna().any():
        excess = (frame["d"] - median).clip(lower=0)
        by_step = excess.groupby(part["step"]).sum().sort_values(ascending=False, kind="stable")
        out["steps_with_most_excess"] = [int(s) for s in by_step.index[:5]]
    return out


def dataset_findings(
    dataset: str, kernels: pd.DataFrame, decompositions: list[Decomposition], pooled: dict, seed: int = 0
) -> dict:
    """The findings record of one dataset (what findings.json holds for it)."""
    d_all = pd.to_numeric(kernels["duration"], errors="coerce")
    total_ns = float(d_all.sum())
    rows = kernels[d_all.notna()]
    sites = call_sites(rows)
    names = rows["kernel_name"].astype("string").fillna("?")
    index_of = names.groupby(names, sort=False).indices
    steps = pd.to_numeric(rows["step"], errors="coerce") if "step" in rows.columns else None
    entries, stable, call_site_only = [], [], []
    for dec in decompositions:
        idx = index_of.get(dec.kernel)
        if idx is None:
            continue
        part = rows.iloc[idx]
        d = pd.to_numeric(part["duration"]).to_numpy(dtype=np.float64)
        s = sites.iloc[idx].to_numpy()
        step_values = None
        if steps is not None and steps.iloc[idx].notna().all():
            step_values = steps.iloc[idx].to_numpy()
        recoverable, interval = _recoverable(d, s, step_values, seed)
        short = short_name(dec.kernel)
        category = category_of(dec)
        brief = {"kernel": dec.kernel, "short_name": short, "launches": dec.launches, "cv_within": dec.cv_within}
        if category == "stable":
            stable.append(brief | {"cv": dec.cv})
            continue
        if category == "call-site differences":
            call_site_only.append(brief | {"between_call_sites": dec.between, "call_sites": dec.call_sites})
            continue
        cheap = total_ns > 0 and recoverable < MIN_RECOVERABLE_SHARE * total_ns
        if cheap and dec.verdict.verdict not in (EXPLAINED, PARTLY):  # an explained cause is reported however small
            stable.append(brief | {"cv": dec.cv, "note": "variable but costs < 0.1 % of kernel time"})
            continue
        action, verify, alternatives = _action(dec)
        site_excess = (
            pd.DataFrame({"site": s, "x": d - pd.Series(d).groupby(s).transform("median").to_numpy()})
            .assign(x=lambda f: f["x"].clip(lower=0))
            .groupby("site")["x"]
            .sum()
            .sort_values(ascending=False, kind="stable")
        )
        entries.append(
            dec.record()
            | {
                "short_name": short,
                "category": category,
                "headline": _headline(dec, short),
                "recoverable_ns": round(recoverable, 3),
                "recoverable_interval_ns": [round(v, 3) for v in interval],
                "recoverable_share_of_kernel_time": round(recoverable / total_ns, 6) if total_ns > 0 else 0.0,
                "top_call_sites": [
                    {"call_site": str(k), "excess_ns": round(float(v), 3)} for k, v in site_excess[:3].items()
                ],
                "action": action,
                "verify": verify,
                "alternatives": alternatives,
                "evidence": _evidence(part, s, d),
            }
        )
    entries.sort(key=lambda e: (-e["recoverable_ns"], e["kernel"]))
    for rank, entry in enumerate(entries, 1):
        entry["rank"] = rank
    stable.sort(key=lambda e: e["kernel"])
    call_site_only.sort(key=lambda e: e["kernel"])
    return {
        "dataset": dataset,
        "launches": int(len(rows)),
        "kernel_names": len(decompositions),
        "kernel_time_ns": round(total_ns, 3),
        "steps": int(steps.nunique()) if steps is not None else None,
        "pooled_shares": {k: round(v, 6) for k, v in pooled.items()},
        "findings": entries[:MAX_FINDINGS],
        "more_findings": max(0, len(entries) - MAX_FINDINGS),
        "stable": stable,
        "call_site_differences": call_site_only,
        "nothing_actionable": not entries,
    }
