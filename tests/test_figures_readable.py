"""Figures a person can read (issue 36 item 6): causal-graph titles of at most two lines and node boxes that count
near-duplicates instead of listing them (Nsight Compute exports carry a dozen columns that follow one another),
kernel names shortened between words with the part that tells variants apart kept, findings legends beside the
data, and parallel coordinates drawn as quantile bands at 10,000 rows. Real: the recorded H100 Nsight Compute
export (tests/data/recorded/h100-torch-ncu); planted: rows whose most variable launches have the largest grid."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from gpuvar.kernel_names import display_name, labels
from gpuvar.plots import parallel, style
from gpuvar.plots.causal_graph.draw import draw_causal_graph
from gpuvar.plots.causal_graph.folder import plot_causal_dir
from gpuvar.plots.causal_graph.layout import compact_label, node_label
from gpuvar.plots.causal_graph.load import group_folders, load_group

NCU = REPO / "tests" / "data" / "recorded" / "h100-torch-ncu" / "raw.csv"


@pytest.fixture(scope="module")
def ncu_causal(tmp_path_factory):
    """The recorded export through `gpuvar explain` (ingest, binning, causal graphs per kernel)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("ncu")
    subprocess.run([sys.executable, "-m", "gpuvar.cli", "explain", str(NCU), "-o", str(out)], check=True,
                   capture_output=True)  # fmt: skip
    return out / "causal"


def _kernel_names() -> list[str]:
    return sorted(pd.read_csv(NCU, usecols=["Kernel Name"])["Kernel Name"].dropna().unique())


def test_real_ncu_names_lose_lambdas_and_are_never_cut_inside_a_word():
    names = _kernel_names()
    shown = labels(names, [None] * len(names), 60)
    for name, label in zip(names, shown, strict=True):
        full = display_name(name)
        assert not re.search(r"lambda|instance \d|operator", full), full  # '[lambda(int) (instance 1)]' gone
        assert len(label) <= 61
        for piece in filter(None, label.split("…")):  # every kept piece starts and ends between words
            start = full.find(piece)
            assert start >= 0, (label, full)
            before, after = full[start - 1 : start], full[start + len(piece) : start + len(piece) + 1]
            assert not (before.isalnum() and piece[0].isalnum()), (label, full)
            assert not (after.isalnum() and piece[-1].isalnum()), (label, full)
    assert len(set(shown)) == len(shown)
    # cuBLAS variants keep what tells them apart: tile and warp size, split-k
    for name, label in zip(names, shown, strict=True):
        if name.startswith("sm80_xmma_gemm"):
            for token in re.findall(r"tilesize\w+?(?=_)|warpsize\w+?(?=_)", name):
                assert token in label, (label, token)
            assert ("split_k" in name) == ("split_k" in label), label


def test_real_ncu_causal_titles_have_at_most_two_lines(ncu_causal, tmp_path):
    index = plot_causal_dir(ncu_causal, tmp_path / "figs", formats=("png",))
    names = dict(zip(index["group"], index["name"]))
    drawn = 0
    for folder in group_folders(ncu_causal):
        cg = load_group(folder)
        fig, _ = draw_causal_graph(cg, name=names[cg.group])
        ax = fig.axes[0]
        title = ax.get_title()
        assert title.count("\n") <= 1, title
        for driver in cg.drivers[:2]:  # the drivers are named, their near-duplicates counted or left out
            assert driver.split(" (≈")[0] in title.replace("\n", " "), (driver, title)
        boxes = [t.get_text() for t in ax.texts if t.get_text() in {node_label(n) for n in cg.graph}]
        assert boxes and max(b.count("\n") for b in boxes) <= 2, boxes  # was 20 lines of metric names
        style.plt.close(fig)
        drawn += 1
    assert drawn >= 5


def test_compact_label_counts_near_duplicates():
    name = "grid_x (≈ launch__grid_dim_x, dram__bytes_read.avg, dram__bytes_read.max)"
    assert compact_label(name) == "grid_x (≈ launch__grid_dim_x and 2 more)"
    assert compact_label("grid_x (≈ grid_size)") == "grid_x (≈ grid_size)"
    assert compact_label("lts__t_sector_hit_rate.pct") == "lts__t_sector_hit_rate.pct"
    long = "sm__warps_active.avg.pct_of_peak_sustained_active (≈ sm__warps_active.sum.pct_of_peak_sustained_active)"
    assert compact_label(long) == "sm__warps_active.avg.pct_of_peak_sustained_active (≈ 1 more)"


@pytest.fixture
def draw_finding(monkeypatch, tmp_path):
    """gpuvar.findings.figures.finding_figure drawn and laid out but not saved: draw(part, sites, finding) returns
    its matplotlib figure."""
    from gpuvar.findings import figures

    drawn = {}

    def keep(fig, stem, formats, dpi=110):
        drawn["fig"] = fig
        fig.canvas.draw()
        return [Path(f"{stem}.png")]

    monkeypatch.setattr(style, "save_figure", keep)

    def draw(part: pd.DataFrame, sites: np.ndarray, finding: dict):
        figures.finding_figure(part, sites, finding, tmp_path / "01")
        return drawn["fig"]

    return draw


def test_findings_legend_sits_beside_the_data(draw_finding):
    rng = np.random.default_rng(0)
    n = 600
    sites = np.array([f"aten::mm#{k}.0" for k in rng.integers(0, 5, n)])
    part = pd.DataFrame({"duration": 1e5 * (1 + rng.random(n)), "step_threads": rng.integers(1, 100, n) * 1e6})
    finding = {
        "drivers": [{"feature": "step_threads", "label": "step_threads"}],
        "short_name": "aten::mm",
        "headline": "aten::mm: explained 98 % by step_threads (≈ grid_x, blocks_per_sm and 2 more) + "
        + "and a long tail of words " * 8,
        "launches": n,
        "call_sites": 5,
        "verdict": {"verdict": "explained", "share": 0.98},
    }
    fig = draw_finding(part, sites, finding)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend, plot = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= plot.x1  # beside the axes, not over the launches
    assert len(ax.get_legend().get_texts()) == 5
    title = ax.get_title()
    assert title.count("\n") <= 2 and title.endswith(" …")  # name + two lines of the claim, cut between words
    assert set(title.replace("…", "").split()) <= set(finding["headline"].split()) | {finding["short_name"]}


@pytest.mark.parametrize(("longest_ns", "unit"), [(160e6, "ms"), (400e3, "µs")])
def test_findings_axes_read_in_units_a_person_reads(draw_finding, longest_ns, unit):
    """A collective's waits in ms (160 ms, not 160000 µs), a kernel's time in µs, and a driver in the hundreds of
    millions with SI prefixes ("400 M"), not a "1e8" offset beside the axis."""
    rng = np.random.default_rng(1)
    n = 400
    threads = rng.integers(70, 460, n) * 1e6
    part = pd.DataFrame({"duration": longest_ns * rng.uniform(0.1, 1.0, n), "step_threads": threads})
    finding = {
        "drivers": [{"feature": "step_threads", "label": "step_threads"}],
        "short_name": "c10d::allreduce_",
        "headline": "c10d::allreduce_: explained 68 % by step_threads −",
        "launches": n,
        "call_sites": 1,
        "verdict": {"verdict": "explained", "share": 0.68},
    }
    ax = draw_finding(part, np.array(["c10d::allreduce_#0.0"] * n), finding).axes[0]
    assert ax.get_ylabel() == f"duration ({unit})"
    top = longest_ns / (1e6 if unit == "ms" else 1e3)
    assert top / 2 < ax.get_ylim()[1] < top * 1.2  # the values drawn are in that unit
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert ticks and all(t.endswith(" M") for t in ticks), ticks
    assert ax.xaxis.get_offset_text().get_text() == ""


def _dense_rows(n: int, seed: int = 0) -> pd.DataFrame:
    """Planted: the duration follows the grid (4 sizes) and a stall counter; block size and copy kind are noise."""
    rng = np.random.default_rng(seed)
    grid = rng.choice([64, 128, 256, 512], n)
    stall = rng.exponential(1.0, n) * grid
    target = 1000 + 3 * grid + 50 * stall + rng.normal(0, 200, n)
    return pd.DataFrame(
        {
            "grid_x": grid,
            "block_x": rng.choice([128, 256], n),
            "tcp_pending_stall": stall,
            "linked_copy_kind": rng.choice([1, 2, 8], n),
            "kernel_variability": target,
        }
    )


FEATURES = ["grid_x", "block_x", "tcp_pending_stall", "linked_copy_kind"]


def test_ten_thousand_rows_are_drawn_as_quantile_bands_that_show_the_planted_cause():
    fig, bands, notes = parallel.draw_parallel(_dense_rows(10_000), "kernel_variability", FEATURES)
    ax = fig.axes[0]
    assert not ax.collections or max(len(c.get_paths()) for c in ax.collections) < 50  # no 10,000 lines
    assert len(ax.collections) == len(parallel.BAND_GROUPS) - 1  # one filled band per group
    grid = bands[bands["axis"] == "grid_x"].set_index("group")
    top, bottom = grid.index.max(), grid.index.min()
    assert grid.at[top, "median"] == 512 and grid.at[bottom, "median"] == 64  # the most variable: the largest grid
    assert grid.at[top, "rows"] == 500 and grid["rows"].sum() == 10_000  # the top 5 % apart, every row in a band
    stall = bands[bands["axis"] == "tcp_pending_stall"].set_index("group")["median"]
    assert stall.is_monotonic_increasing
    style.plt.close(fig)
    small, table, _ = parallel.draw_parallel(_dense_rows(500), "kernel_variability", FEATURES)
    assert len(table) == 500 and len(small.axes[0].collections[0].get_paths()) == 500  # few rows: one line each
    style.plt.close(small)


def test_band_figure_and_its_csv_are_byte_identical_on_rerun(tmp_path):
    _dense_rows(5000).to_parquet(tmp_path / "rows.parquet", index=False)
    out = [parallel.plot_parallel(tmp_path / "rows.parquet", tmp_path / k / "p", "kernel_variability", FEATURES)
           for k in "ab"]  # fmt: skip
    assert out[0]["drawn_as"] == "bands" and out[0]["plotted"] == 5000
    for suffix in (".png", ".svg", ".csv"):
        assert (tmp_path / "a" / f"p{suffix}").read_bytes() == (tmp_path / "b" / f"p{suffix}").read_bytes(), suffix
