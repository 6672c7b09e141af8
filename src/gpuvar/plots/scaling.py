"""Strong-scaling figure (paper Fig. 5b): binning time against MPI ranks for one fixed trace.

Times are the binning job's own measurements (its bin.json), not Snakemake's wall clock, so start-up of the
workflow does not blur the curve: its overall elapsed time when it reports one, else the sum of its phases
(each phase's slowest rank), which is the job's critical path. The ideal line is the smallest run's time divided by the rank ratio.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter, LogLocator

from gpuvar.errors import InputError
from gpuvar.layout import figure_data
from gpuvar.output import write_csv
from gpuvar.plots import style

RANK_KEYS = ("ranks", "n_ranks", "world_size", "mpi_ranks")
TOTAL_KEYS = ("elapsed_s", "total_s", "wall_s", "time_s")
PHASE_KEYS = ("seconds", "phases", "phase_seconds", "timings")  # gpuvar bin: "seconds" = per-phase max over ranks


def _first(report: dict, keys: tuple[str, ...]):
    return next((report[k] for k in keys if isinstance(report.get(k), int | float)), None)


def _phases(report: dict) -> dict[str, float]:
    for key in PHASE_KEYS:
        value = report.get(key)
        if isinstance(value, dict):
            return {str(k): float(v) for k, v in value.items() if isinstance(v, int | float)}
    return {}


def scaling_record(path: str | Path) -> dict:
    """ranks, total seconds and per-phase seconds of one binning run (InputError if bin.json lacks them)."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not readable JSON ({exc})") from None
    ranks, phases = _first(report, RANK_KEYS), _phases(report)
    total = _first(report, TOTAL_KEYS)
    if total is None and phases:  # no overall time: the phases' own total, else their sum
        total = phases.get("total", phases.get("total_s", sum(phases.values())))
    if ranks is None or total is None:
        what = "rank count" if ranks is None else "elapsed seconds"
        raise InputError(
            path, f"no {what} in bin.json (looked for {', '.join(RANK_KEYS if ranks is None else TOTAL_KEYS)})"
        )
    rows = next((report[k] for k in ("rows", "rows_in", "rows_read") if isinstance(report.get(k), int)), None)
    record = {
        "ranks": int(ranks),
        "total_s": float(total),
        "rows": rows if isinstance(rows, int) else np.nan,
        "source": str(path),
    }
    record.update({f"phase_{k}": v for k, v in sorted(phases.items())})
    return record


def scaling_table(paths) -> pd.DataFrame:
    """One row per run sorted by ranks, with ideal time, speedup and parallel efficiency vs the smallest run."""
    table = pd.DataFrame([scaling_record(p) for p in paths]).sort_values("ranks", kind="stable").reset_index(drop=True)
    base = table.iloc[0]
    table["ideal_s"] = base["total_s"] * base["ranks"] / table["ranks"]
    table["speedup"] = base["total_s"] / table["total_s"]
    table["efficiency"] = table["speedup"] * base["ranks"] / table["ranks"]
    return table


def draw_scaling(table: pd.DataFrame, title: str | None = None):
    """Measured time and ideal scaling against ranks (log-log, base 2), each point labelled with efficiency."""
    fig = style.figure(5.6, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(table["ranks"], table["total_s"], "o-", color="#1f618d", lw=1.6, label="measured (bin.json)")
    ax.plot(table["ranks"], table["ideal_s"], "--", color="#7f8c8d", lw=1.2, label="ideal (linear speedup)")
    for r, t, e in zip(table["ranks"], table["total_s"], table["efficiency"], strict=True):
        ax.annotate(f"{t:.2f} s\n{100 * e:.0f} %", (r, t), textcoords="offset points", xytext=(6, 6), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(table["ranks"], [str(r) for r in table["ranks"]])
    ax.minorticks_off()
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.margins(x=0.12, y=0.15)
    ax.set_xlabel("MPI ranks")
    ax.set_ylabel("binning time (s)")
    ax.grid(True, lw=0.3, alpha=0.5, which="both")
    ax.legend(frameon=False, loc="upper right")
    rows = table["rows"].dropna()
    size = f", {int(rows.iloc[0]):,} rows" if len(rows) else ""
    ax.set_title(title or f"Strong scaling of the binning job{size}")
    style.footnote(fig, ["Labels: time and parallel efficiency relative to the smallest rank count."])
    fig.tight_layout()
    return fig


def plot_scaling(paths, stem: str | Path, formats=("svg", "png"), dpi: int = 110, title: str | None = None) -> dict:
    """Collect the runs' bin.json files, draw stem.<fmt> and write the table to stem.csv."""
    paths = list(paths)
    if not paths:
        raise InputError(str(stem), "no bin.json files given for the scaling figure")
    table = scaling_table(paths)
    files = style.save_figure(draw_scaling(table, title), stem, formats, dpi)
    files.append(write_csv(table, Path(figure_data(stem))))
    return {"runs": int(len(table)), "ranks": table["ranks"].tolist(), "files": [str(f) for f in files]}
