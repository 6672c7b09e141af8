"""DirectLiNGAM per group with the target as a sink, and the files the plots read.

The target is declared a sink with lingam's prior-knowledge matrix (pk[i, target] = 0: the target has no
directed path to any feature), so the graph explains the target and never the reverse.

Percentage contribution (what the causal-graph arrows are weighted by): on z-scored data the total
effect TE_j of feature j on the target is the (target, j) entry of (I - B)^-1 — direct plus all indirect
paths, i.e. the change in target standard deviations per one standard deviation of j (already
TE_raw * std(j) / std(target)). contribution_pct_j = 100 * |TE_j| / sum_k |TE_k| over features with a
non-zero total effect (they sum to 100; features without a path to the target get 0). sign = sign(TE_j).

Files per group (OUTDIR/<slug>/): order.json, adjacency.csv (B[i, j] = effect of column j on row i,
lingam's convention), edges.csv (from, to, coefficient, sign), contributions.csv (feature, total_effect,
contribution_pct, sign), graph.graphml, bootstrap_edges.csv (when bootstrapping), causal.json.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.causal.bootstrap import bootstrap_adjacencies, fit_adjacency, make_pool, summarise_edges
from gpuvar.causal.prepare import Prepared, group_slug, prepare_all

log = logging.getLogger("gpuvar.causal")
ENGINES = ("fast", "lingam")


def sink_prior_knowledge(p: int, target: int) -> np.ndarray:
    """lingam's make_prior_knowledge(p, sink_variables=[target]) without importing lingam."""
    pk = np.full((p, p), -1)
    pk[:, target] = 0
    np.fill_diagonal(pk, -1)
    return pk


def total_effects(B: np.ndarray, target: int) -> np.ndarray:
    """Total effect of every variable on `target`: row `target` of (I - B)^-1 (0 for the target itself)."""
    p = B.shape[0]
    te = np.linalg.solve(np.eye(p) - B, np.eye(p))[target].copy()
    te[target] = 0.0
    te[np.abs(te) < 1e-15] = 0.0
    return te


def contributions(B: np.ndarray, names: list[str], target: int) -> pd.DataFrame:
    """contributions.csv: features sorted by contribution (desc), then by column order."""
    te = total_effects(B, target)
    feats = [k for k in range(len(names)) if k != target]
    total = float(np.abs(te[feats]).sum())
    rows = [
        {
            "feature": names[k],
            "total_effect": float(te[k]),
            "contribution_pct": 100.0 * abs(te[k]) / total if total > 0 else 0.0,
            "sign": int(np.sign(te[k])),
        }
        for k in feats
    ]
    df = pd.DataFrame(rows, columns=["feature", "total_effect", "contribution_pct", "sign"])
    df["_pos"] = range(len(df))
    return df.sort_values(["contribution_pct", "_pos"], ascending=[False, True], kind="mergesort").drop(columns="_pos")


def edge_table(B: np.ndarray, names: list[str]) -> pd.DataFrame:
    """edges.csv: every non-zero B[i, j] as from=j, to=i, in (from, to) column order."""
    rows = [
        {"from": names[j], "to": names[i], "coefficient": float(B[i, j]), "sign": int(np.sign(B[i, j]))}
        for j in range(len(names))
        for i in range(len(names))
        if B[i, j] != 0
    ]
    return pd.DataFrame(rows, columns=["from", "to", "coefficient", "sign"])


def build_graph(names, target, edges: pd.DataFrame, contrib: pd.DataFrame, boot: pd.DataFrame | None):
    """networkx DiGraph for graph.graphml: arrows weighted by coefficient, into-target arrows by contribution."""
    import networkx as nx

    g = nx.DiGraph()
    c = contrib.set_index("feature")
    for k, name in enumerate(names):
        attrs = {"is_target": k == target}
        if k != target:
            attrs.update(total_effect=float(c.at[name, "total_effect"]),
                         contribution_pct=float(c.at[name, "contribution_pct"]), sign=int(c.at[name, "sign"]))  # fmt: skip
        g.add_node(name, **attrs)
    prob = {} if boot is None else {(r["from"], r["to"]): float(r["probability"]) for r in boot.to_dict("records")}
    for r in edges.to_dict("records"):
        attrs = {"weight": float(r["coefficient"]), "sign": int(r["sign"])}
        if r["to"] == names[target]:
            attrs["contribution_pct"] = float(c.at[r["from"], "contribution_pct"])
        if boot is not None:
            attrs["probability"] = prob.get((r["from"], r["to"]), 0.0)
        g.add_edge(r["from"], r["to"], **attrs)
    return g


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def discover_group(
    prep: Prepared, outdir: Path, bootstrap: int, workers: int, seed: int, engine: str, pool=None
) -> dict:
    """Fit one prepared group and write its files; returns the causal.json record."""
    import networkx as nx
    from threadpoolctl import threadpool_limits

    outdir.mkdir(parents=True, exist_ok=True)
    record = prep.record() | {"slug": outdir.name, "engine": engine, "seed": seed, "bootstrap": bootstrap}
    if prep.data is None:
        _write_json(outdir / "causal.json", record)
        return record
    names = list(prep.data.columns)
    target = len(names) - 1
    X = prep.data.to_numpy(dtype=np.float64)
    pk = sink_prior_knowledge(len(names), target)
    timings = {}
    t0 = time.perf_counter()
    with threadpool_limits(1):  # tiny BLAS calls: extra BLAS threads only contend
        order, B = fit_adjacency(X, pk, engine)
    timings["fit_s"] = round(time.perf_counter() - t0, 4)
    edges = edge_table(B, names)
    contrib = contributions(B, names, target)
    boot = None
    if bootstrap > 0:
        t0 = time.perf_counter()
        stack = bootstrap_adjacencies(X, pk, bootstrap, seed, workers, engine, pool)
        boot = summarise_edges(stack, names)
        boot.to_csv(outdir / "bootstrap_edges.csv", index=False)
        timings["bootstrap_s"] = round(time.perf_counter() - t0, 4)
    _write_json(outdir / "order.json", {"causal_order": [names[k] for k in order], "target": names[target]})
    adj = pd.DataFrame(B, index=names, columns=names)
    adj.index.name = "to"
    adj.to_csv(outdir / "adjacency.csv")
    edges.to_csv(outdir / "edges.csv", index=False)
    contrib.to_csv(outdir / "contributions.csv", index=False)
    nx.write_graphml(build_graph(names, target, edges, contrib, boot), outdir / "graph.graphml")
    record.update(
        causal_order=[names[k] for k in order],
        n_edges=len(edges),
        top_contributors=contrib.head(5).to_dict("records"),
        timings=timings,
    )
    if not (contrib["contribution_pct"] > 0).any():
        record["note"] = "no feature has a directed path to the target (all total effects are zero)"
    _write_json(outdir / "causal.json", record)
    return record


def discover_all(
    df: pd.DataFrame,
    target: str,
    group_by: str | None = "kernel_name",
    features="auto",
    min_rows: int = 30,
    bootstrap: int = 100,
    workers: int = 1,
    seed: int = 0,
    engine: str = "fast",
    outdir: str | Path = "causal",
) -> dict:
    """Causal discovery for every group and for all rows; writes OUTDIR/<slug>/... and OUTDIR/summary.json.

    Returns the summary dict (also written): one entry per group with status ok/skipped and its reason.
    """
    from gpuvar.errors import GpuvarError

    if engine not in ENGINES:
        raise GpuvarError(f"unknown causal engine {engine!r} (allowed: {', '.join(ENGINES)})")
    if bootstrap < 0 or workers < 1 or min_rows < 1:
        raise GpuvarError("bootstrap must be >= 0, workers >= 1, min_rows >= 1")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    prepared, rejected = prepare_all(df, target, group_by, features, min_rows)
    groups = []
    need_pool = workers > 1 and bootstrap > 0 and any(p.data is not None for p in prepared)
    pool = make_pool(workers) if need_pool else None  # one pool for all groups: spawning is the slow part
    try:
        for prep in prepared:
            slug = group_slug(prep.group)
            log.info("causal: group %s (%s): %s", prep.group[:60], slug, prep.skip_reason or f"{prep.rows_used} rows")
            rec = discover_group(prep, outdir / slug, bootstrap, workers, seed, engine, pool)
            groups.append({k: rec.get(k) for k in ("group", "slug", "status", "skip_reason", "rows_used",
                                                     "features", "n_edges", "top_contributors")})  # fmt: skip
    finally:
        if pool is not None:
            pool.shutdown()
    summary = {
        "target": target,
        "group_by": group_by,
        "engine": engine,
        "seed": seed,
        "bootstrap": bootstrap,
        "min_rows": min_rows,
        "rejected_features": rejected,
        "groups": groups,
        "n_ok": sum(g["status"] == "ok" for g in groups),
        "n_skipped": sum(g["status"] == "skipped" for g in groups),
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    _write_json(outdir / "summary.json", summary)
    return summary
