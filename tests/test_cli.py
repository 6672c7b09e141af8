"""The command line: every stage is reachable, and a user mistake is one line on stderr with exit code 2."""

from __future__ import annotations

import pytest


def test_help_lists_every_stage(run_cli):
    out = run_cli("--help", check=True).stdout
    for stage in ("ingest", "demo-data", "bin", "causal", "plot", "compare", "bench", "schema"):
        assert stage in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["ingest", "/nonexistent/trace.sqlite", "-o", "{tmp}/out"],
            "/nonexistent/trace.sqlite: no such file or directory",
        ),
        (["ingest", "{tmp}/empty.csv", "-o", "{tmp}/out"], "empty.csv: empty file"),
        (["ingest", "{tmp}/notes.txt", "-o", "{tmp}/out"], "notes.txt: unrecognised format"),
        (["ingest", "{tmp}/notes.txt", "-o", "{tmp}/out", "--format", "nvprof"], "unknown format 'nvprof'"),
        (["demo-data", "-o", "{tmp}/d", "--rows", "0"], "--rows must be a positive number"),
        (["compare", "{tmp}/a", "{tmp}/b", "-o", "{tmp}/c", "--results", "{tmp}"], "no ingest output for dataset"),
        (["compare", "{tmp}/a", "{tmp}/b", "-o", "{tmp}/c", "--names", "x"], "--names must be two different labels"),
    ],
)
def test_user_mistakes_are_one_line(run_cli, tmp_path, args, message):
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("just some notes\nnothing to see\n")
    proc = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1


def test_demo_data_is_the_same_bytes_on_every_run(tmp_path):
    """The embedded demo is reproducible byte for byte (gzip'd Kineto traces included: no time stamp)."""
    import time

    from gpuvar.demo.cli import write_demo_set

    write_demo_set(tmp_path / "a", seed=3, rows=500)
    time.sleep(1.1)  # a gzip header with the current time would now differ
    write_demo_set(tmp_path / "b", seed=3, rows=500)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert any(name.endswith(".json.gz") for name in files) and len(files) >= 10
    for name in (n for n in files if n != "demo.json"):  # demo.json names the folder it was written to
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
