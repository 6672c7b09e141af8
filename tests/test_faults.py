"""Pipeline faults: unwritable output, foreign or locked SQLite -> one-line error, exit 2, no complete-looking output."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuvar.errors import GpuvarError
from gpuvar.ingest import ingest


@pytest.fixture(scope="module")
def nsys_file(tmp_path_factory) -> Path:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = tmp_path_factory.mktemp("nsys") / "demo.sqlite"
    write_nsys_demo(path, 300, 2, 0)
    return path


def _one_line_error(proc) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.timeout(60)
def test_output_under_a_file_is_one_line_error(run_cli, nsys_file, tmp_path):
    blocker = tmp_path / "some_file"
    blocker.write_text("x")
    proc = run_cli("ingest", nsys_file, "-o", blocker / "sub")
    _one_line_error(proc)
    assert not list(tmp_path.rglob("kernels.parquet")) and not list(tmp_path.rglob(".tmp-*"))


@pytest.mark.timeout(60)
def test_sqlite_that_is_not_nsys(run_cli, tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
    proc = run_cli("ingest", path, "-o", tmp_path / "out")
    _one_line_error(proc)
    assert str(path) in proc.stderr
    assert not (tmp_path / "out" / "kernels.parquet").exists()


@pytest.mark.timeout(60)
def test_locked_database_fails_promptly_or_reads(nsys_file, tmp_path):
    """A writer holding BEGIN EXCLUSIVE: ingest must not hang; it reads or raises a one-line GpuvarError."""
    holder = sqlite3.connect(nsys_file, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        ingest(nsys_file, tmp_path / "out")
    except GpuvarError as exc:
        assert str(nsys_file) in str(exc) and "\n" not in str(exc)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert ingest(nsys_file, tmp_path / "again")["tables"]["kernels"]["rows_written"] > 0
