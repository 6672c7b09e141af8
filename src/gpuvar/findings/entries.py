"""Each group's place in the findings record, and the record around them, from the exact dataset-level numbers
(gpuvar.findings.summary) and the launches each group's fits saw (gpuvar.findings.sample).

A group fitted on every launch (at or below the cap) gets its time above median, interval, top call sites and
evidence from those launches, as the whole-table code computed them. A sampled group gets them from the exact
per-cell and per-step sums over every launch instead: the time above median and its interval over steps are the
same numbers; where the group has no steps (or fewer than 5), the bootstrap over its launches is replaced by its
normal limit (the sum of n > cap resampled launches: mean n x mean excess, variance n x its variance), since the
bootstrap would hold BOOTSTRAP x n draws.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import EXPLAINED, NOT_EXPLAINED, PARTLY
from gpuvar.findings import advice as A
from gpuvar.findings.decompose import Decomposition, call_sites, rank_note

Z90 = 1.6448536269514722  # the 5 % and 95 % points of the normal limit of the bootstrap
LISTINGS = ("findings", "stable", "call_site_differences", "not_compared", "below_time_floor")


def origins(summary) -> dict:
    """The trace's first kernel start and each (rank, step)'s first kernel start (pass 1's minima)."""
    tally = summary.tally
    if not tally.any_start:
        return {}
    out = {"trace": int(tally.trace_start)}
    if tally.step_values:
        out["steps"] = tally.step_starts  # .get((rank, step)) as a dict's
    return out


def _recoverable_exact(summary, g: int, launches: int) -> tuple[float, list]:
    """Time above the call sites' medians of a sampled group and its interval, from per-cell and per-step sums."""
    cells = summary.cells_of(g)
    value = float(summary.cell_excess[cells].sum())
    steps = summary.sampled_group_steps(g)  # its bootstrap drawn with the seed the summary was given
    if summary.tally.launches_with_step[g] == launches and steps.interval is not None:
        return value, list(steps.interval)
    mean = value / max(launches, 1)
    var = max(float(summary.cell_excess_sq[cells].sum()) / max(launches, 1) - mean**2, 0.0)
    half = Z90 * float(np.sqrt(launches * var))
    return value, [value - half, value + half]


def _evidence_exact(summary, g: int, origin: dict) -> dict:
    """The evidence of a sampled group (gpuvar.findings.report._evidence's fields) from pass 1 and pass 2."""
    from gpuvar.findings.report import step_of

    duration, fields = summary.tally.slowest[g]
    median = float(summary.cell_median[summary.cell_of(g, fields["site"])])
    launch = {
        "call_site": str(summary.sites[fields["site"]]),
        "kernel": str(fields["kernel_name"]),
        "duration_ns": float(duration),
        "call_site_median_ns": median,
        "ratio": round(float(duration / median), 4) if median > 0 else None,
    }
    for column in ("step", "launch_id", "rank"):
        if column in fields and pd.notna(fields[column]):
            value = fields[column]
            launch[column] = value.item() if hasattr(value, "item") else value
    if "start" in fields and pd.notna(fields["start"]):
        start = int(fields["start"])
        launch["start_ns"] = start
        if origin.get("trace") is not None:
            launch["from_trace_start_ns"] = start - origin["trace"]
        step_start = origin.get("steps", {}).get(step_of(pd.Series(fields)))
        if step_start is not None:
            launch["from_step_start_ns"] = start - step_start
    out = {"slowest_launch": launch}
    if summary.tally.launches_with_step[g] > 0:
        out["steps_with_most_excess"] = list(summary.sampled_group_steps(g).most_excess)
    return out


def _site_excess_exact(summary, g: int) -> pd.Series:
    cells = summary.cells_of(g)
    sites = [str(summary.sites[summary.cell_site[c]]) for c in cells]
    frame = pd.Series(summary.cell_excess[cells], index=sites).sort_index()
    return frame.sort_values(ascending=False, kind="stable")


def group_entry(dec: Decomposition, summary, g: int, part: pd.DataFrame, seed: int, vendor: str, origin: dict):
    """(the listing the group goes to, its entry) in the findings record."""
    from gpuvar.findings.predict import Scale, finding_prediction
    from gpuvar.findings.report import (
        MIN_RECOVERABLE_SHARE,
        category_of,
        display_name,
        evidence_of,
        headline_of,
        percent,
        recoverable_time,
        site_medians,
        what_to_fix,
    )

    total_ns = summary.tally.total
    d = pd.to_numeric(part["duration"]).to_numpy(dtype=np.float64)
    s = call_sites(part).to_numpy()
    sampled = dec.sample is not None
    if sampled:
        recoverable, interval = _recoverable_exact(summary, g, dec.launches)
    else:
        median = site_medians(d, s)
        excess = np.maximum(d - median, 0.0)
        steps = pd.to_numeric(part["step"], errors="coerce") if "step" in part.columns else None
        step_values = steps.to_numpy() if steps is not None and steps.notna().all() else None
        recoverable, interval = recoverable_time(excess, step_values, seed)
    is_op = bool(summary.tally.group_op[g] == dec.launches)
    name = display_name(dec.group, is_op, dec.kernels)
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
    if dec.sample:
        brief["sample"] = dict(dec.sample)
    if category == "stable":
        return "stable", brief
    if category == "call-site differences":
        return "call_site_differences", brief | {"between_call_sites": round(dec.between, 6)}
    if category == "not compared":
        return "not_compared", brief | {"reason": dec.verdict.reason}
    cheap = total_ns > 0 and recoverable < MIN_RECOVERABLE_SHARE * total_ns
    if cheap and dec.verdict.verdict not in (EXPLAINED, PARTLY):
        return "below_time_floor", brief
    collective = A.is_collective(dec.group, list(dec.kernels))
    top = dec.drivers[0] if dec.drivers else None
    key = A.advice_key(
        category if dec.verdict.verdict != NOT_EXPLAINED else "unexplained",
        top.feature if top and dec.verdict.verdict != NOT_EXPLAINED else None,
        collective,
    )
    remain = percent(dec.unexplained / max(1e-12, 1 - dec.between)) if dec.between < 1 else "0 %"
    if sampled:
        site_excess = _site_excess_exact(summary, g)
        evidence = _evidence_exact(summary, g, origin)
    else:
        site_excess = (
            pd.DataFrame({"site": s, "x": excess})
            .groupby("site")["x"]
            .sum()
            .sort_values(ascending=False, kind="stable")
        )
        evidence = evidence_of(part, s, d, median, origin)
    entry = dec.record() | {
        "kernel": next(iter(dec.kernels)),
        "short_name": name,
        "is_op": is_op,
        "category": category,
        "collective": collective,
        "headline": headline_of(dec, name),
        "recoverable_ns": round(recoverable, 3),
        "recoverable_interval_ns": [round(v, 3) for v in interval],
        "recoverable_share_of_kernel_time": round(recoverable / total_ns, 6) if total_ns > 0 else 0.0,
        "top_call_sites": [{"call_site": str(k), "excess_ns": round(float(v), 3)} for k, v in site_excess[:3].items()],
        "advice": key,
        "verify": A.check_text(key, what_to_fix(top), vendor, percent(dec.cv_within), remain),
        "evidence": evidence,
    }
    entry["prediction"] = finding_prediction(entry, part, s, Scale.of(summary, g, dec) if sampled else None)
    return "findings", entry


def kernel_table(summary) -> list[dict]:
    """The per-kernel-name view over every launch: launches, time, spread, call sites, time above the call
    sites' medians and the (up to 3) groups that launched it most, from the per-(cell, name) moments."""
    from gpuvar.findings.report import short_name

    total_ns = summary.tally.total
    labels, moments = summary.labels, summary.tally.triples
    triples = np.array(labels.triples.values, np.int64).reshape(-1, 2)
    if not len(triples):
        return []
    cell, name = triples[:, 0], triples[:, 1]
    n_names = len(labels.names)
    n, s, m2 = moments.merged(name, n_names)
    pair = name * max(len(labels.sites), 1) + summary.cell_site[cell]
    pair_codes, pair_keys = pd.factorize(pair)
    _, _, pair_m2 = moments.merged(pair_codes.astype(np.int64), len(pair_keys))
    pair_name = pair_keys // max(len(labels.sites), 1)
    within = np.bincount(pair_name, weights=pair_m2, minlength=n_names)
    sites_of = np.bincount(pair_name, minlength=n_names)
    by_group: list[dict] = [{} for _ in range(n_names)]  # name -> {group: launches}, first appearance first
    for t in range(len(triples)):
        counts = by_group[name[t]]
        group = summary.groups[summary.cell_group[cell[t]]]
        counts[group] = counts.get(group, 0) + int(moments.n[t])
    out = []
    for k, kernel in enumerate(labels.names.values):
        if not n[k]:
            continue
        mean = s[k] / n[k]
        ops = pd.Series(list(by_group[k].values()), index=list(by_group[k].keys()), dtype=np.int64)
        ops = ops.sort_values(ascending=False)  # as pandas' value_counts orders them
        out.append(
            {
                "kernel": str(kernel),
                "short_name": short_name(str(kernel)),
                "launches": int(n[k]),
                "total_ns": round(float(s[k]), 3),
                "share_of_kernel_time": round(float(s[k]) / total_ns, 6) if total_ns > 0 else 0.0,
                "cv": round(float(np.sqrt(m2[k] / n[k]) / mean), 6) if mean > 0 else 0.0,
                "cv_within_call_site": round(float(np.sqrt(within[k] / n[k]) / mean), 6) if mean > 0 else 0.0,
                "call_sites": int(sites_of[k]),
                "above_median_ns": round(float(summary.name_excess[k]), 3),
                "groups": [str(group) for group in ops.index[:3]],
            }
        )
    out.sort(key=lambda e: (-e["total_ns"], e["kernel"]))
    return out


def assemble(dataset, summary, decompositions, listed, pooled, vendor, step_record, notes, sampling) -> dict:
    """The findings record of one dataset (what findings.json holds for it) from each group's (listing, entry)."""
    from gpuvar.findings.report import display_name, distinct_names

    lists: dict[str, list] = {k: [] for k in LISTINGS}
    for listing, entry in listed:
        lists[listing].append(entry)
    entries = lists["findings"]
    names = distinct_names({e["group"]: e["short_name"] for listing in lists.values() for e in listing})
    for listing in lists.values():
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
    for key in LISTINGS[1:]:
        lists[key].sort(key=lambda e: (-e["recoverable_ns"], e["group"]))
    shared = A.shared_advice(vendor)
    used = sorted({e["advice"] for e in entries})
    tally = summary.tally
    op_groups = {summary.groups[g] for g in np.flatnonzero(tally.group_op > 0)}
    if step_record is not None:  # the step level names groups as the findings do
        shown = {dec.group: display_name(dec.group, dec.group in op_groups, dec.kernels) for dec in decompositions}
        for op in step_record.get("ops", []):
            op["name"] = shown.get(op["group"], op["group"])
    context_notes = rank_note(decompositions)
    return {
        "dataset": dataset,
        "vendor": vendor,
        "launches": int(summary.launches),
        "groups": len(decompositions),
        "kernel_names": len(summary.labels.raw_names),
        "kernel_time_ns": round(tally.total, 3),
        "steps": len(tally.step_values) if tally.step_values else None,
        "call_sites": len(summary.sites),
        "unit": "launching op" if op_groups else "kernel name",
        "notes": list(notes or []),
        **({"context_notes": context_notes} if context_notes else {}),
        "step_level": step_record,
        "pooled_shares": {k: round(v, 6) for k, v in pooled.items()},
        "findings": entries,
        "page_findings": min(len(entries), _max_findings()),
        "shared_advice": {k: shared[k] for k in used},
        "stable": lists["stable"],
        "call_site_differences": lists["call_site_differences"],
        "not_compared": lists["not_compared"],
        "below_time_floor": lists["below_time_floor"],
        "kernels": kernel_table(summary),
        "nothing_actionable": not entries,
        "fit_sample": sampling,
    }


def _max_findings() -> int:
    from gpuvar.findings.report import MAX_FINDINGS

    return MAX_FINDINGS
