"""`gpuvar ranks` never states the impossible (issue 35, item 5): inputs that cannot belong to one job are refused
or warned about, bad collectives are dropped and counted, and every share lies between 0 and 100 %.

Before, on the real two-rank gloo trace: a rank 1 shifted by an hour (another job, or a clock offset) read "rank 1 is
last in 100 % of steps" with an hour of arrival skew beside waits of 245 ms; every collective recorded twice read
"rank 0 waits 107 % of its time"; one negative collective duration "-0 %"; one stray ProfilerStep at another epoch
"0 % of 4,651,907,711 ms"."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.cli import main
from gpuvar.errors import InputError
from gpuvar.ranks.analyze import analyze
from gpuvar.ranks.load import from_ingest, from_traces
from gpuvar.ranks.planted import shift_timeline, write_planted

GLOO = "pytorch-kineto-trace/h100-2rank-gloo"
HOUR_US = 3600e6


@pytest.fixture(scope="module")
def gloo() -> list[dict]:
    """The real gloo pair's JSON documents (rank 0, rank 1)."""
    return [json.loads(gzip.decompress(real_file(f"{GLOO}/rank{r}.pt.trace.json.gz").read_bytes())) for r in (0, 1)]


def _write(tmp_path: Path, docs: list[dict]) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for r, doc in enumerate(docs):
        path = tmp_path / f"rank{r}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _shift(doc: dict, by_us: float) -> dict:
    doc = copy.deepcopy(doc)
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), int | float):
            e["ts"] += by_us
    return doc


def _collectives(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"]


def _ranks(tmp_path: Path, docs: list[dict], run_cli) -> tuple[object, dict | None]:
    out = tmp_path / "out"
    proc = run_cli("ranks", "--traces", *_write(tmp_path, docs), "-o", out)
    record = json.loads((out / "ranks.json").read_text()) if proc.returncode == 0 else None
    return proc, record


def _shares_bounded(record: dict) -> None:
    for r, p in record["per_rank"].items():
        for key in ("last_share", "wait_share", "wait_share_of_steps"):
            assert p[key] is None or 0 <= p[key] <= 1, (r, key, p[key])


def test_reproducer_another_job_is_refused(gloo, tmp_path, run_cli):
    """Rank 1's file from a job 1.9 h later (or its clock an hour and more off): the timelines do not overlap."""
    proc, _ = _ranks(tmp_path, [gloo[0], _shift(gloo[1], 1.9 * HOUR_US)], run_cli)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "do not overlap" in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_clock_offset_within_the_run_is_warned_and_no_rank_is_called_last(gloo, tmp_path, run_cli):
    """Rank 1's clock 300 ms ahead: the timelines overlap, but each arrival skew (~300 ms) is far beyond the wait of
    the rank that came first (~2 ms): the clocks disagree, and who came last is not known."""
    proc, record = _ranks(tmp_path, [gloo[0], _shift(gloo[1], 300e3)], run_cli)
    assert proc.returncode == 0, proc.stderr
    assert record["warnings"] and "clock" in record["warnings"][0]
    assert record["findings"][0] == record["warnings"][0]
    assert not any(" is last in " in f for f in record["findings"]), record["findings"]
    # nor what makes a straggler late, nor what the others would save: both need the arrival order
    assert not any("time to the collective" in f or "median pace" in f for f in record["findings"])
    assert "| not known |" in (tmp_path / "out" / "ranks.md").read_text()
    _shares_bounded(record)


def test_reproducer_every_collective_twice(gloo, tmp_path, run_cli):
    rank0 = copy.deepcopy(gloo[0])
    twice = _collectives(rank0)
    rank0["traceEvents"] += copy.deepcopy(twice)
    proc, record = _ranks(tmp_path, [rank0, gloo[1]], run_cli)
    assert proc.returncode == 0, proc.stderr
    _, clean = _ranks(tmp_path / "clean", gloo, run_cli)
    assert record["per_rank"]["0"]["wait_ns"] == clean["per_rank"]["0"]["wait_ns"]
    assert record["dropped_collectives"] == {"0": {"duplicate": len(twice)}}
    assert f"Dropped collectives of rank 0: {len(twice)} (duplicate)." in (tmp_path / "out" / "ranks.md").read_text()
    _shares_bounded(record)


def test_reproducer_a_negative_collective_duration(gloo, tmp_path, run_cli):
    rank0 = copy.deepcopy(gloo[0])
    _collectives(rank0)[5]["dur"] = -7000.0
    proc, record = _ranks(tmp_path, [rank0, gloo[1]], run_cli)
    assert proc.returncode == 0, proc.stderr
    assert record["dropped_collectives"] == {"0": {"negative duration": 1}}
    assert not any("-0 %" in f or " -" in f for f in record["findings"]), record["findings"]
    _shares_bounded(record)


def test_reproducer_one_stray_profiler_step_at_another_epoch(gloo, tmp_path, run_cli):
    rank0 = copy.deepcopy(gloo[0])
    op = next(e for e in rank0["traceEvents"] if e.get("cat") == "cpu_op")
    stray = {**copy.deepcopy(op), "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 1.0, "dur": 1.0}
    rank0["traceEvents"].append(stray)
    proc, record = _ranks(tmp_path, [rank0, gloo[1]], run_cli)
    assert proc.returncode == 0, proc.stderr
    _, clean = _ranks(tmp_path / "clean", gloo, run_cli)
    assert record["per_rank"]["0"]["profiled_ns"] == clean["per_rank"]["0"]["profiled_ns"]
    assert abs(record["per_rank"]["0"]["wait_share"] - 0.26) <= 0.05  # PROVENANCE: ~245 ms, ~26 % of rank 0's time


def test_planted_nccl_collectives_recorded_twice_are_dropped_and_counted(tmp_path):
    """Planted NCCL job, rank 0's kernel table with every row twice (two exports concatenated): the collectives
    are matched across ranks as recorded once, and the waits are the planted ones."""
    folders, truth = write_planted(tmp_path / "job", steps=30, seed=2, collective="nccl")
    kernels = pd.read_parquet(folders[0] / "kernels.parquet")
    pd.concat([kernels, kernels]).sort_values("start", kind="stable").to_parquet(
        folders[0] / "kernels.parquet", index=False
    )
    result = analyze(from_ingest(folders))
    assert {int(r): p["wait_ns"] for r, p in result.summary["per_rank"].items()} == truth["wait_ns"]
    assert result.summary["dropped_collectives"] == {"0": {"duplicate": 30}}
    _shares_bounded(result.summary)


def test_planted_ranks_from_different_runs_are_refused(tmp_path):
    folders, _ = write_planted(tmp_path / "job", steps=30, seed=2)
    shift_timeline(folders[1], 7_000_000_000_000)  # about two hours later
    with pytest.raises(InputError, match="do not overlap"):
        from_ingest(folders)


def test_the_real_pair_is_unchanged(gloo, tmp_path):
    """The checks accept the real job as it is: no warning, nothing dropped, the PROVENANCE figures."""
    result = analyze(from_traces(_write(tmp_path, gloo)))
    assert result.summary["warnings"] == [] and result.summary["dropped_collectives"] == {}
    assert result.findings[0].startswith("rank 1 is last in 58 % of steps (87 of 150)")


def test_a_single_rank_folder_still_says_nothing_to_compare(tmp_path, capsys):
    folders, _ = write_planted(tmp_path / "job", steps=10, seed=1)
    assert main(["ranks", str(folders[0]), "-o", str(tmp_path / "out")]) == 0
