"""Parallel coordinates of the top-k rows (paper Fig. 4): which feature values go with high variability.

One vertical axis per feature plus the target, each scaled to its own min..max so all fit on one figure,
with tick labels in the original units (copy kinds by name) and each axis's unit under its name. Lines are
coloured by the *rank* of the target and drawn in target order, so the most variable launches end up on top:
a linear colour scale painted almost every line one colour when a few launches were far from the rest (Fig. 4,
memory_stall on a log scale: nearly all yellow). Thousands of lines share the few values of a launch feature
(grid sizes, copy kinds): on such an axis the lines of one value fan out over a narrow band in target order
instead of lying on top of each other, and lines get fainter the more there are. Above BANDS_ABOVE rows (a
top-k selection of a long trace holds tens of thousands) one line per row is a solid block of colour whatever
its opacity, so the rows are grouped by the target's rank and each group drawn as a band of its 25th-75th
percentiles on every axis with its median: the figure says which values go with the most variable 5 % at
10,000 rows as at 1,000,000.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from gpuvar.errors import GpuvarError, InputError
from gpuvar.layout import figure_data
from gpuvar.output import write_csv
from gpuvar.plots import style

COPY_KIND_NAMES = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
CATEGORICAL_MAX = 8  # an axis with this few distinct values gets one tick per value
MAX_LINES = 20_000  # beyond this, lines are an unreadable block; a deterministic stride keeps the shape


def select_axes(rows: pd.DataFrame, target: str, features: list[str]) -> tuple[list[str], list[str]]:
    """Features present and numeric, in the requested order, plus a note per feature left out and why."""
    if target not in rows.columns:
        raise GpuvarError(f"target column {target!r} not in the rows (have: {', '.join(map(str, rows.columns))})")
    if not pd.api.types.is_numeric_dtype(rows[target]):
        raise GpuvarError(f"target column {target!r} is not numeric ({rows[target].dtype})")
    axes, notes = [], []
    for name in features:
        if name == target or name in axes:
            continue
        if name not in rows.columns:
            notes.append(f"{name}: not in the rows, skipped")
        elif not pd.api.types.is_numeric_dtype(rows[name]):
            notes.append(f"{name}: not numeric ({rows[name].dtype}), skipped")
        elif rows[name].notna().sum() == 0:
            notes.append(f"{name}: all values missing, skipped")
        else:
            axes.append(name)
    return axes + [target], notes


LOG_SPAN = 30.0  # a positive axis spanning this factor or more is drawn on a log scale (grid sizes, stalls)


def is_log_axis(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(len(finite)) and finite.min() > 0 and finite.max() / finite.min() >= LOG_SPAN


def _ticks(values: np.ndarray, name: str, log: bool = False) -> tuple[np.ndarray, list[str]]:
    """Tick positions (original units) and labels for one axis."""
    finite = values[np.isfinite(values)]
    uniq = np.unique(finite)
    if len(uniq) <= CATEGORICAL_MAX:
        if name.endswith("copy_kind"):
            return uniq, [f"{COPY_KIND_NAMES.get(int(v), int(v))} ({int(v)})" for v in uniq]
        return uniq, [f"{v:.4g}" for v in uniq]
    ticks = np.geomspace(finite.min(), finite.max(), 5) if log else np.linspace(finite.min(), finite.max(), 5)
    return ticks, [f"{v:.4g}" for v in ticks]


def _normalise(values: np.ndarray, log: bool = False) -> np.ndarray:
    """Position on the axis in 0..1 (log10 first for log axes); a constant axis sits in the middle."""
    values = np.log10(values) if log else values
    lo, hi = np.nanmin(values), np.nanmax(values)
    return np.full_like(values, 0.5) if hi == lo else (values - lo) / (hi - lo)


def plotted_table(rows: pd.DataFrame, axes: list[str]) -> tuple[pd.DataFrame, int]:
    """The rows drawn (original units, sorted by target), thinned by a fixed stride above MAX_LINES."""
    table = rows[axes].astype(np.float64)
    table = table[np.isfinite(table[axes[-1]])]
    table = table.sort_values(axes[-1], kind="stable").reset_index(drop=True)
    stride = max(1, -(-len(table) // MAX_LINES))
    return table.iloc[::stride].reset_index(drop=True), stride


BAND = 0.06  # half-height (axis fraction) of the band the lines of one value of a few-valued axis fan out over
PERCENTILES = (0, 10, 50, 90, 100)  # colour bar ticks: the target's value at these percentiles


def line_alpha(n: int) -> float:
    """Opacity of one line: 0.7 for a few hundred lines, down to 0.08 for tens of thousands (overplotting)."""
    return float(np.clip(0.7 * np.sqrt(300 / max(n, 1)), 0.08, 0.7))


def target_ranks(values: np.ndarray) -> np.ndarray:
    """Colour position 0..1 of each row: its rank in the target (ties share their mean rank), so every colour
    of the scale is used by as many lines as any other."""
    if len(values) < 2:
        return np.full(len(values), 0.5)
    return (pd.Series(values).rank(method="average").to_numpy() - 1) / (len(values) - 1)


def _spread(positions: np.ndarray, values: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Positions of a few-valued axis with the rows of each value fanned out over ±band in target order (highest
    on top), the band narrower than half the gap to the next value; a many-valued axis is returned as it is."""
    uniq = np.unique(values[np.isfinite(values)])
    if len(uniq) > CATEGORICAL_MAX or len(values) < 2:
        return positions
    centres = np.unique(positions[np.isfinite(positions)])
    gap = np.diff(centres).min() if len(centres) > 1 else 1.0
    band = min(BAND, 0.3 * gap)
    out = positions.copy()
    for v in uniq:
        rows = np.flatnonzero(values == v)
        if len(rows) > 1:
            order = rows[np.argsort(target[rows], kind="stable")]
            out[order] = positions[order] + np.linspace(-band, band, len(rows))
    return out


def axis_label(name: str) -> str:
    """An axis's name over its unit: 'kernel_variability\n(ns)'; 'linked_copy_kind' has none."""
    unit = style.unit_of(name)
    return f"{name}\n({unit})" if unit else name


BANDS_ABOVE = 2000  # more rows than this are drawn as quantile bands: thousands of lines are one block of colour
BAND_GROUPS = (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)  # target-rank edges of the groups drawn as bands (top 5 % apart)
BAND_QUANTILES = (0.25, 0.5, 0.75)  # per group and axis: the band (25th-75th percentile) and its median line


def band_table(table: pd.DataFrame, axes: list[str], target: str) -> pd.DataFrame:
    """Per group of rows by the target's rank (BAND_GROUPS) and per axis: the rows in the group and the 25th, 50th
    and 75th percentile of the axis's values in it (original units): what a band figure draws, as its CSV."""
    ranks = target_ranks(table[target].to_numpy())
    out = []
    for k, (lo, hi) in enumerate(zip(BAND_GROUPS[:-1], BAND_GROUPS[1:])):
        mask = (ranks >= lo) & ((ranks < hi) if hi < 1 else (ranks <= hi))
        part = table[mask]
        for name in axes:
            q = np.nanquantile(part[name].to_numpy(), BAND_QUANTILES) if len(part) else [np.nan] * 3
            out.append(
                {
                    "group": k,
                    "target_rank_from": lo,
                    "target_rank_to": hi,
                    "rows": int(len(part)),
                    "axis": name,
                    "p25": float(q[0]),
                    "median": float(q[1]),
                    "p75": float(q[2]),
                }
            )
    return pd.DataFrame(out)


def _draw_bands(ax, bands: pd.DataFrame, axes: list[str], table: pd.DataFrame, logs: dict, cmap) -> None:
    """One band per target-rank group between neighbouring axes (its 25th-75th percentiles) with its median as a
    line, coloured at the group's mid rank; the most variable group last, on top."""
    xs = np.arange(len(axes), dtype=float)

    def position(name: str, values) -> np.ndarray:  # on the axis's own 0..1 scale (log where the axis is)
        column = table[name].to_numpy()
        return _normalise(np.append(column, values), logs[name])[len(column) :]

    for k, group in bands.groupby("group", sort=True):
        group = group.set_index("axis").loc[axes]
        mid = (group["target_rank_from"].iloc[0] + group["target_rank_to"].iloc[0]) / 2
        colour = cmap(mid)
        low = np.array([position(a, [group.at[a, "p25"]])[0] for a in axes])
        high = np.array([position(a, [group.at[a, "p75"]])[0] for a in axes])
        median = np.array([position(a, [group.at[a, "median"]])[0] for a in axes])
        ax.fill_between(xs, low, high, color=colour, alpha=0.28, linewidth=0, zorder=1 + k / 10)
        ax.plot(xs, median, color=colour, lw=2.0, zorder=2 + k / 10, solid_capstyle="round")


def draw_parallel(rows: pd.DataFrame, target: str, features: list[str], title: str | None = None):
    """Figure of the rows; returns (figure, plotted table, notes on skipped features / thinning). Up to
    BANDS_ABOVE rows every row is a line (the plotted table: the rows); above, each target-rank group is a band
    of its 25th-75th percentiles with its median (the plotted table: band_table)."""
    axes, notes = select_axes(rows, target, features)
    table, stride = plotted_table(rows, axes)
    as_bands = len(table) > BANDS_ABOVE
    dropped = int(len(rows) - np.isfinite(rows[target].to_numpy(dtype=np.float64, na_value=np.nan)).sum())
    if dropped:
        notes.append(f"{dropped} row(s) without a finite {target} not drawn")
    if stride > 1 and not as_bands:
        notes.append(f"{len(rows)} rows: every {stride}th row (in target order) drawn")
    fig = style.figure(max(6.0, 1.5 * len(axes) + 1.5), 4.6)
    ax = fig.add_axes([0.08, 0.14, 0.8, 0.74])
    cax = fig.add_axes([0.91, 0.14, 0.018, 0.74])
    logs = {a: is_log_axis(table[a].to_numpy()) for a in axes}
    if any(logs.values()):
        notes.append(f"log-scaled axes (values span {LOG_SPAN:g}x or more): {', '.join(a for a in axes if logs[a])}")
    goal = table[target].to_numpy()
    xs = np.arange(len(axes), dtype=float)
    cmap = colormaps[style.CMAP]
    bands = None
    if as_bands:
        bands = band_table(table, axes, target)
        _draw_bands(ax, bands, axes, table, logs, cmap)
    else:
        norm_cols = (
            np.column_stack(
                [_spread(_normalise(table[a].to_numpy(), logs[a]), table[a].to_numpy(), goal) for a in axes]
            )
            if len(table)
            else np.empty((0, len(axes)))
        )
        segments = [np.column_stack([xs, row]) for row in norm_cols]
        lines = LineCollection(
            segments, cmap=cmap, norm=Normalize(0.0, 1.0), linewidths=0.7, alpha=line_alpha(len(table))
        )
        lines.set_array(target_ranks(goal))  # rows are in target order: the most variable are drawn last, on top
        ax.add_collection(lines)
    for i, name in enumerate(axes):
        ax.axvline(i, color="#333333", lw=0.8, zorder=3)
        values = table[name].to_numpy()
        if not len(values):
            continue
        ticks, labels = _ticks(values, name, logs[name])
        positions = _normalise(np.append(values, ticks), logs[name])[len(values) :]
        for y, lab in zip(positions, labels, strict=True):
            ax.plot([i - 0.03, i], [y, y], color="#333333", lw=0.8, zorder=3)
            ax.text(
                i - 0.05,
                y,
                lab,
                ha="right",
                va="center",
                fontsize=7,
                zorder=4,
                bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none", alpha=0.7),
            )
    ax.set_xlim(-0.5, len(axes) - 0.7)
    ax.set_ylim(-0.04 - BAND, 1.04 + BAND)
    ax.set_xticks(xs, [axis_label(a) for a in axes], fontsize=8)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.get_xticklabels()[-1].set_fontweight("bold")
    bar = fig.colorbar(ScalarMappable(Normalize(0.0, 1.0), cmap), cax=cax)
    if len(goal):
        names = {0: "min", 50: "median", 100: "max"}
        labels = [f"{v:.4g} ({names.get(p, f'p{p}')})" for p, v in zip(PERCENTILES, np.percentile(goal, PERCENTILES))]
        bar.set_ticks([p / 100 for p in PERCENTILES], labels=labels)
    bar.set_label(f"{style.with_unit(target)}, colour by rank")
    if as_bands:
        groups = ", ".join(f"{100 * a:g}-{100 * b:g} %" for a, b in zip(BAND_GROUPS[:-1], BAND_GROUPS[1:]))
        ax.set_title(title or f"Top-k rows: {len(table)} launches in {len(BAND_GROUPS) - 1} bands of {target}")
        legend = [
            Patch(color=cmap(0.5), alpha=0.28, label="25th-75th percentile of the group's launches"),
            Line2D([], [], color=cmap(0.5), lw=2.0, label="median"),
        ]
        ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=2, fontsize=7, frameon=False)
        lead = [
            f"{len(table)} launches, too many to draw one line each: grouped by the rank of {target} ({groups}; the "
            "most variable 5 % apart), each group a band of every axis's 25th-75th percentile with its median.",
            "Each axis spans its own min..max; ticks in original units. Colour: the group's rank of "
            f"{target}, bar ticks at its {'/'.join(map(str, PERCENTILES))}th percentiles. The bands are in the CSV.",
        ]
    else:
        ax.set_title(title or f"Top-k rows: {len(table)} launches, coloured by {target}")
        lead = [
            "Each axis spans its own min..max; ticks in original units. Colour: rank of "
            f"{target} (as many lines per colour), bar ticks at its {'/'.join(map(str, PERCENTILES))}th percentiles.",
            f"On axes with at most {CATEGORICAL_MAX} values, the lines of one value fan out over a band in "
            f"{target} order (highest on top).",
        ]
    style.footnote(fig, lead + notes)
    return fig, (bands if as_bands else table), notes


def plot_parallel(
    rows_path: str | Path,
    stem: str | Path,
    target: str,
    features: list[str],
    formats=("svg", "png"),
    dpi: int = 110,
    title: str | None = None,
) -> dict:
    """Read topk_rows.parquet, draw stem.<fmt> and write the plotted rows to stem.csv."""
    rows = read_rows(rows_path, [*features, target])
    if target not in rows.columns:
        raise InputError(rows_path, f"no target column {target!r} (was `gpuvar bin` run with --target {target}?)")
    fig, table, notes = draw_parallel(rows, target, features, title)
    files = style.save_figure(fig, stem, formats, dpi)
    files.append(write_csv(table, Path(figure_data(stem))))
    bands = "axis" in table.columns  # drawn as quantile bands: the table is band_table's
    return {
        "rows": int(len(rows)),
        "plotted": int(table.groupby("group")["rows"].first().sum()) if bands else int(len(table)),
        "drawn_as": "bands" if bands else "lines",
        "axes": list(dict.fromkeys(table["axis"])) if bands else list(table.columns),
        "notes": notes,
        "files": [str(f) for f in files],
    }


def read_rows(path: str | Path, wanted: list[str]) -> pd.DataFrame:
    """Only the wanted columns that exist (missing features become notes later, not errors)."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        names = pq.read_schema(path).names
        return pq.read_table(path, columns=[c for c in dict.fromkeys(wanted) if c in names]).to_pandas()
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable Parquet file ({exc})") from None
