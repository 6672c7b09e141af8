"""Comparison figures, drawn with seaborn on the project's deterministic style (byte-identical reruns).

* forest: ratio of medians (candidate / baseline) per kernel with its bootstrap interval, log scale,
  regressions red, improvements blue, unchanged grey; the kernels that cost the run most, top first.
* delta_time: where the time went -- Δ total time per kernel, copy kind and memset, added and removed ones
  included (they are often most of a change), split into per-launch change and launch-count change; the
  bars add up to the run's Δ total, which the title states.
* distributions: violins of the top regressed kernels' durations in both runs, relative to the baseline
  median (kernels of very different lengths share one axis).
* causal diff: per kernel group with the most changes, the union of both graphs: kept edges grey, added
  edges green, removed edges dashed, sign flips red and marked with a cross.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import NullLocator

from gpuvar.plots import style

SLOWER, FASTER, UNCHANGED = style.NEGATIVE, "#2e86c1", "#7f8c8d"
ADDED, REMOVED, KEPT = "#1e8449", "#7f8c8d", "#b3b6b7"
COLORS = {
    "slower": SLOWER,
    "faster": FASTER,
    "negligible": "#d4ac0d",  # significant but under the minimum effect: amber, not a finding
    "unchanged": UNCHANGED,
    "untested": UNCHANGED,
    "added": SLOWER,
    "removed": FASTER,
}
LABEL_WIDTH = 64
# Legends go to the right of the axes: inside ("lower right") one hid the point of the slowest kernel
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "frameon": False}
NICE_TICKS = (0.1, 0.2, 0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 5.0, 10.0)
VIOLIN_POINTS = 4000  # per kernel and run: evenly spaced quantiles keep the shape, bound the KDE cost


def _duration_axis(values: np.ndarray) -> tuple[float, str]:
    """(divisor, unit) so the largest |value| in ns reads in ns, µs, ms or s."""
    top = float(np.nanmax(np.abs(values))) if len(values) else 0.0
    for divisor, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if top >= divisor:
            return divisor, unit
    return 1.0, "ns"


def delta_time(table: pd.DataFrame, stem, formats, dpi: int, names: tuple[str, str], max_rows: int = 30) -> list:
    """Horizontal bars of Δ total time per row of kernels.csv (largest |Δ| first), stacked as per-launch change
    and launch-count change; coloured by verdict; the rows not drawn are summed in the footnote."""
    data = table.head(max_rows).reset_index(drop=True)
    fig = style.figure(8.5, 1.4 + 0.28 * max(len(data), 1))
    ax = fig.add_subplot(111)
    total = float(table["delta_total_ns"].sum()) if not table.empty else 0.0
    divisor, unit = _duration_axis(np.concatenate([data[c].to_numpy(float) for c in DELTA_PARTS] + [[total]]))
    if data.empty:
        ax.text(0.5, 0.5, "no kernel, copy or memset in either run", ha="center", va="center")
        ax.set_axis_off()
    else:
        y = np.arange(len(data))
        rate, count = (data[c].to_numpy(float) / divisor for c in DELTA_PARTS)
        colors = [COLORS[v] for v in data["verdict"]]
        ax.barh(y, rate, color=colors, height=0.7, edgecolor="none")
        ax.barh(
            y,
            count,
            left=np.where(np.sign(count) == np.sign(rate), rate, 0),
            color=colors,
            height=0.7,
            alpha=0.45,
            hatch="///",
            edgecolor="white",
            linewidth=0,
        )
        ax.axvline(0, color="#333333", linewidth=0.8)
        tags = [
            f"{i + 1}. {lab}" + ("" if st == "both" else f" [{st}]")
            for i, (lab, st) in enumerate(zip(data["label"], data["status"]))
        ]
        ax.set_yticks(y, tags, fontsize=6.5)
        ax.set_ylim(len(data) - 0.5, -0.5)
        ax.set_xlabel(
            f"Δ total time {names[1]} − {names[0]} ({unit}); solid: per-launch change, hatched: launch-count change"
        )
        ax.set_title(
            f"where the time went: Δ total {total / divisor:+.3g} {unit} ({_ratio_text(table)}), largest changes first"
        )
        from matplotlib.patches import Patch

        shown = list(dict.fromkeys(data["verdict"]))
        ax.legend(handles=[Patch(color=COLORS[v], label=v) for v in shown], fontsize=7, **OUTSIDE)
    rest = table.iloc[len(data) :]
    style.footnote(
        fig,
        [
            "N. = row N of kernels.csv (full names, every number)",
            f"{len(rest)} more row(s), Δ {rest['delta_total_ns'].sum() / divisor:+.3g} {unit} together"
            if len(rest)
            else "",
        ],
    )
    return style.save_figure(fig, stem, formats, dpi)


DELTA_PARTS = ("delta_rate_ns", "delta_count_ns")


def _ratio_text(table: pd.DataFrame) -> str:
    b, c = float(table["total_ns_b"].sum()), float(table["total_ns_c"].sum())
    return f"×{c / b:.3f}" if b > 0 else "new"


def forest(table: pd.DataFrame, stem, formats, dpi: int, names: tuple[str, str], max_rows: int = 30) -> list:
    """Forest plot of the kernels with an interval, at most `max_rows` (by |impact|); returns written paths."""
    import seaborn as sns

    data = table[np.isfinite(table["ci_low"])].head(max_rows)
    fig = style.figure(7.5, 1.2 + 0.28 * max(len(data), 1))
    ax = fig.add_subplot(111)
    if data.empty:
        ax.text(0.5, 0.5, "no kernel has enough launches in both runs for an interval", ha="center", va="center")
        ax.set_axis_off()
    else:
        data = data.assign(label=[f"{i + 1}. {lab}" for i, lab in zip(data.index, data["label"])]).reset_index(
            drop=True
        )
        y = np.arange(len(data))
        colors = [COLORS[v] for v in data["verdict"]]
        ax.hlines(y, data["ci_low"], data["ci_high"], colors=colors, linewidth=2)
        sns.scatterplot(
            x=data["ratio"].to_numpy(),
            y=y,
            hue=data["verdict"].to_numpy(),
            palette=COLORS,
            ax=ax,
            s=30,
            zorder=3,
            legend=True,
            edgecolor="none",
        )
        ax.axvline(1.0, color="#333333", linewidth=0.8, linestyle=":")
        ax.set_yticks(y, data["label"], fontsize=6.5)
        ax.set_ylim(len(data) - 0.5, -0.5)
        ax.set_xscale("log")
        lo, hi = _limits(data)
        ax.set_xlim(lo, hi)
        ticks = [t for t in NICE_TICKS if lo <= t <= hi]
        if len(ticks) < 3:  # a narrow range (changes of a few %): evenly spaced ticks with 3 decimals
            ticks = sorted(set(np.round(np.geomspace(lo, hi, 6)[1:-1], 3)) | {1.0})
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        cut = int(((data["ci_low"] < lo) | (data["ci_high"] > hi)).sum())
        style.footnote(
            fig,
            [
                "N. = row N of kernels.csv (full names, every number)",
                f"{cut} interval(s) extend beyond the axis" if cut else "",
            ],
        )
        ax.set_xlabel(f"median duration ratio {names[1]} / {names[0]} (bootstrap interval over steps)")
        ax.legend(title=None, **OUTSIDE)
        ax.set_title(f"per-kernel change, {names[0]} → {names[1]} (ordered by |Δ total time|)")
    return style.save_figure(fig, stem, formats, dpi)


def _limits(data: pd.DataFrame) -> tuple[float, float]:
    """x range holding every ratio and most intervals: a few huge intervals (multi-modal kernels with few
    launches) would otherwise squash all others into one column."""
    lo = min(float(data["ratio"].min()), float(data["ci_low"].quantile(0.1)), 0.99)
    hi = max(float(data["ratio"].max()), float(data["ci_high"].quantile(0.9)), 1.01)
    pad = (hi / lo) ** 0.08
    return lo / pad, hi * pad


def _quantile_sample(values: np.ndarray) -> np.ndarray:
    if len(values) <= VIOLIN_POINTS:
        return np.sort(values)
    return np.quantile(values, (np.arange(VIOLIN_POINTS) + 0.5) / VIOLIN_POINTS)


def top_regressed(table: pd.DataFrame, k: int = 6) -> list[str]:
    """Kernels judged slower, by |Δ time|; if none, those in both runs whose per-launch change cost most."""
    slower = table[table["verdict"] == "slower"]
    pool = slower if not slower.empty else table[(table["status"] == "both") & (table["delta_rate_ns"] > 0)]
    if slower.empty:
        pool = pool.sort_values(["delta_rate_ns", "key"], ascending=[False, True], kind="mergesort")
    return list(pool["key"].head(k))


def distributions(table, baseline: pd.DataFrame, candidate: pd.DataFrame, stem, formats, dpi, names) -> list:
    """Split violins of the top regressed kernels in both runs (durations / baseline median)."""
    import seaborn as sns

    keys = top_regressed(table)
    parts = []
    med = table.set_index("key")["median_ns_b"]
    shown = table.set_index("key")["label"]
    for i, key in enumerate(keys):
        for name, frame in zip(names, (baseline, candidate)):
            d = frame.loc[frame["key"] == key, "duration"].to_numpy(dtype=np.float64)
            rel = _quantile_sample(d) / med[key]
            row = int(np.flatnonzero(table["key"].to_numpy() == key)[0]) + 1
            parts.append(pd.DataFrame({"kernel": f"{row}. {shown[key]}", "run": name, "relative": rel}))
    fig = style.figure(7.5, 1.2 + 0.7 * max(len(keys), 1))
    ax = fig.add_subplot(111)
    if not parts:
        ax.text(0.5, 0.5, "no kernel got slower", ha="center", va="center")
        ax.set_axis_off()
    else:
        data = pd.concat(parts, ignore_index=True)
        sns.violinplot(
            data=data,
            x="relative",
            y="kernel",
            hue="run",
            hue_order=list(names),
            split=True,
            cut=0,
            inner="quart",
            density_norm="width",
            palette=[UNCHANGED, SLOWER],
            linewidth=0.6,
            ax=ax,
        )
        ax.axvline(1.0, color="#333333", linewidth=0.8, linestyle=":")
        ax.set_xlabel("duration / baseline median")
        ax.set_ylabel("")
        ax.legend(title=None, **OUTSIDE)
        ax.set_title("duration distributions of the top regressed kernels")
    return style.save_figure(fig, stem, formats, dpi)


def _layout(nodes: list[str], target: str) -> dict[str, tuple[float, float]]:
    """Target in the centre, features on a circle in name order (stable across runs)."""
    feats = [n for n in nodes if n != target]
    pos = {target: (0.0, 0.0)}
    for i, n in enumerate(feats):
        a = np.pi / 2 - 2 * np.pi * i / max(len(feats), 1)
        pos[n] = (float(np.cos(a)), float(np.sin(a)))
    return pos


def _draw_group(ax, rows: pd.DataFrame, target: str, title: str) -> None:
    rows = rows[rows["stable"].astype(object).ne(False)]
    nodes = sorted(set(rows["from"]) | set(rows["to"]) | {target})
    pos = _layout(nodes, target)
    for r in rows.to_dict("records"):
        (x0, y0), (x1, y1) = pos[r["from"]], pos[r["to"]]
        change = r["change"]
        coef = r["coefficient_candidate"] if change != "removed" else r["coefficient_baseline"]
        width = 0.6 + 2.4 * min(abs(float(coef)), 1.0)
        color = {"added": ADDED, "removed": REMOVED, "flipped": SLOWER, "kept": KEPT}[change]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops=dict(
                arrowstyle="-|>",
                color=color,
                lw=width,
                linestyle="--" if change == "removed" else "-",
                shrinkA=14,
                shrinkB=14,
                mutation_scale=10,
                connectionstyle="arc3,rad=0.08",
            ),
        )
        if change == "flipped":
            ax.plot([(x0 + x1) / 2], [(y0 + y1) / 2], marker="X", color=SLOWER, markersize=7, zorder=4)
    for n, (x, y) in pos.items():
        face = style.TARGET_FACE if n == target else style.FEATURE_FACE
        ax.text(
            x,
            y,
            style.wrap_label(n, 14),  # after a separator: never 'kernel_variabi' + 'lity'
            ha="center",
            va="center",
            fontsize=6,
            zorder=5,
            bbox=dict(boxstyle="round,pad=0.3", facecolor=face, edgecolor="#555555", linewidth=0.5),
        )
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.35, 1.35)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(style.wrap_label(title, 40), fontsize=8)


def causal_diff(causes: dict, rows: pd.DataFrame, stem, formats, dpi, max_groups: int = 6) -> list:
    """Grid of the groups with the most edge changes over all targets (causes: target -> diff_causal record;
    rows: causal_diff.csv with its target column)."""
    from matplotlib.lines import Line2D

    from gpuvar.causal.describe import group_name

    panels = sorted(
        ((t, g) for t, d in causes.items() for g in d["groups"] if g["changes"]),
        key=lambda tg: (-tg[1]["changes"], tg[0], tg[1]["group"]),
    )
    shown = panels[:max_groups]
    cols = min(3, max(len(shown), 1))
    nrows = max(1, -(-len(shown) // cols))
    fig = style.figure(3.6 * cols, 3.6 * nrows + 0.5)
    if not shown:
        compared = sum(d["groups_compared"] for d in causes.values())
        message = (
            f"no edge changed in the {compared} group(s) analysed in both runs"
            if compared
            else ("no kernel group was analysed in both runs")
        )
        ax = fig.add_subplot(111)
        ax.text(0.5, 0.5, message, ha="center", va="center")
        ax.set_axis_off()
    for i, (target, g) in enumerate(shown):
        ax = fig.add_subplot(nrows, cols, i + 1)
        part = rows[(rows["target"] == target) & (rows["group"] == g["group"])]
        prefix = f"[{target}] " if len(causes) > 1 else ""
        name = group_name(g["group"], 48)
        title = f"{prefix}{name}: +{len(g['added'])} −{len(g['removed'])} ±{len(g['sign_flips'])}"
        _draw_group(ax, part, target, title)
    handles = [
        Line2D([], [], color=ADDED, lw=2, label="added"),
        Line2D([], [], color=REMOVED, lw=2, ls="--", label="removed"),
        Line2D([], [], color=SLOWER, lw=2, marker="X", label="sign flipped"),
        Line2D([], [], color=KEPT, lw=2, label="kept"),
    ]
    fig.legend(handles=handles, loc="upper center", ncol=4, frameon=False, bbox_to_anchor=(0.5, 1.0))
    omitted = len(panels) - len(shown)
    unstable = sum(g["unstable_changes"] for d in causes.values() for g in d["groups"])
    unchanged = sum(d["groups_compared"] for d in causes.values()) - len(panels)
    style.footnote(
        fig,
        [
            f"{omitted} more group(s) with fewer changes in causal_diff.csv" if omitted > 0 else "",
            f"{unchanged} group(s) without an edge change not drawn" if unchanged and shown else "",
            (
                f"{unstable} unstable edge change(s) (bootstrap probability below the threshold) not drawn"
                if unstable
                else ""
            ),
        ],
    )
    return style.save_figure(fig, stem, formats, dpi)
