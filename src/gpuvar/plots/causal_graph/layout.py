"""Where a causal graph's boxes and arrows go, in points: layered, left to right, with no random seed (causes
first, the target alone on the right, every arrow pointing right); an arrow longer than one layer passes through a
slot reserved in each layer it crosses, and the layers are ordered against crossings (dense whole-dataset graphs
drawn on rings crossed arrows over labels). Long names wrap after a separator, never inside a word."""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass

import networkx as nx
import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextPath

from gpuvar.plots import style
from gpuvar.plots.causal_graph.load import CausalGraph

FONT = 8.0
LINE = 1.2 * FONT  # points per line of a node label
PORT_SPACING = 5.0  # points between the arrows entering (or leaving) one side of a box
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
ALIASES = re.compile(r"^(?P<name>.+?) \(≈ (?P<aliases>.+)\)$")


def compact_label(name: str) -> str:
    """A merged feature's label with its near-duplicates counted, not listed: 'grid_x (≈ launch__grid_dim_x and
    12 more)'. Nsight Compute exports carry a dozen columns that follow one another (dram__bytes_read.avg/.max/
    .min/.sum, ...); listed in full they made a node box and a title of ten lines. A near-duplicate longer than
    ALIAS_SHOWN characters is counted as well ('(≈ 1 more)'). The full list stays in the
    edge table (its `from`/`to` columns) and in graph.graphml."""
    m = ALIASES.match(name)
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


@functools.lru_cache(maxsize=4096)
def _half_box(label: str, bold: bool = False) -> tuple[float, float]:
    """Half width/height in points of a node label box (text extent of its widest line + padding)."""
    lines = label.split("\n")
    font = FontProperties(family=style.RC["font.family"], weight="bold" if bold else "normal")
    width = max(TextPath((0, 0), line, size=FONT, prop=font).get_extents().width for line in lines)
    return width / 2 + 5, FONT * 0.7 + 0.5 * LINE * (len(lines) - 1) + 4


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
    port on the target box (the arrow is the smooth curve through them, draw._curve)."""
    ends = _ports(layout, layout.half)
    return {edge: [ends[edge][0], *points[1:-1], ends[edge][1]] for edge, points in layout.routes.items()}
