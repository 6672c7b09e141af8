"""An empty selection (no kernel linked to a copy, so no row has memory_stall) is a result, not a failure:
bin.json says why and warns "0 rows linked", the causal step records a skip, and the workflow completes."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path]:
    """A normal trace and the same trace with every copy on another GPU (as with a lost deviceId mapping)."""
    from gpuvar.demo.nsys_writer import write_nsys_demo

    tmp = tmp_path_factory.mktemp("traces")
    good, unlinked = tmp / "good.sqlite", tmp / "unlinked.sqlite"
    write_nsys_demo(good, 600, 1, 0)
    shutil.copy(good, unlinked)
    with sqlite3.connect(unlinked) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET deviceId = deviceId + 7")
    return good, unlinked


def test_bin_json_explains_and_warns(traces, tmp_path, run_cli):
    _, unlinked = traces
    assert run_cli("ingest", unlinked, "-o", tmp_path / "ingest").returncode == 0
    proc = run_cli(
        "bin",
        tmp_path / "ingest" / "kernels.parquet",
        "--memcpy",
        tmp_path / "ingest" / "memcpy.parquet",
        "--target",
        "memory_stall",
        "--bin-width",
        "1ms",
        "-o",
        tmp_path / "bin",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bin" / "bin.json").read_text())
    assert report["rows_binned"] == 0 and report["rows_in"] == 600
    assert report["empty_selection"].startswith("no kernel linked to a copy (600 of 600 kernels")
    assert report["warnings"] and report["warnings"][0].startswith("0 rows linked: none of the 600 kernels")
    assert "WARNING" in proc.stderr and "0 rows linked" in proc.stderr  # and in the log


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.timeout(900)
def test_workflow_completes_with_an_empty_selection(traces, tmp_path):
    good, unlinked = traces
    cfg = {
        "demo": {"enabled": False},
        "datasets": [
            {"name": "good", "source": str(good), "targets": ["kernel_variability", "memory_stall"]},
            {"name": "unlinked", "source": str(unlinked), "targets": ["memory_stall"]},
        ],
        "binning": {"bin_width": "1ms", "top_k": 5},
        "causal": {"bootstrap": 0, "min_rows": 10, "workers": 1},
        "plots": {"formats": ["svg"]},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / "run"),
            "--configfile",
            str(config),
            "--cores",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=850,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = tmp_path / "run"
    summary = json.loads((run / "results/causal/unlinked/memory_stall/summary.json").read_text())
    assert summary["n_ok"] == 0 and summary["skip_reason"].startswith("no rows: no kernel linked to a copy")
    assert json.loads((run / "results/causal/good/memory_stall/summary.json").read_text())["n_ok"] >= 1
    index = (run / "results/plots/unlinked/memory_stall/causal/index.csv").read_text()
    assert "skipped" in index and "no kernel linked to a copy" in index
