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
