"""`gpuvar explain` with several rank files, every format (issue 36 item 4a; gpuvar.ranks.section).

Kineto ranks are read for their host collective ops; Nsight Systems, rocprof and rocpd ranks have none, so their
rank section comes from the ingest folders (NCCL/RCCL kernels, copy round trips) or is one line saying why it is
empty -- and the findings of the merged job are written either way. Real: the nsys-ai MFU pair (NCCL kernels),
the nvFuser H200 pair and two copies of the rocprof-sys rocpd file (no loop: one line why); planted: the rocpd
pair of gpuvar.demo.rocpd_ranks, whose last rank per step and waits are known."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.demo.rocpd_ranks import write_rocpd_ranks

MFU = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after"
NVFUSER = ("nsys-sqlite/nvfuser-matmul-h200/report1.sqlite", "nsys-sqlite/nvfuser-matmul-h200-run2/report2.sqlite")
ROCPD = "rocpd-sqlite/rocprofsys-transpose-w7800/rocpd-3638851.db"
GLOO = "pytorch-kineto-trace/h100-2rank-gloo"


def _explain(run_cli, files, out):
    proc = run_cli("explain", *files, "-o", out, "--no-causal")
    assert proc.returncode == 0, proc.stderr
    assert (out / "findings" / "findings.json").is_file() and (out / "findings" / "findings.md").is_file()
    ranks = json.loads((out / "ranks" / "ranks.json").read_text())
    assert (out / "ranks" / "ranks.md").is_file()
    return proc.stdout, ranks


def _per_device(source, folder):
    """One real two-GPU Nsight Systems export split into one file per GPU: the rank files of one job (one clock),
    each holding its own GPU's kernels and copies."""
    import sqlite3

    files = []
    for device in (0, 1):
        path = folder / f"rank{device}.sqlite"
        shutil.copyfile(source, path)
        with sqlite3.connect(path) as db:
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
                if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                    db.execute(f"DELETE FROM {table} WHERE deviceId != ?", (device,))
        files.append(path)
    return files


def test_two_real_nsys_ranks_with_nccl_kernels(tmp_path, run_cli):
    """The real 2-GPU export split per GPU: two rank files of one job, their NCCL kernels the collectives."""
    files = _per_device(real_file(f"{MFU}/mfu_2gpu_before.sqlite"), tmp_path)
    stdout, ranks = _explain(run_cli, files, tmp_path / "out")
    assert ranks["collective_source"] == "NCCL kernels" and ranks["collectives_compared"] > 10
    assert "ranks: rank " in stdout and " is last in " in stdout
    merged = pd.read_parquet(tmp_path / "out" / "ingest" / "kernels.parquet")
    assert merged["rank"].nunique() == 2 and len(merged) == 4010  # both GPUs' launches, one job


def test_two_real_nsys_recordings_of_different_runs_are_not_ranks(tmp_path, run_cli):
    """Before and after a fix are two runs, 12.5 s apart: explain writes the findings and says, in the rank
    section, why their ranks are not compared (no confident 'last in 100 %')."""
    files = [real_file(f"{MFU}/mfu_2gpu_before.sqlite"), real_file(f"{MFU}/mfu_2gpu_after.sqlite")]
    stdout, ranks = _explain(run_cli, files, tmp_path / "out")
    assert "timelines do not overlap" in ranks["empty_because"] and "is last in" not in stdout


def test_real_nsys_ranks_without_steps_say_why_in_one_line(tmp_path, run_cli):
    stdout, ranks = _explain(run_cli, [real_file(f) for f in NVFUSER], tmp_path / "out")
    (line,) = [x for x in stdout.splitlines() if x.strip().startswith("ranks:")]
    assert "no rank analysis" in line and "no step is known" in line
    assert ranks["findings"] == [line.strip().removeprefix("ranks: ")] and "per_rank" not in ranks


def test_two_real_rocpd_copies_write_findings_and_say_why_the_rank_section_is_empty(tmp_path, run_cli):
    # one real rocpd file with kernels exists: two copies of it are the ranks (as tests/test_merge.py does for nsys);
    # the second one's process id differs, as another rank's would (explain refuses one file given twice)
    import sqlite3

    files = []
    for rank in (0, 1):
        files.append(tmp_path / f"rank{rank}.db")
        shutil.copyfile(real_file(ROCPD), files[-1])
    with sqlite3.connect(files[1]) as db:
        table = db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rocpd_info_process%'"
        ).fetchone()[0]
        db.execute(f'UPDATE "{table}" SET pid = pid + 1')
    stdout, ranks = _explain(run_cli, files, tmp_path / "out")
    assert "ranks: no rank analysis" in stdout and "no step is known" in ranks["empty_because"]
    record = json.loads((tmp_path / "out" / "findings" / "findings.json").read_text())
    assert record["datasets"][0]["launches"] == 2 * 1004


def test_planted_rocpd_ranks_give_the_planted_straggler_and_waits(tmp_path, run_cli):
    files, truth = write_rocpd_ranks(tmp_path / "job", steps=60, seed=3)
    stdout, ranks = _explain(run_cli, files, tmp_path / "out")
    assert ranks["collective_source"] == "NCCL kernels"
    assert ranks["straggler"] == 1 and ranks["per_rank"]["1"]["last_steps"] == truth["last"].count(1)
    assert {int(r): p["wait_ns"] for r, p in ranks["per_rank"].items()} == truth["wait_ns"]
    steps = pd.read_csv(tmp_path / "out" / "ranks" / "steps.csv")
    last = steps[steps["last"] == 1].sort_values("step")["rank"].tolist()
    assert last == truth["last"]  # step by step, from the launch pattern alone
    assert f"rank 1 is last in {round(100 * truth['last'].count(1) / 60)} % of steps" in stdout


def test_planted_rocpd_ranks_are_deterministic(tmp_path):
    a, _ = write_rocpd_ranks(tmp_path / "a", steps=10, seed=5)
    b, _ = write_rocpd_ranks(tmp_path / "b", steps=10, seed=5)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


@pytest.mark.slow
def test_kineto_ranks_still_use_the_host_collectives(tmp_path):
    from gpuvar.ingest import ingest
    from gpuvar.ranks.section import rank_section

    traces = [real_file(f"{GLOO}/rank{r}.pt.trace.json.gz") for r in (0, 1)]
    parts = []
    for r, trace in enumerate(traces):
        ingest(trace, tmp_path / f"part{r}")
        parts.append(tmp_path / f"part{r}")
    lines = rank_section(traces, parts, tmp_path / "ranks")
    assert lines[0] == "rank 1 is last in 58 % of steps (87 of 150)"
    assert json.loads((tmp_path / "ranks" / "ranks.json").read_text())["collective_source"].startswith("host ops")


@pytest.fixture(scope="module")
def scale_job(tmp_path_factory):
    from gpuvar.demo.planted_scale import write_scale_job

    folder = tmp_path_factory.mktemp("scale_job")
    write_scale_job(folder, ranks=3, launches_per_rank=1500, seed=4)
    return sorted(folder.glob("rank*.pt.trace.json.gz"))


def _untimed(path):
    """A file's bytes; an ingest report without its wall times."""
    if path.name != "ingest.json":
        return path.read_bytes()
    report = json.loads(path.read_text())
    report.pop("seconds", None)  # (a rank's: the merged dataset's report has none)
    return report


def test_ranks_ingested_side_by_side_are_the_bytes_of_one_at_a_time(scale_job, tmp_path, run_cli):
    """`--jobs 2` ingests the rank files in two worker processes: every file explain writes from them (each rank's
    folder, the merged dataset, the rank analysis, the findings) is the one `--jobs 1` writes in this process."""
    outs = {}
    for jobs in (1, 2):
        out = tmp_path / "out"  # (the same folder: its path is written in the reports)
        proc = run_cli("explain", *scale_job, "-o", out, "--no-causal", "--jobs", jobs)
        assert proc.returncode == 0, proc.stderr
        assert ("3 rank files, 2 at a time" in proc.stderr) == (jobs == 2)
        assert proc.stdout.startswith("rank (3 ranks): 4200 launches"), proc.stdout  # the job, not rank 0 alone
        outs[jobs] = {p.relative_to(out): _untimed(p) for p in sorted(out.rglob("*")) if p.is_file()}
        shutil.rmtree(out)
    assert outs[1].keys() == outs[2].keys()
    assert [p for p in outs[1] if outs[1][p] != outs[2][p]] == []
    assert {str(p) for p in outs[1]} >= {f"ingest/ranks/{k}/kernels.parquet" for k in range(3)}


def test_a_bad_rank_file_among_several_stops_explain_with_one_line(scale_job, tmp_path, run_cli):
    """Rank 1's file cut short: with the ranks ingested side by side, one line names that file, no traceback, and
    no output folder is left (the other ranks' ingests went into the staging folder, removed)."""
    bad = tmp_path / scale_job[1].name
    data = scale_job[1].read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    files = [scale_job[0], bad, scale_job[2]]
    proc = run_cli("explain", *files, "-o", tmp_path / "out", "--no-causal", "--jobs", 3)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpuvar explain: error:")]
    assert len(errors) == 1 and str(bad) in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == [bad.name]


def test_a_bad_first_rank_file_stops_the_ranks_not_yet_started(tmp_path, run_cli):
    """Eight rank files two at a time, the first cut short: the ranks still queued are cancelled, and the one
    line names the bad file (no traceback from the cancelled ingests)."""
    from gpuvar.demo.planted_scale import write_scale_job

    write_scale_job(tmp_path / "job", ranks=8, launches_per_rank=5000, seed=2)
    files = sorted((tmp_path / "job").glob("rank*.pt.trace.json.gz"))
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 3])
    proc = run_cli("explain", *files, "-o", tmp_path / "out", "--no-causal", "--jobs", 2)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("gpuvar explain: error:")]
    assert str(files[0]) in error
    assert not (tmp_path / "out").exists()


def test_rank_jobs_follow_the_cores_and_the_free_memory(monkeypatch, tmp_path):
    """The default: the cores this process may use, at most the rank files, at most what the available memory (a
    Slurm job's limit inside one) holds at the largest file's estimated ingest peak; --jobs as given (at most the
    files)."""
    import os

    from gpuvar import explain
    from gpuvar.errors import GpuvarError
    from gpuvar.ingest import footprint

    files = []
    for k in range(6):
        path = tmp_path / f"rank{k}.json"
        with open(path, "wb") as fh:  # rank 3: 100 MB of Kineto trace text (sparse past the head)
            fh.write(b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [{"cat": "kernel"')
            fh.truncate(100 << 20 if k == 3 else 1000)
        files.append([path])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    peak = footprint.BASE_BYTES + int(footprint.BYTES_PER_FILE_BYTE["pytorch-kineto"] * (100 << 20))
    assert footprint.peak_bytes(files[3]) == peak
    for free_bytes, expected in [(64 << 30, 6), (3 * peak + 1, 3), (peak // 2, 1), (None, 6)]:
        monkeypatch.setattr(footprint, "available_bytes", lambda free=free_bytes: free)
        assert explain.rank_jobs(files, None) == expected
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(footprint, "available_bytes", lambda: 64 << 30)
    assert explain.rank_jobs(files, None) == 2
    assert explain.rank_jobs(files, 4) == 4 and explain.rank_jobs(files, 40) == 6
    with pytest.raises(GpuvarError, match="--jobs 0"):
        explain.rank_jobs(files, 0)


def test_piece_workers_follow_the_cores_and_the_free_memory(monkeypatch):
    """One big Nsight Systems export: no worker below 4 cores (they slow a 2-core machine), else the cores but two
    and at most 7, fewer where the available memory would not hold them; --jobs J: J - 1."""
    import os

    from gpuvar import explain
    from gpuvar.ingest import footprint

    for cores, free, expected in [
        (2, 64 << 30, 0),
        (4, 64 << 30, 2),
        (16, 64 << 30, 7),
        (6, 64 << 30, 4),
        (16, None, 7),
        (16, explain.MAIN_BYTES + explain.WORKER_BYTES, 1),
        (16, explain.MAIN_BYTES // 2, 0),
    ]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        monkeypatch.setattr(footprint, "available_bytes", lambda free=free: free)
        assert explain.piece_workers(None) == expected, (cores, free)
    assert explain.piece_workers(1) == 0 and explain.piece_workers(5) == 4


def test_the_causal_graphs_run_beside_the_findings_of_a_big_job_with_cores_and_memory(monkeypatch):
    """Beside the findings: from BESIDE_LAUNCHES launches (below, a process's start-up costs about what the
    findings take), with two cores or more and the memory for both stages."""
    import os

    from gpuvar import explain
    from gpuvar.ingest import footprint

    big, small = explain.BESIDE_LAUNCHES, explain.BESIDE_LAUNCHES - 1
    for cores, free, launches, expected in [
        (2, 64 << 30, big, True),
        (16, None, big, True),
        (16, 64 << 30, small, False),
        (1, 64 << 30, big, False),
        (16, explain.BESIDE_BYTES - 1, big, False),
    ]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        monkeypatch.setattr(footprint, "available_bytes", lambda free=free: free)
        assert explain.causal_beside(launches) is expected, (cores, free, launches)


def test_the_causal_graphs_beside_the_findings_take_the_cores_the_findings_leave(monkeypatch):
    """Beside the findings' process the causal stage's bootstrap is fitted by as many processes as the findings
    leave cores, and by two at least (that process and one helper), so that it takes the core the findings free
    when they end first. The graphs are the same bytes for any number of them (the stage test below)."""
    import os

    from gpuvar import explain
    from gpuvar.options import bounds

    for cores, expected in ((1, 2), (2, 2), (4, 3), (16, 15), (128, bounds("causal", "workers")["le"])):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert explain.beside_workers() == expected, cores


def test_a_bad_rank_file_read_by_a_worker_names_itself(scale_job, tmp_path):
    """The rank section's worker processes (explain --jobs) raise a bad file's InputError in the analysing process
    whole: its path and reason, which the section's one line is made of (an InputError used not to unpickle)."""
    import pickle

    from gpuvar.errors import AccountingError, InputError
    from gpuvar.ranks.job import run_here

    for error in (InputError(tmp_path / "r1.json", "not JSON"), AccountingError("r2.db", "5 rows in, 4 out")):
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), back.path, back.reason, str(back)) == (type(error), error.path, error.reason, str(error))
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    with pytest.raises(InputError) as raised:
        run_here([str(scale_job[0]), str(bad), str(scale_job[2])], True, str(tmp_path / "out"), workers=2)
    assert raised.value.path == str(bad) and raised.value.reason


def test_stages_in_processes_of_their_own_write_what_one_process_writes(scale_job, tmp_path, monkeypatch, capsys):
    """A job of ISOLATED_LAUNCHES launches or more runs the merge, binning, causal graphs, rank section and
    findings each in a process of its own (their memory given back when they end), and where the cores allow the
    causal graphs run beside the rank section and the findings: the files and the console are those of the stages
    run one after the other in explain's own process."""
    from gpuvar import explain
    from gpuvar.cli import main

    results, isolated = {}, []
    in_own_process = explain._isolated
    monkeypatch.setattr(
        explain, "_isolated", lambda stage, *a, **k: isolated.append(a[0]) or in_own_process(stage, *a, **k)
    )
    for threshold, beside in ((10**12, False), (0, False), (10**12, True)):
        monkeypatch.setattr(explain, "ISOLATED_LAUNCHES", threshold)
        monkeypatch.setattr(explain, "causal_beside", lambda launches, beside=beside: beside)
        out = tmp_path / "out"
        assert main(["explain", *map(str, scale_job), "-o", str(out), "--jobs", "1"]) == 0
        console = capsys.readouterr()
        files = {
            p.relative_to(out): p.read_bytes()
            for p in sorted(out.rglob("*"))
            if p.is_file() and (p.suffix != ".json" or p.name in ("findings.json", "ranks.json"))
        }
        results[threshold, beside] = (console.out, files)
        assert ("stage `gpuvar" in console.err) is False
        assert ("beside what follows" in console.err) is beside
        shutil.rmtree(out)
    out_here, here = results[10**12, False]
    assert "findings page:" in out_here and {"bin/sample_rows.parquet", "ranks/ranks.md"} <= {str(p) for p in here}
    assert isolated[:4] == ["ingest-merge", "bin", "causal", "ranks"] and len(isolated) == 5  # and the findings
    for out_apart, apart in (results[0, False], results[10**12, True]):
        assert out_here == out_apart
        assert here.keys() == apart.keys()
        assert [p for p in here if here[p] != apart[p]] == []


def test_a_stage_whose_process_is_killed_is_one_line():
    """A stage's own process killed (out of memory, a signal) ends explain with a StageError, one line, not the
    executor's traceback."""
    import os

    from gpuvar import explain
    from gpuvar.errors import StageError

    with pytest.raises(StageError, match="ended abruptly: its process was killed"):
        explain._isolated(os._exit, 9)
    with explain.Beside(os._exit, 9) as beside, pytest.raises(StageError, match="its process was killed"):
        beside.wait()


def test_rank_ingest_workers_decode_in_their_own_process(monkeypatch, tmp_path):
    """Explain's rank workers fill the cores: a big Kineto rank's reader forks no decode processes of its own there
    (it does where it runs alone)."""
    import os

    from gpuvar import explain
    from gpuvar.ingest import kineto

    big = tmp_path / "rank0.json"
    with open(big, "wb") as fh:
        fh.write(b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [{"cat": "kernel"')
        fh.truncate(200 << 20)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "2")
    assert kineto._workers(big) == 2
    explain._rank_worker_start()  # (monkeypatch puts the variable back)
    assert kineto._workers(big) == 0


def test_a_job_of_many_rank_files_says_how_far_its_ingest_has_come_in_ten_lines(monkeypatch, capsys, tmp_path):
    """Up to RANK_LINES files, one line names each; a job of 256 files printed 512 lines before (one per file
    started and ingested), now a line per tenth of them, the last at every file."""
    from gpuvar import explain

    ingested = []
    monkeypatch.setattr(explain, "_ingest_rank", lambda files, part, fmt: ingested.append(files) and None)
    for count in (5, 23):
        ranks = [[tmp_path / f"rank{k}.pt.trace.json"] for k in range(count)]
        explain._ingest_ranks(ranks, [tmp_path / str(k) for k in range(count)], "auto", 1, 0.0)
        lines = capsys.readouterr().err.splitlines()
        assert len(ingested) == count
        ingested.clear()
        if count <= explain.RANK_LINES:
            assert [line.split("] ")[1] for line in lines] == [f"ingest rank file {k}: {ranks[k][0]}" for k in range(5)]
        else:
            counts = [int(line.split("ingested ")[1].split(" of")[0]) for line in lines[1:]]
            assert "ingest 23 rank files, one at a time" in lines[0]
            assert counts == [3, 5, 7, 10, 12, 14, 17, 19, 21, 23] and all(" of 23 rank files" in x for x in lines[1:])
