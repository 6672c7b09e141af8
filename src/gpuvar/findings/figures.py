"""One evidence figure per finding: the kernel's launches against what explains them, one colour per call site.

With a driver: duration against the top driver (a launch parameter or a context flag), so the claim "explained
by grid_x" or "slower when a copy runs beside it" can be seen, not only read. Without one: duration over the
launch order (the step where known), so the user sees whether the spread is drift, bursts or noise. The
median of each call site is drawn as a line. Byte-identical reruns (gpuvar.plots.style)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.units import counted

MAX_CALL_SITES = 8  # colours; the rest are drawn grey as "other call sites"
MAX_POINTS = 20_000  # per figure: a deterministic subsample beyond that
SITE_LABEL = 40  # characters of a call site in the legend, shortened at a word boundary
TITLE_WIDTH = 100  # characters per line of the claim under the kernel's name (two lines at most)


def _site_label(site) -> str:
    """A call site as the legend shows it: its end kept (the op's occurrence, `#3.0`), cut between words."""
    from gpuvar.kernel_names import shorten_left

    return shorten_left(str(site), SITE_LABEL)


def _two_lines(claim: str) -> str:
    """The claim on at most two lines, broken and, if need be, cut between words ('…'), never inside one."""
    from gpuvar.plots import style

    lines = style.wrap_label(claim, TITLE_WIDTH).split("\n")
    return "\n".join(lines[:2]) + (" …" if len(lines) > 2 else "")


def duration_axis(us: np.ndarray) -> tuple[np.ndarray, str]:
    """Durations (µs) in the unit the axis shows, and its label: ms once the longest reaches 10 ms (a collective's
    waits read 160 ms, not 160000 µs)."""
    finite = us[np.isfinite(us)]
    if len(finite) and finite.max() >= 1e4:
        return us / 1e3, "duration (ms)"
    return us, "duration (µs)"


def large_ticks(axis, values: np.ndarray) -> None:
    """Ticks of a quantity in the millions or more with SI prefixes ("800 M" threads), not a "1e9" beside the axis."""
    from matplotlib.ticker import EngFormatter

    finite = values[np.isfinite(values)]
    if len(finite) and np.abs(finite).max() >= 1e6:
        axis.set_major_formatter(EngFormatter(sep=" "))


def finding_figure(part: pd.DataFrame, sites: np.ndarray, finding: dict, stem: Path) -> Path:
    """Draw `finding` (its launches in `part`, call site per row in `sites`) to stem.png; returns the path."""
    from gpuvar.plots import style

    d, ylabel = duration_axis(pd.to_numeric(part["duration"], errors="coerce").to_numpy(dtype=np.float64) / 1e3)
    driver = finding["drivers"][0]["feature"] if finding["drivers"] else None
    if driver is not None and driver in part.columns:
        x = pd.to_numeric(part[driver], errors="coerce").to_numpy(dtype=np.float64)
        unit = style.unit_of(driver)  # a duration driver (ctx_gap_ns) says ns, a grid size blocks
        xlabel = finding["drivers"][0]["label"] + (f" ({unit})" if unit else "")
    else:
        axis = "step" if "step" in part.columns and part["step"].notna().all() else None
        x = pd.to_numeric(part[axis]).to_numpy(dtype=np.float64) if axis else np.arange(len(part), dtype=np.float64)
        xlabel = "step" if axis else "launch (in order)"
    rows = np.arange(len(d))
    if len(rows) > MAX_POINTS:
        rows = np.sort(np.random.default_rng(0).choice(rows, MAX_POINTS, replace=False))
    order = pd.Series(sites).value_counts(sort=True)
    ranked = sorted(order.index, key=lambda s: (-order[s], str(s)))[:MAX_CALL_SITES]
    fig = style.figure(6.4, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    site_series = pd.Series(sites)
    others = ~site_series.isin(ranked).to_numpy()
    if others[rows].any():
        r = rows[others[rows]]
        ax.scatter(x[r], d[r], s=6, color="#bbbbbb", label="other call sites", linewidths=0)
    colours = style.plt.get_cmap("tab10")
    for k, site in enumerate(ranked):
        mask = (site_series == site).to_numpy()
        r = rows[mask[rows]]
        ax.scatter(x[r], d[r], s=6, color=colours(k % 10), label=_site_label(site), linewidths=0)
        ax.axhline(float(np.median(d[mask])), color=colours(k % 10), lw=0.6, alpha=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    large_ticks(ax.xaxis, x[rows])
    short = finding["short_name"]
    claim = finding["headline"][len(short) + 2 :] if finding["headline"].startswith(short) else finding["headline"]
    ax.set_title(f"{short}\n{_two_lines(claim)}", fontsize=8)
    if len(ranked) > 1 or others.any():  # beside the axes, never over the launches (the saved image grows to fit)
        ax.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6, markerscale=2, frameon=False, title="call site"
        ).get_title().set_fontsize(6)
    v = finding["verdict"]
    style.footnote(
        fig,
        [
            f"{counted(finding['launches'], 'launch')} at {counted(finding['call_sites'], 'call site')}; lines: each call site's median. "
            f"Verdict: {v['verdict']} (cross-validated share {v['share']:.2f} of the within-call-site variance).",
        ],
    )
    (png,) = style.save_figure(fig, stem, ("png",), dpi=100)
    return Path(png)
