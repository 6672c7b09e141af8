"""`gpuvar bin` over several kernels files (a job's per-rank tables): one table on one global timeline, the same
bins as the merged file, byte-identical for any number of ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

MPIEXEC = Path(sys.executable).with_name("mpiexec")


def _bin(files, out: Path, ranks: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "gpuvar.cli", "bin", *map(str, files)]
    cmd += ["--bin-width", "1ms", "--top-k", "4", "--sample-bins", "3", *extra, "--output", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ.copy())


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory) -> list[Path]:
    """Four ranks' kernels tables (4,000 rows each, 1,024-row groups), interleaved on one timeline."""
    from gpuvar.demo.canonical_writer import write_canonical_demo

    root = tmp_path_factory.mktemp("ranks")
    write_canonical_demo(root / "all", 16_000, seed=7, workers=1, chunk_rows=4096)
    table = pd.read_parquet(root / "all" / "kernels.parquet")
    files = []
    for r in range(4):
        part = table.iloc[r::4].assign(rank=r)  # each rank's rows in start order, the ranks interleaved
        path = root / f"rank{r}.parquet"
        part.to_parquet(path, index=False, row_group_size=1024)
        files.append(path)
    return files


def test_several_files_are_byte_identical_for_1_2_3_ranks_and_agree_with_the_merged_file(rank_files, tmp_path):
    for n in (1, 2, 3):
        proc = _bin(rank_files, tmp_path / f"r{n}", n)
        assert proc.returncode == 0, proc.stderr
    for name in ("bins.parquet", "topk_rows.parquet", "sample_rows.parquet"):
        first = (tmp_path / "r1" / name).read_bytes()
        assert all((tmp_path / f"r{n}" / name).read_bytes() == first for n in (2, 3)), name
    report = json.loads((tmp_path / "r3" / "bin.json").read_text())
    assert report["rows_in"] == 16_000 and len(report["rows_in_per_rank"]) == 3
    assert report["kernels"] == [str(f) for f in rank_files]
    # the same rows in one file (sorted by start, as ingest-merge writes it): the same bins and statistics
    merged = tmp_path / "merged.parquet"
    pd.concat([pd.read_parquet(f) for f in rank_files]).sort_values("start", kind="stable").to_parquet(merged)
    assert _bin([merged], tmp_path / "m", 2).returncode == 0
    a = pd.read_parquet(tmp_path / "r1" / "bins.parquet").sort_values("bin").reset_index(drop=True)
    b = pd.read_parquet(tmp_path / "m" / "bins.parquet").sort_values("bin").reset_index(drop=True)
    assert a["bin"].tolist() == b["bin"].tolist() and a["count"].tolist() == b["count"].tolist()
    for column in ("mean", "var", "min", "max", "median"):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-9, err_msg=column)
    assert set(pq.read_table(tmp_path / "r1" / "topk_rows.parquet").column("rank").to_pylist()) <= {0, 1, 2, 3}


def test_files_with_other_columns_are_refused_in_one_line(rank_files, tmp_path):
    odd = tmp_path / "odd.parquet"
    pd.read_parquet(rank_files[1]).drop(columns=["grid_x"]).to_parquet(odd)
    proc = _bin([rank_files[0], odd], tmp_path / "out", 2)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(odd) in lines[0] and "columns differ" in lines[0] and "grid_x" in lines[0]
    assert not (tmp_path / "out").exists()


def test_memcpy_link_needs_one_kernels_file(rank_files, tmp_path):
    proc = _bin(rank_files[:2], tmp_path / "out", 1, "--memcpy", str(rank_files[0]), "--target", "memory_stall")
    assert proc.returncode != 0 and "--memcpy links the copies of one kernels file" in proc.stderr
