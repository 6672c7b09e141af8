"""Causal graph figures (paper Figs. 2, 3, 5a): which features push the target up (black) or down (red).

Input is one analysis group folder written by `gpuvar causal` (graph.graphml, or edges.csv +
contributions.csv + bootstrap_edges.csv). Layout is a fixed shell, no random seed: the target sits in the
centre, its direct causes on an inner ring ordered by contribution, every other feature with a shown edge
on an outer ring in causal order. Edges below the variance-share or bootstrap-probability thresholds are
hidden and counted in the footnote and in the edge CSV, so nothing disappears without a trace; so are the
edges beyond the MAX_DRAWN_EDGES strongest (the footnote says how many more the CSV lists), which with rings
of at most MAX_RING_NODES and a pixel bound on the PNG keeps a dense graph a figure drawn in seconds. A graph
whose assumption checks failed (causal.json `trusted: false`) carries a red banner with the failed checks,
and edges found only in the selected bins (not in a random sample of bins) are dashed.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.textpath import TextPath

from gpuvar.artifacts import ALL_GROUP, CAUSAL_RECORD
from gpuvar.errors import InputError
from gpuvar.plots import style

FONT = 8.0
MAX_DRAWN_EDGES = 40  # a raw ncu dataset can give 450 edges: drawn in full it took 26 min and a 440-MP PNG
BEYOND = "strength rank > "  # status of a shown-worthy edge left out of the figure by MAX_DRAWN_EDGES
MAX_RING_NODES = 24  # beyond this, a ring's nodes go on further concentric rings (area ~ nodes, not nodes^2)
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

    @property
    def flagged(self) -> bool:
        """Read with care: a check that counts for this graph failed (all failed checks without a verdict)."""
        if self.verdict is None:
            return bool(self.warnings)
        return bool(self.verdict.get("failed_checks"))


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
def shell_layout(cg: CausalGraph, shown: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Positions in points: target at the origin, its shown causes on an inner ring (largest contribution
    at 12 o'clock, clockwise), other nodes with shown edges on an outer ring in causal order. No randomness.
    A ring of more than MAX_RING_NODES continues on the next ring out, so the figure's area grows with the
    node count rather than with its square (one long ring of 80 nodes is kilometres of staggered labels)."""
    into = shown[shown["to"] == cg.target].copy()
    into["rank"] = into["variance_share"].abs().fillna(into["coefficient"].abs())
    inner = list(into.sort_values(["rank", "from"], ascending=[False, True], kind="stable")["from"])
    touched = set(shown["from"]) | set(shown["to"])
    rank = {n: i for i, n in enumerate(cg.order)}
    outer = sorted((n for n in touched if n != cg.target and n not in inner), key=lambda n: (rank.get(n, 1e9), n))
    widest = lambda names: max((_half_box(n)[0] for n in names), default=0.0)  # noqa: E731
    # Ellipses in points: wide enough that the widest labels keep ~70 pt of arrow between them, and with a
    # perimeter giving every node most of its label width as arc. Crowded rings (> 8 nodes) alternate
    # between two radii so neighbouring labels are staggered rather than overlapping.
    arc = lambda names: sum(1.5 * _half_box(n)[0] + _half_box(n)[1] + 10 for n in names) / (2 * math.pi)  # noqa: E731
    stagger = lambda names: 45.0 if len(names) > 8 else 0.0  # noqa: E731
    chunks = lambda names: [names[i : i + MAX_RING_NODES] for i in range(0, len(names), MAX_RING_NODES)]  # noqa: E731
    rings = chunks(inner) or [[]]
    rings += chunks(outer) or [[]]
    pos = {cg.target: (0.0, 0.0)}
    a = b = None
    prev: list[str] = []
    for k, ring in enumerate(rings):
        if a is None:
            b = max(110.0, arc(ring))
            a = max(_half_box(cg.target)[0] + widest(ring) + 70, 1.3 * b)
        else:
            b = max(b + stagger(prev) + 90, arc(ring))
            a = max(a + stagger(prev) + widest(prev) + widest(ring) + 50, 1.3 * b)
        offset = 0.5 * (k % 2)
        for i, node in enumerate(ring):
            angle = math.pi / 2 - 2 * math.pi * (i + offset * (len(ring) > 1)) / max(len(ring), 1)
            extra = stagger(ring) * (i % 2)
            pos[node] = ((a + extra) * math.cos(angle), (b + extra) * math.sin(angle))
        prev = ring
    return pos


# ----------------------------------------------------------------------------------------------- drawing
@functools.lru_cache(maxsize=4096)
def _half_box(label: str) -> tuple[float, float]:
    """Half width/height in points of a node label box (text extent + padding)."""
    ext = TextPath((0, 0), label, size=FONT).get_extents()
    return ext.width / 2 + 5, FONT * 0.7 + 4


def _shrink(label: str, ux: float, uy: float) -> float:
    a, b = _half_box(label)
    return min(a / abs(ux) if ux else math.inf, b / abs(uy) if uy else math.inf) + 2


def _edge_style(edge: dict, max_coef: float) -> tuple[float, str]:
    """Line width and label: % of the target's variance for edges into the target, coefficient elsewhere."""
    share = edge["variance_share"]
    if edge["into_target"] and not np.isnan(share):
        return 0.8 + 4.0 * min(abs(share), 1.0), f"{100 * abs(share):.1f}%"
    return 0.7 + 2.0 * min(abs(edge["coefficient"]) / max_coef, 1.0), f"{edge['coefficient']:+.2f}"


def _bend(x0: float, y0: float, ux: float, uy: float, dist: float, target_half: tuple[float, float]) -> float:
    """arc3 curvature of a feature-to-feature edge, always away from the centre: slight, or far enough to
    clear the target's box when the straight line would pass through or near it."""
    side = -x0 * uy + y0 * ux  # > 0: the centre lies to the right of the direction of travel
    along = -(x0 * ux + y0 * uy)  # where the foot of the perpendicular from the centre falls
    reach = target_half[0] * abs(uy) + target_half[1] * abs(ux) + 12  # the box's half extent across the line
    rad = 0.18
    if abs(side) < reach and 0 < along < dist:
        rad = min(1.0, max(0.3, 2 * (reach - abs(side) + 12) / dist))  # midpoint bulge = rad * dist / 2
    return -rad if side > 0 else rad  # always bulge away from the centre, where the target's edges run


def _edge_geometry(edge: dict, pos, target_half: tuple[float, float]):
    """Start, unit direction, length, curvature and the arc's midpoint (its farthest bulge) of one edge."""
    (x0, y0), (x1, y1) = pos[edge["from"]], pos[edge["to"]]
    dist = math.hypot(x1 - x0, y1 - y0) or 1.0
    ux, uy = (x1 - x0) / dist, (y1 - y0) / dist
    rad = 0.0 if edge["into_target"] else _bend(x0, y0, ux, uy, dist, target_half)
    mid = ((x0 + x1) / 2 + rad * dist / 2 * uy, (y0 + y1) / 2 - rad * dist / 2 * ux)
    return (x0, y0), (ux, uy), dist, rad, mid


def _draw_edge(ax, edge: dict, pos, ppu: float, max_coef: float, target_half: tuple[float, float]) -> None:
    src, dst = edge["from"], edge["to"]
    (x0, y0), (ux, uy), dist, rad, _ = _edge_geometry(edge, pos, target_half)
    x1, y1 = pos[dst]
    dx, dy = x1 - x0, y1 - y0
    width, label = _edge_style(edge, max_coef)
    color = style.POSITIVE if edge["coefficient"] > 0 else style.NEGATIVE
    dashed = edge.get("in_random_bins") is False  # found only in the selected bins: possibly selection-induced
    ax.annotate(
        "",
        xy=(x1, y1),
        xytext=(x0, y0),
        zorder=2,
        arrowprops=dict(
            arrowstyle="-|>,head_length=0.6,head_width=0.3",
            color=color,
            lw=width,
            linestyle="--" if dashed else "-",
            shrinkA=_shrink(src, ux, uy),
            shrinkB=_shrink(dst, ux, uy),
            connectionstyle=f"arc3,rad={rad}",
            mutation_scale=10,
        ),
    )
    # Label at the visible middle of the arrow (arc3 bulges by rad*dist/2 to the right of travel).
    sa, sb = _shrink(src, ux, uy) / ppu, _shrink(dst, ux, uy) / ppu
    # Into the target: nearer the source, so labels spread out instead of piling up at the centre.
    t = (sa + (0.4 if edge["into_target"] else 0.5) * max(dist - sa - sb, 0.0)) / dist
    mx, my = x0 + dx * t, y0 + dy * t
    mx, my = mx + rad * dist / 2 * uy, my - rad * dist / 2 * ux
    ax.text(
        mx,
        my,
        label,
        fontsize=FONT - 1,
        color=color,
        ha="center",
        va="center",
        zorder=4,
        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85),
    )


def _draw_node(ax, name: str, xy, is_target: bool) -> None:
    ax.text(
        *xy,
        name,
        fontsize=FONT,
        ha="center",
        va="center",
        zorder=5,
        fontweight="bold" if is_target else "normal",
        bbox=dict(
            boxstyle="round,pad=0.35",
            fc=style.TARGET_FACE if is_target else style.FEATURE_FACE,
            ec=style.HIGHLIGHT if is_target else "#5d6d7e",
            lw=1.6 if is_target else 0.8,
        ),
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
):
    """Figure of one causal graph; returns (figure, edge table with a status per edge). `edges_csv`: the name
    the footnote gives the edge table, where the edges not drawn are listed."""
    edges = classify_edges(cg, min_variance_share, min_probability)
    shown = edges[edges["status"] == "shown"]
    pos = shell_layout(cg, shown)
    target_half = _half_box(cg.target)
    boxes = [(x, y, *_half_box(n)) for n, (x, y) in pos.items()]
    # curved edges bulge beyond the nodes: keep their arcs and labels inside the figure
    boxes += [(*_edge_geometry(e, pos, target_half)[4], 24.0, 10.0) for e in shown.to_dict("records")]
    x0, x1 = min(x - w for x, _, w, _ in boxes) - 20, max(x + w for x, _, w, _ in boxes) + 20
    y0, y1 = min(y - h for _, y, _, h in boxes) - 15, max(y + h for _, y, _, h in boxes) + 45  # title, legend
    pad = max(0.0, 440 - (x1 - x0)) / 2  # the title and footnote need some width
    x0, x1 = x0 - pad, x1 + pad
    fig = style.figure((x1 - x0) / 72, (y1 - y0) / 72)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ppu = 1.0  # layout units are points
    max_coef = float(shown["coefficient"].abs().max()) if len(shown) else 1.0
    for edge in shown.to_dict("records"):
        _draw_edge(ax, edge, pos, ppu, max_coef or 1.0, target_half)
    for node, xy in pos.items():
        _draw_node(ax, node, xy, node == cg.target)
    handles = [
        Line2D([], [], color=style.POSITIVE, lw=2, label="positive"),
        Line2D([], [], color=style.NEGATIVE, lw=2, label="negative"),
    ]
    ax.legend(handles=handles, loc="upper right", frameon=False)
    ax.set_title(title or default_title(cg), pad=4)
    ax.title.set_position((0.5, 0.99))
    ax.title.set_va("top")
    if cg.flagged:
        ax.text(
            0.5,
            0.935,
            f"⚠ assumption checks failed ({len(cg.warnings)}): read with care, see footnote",
            transform=ax.transAxes,
            ha="center",
            va="top",
            fontsize=FONT,
            color="white",
            zorder=6,
            bbox=dict(boxstyle="round,pad=0.3", fc=style.NEGATIVE, ec="none"),
        )
    style.footnote(fig, _footnote_lines(cg, edges, set(pos), edges_csv))
    return fig, edges


def default_title(cg: CausalGraph) -> str:
    """The verdict in words: '<kernel>: what explains <target>: explained 99 % by grid_x' (kernel names
    shortened), never "causes of" on a graph that does not explain its target."""
    from gpuvar.causal.verdict import verdict_title

    if cg.group in (ALL_GROUP, "all"):
        name = "All kernels"
    else:
        name = cg.group if len(cg.group) <= 50 else cg.group[:47] + "..."
    if cg.verdict is None:
        return f"{name}: causes of {cg.target}"
    return verdict_title(name, cg.target, cg.verdict, cg.drivers)


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
    The group's graph.graphml is copied to outdir/<slug>.graphml. Writes outdir/index.csv listing every group, drawn or skipped and why; returns that table.
    """
    if which not in ("all", "per_kernel", "whole"):
        raise ValueError(f"which must be all, per_kernel or whole, not {which!r}")
    root, outdir = Path(causal_dir), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for folder in group_folders(root):
        cg = load_group(folder)
        is_whole = cg.group == ALL_GROUP
        if (which == "whole" and not is_whole) or (which == "per_kernel" and is_whole):
            continue
        fig, edges = draw_causal_graph(cg, min_variance_share, min_probability, edges_csv=f"{folder.name}.edges.csv")
        style.save_figure(fig, outdir / folder.name, formats, dpi)
        style.write_csv(edges, outdir / f"{folder.name}.edges.csv")
        if (folder / "graph.graphml").is_file():  # the full graph travels with the figure
            shutil.copyfile(folder / "graph.graphml", outdir / f"{folder.name}.graphml")
        hidden = hidden_counts(edges)
        rows.append(
            {
                "group": cg.group,
                "slug": folder.name,
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
    index = pd.DataFrame(rows, columns=["group", "slug", "status", "edges", "shown", "hidden", "reason"])
    style.write_csv(index, outdir / "index.csv")
    return index
