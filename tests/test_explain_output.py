"""`gpuvar explain` never mixes two runs (issue 35, item 4): its whole output is staged and swapped in once, a
second explain into the same folder while one runs is refused, and bad inputs (a file given twice, a copy of one
rank's file, an unknown format) stop it before any work.

Before: each stage swapped its own subfolder, so a rerun failing half-way left run B's ingest beside run A's
findings; two concurrent runs both exited 0; a duplicated rank file was found only by the ranks stage, after the
ingest, binning and causal stages had written their outputs."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from gpuvar.layout import OUTPUT_MARKER


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    from gpuvar.cli import main

    root = tmp_path_factory.mktemp("explain_demo")
    assert main(["demo-data", "-o", str(root / "demo"), "--seed", "1", "--rows", "4000"]) == 0
    return root / "demo"


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _one_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_rerun_failing_half_way_leaves_the_previous_answer_whole(demo, tmp_path, run_cli):
    out = tmp_path / "out"
    kineto = [demo / "kineto_rank0.json.gz", demo / "kineto_rank1.json.gz"]
    assert run_cli("explain", *kineto, "--no-causal", "-o", out).returncode == 0
    before = _digests(out)
    assert "ranks/ranks.md" in before and "findings/findings.md" in before
    broken = tmp_path / "rank1.json.gz"  # a gzip cut short: detected as Kineto, fails in its ingest
    data = kineto[1].read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    proc = run_cli("explain", kineto[0], broken, "--no-causal", "-o", out)
    assert proc.returncode == 2, proc.stderr
    assert _digests(out) == before, "run A's files, every one as it was (no rank-0 ingest of run B)"
    assert ".tmp-" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "rank1.json.gz"], "no staging folder or lock left"


def test_a_second_explain_into_a_folder_being_written_is_refused(demo, tmp_path, run_cli):
    """The first run is stood in for by this test holding the folder's claim, as a running explain does."""
    from gpuvar.atomic import Output, claimed

    out = tmp_path / "out"
    with claimed(Output(out, "explain")):
        proc = run_cli("explain", demo / "pair_baseline.sqlite", "--no-causal", "-o", out)
    line = _one_line(proc)
    assert "another gpuvar process" in line and str(out) in line, line
    assert not out.exists()
    assert run_cli("explain", demo / "pair_baseline.sqlite", "--no-causal", "-o", out).returncode == 0


@pytest.mark.parametrize("how", ["same path", "same file by another path", "a copy"])
def test_a_rank_file_given_twice_is_refused_before_any_work(demo, tmp_path, run_cli, how):
    first = demo / "kineto_rank0.json.gz"
    if how == "same path":
        second = first
    elif how == "same file by another path":
        second = tmp_path / "link.json.gz"
        second.symlink_to(first)
    else:
        second = shutil.copy(first, tmp_path / "copy.json.gz")
    out = tmp_path / "out"
    proc = run_cli("explain", first, second, "-o", out)
    line = _one_line(proc)
    assert "twice" in line, line
    assert "ingest" not in proc.stderr, "no stage ran"
    assert not out.exists()


def test_an_unknown_format_is_refused_before_any_work(demo, tmp_path, run_cli):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a trace\n")
    out = tmp_path / "out"
    proc = run_cli("explain", demo / "kineto_rank0.json.gz", notes, "-o", out)
    line = _one_line(proc)
    assert str(notes) in line and "unrecognised format" in line, line
    assert not out.exists()


def test_ranks_without_host_ops_come_from_the_ingest_not_the_traces_advice(demo, tmp_path, run_cli):
    """Item 9: two Nsight Systems ranks told the explain user to 'pass the ingest folder instead of --traces', an
    option explain does not have. The ranks stage reads the merged ingest; it cannot align these demo ranks (no
    steps), which is said, and the findings are written."""
    out = tmp_path / "out"
    proc = run_cli("explain", demo / "rank0.sqlite", demo / "rank1.sqlite", "--no-causal", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "--traces" not in proc.stdout + proc.stderr
    assert "ranks: no rank analysis" in proc.stdout and "no step is known" in proc.stdout
    assert (out / "findings" / "findings.md").is_file()
    assert "no step is known" in (out / "ranks" / "ranks.md").read_text()  # the rank section says why it is empty
    assert (out / "ingest" / "ranks" / "1" / "kernels.parquet").is_file(), "the per-rank ingests are kept"


def test_paths_recorded_by_the_stages_name_the_output_not_the_staging_folder(demo, tmp_path, run_cli):
    out = tmp_path / "out"
    kineto = [demo / "kineto_rank0.json.gz", demo / "kineto_rank1.json.gz"]
    assert run_cli("explain", *kineto, "-o", out).returncode == 0
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".csv"):
            assert ".tmp-" not in path.read_text(), path
    assert str(out / "ingest") in (out / "findings" / "findings.json").read_text()
    for sub in ("", "ingest", "bin", "causal", "findings", "ranks"):
        assert (out / sub / OUTPUT_MARKER).is_file(), sub


def test_a_long_stage_says_how_far_it_has_come(tmp_path, monkeypatch, capsys):
    """Every HEARTBEAT_S (here 20 ms) explain prints how far the step under way has come: the Kineto read by its
    bytes, the findings' first pass by its launches; a stage's step ends with it (no stale line after), and the
    files are those of a run without the lines."""
    import re

    from gpuvar import explain, progress
    from gpuvar.cli import main

    trace = Path(__file__).parent / "data" / "recorded" / "h100-gpt2-varlen" / "gpt2varlen.pt.trace.json.gz"
    monkeypatch.setattr(explain, "HEARTBEAT_S", 0.02)
    assert main(["explain", str(trace), "-o", str(tmp_path / "out"), "--no-causal"]) == 0
    err = capsys.readouterr().err
    beats = [line for line in err.splitlines() if re.match(r"\[\s*\d+\.\d s\]   \S", line)]
    assert beats, err
    assert any(re.search(r"reading the Kineto trace: \d+ % \([\d.]+ [kMG]?B of [\d.]+ [kMG]?B\)", b) for b in beats)
    assert any("findings: " in b for b in beats), beats
    assert progress.current() is None  # (the heartbeat ended with explain)


def test_a_step_reads_as_a_share_of_its_total():
    from gpuvar.progress import Step

    assert Step("writing", 20e6, "kernel rows", 8.4e6).line() == "writing: 42 % (8.4 M of 20 M kernel rows)"
    assert Step("reading", 3 << 30, "bytes", 1 << 29).line() == "reading: 17 % (512 MB of 3 GB)"
    assert Step("placing", None, "launches", 1_200_000).line() == "placing: 1.2 M launches so far"
    assert Step("medians").line() == "medians"


def test_a_command_logs_its_step_for_a_jobs_log(tmp_path, monkeypatch, caplog):
    """Every command logs its step under way every LOG_PROGRESS_S (a minute; here 20 ms) on the gpuvar.progress
    logger, which a Slurm job's log keeps: `gpuvar ingest` of the GPT-2 recording says how much of the trace it
    has read."""
    import logging

    from gpuvar import cli

    trace = Path(__file__).parent / "data" / "recorded" / "h100-gpt2-varlen" / "gpt2varlen.pt.trace.json.gz"
    monkeypatch.setattr(cli, "LOG_PROGRESS_S", 0.02)
    with caplog.at_level(logging.INFO, logger="gpuvar.progress"):
        assert cli.main(["ingest", str(trace), "-o", str(tmp_path / "out")]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "gpuvar.progress"]
    assert said and all(line for line in said), said
    assert any(line.startswith(("reading the", "canonical columns", "writing the")) for line in said), said
