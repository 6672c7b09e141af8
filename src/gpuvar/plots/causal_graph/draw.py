"""A causal graph drawn: boxes, S-bend arrows (black positive, red negative, dashed when found only in the
selected bins), arrow labels placed where they overlap nothing, the legend, a red banner on a graph whose
assumption checks failed, the title and the footnote (captions)."""

from __future__ import annotations

import functools

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path as MplPath
from matplotlib.textpath import TextPath

from gpuvar.plots import style
from gpuvar.plots.causal_graph.captions import fitted_title, footnote_lines
from gpuvar.plots.causal_graph.edges import classify_edges
from gpuvar.plots.causal_graph.layout import FONT, arrow_routes, layered_layout
from gpuvar.plots.causal_graph.load import CausalGraph


def _edge_style(edge: dict, max_coef: float) -> tuple[float, str]:
    """Line width and label: % of the target's variance for edges into the target, coefficient elsewhere."""
    share = edge["variance_share"]
    if edge["into_target"] and not np.isnan(share):
        return 0.8 + 4.0 * min(abs(share), 1.0), f"{100 * abs(share):.1f}%"
    return 0.7 + 2.0 * min(abs(edge["coefficient"]) / max_coef, 1.0), f"{edge['coefficient']:+.2f}"


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
    style.footnote(fig, footnote_lines(cg, edges, set(pos), edges_csv))
    return fig, edges
