"""A Kineto trace's ingest keeps its host collective ops (gpuvar.ingest.host_collectives), so the rank analysis
reads each rank's ingest folder as it would read the trace: the same answer, without reading the traces again
(at 256 ranks that second read was 140 s of `gpuvar explain`'s 390 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.errors import InputError
from gpuvar.ingest import ingest, read_source
from gpuvar.ingest.host_collectives import collective_ops
from gpuvar.layout import HOST_COLLECTIVES_TABLE, INGEST_REPORT
from gpuvar.ranks.job import run_here

GLOO = "pytorch-kineto-trace/h100-2rank-gloo"
OUTPUTS = ["call_sites.csv", "ranks.html", "ranks.json", "ranks.md", "skew.png", "steps.csv", "timeline.png"]


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    """The real two-rank gloo recording: its traces and each one's ingest folder."""
    traces = [real_file(f"{GLOO}/rank{r}.pt.trace.json.gz") for r in (0, 1)]
    root = tmp_path_factory.mktemp("gloo_kept")
    folders = []
    for r, trace in enumerate(traces):
        ingest(trace, root / f"rank{r}")
        folders.append(root / f"rank{r}")
    return [str(t) for t in traces], [str(f) for f in folders]


def _bytes(folder: Path) -> dict[str, bytes]:
    return {name: (Path(folder) / name).read_bytes() for name in OUTPUTS}


def _traces_unreadable(monkeypatch):
    """Reading a trace again fails the test: the folders must be enough."""

    def refuse(path, position):
        raise AssertionError(f"the trace {path} was read again")

    monkeypatch.setattr("gpuvar.ranks.job.trace_part", refuse)


def test_ingest_keeps_the_gloo_collectives_of_the_trace(gloo):
    traces, folders = gloo
    for trace, folder in zip(traces, folders):
        kept = pd.read_parquet(Path(folder) / HOST_COLLECTIVES_TABLE)
        report = json.loads((Path(folder) / INGEST_REPORT).read_text())
        assert report["host_collectives"] == len(kept) == 150  # one gloo all-reduce per step, 150 steps
        assert kept["name"].str.startswith("gloo:").all()
        # the trace's own host ops (ts and dur in µs), to the ns
        ops = read_source(Path(trace)).tables["cpu_ops"].to_pandas()
        gloo_ops = ops[ops["name"].astype(str).str.startswith("gloo:")]
        assert kept["start"].tolist() == [round(float(t) * 1000) for t in gloo_ops["ts"]]
        assert (kept["end"] - kept["start"]).tolist() == [round(float(d) * 1000) for d in gloo_ops["dur"]]


def test_the_folders_give_the_traces_answer_without_reading_them(gloo, tmp_path, monkeypatch):
    traces, folders = gloo
    run_here(traces, True, str(tmp_path / "traces"))
    _traces_unreadable(monkeypatch)
    record = run_here(traces, True, str(tmp_path / "kept"), folders=folders)
    assert _bytes(tmp_path / "kept") == _bytes(tmp_path / "traces")
    assert record["findings"][0] == "rank 1 is last in 58 % of steps (87 of 150)"
    ranks = json.loads((tmp_path / "kept" / "ranks.json").read_text())
    assert ranks["collective_source"].startswith("host ops gloo:")
    assert ranks["sources"] == traces  # the traces still name the ranks


def test_ingest_folders_alone_use_the_host_collectives_not_the_copies(gloo, tmp_path, monkeypatch):
    """`gpuvar ranks FOLDERS` of Kineto ingests: the exact waits of the host ops, as from the traces (the copies'
    round trips overstate them)."""
    traces, folders = gloo
    run_here(traces, True, str(tmp_path / "traces"))
    _traces_unreadable(monkeypatch)
    run_here(folders, False, str(tmp_path / "folders"))
    a = json.loads((tmp_path / "traces" / "ranks.json").read_text())
    b = json.loads((tmp_path / "folders" / "ranks.json").read_text())
    assert b["collective_source"] == a["collective_source"]
    assert b["per_rank"] == a["per_rank"] and b["straggler"] == a["straggler"] == 1
    assert (tmp_path / "folders" / "steps.csv").read_bytes() == (tmp_path / "traces" / "steps.csv").read_bytes()


def test_a_folder_ingested_before_the_collectives_were_kept_reads_its_trace(gloo, tmp_path):
    """An older ingest (no host_collectives in its ingest.json) is not trusted, even beside a stale file: the
    trace is read; the folders alone fall back to the copies."""
    traces, folders = gloo
    old = []
    for r, folder in enumerate(folders):
        copy = tmp_path / f"old{r}"
        copy.mkdir()
        for name in ("kernels.parquet", "memcpy.parquet", HOST_COLLECTIVES_TABLE):
            (copy / name).write_bytes((Path(folder) / name).read_bytes())
        report = json.loads((Path(folder) / INGEST_REPORT).read_text())
        del report["host_collectives"]
        (copy / INGEST_REPORT).write_text(json.dumps(report))
        old.append(str(copy))
    run_here(traces, True, str(tmp_path / "traces"))
    run_here(traces, True, str(tmp_path / "old"), folders=old)
    assert _bytes(tmp_path / "old") == _bytes(tmp_path / "traces")
    run_here(old, False, str(tmp_path / "copies"))
    assert json.loads((tmp_path / "copies" / "ranks.json").read_text())["collective_source"] == "copies"


def test_a_rank_folder_given_for_another_ranks_trace_is_refused(gloo, tmp_path):
    traces, folders = gloo
    with pytest.raises(InputError) as caught:
        run_here(traces, True, str(tmp_path / "out"), folders=folders[::-1])
    assert caught.value.path == folders[1]
    assert caught.value.reason == f"was ingested from {traces[1]}, not from {traces[0]}"
    assert not (tmp_path / "out").exists()


def test_ranks_cli_reads_the_ingested_folders(gloo, tmp_path, run_cli):
    traces, folders = gloo
    run_cli("ranks", *traces, "--traces", "-o", tmp_path / "traces", check=True)
    proc = run_cli("ranks", *traces, "--traces", "--ingested", *folders, "-o", tmp_path / "kept")
    assert proc.returncode == 0, proc.stderr
    assert _bytes(tmp_path / "kept") == _bytes(tmp_path / "traces")
    proc = run_cli("ranks", *folders, "--ingested", *folders, "-o", tmp_path / "bad")
    assert proc.returncode == 2 and proc.stderr.strip().endswith("give --traces too")
    assert "Traceback" not in proc.stderr


def test_a_trace_without_collectives_says_so_from_its_folder(tmp_path):
    """Host ops but no collective among them (a one-process recording): the folder keeps an empty table, and the
    rank analysis names the trace and the reason, as it does reading the trace."""
    traces = [
        real_file("pytorch-kineto-trace/h100-varlen-transformer-block/varlen.pt.trace.json.gz"),
        real_file("pytorch-kineto-trace/h100-fixed-shape-copy-contention/fixedcontend.pt.trace.json.gz"),
    ]
    folders = []
    for r, trace in enumerate(traces):
        ingest(trace, tmp_path / f"part{r}")
        folders.append(str(tmp_path / f"part{r}"))
    assert json.loads((tmp_path / "part0" / INGEST_REPORT).read_text())["host_collectives"] == 0
    errors = []
    for kept in (None, folders):
        with pytest.raises(InputError) as caught:
            run_here([str(t) for t in traces], True, str(tmp_path / "out"), folders=kept)
        errors.append((caught.value.path, caught.value.reason))
    assert (
        errors[0]
        == errors[1]
        == (
            str(traces[0]),
            "no collective op (gloo:/nccl:/c10d::/record_param_comms) among the host ops",
        )
    )


def test_collective_ops_take_the_most_specific_tier():
    ops = pd.DataFrame(
        {
            "name": ["aten::mm", "c10d::allreduce_", "record_param_comms", "gloo:all_reduce", None, "nccl:broadcast"],
            "ts": ["1.5", "2", "3", "4.0005", "5", "6"],
            "dur": [1.0, 2.0, 3.0, 0.25, 1.0, 0.5],
        }
    )
    kept, untimed = collective_ops(ops)
    assert kept.to_dict("list") == {
        "start": [4000, 6000],
        "end": [4250, 6500],
        "name": ["gloo:all_reduce", "nccl:broadcast"],
    }
    assert untimed == 0
    kept, _ = collective_ops(ops[~ops["name"].isin(["gloo:all_reduce", "nccl:broadcast"])])
    assert kept["name"].tolist() == ["c10d::allreduce_"]
    assert collective_ops(ops.iloc[:1])[0].empty


def test_a_collective_op_without_a_time_is_left_out_and_counted():
    """A ts or dur the reader could not read (a list in the JSON: null) gives no interval, not a crash."""
    ops = pd.DataFrame(
        {
            "name": ["gloo:all_reduce", "gloo:all_reduce", "gloo:all_reduce", "gloo:barrier"],
            "ts": ["1", None, "3", "4"],
            "dur": [1.0, 1.0, float("nan"), 2.0],
        }
    )
    kept, untimed = collective_ops(ops)
    assert kept.to_dict("list") == {
        "start": [1000, 4000],
        "end": [2000, 6000],
        "name": ["gloo:all_reduce", "gloo:barrier"],
    }
    assert untimed == 2


def test_explains_rank_section_reads_the_rank_folders(gloo, tmp_path, monkeypatch):
    """`gpuvar explain a.json b.json`: the rank section after the ingest reads the ranks' ingest folders."""
    from gpuvar.ranks.section import rank_section

    traces, folders = gloo
    run_here(traces, True, str(tmp_path / "traces"))
    _traces_unreadable(monkeypatch)
    lines = rank_section(traces, folders, tmp_path / "section")
    assert lines[0] == "rank 1 is last in 58 % of steps (87 of 150)"
    assert _bytes(tmp_path / "section") == _bytes(tmp_path / "traces")


def test_a_merged_folder_is_read_through_the_rank_folders_that_keep_them(gloo, tmp_path, monkeypatch):
    """`gpuvar ranks MERGED` (docs/ranks.md's merged form): the rank folders it was made from, listed in its
    ingest.json, give the host collectives, also once the merged folder and its ranks/ have moved; a rank folder
    without them leaves the merged table read through copies."""
    import shutil

    from gpuvar.ingest.merge import merge
    from gpuvar.ranks.load import from_ingest

    traces, folders = gloo
    run_here(traces, True, str(tmp_path / "traces"))
    job = tmp_path / "job"
    for r, folder in enumerate(folders):
        shutil.copytree(folder, job / "ranks" / str(r))
    merge([job / "ranks" / "0", job / "ranks" / "1"], job)
    job.rename(tmp_path / "moved")  # the paths its ingest.json records are gone
    moved = tmp_path / "moved"
    _traces_unreadable(monkeypatch)
    run_here([str(moved)], False, str(tmp_path / "merged"))
    a = json.loads((tmp_path / "traces" / "ranks.json").read_text())
    b = json.loads((tmp_path / "merged" / "ranks.json").read_text())
    assert b["collective_source"] == a["collective_source"] and b["per_rank"] == a["per_rank"]
    assert b["sources"] == [str(moved / "ranks" / "0"), str(moved / "ranks" / "1")]
    assert (tmp_path / "merged" / "steps.csv").read_bytes() == (tmp_path / "traces" / "steps.csv").read_bytes()
    assert from_ingest([moved]).collective_source == a["collective_source"]  # the one-process reference too
    report = json.loads((moved / "ranks" / "1" / INGEST_REPORT).read_text())
    del report["host_collectives"]
    (moved / "ranks" / "1" / INGEST_REPORT).write_text(json.dumps(report))
    run_here([str(moved)], False, str(tmp_path / "copies"))
    c = json.loads((tmp_path / "copies" / "ranks.json").read_text())
    assert c["collective_source"] == "copies" and c["sources"] == [str(moved)]
