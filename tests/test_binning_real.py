"""The binning job on a real Nsight Systems export (a 2-GPU PyTorch job, 4010 kernels, 1020 copies): both of
the paper's targets, 10 ms bins, statistics and ranking equal to a pandas reference built independently."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import real_file
from test_binning import STATS, assert_close, pandas_reference, run_bin

from gpuvar.ingest import ingest

MFU = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite"
WIDTH_NS = 10_000_000


@pytest.fixture(scope="module")
def canonical(tmp_path_factory):
    out = tmp_path_factory.mktemp("mfu")
    ingest(real_file(MFU), out)
    return out


def _reference_target(canonical, target: str) -> pd.DataFrame:
    """Kernels with the target computed the way the README defines it, in plain pandas."""
    k = pq.read_table(canonical / "kernels.parquet").to_pandas()
    if target == "kernel_variability":
        k[target] = k["duration"] - k.groupby("kernel_name")["duration"].transform("mean")
        return k
    m = pq.read_table(canonical / "memcpy.parquet", columns=["device_id", "stream_id", "start", "end"]).to_pandas()
    m["copy_duration"] = m["end"] - m["start"]
    k = k.sort_values("start", kind="stable")
    linked = pd.merge_asof(
        k,
        m.drop(columns="end").sort_values("start", kind="stable").rename(columns={"start": "copy_start"}),
        left_on="start",
        right_on="copy_start",
        by=["device_id", "stream_id"],
        direction="backward",
        allow_exact_matches=True,
    )
    linked = linked[linked["copy_start"].notna()].copy()
    linked[target] = (linked["duration"] - linked["copy_duration"]).abs()
    return linked


@pytest.mark.parametrize("target", ["kernel_variability", "memory_stall"])
def test_real_trace_bins_equal_pandas(canonical, tmp_path, target):
    proc = run_bin(
        canonical / "kernels.parquet",
        "--memcpy",
        canonical / "memcpy.parquet",
        "--target",
        target,
        "--bin-width",
        "10ms",
        "--top-k",
        "5",
        "--output",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bin.json").read_text())
    ref_rows = _reference_target(canonical, target)
    assert report["rows_in"] == 4010
    assert report["rows_binned"] == len(ref_rows)
    assert report["rows_binned"] + sum(report["rows_without_target"].values()) == report["rows_in"]

    all_starts = pq.read_table(canonical / "kernels.parquet", columns=["start"]).column("start").to_numpy()
    bins_of_rows = (ref_rows["start"].to_numpy() - all_starts.min()) // WIDTH_NS
    ref = pandas_reference(ref_rows[target].to_numpy(float), bins_of_rows)
    bins = pq.read_table(tmp_path / "bins.parquet").to_pandas().set_index("bin")
    assert_close(bins[STATS], ref, np.maximum(ref["min"].abs(), ref["max"].abs()).to_numpy())
    assert len(bins) == 30  # the export is a 0.3 s window

    top = bins.sort_values("variance_rank").head(5)
    assert sorted(top.index) == report["top_k_bins"]
    assert top.index.tolist() == ref["var"].sort_values(ascending=False, kind="stable").index[:5].tolist()
    rows = pq.read_table(tmp_path / "topk_rows.parquet").to_pandas()
    assert len(rows) == int(top["count"].sum()) and target in rows
