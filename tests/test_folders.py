"""A folder given where a trace is expected (gpuvar.ingest.folders): its traces found by content, the other files
left out and named, and several traces taken as a job's ranks only where each records its own rank.

Real folders: the GPT-2 recording beside its PROVENANCE.md and truth.json (in the repository), the two-rank gloo
job (Kineto distributedInfo ranks 0 and 1), the Nsight Compute CSV ladder (five separate recordings beside text
notes) and a rocprof v1 run (a folder its reader claims whole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import real_file

from gpuvar.errors import InputError
from gpuvar.ingest.folders import job_ranks, natural_key, one_trace, resolve_sources
from gpuvar.ingest.footprint import peak_bytes

GPT2 = Path(__file__).parent / "data" / "recorded" / "h100-gpt2-varlen"
GPT2_TRACE = GPT2 / "gpt2varlen.pt.trace.json.gz"
GLOO = "pytorch-kineto-trace/h100-2rank-gloo"
NCU_LADDER = "ncu-csv/roofline-profiler-rtx5070"
ROCPROF_RUN = "rocprof-v1-csv/hpct-laplacian-kernel1-mi250x"


def _kineto_head(rank: int | None) -> str:
    """The start of a Kineto trace as PyTorch writes it (what detection and the recorded rank read)."""
    info = "" if rank is None else f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 16}},\n'
    return f'{{"schemaVersion": 1,\n{info}"traceEvents": [\n{{"ph": "X", "cat": "kernel", "name": "k"}}\n]}}\n'


def test_a_dataset_folder_is_its_one_trace_and_names_what_it_left_out(tmp_path, run_cli):
    """`gpuvar ingest FOLDER` of the recording beside its notes writes the bytes `gpuvar ingest TRACE` writes, and
    says in one line on stderr which trace it took and which files it left out."""
    by_folder = run_cli("ingest", GPT2, "-o", tmp_path / "folder")
    by_file = run_cli("ingest", GPT2_TRACE, "-o", tmp_path / "file")
    assert by_folder.returncode == 0 and by_file.returncode == 0, by_folder.stderr + by_file.stderr
    note = [line for line in by_folder.stderr.splitlines() if line.startswith("gpuvar: ")]
    assert note == [f"gpuvar: {GPT2}: 1 trace (gpt2varlen.pt.trace.json.gz); left out PROVENANCE.md, truth.json "
                    "(not a trace)"]  # fmt: skip
    for table in ("kernels.parquet", "memcpy.parquet"):
        assert (tmp_path / "folder" / table).read_bytes() == (tmp_path / "file" / table).read_bytes()
    assert peak_bytes(GPT2) == peak_bytes(GPT2_TRACE)  # (the workflow's memory request: the trace, not its notes)


def test_read_of_a_folder_is_the_workflow_step_of_its_trace(tmp_path, run_cli):
    """A dataset's `source: FOLDER` reaches `gpuvar read FOLDER` in the workflow: it reads the trace inside."""
    proc = run_cli("read", GPT2, "-o", tmp_path / "raw")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["format"] == "pytorch-kineto"


def test_a_job_folder_is_its_ranks_as_if_each_file_were_given(tmp_path, run_cli):
    """The gloo job's folder (two rank files recording ranks 0 and 1, and a PROVENANCE.md): explain gives the
    findings and rank section it gives for the two files named on the command line."""
    folder = real_file(GLOO)
    files = [folder / f"rank{r}.pt.trace.json.gz" for r in (0, 1)]
    runs = {}
    for name, given in (("folder", [folder]), ("files", files)):
        out = tmp_path / name
        proc = run_cli("explain", *given, "-o", out, "--no-causal")
        assert proc.returncode == 0, proc.stderr
        runs[name] = (proc, json.loads((out / "ranks" / "ranks.json").read_text()))
    first = runs["folder"][0].stderr.splitlines()[0]
    assert first.endswith(
        "2 traces (rank0.pt.trace.json.gz, rank1.pt.trace.json.gz); left out PROVENANCE.md (not a trace)"
    )
    assert runs["folder"][1] == runs["files"][1]
    strip = lambda text: text.replace(str(tmp_path / "folder"), "OUT").replace(str(tmp_path / "files"), "OUT")  # noqa: E731
    assert strip(runs["folder"][0].stdout) == strip(runs["files"][0].stdout)


def test_separate_recordings_are_refused_with_what_to_type(tmp_path, run_cli):
    """Five Nsight Compute CSVs of five programs record no rank: explain refuses them as a job in one line, with
    the command that would take them as ranks (their shared suffix, so the notes beside them stay out), and writes
    nothing."""
    folder = real_file(NCU_LADDER)
    proc = run_cli("explain", folder, "-o", tmp_path / "out")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "holds 5 traces (gemm_naive.csv, gemm_tiled.csv" in proc.stderr
    assert f"gpuvar explain {folder}/*.csv" in proc.stderr
    assert not (tmp_path / "out").exists()
    ingest = run_cli("ingest", folder, "-o", tmp_path / "ingest")
    assert ingest.returncode == 2 and "holds 5 traces" in ingest.stderr and "give one of them" in ingest.stderr
    assert not (tmp_path / "ingest").exists()


def test_two_recordings_of_one_rank_are_not_a_job(tmp_path):
    """tensorboard_trace_handler writes a file per profiling cycle: two files recording rank 0 are two recordings
    of one rank, refused as a job."""
    for name in ("host_1.1700000000001.pt.trace.json", "host_1.1700000000002.pt.trace.json"):
        (tmp_path / name).write_text(_kineto_head(0))
    paths, opened = resolve_sources([tmp_path])
    assert len(paths) == 2
    with pytest.raises(InputError, match="both record rank 0: several recordings of one rank"):
        job_ranks(opened)


def test_traces_in_rank_order_and_everything_else_named(tmp_path):
    """Natural order (rank2 before rank10), whatever the file names' lengths; subfolders, notes and an empty file
    are left out, each named with its reason, hidden files counted; and the ranks are a job."""
    for rank in (10, 2, 1):
        (tmp_path / f"rank{rank}.json").write_text(_kineto_head(rank))
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (tmp_path / "notes.md").write_text("# run notes\n")
    (tmp_path / "rank3.json").write_bytes(b"")
    (tmp_path / "old-output").mkdir()
    paths, opened = resolve_sources([tmp_path])
    assert [p.name for p in paths] == ["rank1.json", "rank2.json", "rank10.json"]
    job_ranks(opened)  # distinct recorded ranks: a job
    note = opened[0].note()
    assert note.startswith(f"{tmp_path}: 3 traces (rank1.json, rank2.json, rank10.json); left out ")
    for part in ("notes.md (not a trace)", "old-output (subfolder)", "rank3.json (empty file)", "; 1 hidden file"):
        assert part in note
    assert ".DS_Store" not in note  # (counted: macOS's and gpuvar's own lock files are noise by name)
    assert sorted(["b10", "b9", "a", "b1"], key=natural_key) == ["a", "b1", "b9", "b10"]


def test_a_folder_a_reader_claims_whole_is_kept_and_an_empty_one_refused(tmp_path, run_cli):
    """A rocprof run's folder is that reader's (its kernel trace with its counter passes): given as it is. A
    folder with no trace is one line naming it."""
    run = real_file(ROCPROF_RUN)
    assert resolve_sources([run]) == ([run], [])
    assert one_trace([run])[0] == [str(run)]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.txt").write_text("traces go here\n")
    proc = run_cli("ingest", tmp_path / "empty", "-o", tmp_path / "out")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no trace directly in this folder (README.txt: not a trace)" in proc.stderr


def test_a_workflow_dataset_folder_is_its_traces_or_a_one_line_config_error(tmp_path):
    """`source: DIR` in the workflow's config: with merge: true the folder's ranks (natural order), without it its
    one trace, as the rules' inputs (not the folder, whose notes would rerun the ingest); a folder of several
    recordings without merge, or of none, stops the run before any job with the key that says so."""
    from gpuvar.errors import ConfigError
    from gpuvar.workflow.registry import build_registry

    gloo = real_file(GLOO)
    datasets = [
        {"name": "job", "source": str(gloo), "merge": True},
        {"name": "gpt2", "source": str(GPT2)},
    ]
    registry = build_registry({"datasets": datasets}, tmp_path)
    assert registry.datasets["job"].sources == [
        str(gloo / "rank0.pt.trace.json.gz"),
        str(gloo / "rank1.pt.trace.json.gz"),
    ]
    assert registry.datasets["gpt2"].source == str(GPT2_TRACE)
    ladder = real_file(NCU_LADDER)
    with pytest.raises(ConfigError, match=r"datasets\[0\]\.source: .* holds 5 traces .*set merge: true"):
        build_registry({"datasets": [{"name": "ladder", "source": str(ladder)}]}, tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("traces go here\n")
    with pytest.raises(ConfigError, match=r"datasets\[0\]\.source: 'notes' of dataset 'x': no trace directly in"):
        build_registry({"datasets": [{"name": "x", "source": "notes"}]}, tmp_path)


def test_a_report_beside_its_own_export_is_one_recording(tmp_path):
    """`nsys export` leaves report1.sqlite beside report1.nsys-rep: the folder is that one recording, read from
    the export, the report named as left out (not two traces refused as separate recordings)."""
    export = real_file("nsys-sqlite/nvfuser-matmul-h200/report1.sqlite")
    (tmp_path / "report1.sqlite").symlink_to(export)
    (tmp_path / "report1.nsys-rep").write_bytes(b"NSYS-REP\0" + bytes(64))  # (detected by its name)
    paths, opened = resolve_sources([tmp_path])
    assert [p.name for p in paths] == ["report1.sqlite"]
    assert opened[0].note().endswith("left out report1.nsys-rep (its export is beside it)")
