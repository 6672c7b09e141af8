"""`gpuvar ranks` as an MPI job (gpuvar.ranks.job): byte-identical to the one-process analysis for any number of
processes, no process holding every launch, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpuvar.layout import OUTPUT_MARKER
from gpuvar.ranks.analyze import analyze
from gpuvar.ranks.load import from_ingest, from_traces
from gpuvar.ranks.planted import shift_timeline, write_merged, write_planted
from gpuvar.ranks.report import write_outputs

MPIEXEC = Path(sys.executable).with_name("mpiexec")
GLOO = Path("../shared/data/real/pytorch-kineto-trace/h100-2rank-gloo")
GLOO_TRACES = [GLOO / "rank0.pt.trace.json.gz", GLOO / "rank1.pt.trace.json.gz"]
OUTPUTS = ["call_sites.csv", "ranks.html", "ranks.json", "ranks.md", "skew.png", "steps.csv", "timeline.png"]


def _mpi(processes: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(MPIEXEC), "-n", str(processes), sys.executable, "-m", "gpuvar.cli", "ranks", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _reference(data, out: Path) -> None:
    """Today's one-process analysis: every launch in memory."""
    write_outputs(analyze(data), data, out)


def _same(a: Path, b: Path) -> None:
    """`a` the reference (write_outputs alone), `b` the job's output: the same files, plus the marker the CLI's
    output rule writes (gpuvar.atomic) naming the command."""
    assert sorted(p.name for p in a.iterdir()) == OUTPUTS
    assert sorted(p.name for p in b.iterdir()) == sorted([OUTPUT_MARKER, *OUTPUTS])
    assert json.loads((b / OUTPUT_MARKER).read_text()) == {"command": "ranks"}
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("kind", [{}, {"collective": "nccl"}, {"cause": "host"}])
def test_planted_job_is_byte_identical_for_1_2_3_processes(tmp_path, kind):
    folders, truth = write_planted(tmp_path / "job", steps=40, seed=2, **kind)
    _reference(from_ingest(folders), tmp_path / "ref")
    for n in (1, 2, 3):  # 3 processes for 2 ranks: one process reads nothing
        out = tmp_path / f"n{n}"
        proc = _mpi(n, *map(str, folders), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        _same(tmp_path / "ref", out)
        record = json.loads(proc.stdout)
        assert len(record["processes"]) == n
    assert json.loads((tmp_path / "n2" / "ranks.json").read_text())["straggler"] == 1


def test_merged_folder_is_read_in_shares_of_its_ranks(tmp_path):
    folders, _ = write_planted(tmp_path / "job", steps=40, seed=5)
    merged = write_merged(folders, tmp_path / "merged")
    _reference(from_ingest([merged]), tmp_path / "ref")
    proc = _mpi(2, str(merged), "-o", str(tmp_path / "n2"))
    assert proc.returncode == 0, proc.stderr
    _same(tmp_path / "ref", tmp_path / "n2")
    processes = json.loads(proc.stdout)["processes"]
    total = sum(len(pd.read_parquet(merged / n)) for n in ("kernels.parquet", "memcpy.parquet"))
    assert all(p["rows_held"] < total for p in processes)  # each process read its rank's rows only


@pytest.fixture(scope="module")
def gloo_ingests(tmp_path_factory):
    if not GLOO.is_dir():
        pytest.skip("real gloo traces not available")
    from gpuvar.ingest import ingest

    root = tmp_path_factory.mktemp("gloo")
    folders = []
    for r, trace in enumerate(GLOO_TRACES):
        ingest(trace, root / f"rank{r}")
        folders.append(root / f"rank{r}")
    return folders


def test_real_gloo_ingest_folders_are_byte_identical_under_mpi(tmp_path, gloo_ingests):
    _reference(from_ingest(gloo_ingests), tmp_path / "ref")
    proc = _mpi(2, *map(str, gloo_ingests), "-o", str(tmp_path / "n2"))
    assert proc.returncode == 0, proc.stderr
    _same(tmp_path / "ref", tmp_path / "n2")
    assert json.loads((tmp_path / "n2" / "ranks.json").read_text())["straggler"] == 1


@pytest.mark.skipif(not GLOO.is_dir(), reason="real gloo traces not available")
def test_real_gloo_traces_on_one_shared_gpu_are_byte_identical_under_mpi(tmp_path):
    """The two ranks share one H100: the straggler's split needs the other rank's kernels, which another
    process read; rank 0 reads both again once the straggler is known."""
    _reference(from_traces([str(t) for t in GLOO_TRACES]), tmp_path / "ref")
    proc = _mpi(2, "--traces", *map(str, GLOO_TRACES), "-o", str(tmp_path / "n2"))
    assert proc.returncode == 0, proc.stderr
    _same(tmp_path / "ref", tmp_path / "n2")
    record = json.loads((tmp_path / "n2" / "ranks.json").read_text())
    assert record["driver"]["same_gpu_as_other_ranks"] is True
    parts = [p["part"] for p in record["driver"]["parts"]]
    assert parts[:2] == ["aten::mm", "other processes' kernels on its GPU"]


def test_a_bad_folder_ends_every_process_with_one_line(tmp_path):
    folders, _ = write_planted(tmp_path / "job", steps=30)
    (folders[1] / "kernels.parquet").unlink()
    proc = _mpi(2, *map(str, folders), "-o", str(tmp_path / "out"))
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no kernels.parquet" in lines[0] and str(folders[1]) in lines[0]
    assert not (tmp_path / "out").exists()


def test_collectives_recorded_twice_are_dropped_alike_under_mpi(tmp_path):
    """Rank 0's NCCL kernels recorded twice (two exports concatenated): each process drops its ranks' repeated
    records before numbering the collectives, rank 0 counts them; the outputs are the one-process analysis'."""
    folders, truth = write_planted(tmp_path / "job", steps=30, seed=2, collective="nccl")
    kernels = pd.read_parquet(folders[0] / "kernels.parquet")
    pd.concat([kernels, kernels]).sort_values("start", kind="stable").to_parquet(
        folders[0] / "kernels.parquet", index=False
    )
    _reference(from_ingest(folders), tmp_path / "ref")
    proc = _mpi(2, *map(str, folders), "-o", str(tmp_path / "n2"))
    assert proc.returncode == 0, proc.stderr
    _same(tmp_path / "ref", tmp_path / "n2")
    record = json.loads((tmp_path / "n2" / "ranks.json").read_text())
    assert record["dropped_collectives"] == {"0": {"duplicate": 30}}
    assert {int(r): p["wait_ns"] for r, p in record["per_rank"].items()} == truth["wait_ns"]


def test_ranks_of_different_runs_are_refused_under_mpi_with_one_line(tmp_path):
    """The timeline check (gpuvar.ranks.load.check_one_job) runs on rank 0 over every process' spans."""
    folders, _ = write_planted(tmp_path / "job", steps=30, seed=2)
    shift_timeline(folders[1], 7_000_000_000_000)  # about two hours later
    proc = _mpi(2, *map(str, folders), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "do not overlap" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()
