"""DirectLiNGAM per group with domain prior knowledge, assumption checks, and the files the plots read.

For each group: fit with the prior knowledge (gpuvar.causal.prior: launch configuration -> counters ->
target, the target a sink); refit without any prior knowledge to check that the target comes out a sink;
test the residuals (gpuvar.causal.checks); split the target's variance over the features
(gpuvar.causal.effects); bootstrap whole bins for edge stability; and, when rows of a random sample of bins
are given, fit the same group on them and flag the edges found only in the selected (most variable) bins:
selecting bins on the target's variance makes its causes dependent in the selected rows (collider bias).

Files per group (OUTDIR/<slug>/): order.json, adjacency.csv (B[i, j] = effect of column j on row i,
lingam's convention), edges.csv (from, to, coefficient, sign, probability, sign_agreement, in_random_bins),
contributions.csv (feature, label, total_effect, variance_share, sign), graph.graphml,
bootstrap_edges.csv (when bootstrapping), causal.json (everything above plus the checks and warnings).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.causal.bootstrap import (
    Bootstrap,
    fit_adjacency,
    make_pool,
    one_blas_thread,
    summarise_edges,
)
from gpuvar.causal.checks import assumption_checks
from gpuvar.causal.effects import contributions, total_effects
from gpuvar.causal.encode import sibling_groups
from gpuvar.causal.options import CausalOptions
from gpuvar.causal.prepare import Prepared, group_slug, prepare_all, prepare_group
from gpuvar.causal.prior import prior_knowledge, tiers
from gpuvar.causal.verdict import graph_verdict
from gpuvar.layout import (
    CAUSAL_ADJACENCY,
    CAUSAL_BOOTSTRAP_EDGES,
    CAUSAL_CONTRIBUTIONS,
    CAUSAL_EDGES,
    CAUSAL_GRAPH,
    CAUSAL_ORDER,
    CAUSAL_RECORD,
    CAUSAL_SUMMARY,
)
from gpuvar.output import write_json

log = logging.getLogger("gpuvar.causal")
# Derived floats are written at 12 significant digits: the last bits of a BLAS result depend on the CPU's SIMD
# path, so 17 digits made reruns on another machine of the same kind differ (issue 22 item 10).
FLOAT_FORMAT = "%.12g"


def stable_float(value: float) -> float:
    """value rounded to 12 significant digits (the precision every causal output is written at)."""
    return float(f"{value:.12g}") if np.isfinite(value) else value


def sink_prior_knowledge(p: int, target: int) -> np.ndarray:
    """lingam's make_prior_knowledge(p, sink_variables=[target]) without importing lingam."""
    return prior_knowledge([str(k) for k in range(p)], target, "sink")


def edge_table(B: np.ndarray, names: list[str]) -> pd.DataFrame:
    """edges.csv: every non-zero B[i, j] as from=j, to=i, in (from, to) column order."""
    rows = [
        {"from": names[j], "to": names[i], "coefficient": float(B[i, j]), "sign": int(np.sign(B[i, j]))}
        for j in range(len(names))
        for i in range(len(names))
        if B[i, j] != 0
    ]
    return pd.DataFrame(rows, columns=["from", "to", "coefficient", "sign"])


def build_graph(names, target, edges: pd.DataFrame, contrib: pd.DataFrame, labels: dict[str, str]):
    """networkx DiGraph for graph.graphml: nodes with total effect and variance share, edges with coefficient,
    bootstrap probability and the random-bins flag."""
    import networkx as nx

    g = nx.DiGraph()
    c = contrib.set_index("feature")
    for k, name in enumerate(names):
        attrs = {"is_target": k == target, "label": labels.get(name, name)}
        if k != target:
            attrs.update(
                total_effect=stable_float(float(c.at[name, "total_effect"])),
                variance_share=stable_float(float(c.at[name, "variance_share"])),
                sign=int(c.at[name, "sign"]),
            )
        g.add_node(name, **attrs)
    for r in edges.to_dict("records"):
        attrs = {"weight": stable_float(float(r["coefficient"])), "sign": int(r["sign"])}
        if r["to"] == names[target]:
            attrs["variance_share"] = stable_float(float(c.at[r["from"], "variance_share"]))
        for key in ("probability", "sign_agreement"):
            if key in r and r[key] == r[key]:
                attrs[key] = stable_float(float(r[key]))
        if "in_random_bins" in r and r["in_random_bins"] in (True, False):
            attrs["in_random_bins"] = bool(r["in_random_bins"])
        g.add_edge(r["from"], r["to"], **attrs)
    return g


def selection_flags(edges: pd.DataFrame, names: list[str], random_fit: tuple[list[str], np.ndarray] | None):
    """in_random_bins per edge: True/False when both ends were analysed in the random bins, else None."""
    if random_fit is None:
        return [None] * len(edges)
    rnames, rB = random_fit
    index = {n: k for k, n in enumerate(rnames)}
    out = []
    for r in edges.to_dict("records"):
        if r["from"] in index and r["to"] in index:
            out.append(bool(rB[index[r["to"]], index[r["from"]]] != 0))
        else:
            out.append(None)
    return out


def random_fit_columns(prepared: list[Prepared], opts: CausalOptions) -> list[str]:
    """The columns fit_random_bins reads of the random bins' rows, for these prepared groups."""
    wanted = [opts.target] + ([opts.group_by] if opts.group_by else [])
    for prep in prepared:
        if prep.data is not None:
            wanted += [f.split("=", 1)[0] for f in prep.features]
    return list(dict.fromkeys(wanted))


def fit_random_bins(
    sample: pd.DataFrame | None, prep: Prepared, opts: CausalOptions
) -> tuple[list[str], np.ndarray] | None:
    """The same group, same features, fitted on the rows of randomly chosen bins (None if not possible)."""
    if sample is None or prep.data is None:
        return None
    rows, within, group_by = sample, None, opts.group_by
    if group_by and group_by in sample.columns:
        keys = sample[group_by].astype("string").fillna("<missing>")
        if prep.centred_within is None:
            rows = sample[(keys == prep.group).to_numpy()]
        else:
            within = keys.reset_index(drop=True)
            rows = sample.reset_index(drop=True)
    originals = list(dict.fromkeys(f.split("=", 1)[0] for f in prep.features))
    if prep.target not in rows.columns or any(c not in rows.columns for c in originals):
        return None
    # no merging: the random fit must keep the variables of the selected fit
    other = prepare_group(
        rows, prep.group, prep.target, originals, opts.min_rows, collinear_threshold=1.01, within=within
    )
    if other.data is None:
        return None
    names = list(other.data.columns)
    target = len(names) - 1
    pk = prior_knowledge(names, target, opts.prior_knowledge, sibling_groups(other.categories))
    with one_blas_thread():
        return names, fit_adjacency(other.data.to_numpy(dtype=np.float64), pk, opts.engine)[1]


@dataclass
class _Started:
    """A group fitted and checked, its bootstrap under way (finish_group writes it once the resamples are in)."""

    record: dict
    outdir: Path
    names: list = field(default_factory=list)
    B: np.ndarray | None = None
    contrib: pd.DataFrame | None = None
    explained: float = 0.0
    edges: pd.DataFrame | None = None
    random_fit: tuple | None = None
    boot: Bootstrap | None = None
    t_boot: float = 0.0
    labels: dict = field(default_factory=dict)
    done: bool = False  # a skipped group: its record is written


def start_group(prep: Prepared, outdir: Path, opts: CausalOptions, pool=None, random_fit=None) -> _Started:
    """Fit and check one prepared group and hand its bootstrap to `pool` (opts.workers processes fit it, this one
    included, in finish_group)."""
    engine, seed, bootstrap, pk_mode = opts.engine, opts.seed, opts.bootstrap, opts.prior_knowledge
    outdir.mkdir(parents=True, exist_ok=True)
    record = prep.record() | {
        "slug": outdir.name,
        "engine": engine,
        "seed": seed,
        "bootstrap": bootstrap,
        "prior_knowledge": pk_mode,
    }
    if prep.data is None:
        write_json(record, outdir / CAUSAL_RECORD, stable_float)
        return _Started(record, outdir, done=True)
    names = list(prep.data.columns)
    target = len(names) - 1
    labels = {n: prep.label(n) for n in names}
    X = prep.data.to_numpy(dtype=np.float64)
    siblings = sibling_groups(prep.categories)
    pk = prior_knowledge(names, target, pk_mode, siblings)
    timings = {}
    t0 = time.perf_counter()
    with one_blas_thread():  # tiny BLAS calls: extra BLAS threads only contend
        order, B = fit_adjacency(X, pk, engine)
        timings["fit_s"] = round(time.perf_counter() - t0, 4)
        unconstrained = fit_adjacency(X, None, engine)
    t_boot = time.perf_counter()
    boot = Bootstrap(X, pk, bootstrap, seed, opts.workers, engine, pool, bins=prep.bins) if bootstrap > 0 else None
    te = total_effects(B, target)
    contrib, explained = contributions(X, B, names, target, labels)
    n_bins = int(len(np.unique(prep.bins))) if prep.bins is not None else 0
    try:
        verdict = assumption_checks(
            X, B, names, target, te, prep.condition_number, unconstrained, seed, siblings, n_bins if bootstrap else None
        )
        graph_verdict_record, trusted = graph_verdict(X, names, target, prep.bins, seed, verdict["checks"], prep.sites)
    except BaseException:
        if boot is not None:
            boot.close()
        raise
    record.update(
        causal_order=[names[k] for k in order],
        tiers=tiers(names, target),
        checks=verdict["checks"],
        verdict=graph_verdict_record,
        trusted=trusted,
        warnings=verdict["warnings"],
        bins_analysed=n_bins,
        timings=timings,
    )
    edges = edge_table(B, names)
    return _Started(record, outdir, names, B, contrib, explained, edges, random_fit, boot, t_boot, labels)


def finish_group(started: _Started) -> dict:
    """The group's bootstrap gathered (its chunks no helper has started fitted here) and its files written."""
    if started.done:
        return started.record
    import networkx as nx

    record, outdir, names, B, edges = started.record, started.outdir, started.names, started.B, started.edges
    labels = started.labels
    target = len(names) - 1
    boot = None
    if started.boot is not None:
        stack = started.boot.result()
        boot = summarise_edges(stack, names, B)
        boot.to_csv(outdir / CAUSAL_BOOTSTRAP_EDGES, index=False, float_format=FLOAT_FORMAT)
        record["timings"]["bootstrap_s"] = round(time.perf_counter() - started.t_boot, 4)
    prob = {} if boot is None else {(r["from"], r["to"]): r for r in boot.to_dict("records")}
    edges["probability"] = [
        prob.get((f, t), {}).get("probability", 0.0 if boot is not None else np.nan)
        for f, t in zip(edges["from"], edges["to"])
    ]
    edges["sign_agreement"] = [
        prob.get((f, t), {}).get("sign_agreement", np.nan) for f, t in zip(edges["from"], edges["to"])
    ]
    edges["in_random_bins"] = selection_flags(edges, names, started.random_fit)
    selection_only = [f"{r['from']} -> {r['to']}" for r in edges.to_dict("records") if r["in_random_bins"] is False]
    write_json({"causal_order": record["causal_order"], "target": names[target]}, outdir / CAUSAL_ORDER)
    adj = pd.DataFrame(B, index=names, columns=names)
    adj.index.name = "to"
    adj.to_csv(outdir / CAUSAL_ADJACENCY, float_format=FLOAT_FORMAT)
    edges.to_csv(outdir / CAUSAL_EDGES, index=False, float_format=FLOAT_FORMAT)
    contrib = started.contrib
    contrib.to_csv(outdir / CAUSAL_CONTRIBUTIONS, index=False, float_format=FLOAT_FORMAT)
    nx.write_graphml(build_graph(names, target, edges, contrib, labels), outdir / CAUSAL_GRAPH)
    record.update(
        n_edges=len(edges),
        explained_share=round(started.explained, 6),
        top_contributors=contrib.head(5).to_dict("records"),
        selection={
            "random_bins_fitted": started.random_fit is not None,
            "edges_only_in_selected_bins": selection_only,
        },
    )
    if not (contrib["variance_share"] > 0).any():
        record["note"] = "no feature has a directed path to the target (all total effects are zero)"
    write_json(record, outdir / CAUSAL_RECORD, stable_float)
    return record


SUMMARY_KEYS = (
    "group",
    "slug",
    "status",
    "skip_reason",
    "rows_used",
    "features",
    "n_edges",
    "explained_share",
    "trusted",
    "verdict",
    "warnings",
    "top_contributors",
)


def _summary_entry(record: dict) -> dict:
    """A group's entry in summary.json: its record's SUMMARY_KEYS."""
    return {k: record.get(k) for k in SUMMARY_KEYS}


def discover_all(df: pd.DataFrame, opts: CausalOptions, outdir: str | Path, random_rows=None) -> dict:
    """Causal discovery for every group and for all rows; writes OUTDIR/<slug>/... and OUTDIR/summary.json.
    `random_rows`: the random bins' rows, a DataFrame or a function of the columns wanted that reads them (the
    random fits read the target, the grouping and the groups' features: of a 256-rank job's 341 k sample rows, read
    whole into pandas, that is 10 of 56 columns, and 0.44 GB the causal stage no longer holds).

    Returns the summary dict (also written): one entry per group with status ok/skipped and its reason,
    whether its checks passed, and the list of flagged graphs. `opts` (gpuvar.causal.options) was validated
    when built, so its values are within the config's bounds.
    """
    target, bootstrap, workers = opts.target, opts.bootstrap, opts.workers
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    prepared, rejected = prepare_all(df, opts)
    if callable(random_rows):
        random_rows = random_rows(random_fit_columns(prepared, opts))
    groups = []
    need_pool = workers > 1 and bootstrap > 0 and any(p.data is not None for p in prepared)
    pool = make_pool(workers) if need_pool else None  # one pool for all groups: spawning is the slow part
    # one group ahead: a group's fits and checks run here while the helpers fit the previous group's resamples
    started: list[_Started] = []
    try:
        for prep in prepared:
            slug = group_slug(prep.group)
            log.info("causal: group %s (%s): %s", prep.group[:60], slug, prep.skip_reason or f"{prep.rows_used} rows")
            random_fit = fit_random_bins(random_rows, prep, opts)
            started.append(start_group(prep, outdir / slug, opts, pool, random_fit))
            if len(started) > 1:
                groups.append(_summary_entry(finish_group(started.pop(0))))
        while started:
            groups.append(_summary_entry(finish_group(started.pop(0))))
    finally:
        for left in started:  # (an error: no resample left running for nothing)
            if left.boot is not None:
                left.boot.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    summary = {
        "target": target,
        "group_by": opts.group_by,
        "engine": opts.engine,
        "prior_knowledge": opts.prior_knowledge,
        "collinear_threshold": opts.collinear_threshold,
        "seed": opts.seed,
        "bootstrap": bootstrap,
        "bootstrap_unit": "bin",
        "min_rows": opts.min_rows,
        "random_bins_compared": random_rows is not None,
        "rejected_features": rejected,
        "groups": groups,
        "n_ok": sum(g["status"] == "ok" for g in groups),
        "n_skipped": sum(g["status"] == "skipped" for g in groups),
        "flagged": [g["group"] for g in groups if g["status"] == "ok" and not g["trusted"]],
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    for g in groups:
        if g["status"] == "ok" and not g["trusted"]:
            log.warning("causal: graph %s flagged: %s", g["group"][:60], "; ".join(g["warnings"]))
    write_json(summary, outdir / CAUSAL_SUMMARY, stable_float)
    return summary
