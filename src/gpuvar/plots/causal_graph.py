"""Causal graph figures (paper Figs. 2, 3, 5a): which features push the target up (black) or down (red).

Input is one analysis group folder written by `gpuvar causal` (graph.graphml, or edges.csv +
contributions.csv + bootstrap_edges.csv). The layout is layered, left to right, with no random seed: causes
first, the target alone on the right, every arrow pointing right; an arrow longer than one layer passes
through a slot reserved in each layer it crosses, and the layers are ordered against crossings (dense
whole-dataset graphs drawn on rings crossed arrows over labels). Long names wrap after a separator, never
inside a word. Edges below the variance-share or bootstrap-probability thresholds are hidden and counted in
the footnote and in the edge CSV, so nothing disappears without a trace; so are the edges beyond the
MAX_DRAWN_EDGES strongest (the footnote says how many more the CSV lists), which with a pixel bound on the
PNG keeps a dense graph a figure drawn in seconds. A graph whose assumption checks failed (causal.json
`trusted: false`) carries a red banner with the failed checks, and edges found only in the selected bins
(not in a random sample of bins) are dashed.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path as MplPath
from matplotlib.textpath import TextPath

from gpuvar.artifacts import ALL_GROUP, CAUSAL_RECORD
from gpuvar.causal.describe import graph_status, group_name, group_names
from gpuvar.errors import InputError
from gpuvar.plots import style

FONT = 8.0
MAX_DRAWN_EDGES = 40  # a raw ncu dataset can give 450 edges: drawn in full it took 26 min and a 440-MP PNG
BEYOND = "strength rank > "  # status of a shown-worthy edge left out of the figure by MAX_DRAWN_EDGES
EDGE_COLUMNS = [
    "from",
    "to",
    "coefficient",
    "sign",
    "variance_share",
    "probability",
    "in_random_bins",
    "into_target",
    "status",
]


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


# ----------------------------------------------------------------------------------------------- loading
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
    path = folder / "edges.csv"
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
    order = _read_json(folder / "order.json") if (folder / "order.json").is_file() else {}
    target = meta.get("target")
    labels = {}
    if (folder / "graph.graphml").is_file():
        g, graph_target, labels = _from_graphml(folder / "graph.graphml")
        target = graph_target or target
    elif (folder / "edges.csv").is_file():
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
    if (folder / "bootstrap_edges.csv").is_file():
        _merge_bootstrap(g, folder / "bootstrap_edges.csv")
    if (folder / "contributions.csv").is_file():
        _merge_contributions(g, str(target), folder / "contributions.csv")
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


# ----------------------------------------------------------------------------------------------- filtering
def classify_edges(
    cg: CausalGraph, min_variance_share: float, min_probability: float, max_edges: int = MAX_DRAWN_EDGES
) -> pd.DataFrame:
    """One row per edge with status 'shown' or why it is hidden (probability first, then variance share, then
    beyond the `max_edges` strongest, BEYOND: a readable figure that draws in seconds; the table keeps every edge)."""
    rows = []
    for u, v, a in cg.graph.edges(data=True):
        coef, share, prob = a.get("coefficient", np.nan), a.get("variance_share", np.nan), a.get("probability", np.nan)
        if coef == 0 or np.isnan(coef):
            continue  # no edge: a zero adjacency entry that slipped into the file
        if not np.isnan(prob) and prob < min_probability:
            status = f"bootstrap probability < {min_probability:g}"
        elif not np.isnan(share) and abs(share) < min_variance_share:
            status = f"variance share < {100 * min_variance_share:g} %"
        else:
            status = "shown"
        rows.append(
            {
                "from": u,
                "to": v,
                "coefficient": coef,
                "sign": "+" if coef > 0 else "-",
                "variance_share": share,
                "probability": prob,
                "in_random_bins": a.get("in_random_bins"),
                "into_target": v == cg.target,
                "status": status,
            }
        )
    frame = pd.DataFrame(rows, columns=EDGE_COLUMNS)
    frame = frame.sort_values(["into_target", "from", "to"], ascending=[False, True, True], kind="stable")
    shown = frame[frame["status"] == "shown"]
    if len(shown) > max_edges:
        frame.loc[_weakest(shown, max_edges), "status"] = f"{BEYOND}{max_edges}"
    return frame


def _weakest(shown: pd.DataFrame, keep: int) -> pd.Index:
    """Rows of `shown` beyond the `keep` strongest: edges into the target by |variance share| first (what the
    figure is about), then the rest by |coefficient|; ties by name, so the choice is deterministic."""
    share = shown["variance_share"].abs().where(shown["into_target"])
    key = pd.DataFrame(
        {
            "no_share": share.isna(),
            "share": -share.fillna(0.0),
            "coef": -shown["coefficient"].abs(),
            "from": shown["from"],
            "to": shown["to"],
        },
        index=shown.index,
    )
    order = key.sort_values(list(key.columns), kind="stable").index
    return order[keep:]


def hidden_counts(edges: pd.DataFrame) -> Counter:
    """Hidden edges by reason (the footnote's numbers)."""
    return Counter(edges.loc[edges["status"] != "shown", "status"])


# ----------------------------------------------------------------------------------------------- layout
LABEL_WIDTH = 26  # characters per line of a node label; longer names wrap after a separator (style.wrap_label)
LAYER_GAP = 110.0  # points between the boxes of neighbouring layers: room for the arrows and their labels
NODE_GAP = 16.0  # points between two boxes of one layer
DUMMY_SLOT = 10.0  # points a long edge takes where it passes through a layer
SWEEPS = 8  # barycentre passes ordering each layer (crossing reduction)
MAX_COLUMN = 12  # direct causes beyond this many go on both sides of the target


@dataclass
class Layout:
    """Where everything goes, in points: node centres, each drawn edge's route (source exit, the points where
    it passes intermediate layers, target entry) and the layer of each node (0 = first causes)."""

    pos: dict[str, tuple[float, float]]
    routes: dict[tuple[str, str], list[tuple[float, float]]]
    layer: dict[str, int]
    labels: dict[str, str]  # node -> wrapped label drawn
    half: dict[str, tuple[float, float]]  # node -> half width, half height of its box


ALIAS_SHOWN = 24  # characters of the one near-duplicate a label names; a longer one is counted, not named
_ALIASES = re.compile(r"^(?P<name>.+?) \(≈ (?P<aliases>.+)\)$")


def compact_label(name: str) -> str:
    """A merged feature's label with its near-duplicates counted, not listed: 'grid_x (≈ launch__grid_dim_x and
    12 more)'. Nsight Compute exports carry a dozen columns that follow one another (dram__bytes_read.avg/.max/
    .min/.sum, ...); listed in full they made a node box and a title of ten lines. A near-duplicate longer than
    ALIAS_SHOWN characters is counted as well ('(≈ 1 more)'). The full list stays in the
    edge table (its `from`/`to` columns) and in graph.graphml."""
    m = _ALIASES.match(name)
    if not m:
        return name
    aliases = m.group("aliases").split(", ")
    if len(aliases[0]) > ALIAS_SHOWN:  # a long metric name as well: counted too
        return f"{m.group('name')} (≈ {len(aliases)} more)"
    if len(aliases) <= 1:
        return name
    return f"{m.group('name')} (≈ {aliases[0]} and {len(aliases) - 1} more)"


def node_label(name: str) -> str:
    """The node's name (near-duplicates counted: compact_label) on lines of at most ~LABEL_WIDTH characters,
    never cut inside a word."""
    return style.wrap_label(compact_label(name), LABEL_WIDTH)


def _layers(cg: CausalGraph, nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layering left to right: every edge points to a later layer, the target in the last; a
    feature caused by nothing drawn sits just before the first feature it acts on (short arrows). Only in a
    graph with a cycle (none from DirectLiNGAM) or edges out of the target is an edge laid out reversed."""
    rank = _rank(cg, nodes)
    dag = nx.DiGraph(edges)
    dag.add_nodes_from(nodes)
    if nx.is_directed_acyclic_graph(dag):  # the edges' own order (the file's causal order may be missing)
        topo = nx.lexicographical_topological_sort(dag, key=rank.__getitem__)
        rank = {n: (n == cg.target, i) for i, n in enumerate(topo)}
    forward = [(u, v) if rank[u] < rank[v] else (v, u) for u, v in edges]
    layer = dict.fromkeys(nodes, 0)
    for node in sorted(nodes, key=rank.__getitem__):  # rank order is a topological order of `forward`
        for u, v in forward:
            if u == node:
                layer[v] = max(layer[v], layer[u] + 1)
    others = [layer[n] for n in nodes if n != cg.target]
    layer[cg.target] = max(others, default=-1) + 1
    caused = {v for _, v in forward}
    for node in nodes:
        if node not in caused and node != cg.target:
            layer[node] = min((layer[v] for u, v in forward if u == node), default=1) - 1
    return layer


def _split_direct_causes(cg: CausalGraph, layer: dict[str, int], edges, order: dict[str, tuple]) -> None:
    """A star of many direct causes (a raw counter dataset: 40 features into the target) would be one column
    as tall as 40 labels: beyond MAX_COLUMN, the weaker half of the features acting only on the target moves
    to the target's right, their arrows pointing left."""
    last = layer[cg.target]
    touching = Counter(n for e in edges for n in e)
    only_target = [n for n in layer if layer[n] == last - 1 and touching[n] == 1 and (n, cg.target) in edges]
    if len(only_target) > MAX_COLUMN:
        for n in sorted(only_target, key=order.__getitem__)[(len(only_target) + 1) // 2 :]:
            layer[n] = last + 1


def _rank(cg: CausalGraph, nodes: list[str]) -> dict[str, tuple]:
    position = {n: i for i, n in enumerate(cg.order)}
    return {n: (n == cg.target, position.get(n, math.inf), n) for n in nodes}


def _first_order(cg: CausalGraph, shown: pd.DataFrame, nodes: list[str]) -> dict[str, tuple]:
    """Initial order within a layer: the target's direct causes by share of its variance (largest on top),
    then the other features in causal order."""
    into = shown[shown["to"] == cg.target]
    strength = dict(zip(into["from"], into["variance_share"].abs().fillna(into["coefficient"].abs()), strict=True))
    rank = _rank(cg, nodes)
    return {n: (n not in strength, -strength.get(n, 0.0), rank[n]) for n in nodes}


def _isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, size]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def _place(order: list[str], height: dict[str, float], wanted: dict[str, float]) -> dict[str, float]:
    """y of each item of one layer (top to bottom in `order`), as near `wanted` as boxes that must not overlap
    allow: minimal squared displacement under the spacing constraints (isotonic regression on offsets)."""
    offsets, at = [], 0.0
    for i, item in enumerate(order):
        if i:
            at += height[order[i - 1]] / 2 + NODE_GAP + height[item] / 2
        offsets.append(at)
    # top to bottom = decreasing y: z_k = -y_k - offset_k must be non-decreasing
    z = _isotonic([-wanted[item] - off for item, off in zip(order, offsets, strict=True)])
    return {item: -(zk + off) for item, zk, off in zip(order, z, offsets, strict=True)}


def layered_layout(cg: CausalGraph, shown: pd.DataFrame) -> Layout:
    """Positions in points for the nodes with a shown edge (and the target): causes on the left, the target
    alone on the right, every arrow pointing right (a Sugiyama layout: longest-path layers, edges longer than
    one layer routed through a slot in each layer they cross, barycentre sweeps against crossings, each layer
    pulled towards its neighbours without overlapping); beyond MAX_COLUMN direct causes, the weaker half on the
    target's right. No randomness: the same graph gives the same figure."""
    edges = list(zip(shown["from"], shown["to"], strict=True))
    touched = {cg.target} | {n for e in edges for n in e}
    nodes = sorted(touched, key=_rank(cg, list(touched)).__getitem__)
    first = _first_order(cg, shown, nodes)
    layer = _layers(cg, nodes, edges)
    _split_direct_causes(cg, layer, set(edges), first)
    used = {k: i for i, k in enumerate(sorted(set(layer.values())))}  # no empty layer between two others
    layer = {n: used[k] for n, k in layer.items()}
    labels = {n: node_label(n) for n in nodes}
    # arrows per side of a box (left: from earlier layers, right: to later ones), the larger count of the two
    sides = Counter((u, layer[v] > layer[u]) for u, v in edges) + Counter((v, layer[u] > layer[v]) for u, v in edges)
    arrows = Counter()
    for (n, _), k in sides.items():
        arrows[n] = max(arrows[n], k)
    half = {}
    for n in nodes:  # a box is tall enough for its arrows to enter PORT_SPACING apart (the target: all of them)
        hw, hh = _half_box(labels[n], n == cg.target)
        half[n] = (hw, max(hh, (PORT_SPACING * (arrows[n] - 1) + 8) / 2))
    height: dict = {n: 2 * half[n][1] for n in nodes}
    # chains: each edge as the items it visits layer by layer (dummy items in the layers it crosses)
    chains: dict[tuple[str, str], list] = {}
    for u, v in edges:
        a, b = (u, v) if layer[u] < layer[v] else (v, u)
        chains[(u, v)] = [a, *[("dummy", u, v, k) for k in range(layer[a] + 1, layer[b])], b]
    items_by_layer: dict[int, list] = {k: [] for k in range(max(layer.values()) + 1)}
    for n in sorted(nodes, key=first.__getitem__):
        items_by_layer[layer[n]].append(n)
    for chain in chains.values():
        for item in chain[1:-1]:
            items_by_layer[item[3]].append(item)
            height[item] = DUMMY_SLOT
    links: dict = {}
    for chain in chains.values():
        for a, b in zip(chain, chain[1:]):
            links.setdefault(a, []).append(b)
            links.setdefault(b, []).append(a)
    layer_of = {item: k for k, items in items_by_layer.items() for item in items}
    # crossing reduction: sort each layer by the mean position of its neighbours in the layer before (down
    # sweeps) or after (up sweeps); ties keep the current order
    index = {item: i for items in items_by_layer.values() for i, item in enumerate(items)}
    layers = sorted(items_by_layer)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for k in layers[1:] if down else layers[-2::-1]:
            ref = k - 1 if down else k + 1

            def bary(item, ref=ref):
                near = [index[o] for o in links.get(item, []) if layer_of[o] == ref]
                return sum(near) / len(near) if near else index[item]

            items_by_layer[k].sort(key=lambda item: (bary(item), index[item]))
            index.update({item: i for i, item in enumerate(items_by_layer[k])})
    # vertical positions: stacked and centred, then pulled towards the neighbours' mean a few times
    y = {}
    for items in items_by_layer.values():
        y.update(_place(items, height, dict.fromkeys(items, 0.0)))
    for _ in range(2 * SWEEPS):
        for k in layers:
            wanted = {}
            for item in items_by_layer[k]:
                near = [y[o] for o in links.get(item, [])]
                wanted[item] = sum(near) / len(near) if near else y[item]
            y.update(_place(items_by_layer[k], height, wanted))
    # x: layers side by side, each as wide as its widest box
    half_width = {k: max((half[i][0] for i in items if i in half), default=0.0) for k, items in items_by_layer.items()}
    x_of, at = {}, 0.0
    for k in layers:
        if k:
            at += half_width[k - 1] + LAYER_GAP + half_width[k]
        x_of[k] = at
    pos = {n: (x_of[layer[n]], y[n]) for n in nodes}
    routes = {}
    for (u, v), chain in chains.items():
        points = [(x_of[layer_of[item]], y[item]) for item in chain]
        if chain[0] != u:  # laid out reversed
            points.reverse()
        routes[(u, v)] = points
    return Layout(pos, routes, layer, labels, half)


# ----------------------------------------------------------------------------------------------- drawing
LINE = 1.2 * FONT  # points per line of a node label
PORT_SPACING = 5.0  # points between the arrows entering (or leaving) one side of a box


@functools.lru_cache(maxsize=4096)
def _half_box(label: str, bold: bool = False) -> tuple[float, float]:
    """Half width/height in points of a node label box (text extent of its widest line + padding)."""
    lines = label.split("\n")
    font = FontProperties(family=style.RC["font.family"], weight="bold" if bold else "normal")
    width = max(TextPath((0, 0), line, size=FONT, prop=font).get_extents().width for line in lines)
    return width / 2 + 5, FONT * 0.7 + 0.5 * LINE * (len(lines) - 1) + 4


def _edge_style(edge: dict, max_coef: float) -> tuple[float, str]:
    """Line width and label: % of the target's variance for edges into the target, coefficient elsewhere."""
    share = edge["variance_share"]
    if edge["into_target"] and not np.isnan(share):
        return 0.8 + 4.0 * min(abs(share), 1.0), f"{100 * abs(share):.1f}%"
    return 0.7 + 2.0 * min(abs(edge["coefficient"]) / max_coef, 1.0), f"{edge['coefficient']:+.2f}"


def _ports(layout: Layout, half: dict[str, tuple[float, float]]) -> dict[tuple, tuple[tuple, tuple]]:
    """(exit point, entry point) of every route: on the box side facing the next point, spread over the
    box's height in the order of where the arrows come from or go to, so that they do not cross at a box."""
    sides: dict[tuple[str, int], list] = {}  # (node, +1 right / -1 left) -> [(other end's y, edge, is_exit)]
    for edge, points in layout.routes.items():
        u, v = edge
        out_side = 1 if points[1][0] > points[0][0] else -1
        sides.setdefault((u, out_side), []).append((points[1][1], edge, True))
        sides.setdefault((v, -out_side), []).append((points[-2][1], edge, False))
    ends: dict[tuple, dict[bool, tuple[float, float]]] = {}
    for (node, side), items in sorted(sides.items()):
        x, y = layout.pos[node]
        hw, hh = half[node]
        items.sort(key=lambda t: (-t[0], t[1]))  # top to bottom
        span = min(2 * hh - 6, PORT_SPACING * (len(items) - 1))
        for i, (_, edge, is_exit) in enumerate(items):
            dy = span / 2 - span * i / (len(items) - 1) if len(items) > 1 else 0.0
            ends.setdefault(edge, {})[is_exit] = (x + side * (hw + 2), y + dy)
    return {edge: (e[True], e[False]) for edge, e in ends.items()}


def arrow_routes(layout: Layout) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each arrow's points as drawn: from its port on the source box, through the layers it crosses, to its
    port on the target box (the arrow is the smooth curve through them, _curve)."""
    ends = _ports(layout, layout.half)
    return {edge: [ends[edge][0], *points[1:-1], ends[edge][1]] for edge, points in layout.routes.items()}


def _curve(points: list[tuple[float, float]]) -> MplPath:
    """A smooth path through the points: one cubic Bézier per step, horizontal at every point (an S-bend
    between layers), so an arrow leaves and enters its boxes sideways."""
    verts, codes = [points[0]], [MplPath.MOVETO]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        mid = (x1 - x0) / 2
        verts += [(x0 + mid, y0), (x1 - mid, y1), (x1, y1)]
        codes += [MplPath.CURVE4] * 3
    return MplPath(verts, codes)


def _on_curve(p0, p1, t: float) -> tuple[float, float]:
    """The point at parameter t of the S-bend from p0 to p1 (as _curve draws it)."""
    (x0, y0), (x1, y1) = p0, p1
    mid = (x1 - x0) / 2
    c1, c2 = (x0 + mid, y0), (x1 - mid, y1)
    s = 1 - t
    x = s**3 * x0 + 3 * s * s * t * c1[0] + 3 * s * t * t * c2[0] + t**3 * x1
    y = s**3 * y0 + 3 * s * s * t * c1[1] + 3 * s * t * t * c2[1] + t**3 * y1
    return x, y


@functools.lru_cache(maxsize=4096)
def _label_half(text: str) -> tuple[float, float]:
    return TextPath((0, 0), text, size=FONT - 1).get_extents().width / 2 + 2, (FONT - 1) * 0.6 + 1.5


def _overlap(a, b) -> float:
    """Overlapping area of two boxes (x, y, half width, half height)."""
    dx = min(a[0] + a[2], b[0] + b[2]) - max(a[0] - a[2], b[0] - b[2])
    dy = min(a[1] + a[3], b[1] + b[3]) - max(a[1] - a[3], b[1] - b[3])
    return max(dx, 0.0) * max(dy, 0.0)


def _at_x(p0, p1, dx: float) -> tuple[float, float]:
    """The point of the S-bend from p0 to p1 `dx` points (horizontally) after p0 (bisection: x is monotone)."""
    lo, hi = 0.0, 1.0
    span = abs(p1[0] - p0[0]) or 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if abs(_on_curve(p0, p1, mid)[0] - p0[0]) < min(dx, span):
            lo = mid
        else:
            hi = mid
    return _on_curve(p0, p1, (lo + hi) / 2)


# Where along an arrow's first step its label may go, in this order, as fractions of the step's width. Arrows
# into the target converge at its box: theirs go just after their source, where they are as far apart as the
# sources are and the curve has hardly turned yet (points after the label's half width).
LABEL_SPOTS = (0.5, 0.3, 0.7, 0.15, 0.85)
INTO_TARGET_SPOTS = (6.0, 30.0, 54.0)


def _label_spots(edges: list[dict], routes, taken: list) -> dict[tuple, tuple[float, float]]:
    """Where each arrow's label goes: on the first step of its route, at the first spot whose box overlaps
    no node box and no label placed before (else where it overlaps least); strongest arrows first."""
    spots = {}
    for edge in edges:
        key = (edge["from"], edge["to"])
        p0, p1 = routes[key][0], routes[key][1]
        hw, hh = _label_half(edge["label"])
        width = abs(p1[0] - p0[0])
        offsets = [hw + d for d in INTO_TARGET_SPOTS] if edge["into_target"] else [f * width for f in LABEL_SPOTS]
        best = None
        for dx in offsets:
            x, y = _at_x(p0, p1, dx)
            box = (x, y, hw, hh)
            clash = sum(_overlap(box, other) for other in taken)
            if best is None or clash < best[0]:
                best = (clash, box)
            if clash == 0:
                break
        taken.append(best[1])
        spots[key] = best[1][:2]
    return spots


def _draw_edge(ax, edge: dict, route: list[tuple[float, float]], width: float) -> None:
    color = style.POSITIVE if edge["coefficient"] > 0 else style.NEGATIVE
    dashed = edge.get("in_random_bins") is False  # found only in the selected bins: possibly selection-induced
    ax.add_patch(
        FancyArrowPatch(
            path=_curve(route),
            arrowstyle="-|>,head_length=0.6,head_width=0.3",
            mutation_scale=10,
            color=color,
            lw=width,
            linestyle="--" if dashed else "-",
            zorder=2,
        )
    )


def _draw_edge_label(ax, edge: dict, xy) -> None:
    ax.text(
        *xy,
        edge["label"],
        fontsize=FONT - 1,
        color=style.POSITIVE if edge["coefficient"] > 0 else style.NEGATIVE,
        ha="center",
        va="center",
        zorder=4,
        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85),
    )


def _draw_node(ax, label: str, xy, half: tuple[float, float], is_target: bool) -> None:
    (x, y), (hw, hh) = xy, half
    ax.add_patch(
        FancyBboxPatch(
            (x - hw + 2, y - hh + 2),
            2 * hw - 4,
            2 * hh - 4,
            boxstyle="round,pad=2",
            fc=style.TARGET_FACE if is_target else style.FEATURE_FACE,
            ec=style.HIGHLIGHT if is_target else "#5d6d7e",
            lw=1.6 if is_target else 0.8,
            zorder=5,
        )
    )
    ax.text(
        x, y, label, fontsize=FONT, ha="center", va="center", zorder=6, fontweight="bold" if is_target else "normal"
    )


def _footnote_lines(
    cg: CausalGraph, edges: pd.DataFrame, shown_nodes: set[str], edges_csv: str | None = None
) -> list[str]:
    explained = (
        "" if cg.explained_share is None else f" Together the features explain {100 * cg.explained_share:.0f} %."
    )
    lines = [
        "Black: positive effect, red: negative. Label/width: share of the target's variance that enters through "
        "the feature (edges into the target), coefficient in SD per SD (other edges)." + explained
    ]
    if cg.verdict:
        v = cg.verdict
        p = "" if v.get("p_value") is None else f", permutation p = {v['p_value']:.3g}"
        lines.append(
            f"Verdict: {v.get('verdict')} (cross-validated share {v.get('share', 0):.2f}{p}; basis: {v.get('basis')})."
        )
    if cg.flagged:
        lines.append("READ WITH CARE - " + "; ".join(cg.warnings))
    elif cg.warnings:
        lines.append(
            "Orientation checks (informational: the direction of these features is known): " + "; ".join(cg.warnings)
        )
    selection = edges[(edges["status"] == "shown") & (edges["in_random_bins"] == False)]  # noqa: E712
    if len(selection):
        lines.append(
            f"Dashed: {len(selection)} edge(s) found only in the most variable bins, not in a random "
            "sample of bins (possibly induced by the selection)."
        )
    hidden = hidden_counts(edges)
    if hidden:
        parts = [f"{n} with {reason}" for reason, n in sorted(hidden.items())]
        lines.append(f"Hidden: {sum(hidden.values())} of {len(edges)} edges ({'; '.join(parts)}).")
    beyond = int(edges["status"].str.startswith(BEYOND).sum())
    if beyond:
        lines.append(f"{beyond} more edges in {edges_csv or 'the edge table'} (only the strongest are drawn).")
    if edges["probability"].isna().all() and len(edges):
        lines.append("No bootstrap probabilities: edges not filtered by confidence.")
    counted = sorted(n for n in shown_nodes if compact_label(n) != n)
    if counted:
        lines.append(
            f"≈ … and N more: near-duplicate columns merged into the one named ({len(counted)} node(s)); every "
            f"name is in {edges_csv or 'the edge table'} and graph.graphml."
        )
    idle = sorted(set(cg.graph.nodes) - shown_nodes)
    if idle:
        lines.append(f"{len(idle)} feature(s) without a shown edge not drawn.")
    return lines


def draw_causal_graph(
    cg: CausalGraph,
    min_variance_share: float = 0.01,
    min_probability: float = 0.5,
    title: str | None = None,
    edges_csv: str | None = None,
    name: str | None = None,
):
    """Figure of one causal graph; returns (figure, edge table with a status per edge). `edges_csv`: the name
    the footnote gives the edge table, where the edges not drawn are listed; `name`: the group's name in the
    default title (default: group_name; plot_causal_dir passes the name the figure has in its index)."""
    edges = classify_edges(cg, min_variance_share, min_probability)
    shown = edges[edges["status"] == "shown"]
    layout = layered_layout(cg, shown)
    pos, half = layout.pos, layout.half
    max_coef = float(shown["coefficient"].abs().max()) if len(shown) else 1.0
    drawn = []
    for edge in shown.to_dict("records"):
        width, edge["label"] = _edge_style(edge, max_coef or 1.0)
        drawn.append((edge, width))
    routes = arrow_routes(layout)
    boxes = [(x, y, *half[n]) for n, (x, y) in pos.items()]
    # labels of the strongest arrows first: edges into the target by share, then by |coefficient|
    strength = sorted(drawn, key=lambda d: (not d[0]["into_target"], -d[1], d[0]["from"], d[0]["to"]))
    spots = _label_spots([e for e, _ in strength], routes, list(boxes))
    # arrows through the layers they cross stay within the figure (a Bézier stays within its points' hull)
    boxes += [(x, y, 4.0, 6.0) for points in routes.values() for x, y in points]
    x0 = min(x - w for x, _, w, _ in boxes) - 20
    x1 = max(x + w for x, _, w, _ in boxes) + 20
    pad = max(0.0, 440 - (x1 - x0)) / 2  # the title and footnote need some width
    x0, x1 = x0 - pad, x1 + pad
    width = max(60, int((x1 - x0) / 5.6))
    title = style.wrap_label(title or fitted_title(cg, width, name), width)
    header = 4 + 12.5 * (title.count("\n") + 1) + (24 if cg.flagged else 0) + 26  # title, banner, legend row
    y0 = min(y - h for _, y, _, h in boxes) - 15
    y1 = max(y + h for _, y, _, h in boxes) + 10 + header
    fig = style.figure((x1 - x0) / 72, (y1 - y0) / 72)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    for edge, width in drawn:
        _draw_edge(ax, edge, routes[(edge["from"], edge["to"])], width)
        _draw_edge_label(ax, edge, spots[(edge["from"], edge["to"])])
    for node, xy in pos.items():
        _draw_node(ax, layout.labels[node], xy, half[node], node == cg.target)
    handles = [
        Line2D([], [], color=style.POSITIVE, lw=2, label="positive"),
        Line2D([], [], color=style.NEGATIVE, lw=2, label="negative"),
    ]
    ax.legend(
        handles=handles,
        loc="upper right",
        bbox_to_anchor=(x1 - 4, y1 - header + 20),
        bbox_transform=ax.transData,
        ncol=2,
        frameon=False,
        borderaxespad=0,
    )
    ax.set_title(title, y=1 - 4 / (y1 - y0), va="top")  # an explicit y: not moved at draw time
    if cg.flagged:
        ax.text(
            (x0 + x1) / 2,
            y1 - 4 - 12.5 * (title.count("\n") + 1) - 8,
            f"⚠ assumption checks failed ({len(cg.warnings)}): read with care, see footnote",
            ha="center",
            va="top",
            fontsize=FONT,
            color="white",
            zorder=6,
            bbox=dict(boxstyle="round,pad=0.3", fc=style.NEGATIVE, ec="none"),
        )
    style.footnote(fig, _footnote_lines(cg, edges, set(pos), edges_csv))
    return fig, edges


def default_title(cg: CausalGraph, name: str | None = None, aliases: bool = True) -> str:
    """The verdict in words: '<kernel>: what explains <target>: explained 99 % by grid_x' (kernel names
    without return type, namespaces and parameter lists), never "causes of" on a graph that does not explain
    its target. Near-duplicates of a driver are counted (compact_label), or left out with aliases=False."""
    from gpuvar.causal.verdict import verdict_title

    name = name or group_name(cg.group)
    if cg.verdict is None:
        return f"{name}: causes of {cg.target}"
    drivers = [compact_label(d) if aliases else _ALIASES.sub(r"\g<name>", d) for d in cg.drivers]
    return verdict_title(name, cg.target, cg.verdict, drivers)


TITLE_LINES = 2
_PERCENT = re.compile(r"(\d) %")


def fitted_title(cg: CausalGraph, width: int, name: str | None = None) -> str:
    """default_title in at most TITLE_LINES lines of `width` characters: with the drivers' near-duplicates
    counted; else without them; else with the kernel's name shortened at a word boundary (its end, which holds
    the template arguments, kept); else cut after the last whole word that fits."""
    name = name or group_name(cg.group)

    def fits(text: str) -> bool:  # ('100 %' is written '100%' below: a line never ends in a bare number)
        return style.wrap_label(text, width).count("\n") < TITLE_LINES

    for aliases in (True, False):
        title = _PERCENT.sub(r"\1%", default_title(cg, name, aliases))
        if fits(title):
            return title
    rest = title[len(name) :]  # ': what explains ...'
    budget = TITLE_LINES * width - len(rest) - 8  # wrapping at word boundaries leaves some room unused
    if budget >= 16:
        from gpuvar.kernel_names import shorten_left

        title = shorten_left(name, budget) + rest
        if fits(title):
            return title
    lines = style.wrap_label(title, width).split("\n")[:TITLE_LINES]
    return " ".join(lines).rstrip(" ,:") + " …"


def plot_group(
    folder: str | Path,
    stem: str | Path,
    formats=("svg", "png"),
    dpi: int = 110,
    min_variance_share: float = 0.01,
    min_probability: float = 0.5,
    title: str | None = None,
) -> dict:
    """Draw one analysis group to stem.<fmt> and its edge table (with hidden reasons) to stem.edges.csv."""
    cg = load_group(folder)
    csv = Path(f"{stem}.edges.csv")
    fig, edges = draw_causal_graph(cg, min_variance_share, min_probability, title, csv.name)
    files = style.save_figure(fig, stem, formats, dpi)
    files.append(style.write_csv(edges, csv))
    hidden = hidden_counts(edges)
    return {
        "group": cg.group,
        "target": cg.target,
        "edges": int(len(edges)),
        "shown": int((edges["status"] == "shown").sum()),
        "hidden": dict(sorted(hidden.items())),
        "trusted": not cg.flagged,
        "files": [str(f) for f in files],
    }


# outdir/index.csv of plot_causal_dir: one row per group; `name` and `checks` are what the HTML report lists
# each figure by (gpuvar.workflow.figures.causal_labels), `slug` is the figure's file name
INDEX_COLUMNS = ["group", "slug", "name", "checks", "status", "edges", "shown", "hidden", "reason"]
REPORT_NAME_WIDTH = 80
TITLE_NAME_WIDTH = 60  # characters of a kernel's name in a figure title (group_name's default)


def group_folders(causal_dir: str | Path) -> list[Path]:
    """Analysis group sub-folders of a `gpuvar causal` output, sorted (skipped groups have no graph)."""
    root = Path(causal_dir)
    if not root.is_dir():
        raise InputError(root, "not a folder written by `gpuvar causal`")
    return sorted(
        p for p in root.iterdir() if p.is_dir() and ((p / "graph.graphml").is_file() or (p / "edges.csv").is_file())
    )


def _skipped_groups(root: Path) -> list[dict]:
    """Groups `gpuvar causal` could not analyse (causal.json only), with its reason."""
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        meta_path = folder / CAUSAL_RECORD
        if meta_path.is_file() and not (folder / "graph.graphml").is_file() and not (folder / "edges.csv").is_file():
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


def plot_causal_dir(
    causal_dir: str | Path,
    outdir: str | Path,
    formats=("svg", "png"),
    dpi: int = 110,
    min_variance_share: float = 0.01,
    min_probability: float = 0.5,
    which: str = "all",
) -> pd.DataFrame:
    """One figure per analysis group of a `gpuvar causal` output into outdir/<slug>.<fmt> (+ .edges.csv).

    which: 'all', 'per_kernel' (every group but the whole dataset) or 'whole' (only the whole dataset).
    The group's graph.graphml is copied to outdir/<slug>.graphml. Writes outdir/index.csv listing every group
    (INDEX_COLUMNS): its readable name, how to read it (trusted, flagged, not explained, skipped), drawn or
    skipped and why; returns that table.
    """
    if which not in ("all", "per_kernel", "whole"):
        raise ValueError(f"which must be all, per_kernel or whole, not {which!r}")
    root, outdir = Path(causal_dir), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    # every group's title names it as the index does: told apart from the folder's other kernels (a tile size)
    loaded = [(folder, load_group(folder)) for folder in group_folders(root)]
    groups = [cg.group for _, cg in loaded] + [g["group"] for g in _skipped_groups(root)]
    names = dict(zip(groups, group_names(groups, TITLE_NAME_WIDTH), strict=True))
    for folder, cg in loaded:
        is_whole = cg.group == ALL_GROUP
        if (which == "whole" and not is_whole) or (which == "per_kernel" and is_whole):
            continue
        fig, edges = draw_causal_graph(
            cg, min_variance_share, min_probability, edges_csv=f"{folder.name}.edges.csv", name=names[cg.group]
        )
        style.save_figure(fig, outdir / folder.name, formats, dpi)
        style.write_csv(edges, outdir / f"{folder.name}.edges.csv")
        if (folder / "graph.graphml").is_file():  # the full graph travels with the figure
            shutil.copyfile(folder / "graph.graphml", outdir / f"{folder.name}.graphml")
        hidden = hidden_counts(edges)
        rows.append(
            {
                "group": cg.group,
                "slug": folder.name,
                "checks": cg.checks,
                "status": "drawn" if not cg.flagged else "drawn, flagged",
                "edges": len(edges),
                "shown": int((edges["status"] == "shown").sum()),
                "hidden": int(sum(hidden.values())),
                "reason": "; ".join([f"{n} {r}" for r, n in sorted(hidden.items())] + cg.warnings),
            }
        )
    for skipped in _skipped_groups(root):
        if which == "all" or (which == "per_kernel") == (skipped["group"] != ALL_GROUP):
            rows.append(skipped | {"edges": 0, "shown": 0, "hidden": 0})
    for row, name in zip(rows, group_names([r["group"] for r in rows], REPORT_NAME_WIDTH), strict=True):
        row["name"] = name  # unique within the folder: the report lists the figures by it
    index = pd.DataFrame(rows, columns=INDEX_COLUMNS)
    style.write_csv(index, outdir / "index.csv")
    return index
