"""Variability timeline: per-bin variance of the target along the trace, with the top-k bins marked.

Why: the causal graphs only look at the top-k bins; this figure shows where in the run they are (a burst
at start-up, periodic spikes, a drift) and how much more variable they are than the rest. X is seconds from
the first bin for timed traces, launch index for Nsight Compute data binned by launches.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.layout import figure_data
from gpuvar.output import write_csv
from gpuvar.plots import style
from gpuvar.targets import target as target_of

# Column names accepted for each quantity (first match wins), so small renames upstream do not break plots.
CANDIDATES = {
    "start": ("bin_start", "bin_start_ns", "start", "start_ns"),
    "end": ("bin_end", "bin_end_ns", "end", "end_ns"),
    "var": ("var", "variance"),
    "count": ("count", "n", "rows"),
    "rank": ("variance_rank", "var_rank", "rank"),
    "top": ("is_top_k", "top_k", "topk", "selected", "in_top_k"),
    "bin": ("bin", "bin_id", "bin_index"),
}


def resolve(frame: pd.DataFrame, key: str) -> str | None:
    return next((c for c in CANDIDATES[key] if c in frame.columns), None)


def timeline_table(bins: pd.DataFrame, top_k: int | None = None, unit: str = "ns") -> pd.DataFrame:
    """Plotted data: x (s or launch index), bin start/end, count, var, is_top_k, sorted by x.

    Top-k comes from a flag column when the binning wrote one, else from variance_rank <= top_k, else from
    the top_k largest variances (ties broken by earlier bin).
    """
    start, var = resolve(bins, "start") or resolve(bins, "bin"), resolve(bins, "var")
    if start is None or var is None:
        missing = "bin start" if start is None else "var"
        raise InputError("bins", f"missing column {missing} (have: {', '.join(map(str, bins.columns))})")
    out = pd.DataFrame({"bin_start": bins[start].to_numpy()})
    end, count = resolve(bins, "end"), resolve(bins, "count")
    out["bin_end"] = bins[end].to_numpy() if end else np.nan
    out["count"] = bins[count].to_numpy() if count else np.nan
    out["var"] = bins[var].to_numpy(dtype=np.float64, na_value=np.nan)
    out["is_top_k"] = _top_flags(bins, out["var"].to_numpy(), top_k)
    origin = float(np.nanmin(out["bin_start"])) if len(out) else 0.0
    scale = 1e9 if unit == "ns" else 1.0
    out.insert(0, "x", (out["bin_start"].astype(np.float64) - origin) / scale)
    return out.sort_values("x", kind="stable").reset_index(drop=True)


def _top_flags(bins: pd.DataFrame, var: np.ndarray, top_k: int | None) -> np.ndarray:
    flag, rank = resolve(bins, "top"), resolve(bins, "rank")
    if flag and pd.api.types.is_bool_dtype(bins[flag]):
        return bins[flag].to_numpy(dtype=bool)
    if rank and top_k:
        r = bins[rank].to_numpy(dtype=np.float64, na_value=np.nan)
        return np.nan_to_num(r, nan=np.inf) <= (top_k if np.nanmin(r, initial=np.inf) >= 1 else top_k - 1)
    flags = np.zeros(len(var), dtype=bool)
    if top_k:
        order = np.argsort(-np.nan_to_num(var, nan=-np.inf), kind="stable")[:top_k]
        flags[order[np.isfinite(var[order])]] = True
    return flags


def variance_unit(var: pd.Series, unit: str = "ns") -> tuple[float, str]:
    """(divisor, unit) for a variance of values in `unit` (the target's): durations in ns² read in ns², µs², ms²
    or s² (the unit whose square root is just below the largest standard deviation); another unit as it is
    ('' for a ratio)."""
    if unit != "ns":
        return 1.0, f"{unit}²" if unit else ""
    top = float(np.sqrt(np.nanmax(var))) if var.notna().any() and np.nanmax(var) > 0 else 0.0
    for divisor, scaled in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if top >= divisor:
            return divisor**2, f"{scaled}²"
    return 1.0, "ns²"


def draw_timeline(table: pd.DataFrame, target: str, unit: str = "ns", title: str | None = None):
    """Figure: variance per bin as a line, top-k bins as red markers; returns the figure. The variance is in the
    square of the target's unit (gpuvar.targets; a duration's shown in the unit that keeps the numbers short).
    `unit`: the bins' ('ns': time bins, else launch-index bins)."""
    fig = style.figure(8.0, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    divisor, var_unit = variance_unit(table["var"], target_of(target).unit)
    var = table["var"] / divisor
    ax.plot(table["x"], var, color="#2e86c1", lw=0.8, label="variance per bin")
    top = table["is_top_k"].to_numpy(dtype=bool)
    ax.scatter(
        table["x"][top], var[top], color=style.HIGHLIGHT, s=18, zorder=3, label=f"top-{top.sum()} bins (analysed)"
    )
    positive = var[var > 0]
    if len(positive) and positive.max() / positive.min() > 1e3:
        ax.set_yscale("log")
    ax.set_xlabel("time from trace start (s)" if unit == "ns" else "launch index")
    ax.set_ylabel(f"var({target}) per bin ({var_unit})" if var_unit else f"var({target}) per bin")
    ax.grid(True, lw=0.3, alpha=0.5)
    # outside the axes: inside, the legend hid the highest bins, which are usually at the top right
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    ax.set_title(title or f"Variability of {target} over the trace ({len(table)} bins)")
    empty = int(table["var"].isna().sum())
    style.footnote(fig, [f"{empty} bin(s) with fewer than 2 activities have no variance (gaps)." if empty else ""])
    fig.tight_layout()
    return fig


def read_bin_report(path: str | Path | None) -> dict:
    """bin.json as a dict ({} when absent) — top_k and the bin unit come from it."""
    if path is None or not Path(path).is_file():
        return {}
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None


def bin_unit(report: dict) -> str:
    """'ns' for time bins, 'launches' when the job binned by launch index (bare-number bin width)."""
    from gpuvar.units import parse_bin_width

    for key in ("bin_unit", "unit"):
        if isinstance(report.get(key), str):
            return "launches" if report[key].startswith("launch") else "ns"
    try:
        return parse_bin_width(report["bin_width"])[1]
    except (KeyError, ValueError, TypeError):
        return "ns"


def plot_timeline(
    bins_path: str | Path,
    stem: str | Path,
    target: str,
    report_path: str | Path | None = None,
    formats=("svg", "png"),
    dpi: int = 110,
    top_k: int | None = None,
) -> dict:
    """Read bins.parquet (+ bin.json), draw stem.<fmt> and write the plotted bins to stem.csv."""
    report = read_bin_report(report_path)
    unit = bin_unit(report)
    top_k = top_k or report.get("top_k")
    try:
        bins = pd.read_parquet(bins_path)
    except (OSError, ValueError) as exc:
        raise InputError(bins_path, f"not a readable Parquet file ({exc})") from None
    try:
        table = timeline_table(bins, top_k, unit)
    except InputError as exc:
        raise InputError(bins_path, exc.reason) from None
    files = style.save_figure(draw_timeline(table, target, unit), stem, formats, dpi)
    files.append(write_csv(table, Path(figure_data(stem))))
    return {
        "bins": int(len(table)),
        "top_k": int(table["is_top_k"].sum()),
        "unit": unit,
        "files": [str(f) for f in files],
    }
