"""A causal analysis group folder (graph.graphml, or edges.csv + contributions.csv + bootstrap_edges.csv, with
causal.json and order.json) read into a CausalGraph ready to draw; a broken or missing file is a one-line
InputError naming it. Also the group folders of a `gpuvar causal` output, drawn and skipped."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from gpuvar.causal.describe import graph_status
from gpuvar.errors import InputError
from gpuvar.layout import (
    CAUSAL_BOOTSTRAP_EDGES,
    CAUSAL_CONTRIBUTIONS,
    CAUSAL_EDGES,
    CAUSAL_GRAPH,
    CAUSAL_ORDER,
    CAUSAL_RECORD,
)


@dataclass
class CausalGraph:
    """A causal graph ready to draw: edge attrs coefficient, variance_share, probability (NaN if unknown)."""

    graph: nx.DiGraph
    target: str
    group: str
    order: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # column -> node name drawn (merged near-duplicates)
    warnings: list[str] = field(default_factory=list)  # failed assumption checks (empty: trusted)
    explained_share: float | None = None
    verdict: dict | None = None  # causal.json `verdict` (gpuvar.causal.verdict)
    drivers: list[str] = field(default_factory=list)  # top contributors' labels, largest share first
    trusted: bool | None = None  # causal.json `trusted` (None: not recorded)

    @property
    def flagged(self) -> bool:
        """Read with care: a check that counts for this graph failed (all failed checks without a verdict)."""
        return self.checks == "flagged"

    @property
    def checks(self) -> str:
        """trusted, flagged or not explained (gpuvar.causal.describe.graph_status, as checks.tsv says)."""
        return graph_status({"verdict": self.verdict, "warnings": self.warnings, "trusted": self.trusted})


def _pick(frame: pd.DataFrame, names: tuple[str, ...], path: Path, required: bool = True) -> str | None:
    for name in names:
        if name in frame.columns:
            return name
    if required:
        raise InputError(path, f"missing column {names[0]!r} (have: {', '.join(map(str, frame.columns))})")
    return None


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({str(exc).splitlines()[0]})") from None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not readable JSON ({exc})") from None


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _from_graphml(path: Path) -> tuple[nx.DiGraph, str | None, dict[str, str]]:
    try:
        raw = nx.read_graphml(path)
    except Exception as exc:  # networkx raises several XML/Key errors for a broken file
        raise InputError(path, f"not a readable GraphML file ({exc})") from None
    g = nx.DiGraph()
    target = None
    labels = {}
    for node, attrs in raw.nodes(data=True):
        g.add_node(str(node))
        if attrs.get("label"):
            labels[str(node)] = str(attrs["label"])
        if _truthy(attrs.get("is_target", False)):
            target = str(node)
    for u, v, attrs in raw.edges(data=True):
        coef = attrs.get("weight", attrs.get("coefficient", np.nan))
        in_random = attrs.get("in_random_bins")
        g.add_edge(
            str(u),
            str(v),
            coefficient=float(coef),
            variance_share=float(attrs.get("variance_share", np.nan)),
            probability=float(attrs.get("probability", np.nan)),
            in_random_bins=None if in_random is None else _truthy(in_random),
        )
    return g, target, labels


def _from_csv(folder: Path) -> nx.DiGraph:
    path = folder / CAUSAL_EDGES
    edges = _read_csv(path)
    src, dst = _pick(edges, ("from", "source", "cause"), path), _pick(edges, ("to", "target", "effect"), path)
    coef = _pick(edges, ("coefficient", "weight", "coef"), path)
    g = nx.DiGraph()
    for rec in edges.to_dict("records"):
        g.add_edge(
            str(rec[src]),
            str(rec[dst]),
            coefficient=float(rec[coef]),
            variance_share=np.nan,
            probability=np.nan,
            in_random_bins=None,
        )
    return g


def _merge_bootstrap(g: nx.DiGraph, path: Path) -> None:
    """Fill edge probabilities from bootstrap_edges.csv where the graph does not carry them."""
    boot = _read_csv(path)
    src, dst = _pick(boot, ("from", "source"), path), _pick(boot, ("to", "target"), path)
    prob = _pick(boot, ("probability", "prob"), path)
    for s, d, p in zip(boot[src].astype(str), boot[dst].astype(str), boot[prob], strict=True):
        if g.has_edge(s, d) and np.isnan(g.edges[s, d]["probability"]):
            g.edges[s, d]["probability"] = float(p)


def _merge_contributions(g: nx.DiGraph, target: str, path: Path) -> None:
    """Each feature's share of the target's variance goes on its edge into the target when missing there."""
    table = _read_csv(path)
    feat = _pick(table, ("feature", "from", "source"), path)
    share = _pick(table, ("variance_share",), path)
    for f, p in zip(table[feat].astype(str), table[share], strict=True):
        if g.has_edge(f, target) and np.isnan(g.edges[f, target]["variance_share"]):
            g.edges[f, target]["variance_share"] = float(p)


def load_group(folder: str | Path) -> CausalGraph:
    """Read one causal analysis group folder into a CausalGraph (InputError names what is missing)."""
    folder = Path(folder)
    meta = _read_json(folder / CAUSAL_RECORD) if (folder / CAUSAL_RECORD).is_file() else {}
    order = _read_json(folder / CAUSAL_ORDER) if (folder / CAUSAL_ORDER).is_file() else {}
    target = meta.get("target")
    labels = {}
    if (folder / CAUSAL_GRAPH).is_file():
        g, graph_target, labels = _from_graphml(folder / CAUSAL_GRAPH)
        target = graph_target or target
    elif (folder / CAUSAL_EDGES).is_file():
        g = _from_csv(folder)
    else:
        raise InputError(folder, "no graph.graphml or edges.csv: not a causal analysis group folder")
    if isinstance(order, dict):
        order_list = order.get("causal_order", order.get("order", []))
        target = target or order.get("target")
    else:
        order_list = list(order)
    if target is None and order_list:
        target = order_list[-1]
    if target is None:
        raise InputError(
            folder, "cannot tell the target: no is_target node in graph.graphml and no causal.json 'target'"
        )
    g.add_node(str(target))
    for extra in order_list:
        g.add_node(str(extra))
    if (folder / CAUSAL_BOOTSTRAP_EDGES).is_file():
        _merge_bootstrap(g, folder / CAUSAL_BOOTSTRAP_EDGES)
    if (folder / CAUSAL_CONTRIBUTIONS).is_file():
        _merge_contributions(g, str(target), folder / CAUSAL_CONTRIBUTIONS)
    group = str(meta.get("group", meta.get("group_name", folder.name)))
    warnings = [str(w) for w in meta.get("warnings") or []]
    explained = meta.get("explained_share")
    if labels:  # draw merged near-duplicates under their label, e.g. 'grid_x (≈ grid_size)'
        g = nx.relabel_nodes(g, {n: labels.get(n, n) for n in g.nodes})
        target = labels.get(str(target), str(target))
        order_list = [labels.get(str(n), str(n)) for n in order_list]
    drivers = [
        labels.get(str(c.get("feature")), str(c.get("label") or c.get("feature")))
        for c in meta.get("top_contributors") or []
        if (c.get("variance_share") or 0) >= 0.01
    ]
    return CausalGraph(
        g,
        str(target),
        group,
        [str(n) for n in order_list],
        labels,
        warnings,
        float(explained) if explained is not None else None,
        meta.get("verdict"),
        drivers,
        meta.get("trusted"),
    )


def group_folders(causal_dir: str | Path) -> list[Path]:
    """Analysis group sub-folders of a `gpuvar causal` output, sorted (skipped groups have no graph)."""
    root = Path(causal_dir)
    if not root.is_dir():
        raise InputError(root, "not a folder written by `gpuvar causal`")
    return sorted(
        p for p in root.iterdir() if p.is_dir() and ((p / CAUSAL_GRAPH).is_file() or (p / CAUSAL_EDGES).is_file())
    )


def skipped_groups(root: Path) -> list[dict]:
    """Groups `gpuvar causal` could not analyse (causal.json only), with its reason."""
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        meta_path = folder / CAUSAL_RECORD
        if meta_path.is_file() and not (folder / CAUSAL_GRAPH).is_file() and not (folder / CAUSAL_EDGES).is_file():
            meta = _read_json(meta_path)
            out.append(
                {
                    "group": str(meta.get("group", folder.name)),
                    "slug": folder.name,
                    "checks": "skipped",
                    "status": "skipped",
                    "reason": str(meta.get("skip_reason") or "no graph written"),
                }
            )
    return out
