"""A SQLite input is never written (issue 35, item 9): a WAL-mode database is read as it is, WAL included.

Before: `gpuvar read` / `ingest` of a WAL-mode database with frames not yet checkpointed (its writer still
connected) checkpointed the WAL into the database and removed the -wal and -shm files: connectorx opens the file
read-write, and its connection, the last one to close, checkpoints."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from gpuvar.ingest import ingest

ROWS = 3000
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def wal_trace(tmp_path):
    """A demo nsys export in WAL mode with one more kernel in its WAL, its writer still connected."""
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = tmp_path / "t.sqlite"
    write_nsys_demo(path, ROWS, 1, 0)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute(f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS} ORDER BY start DESC LIMIT 1")
    writer.commit()
    yield path
    writer.close()


@pytest.mark.parametrize("partitioned", [False, True], ids=["one-query", "partitioned"])
def test_reproducer_a_wal_database_is_read_not_checkpointed(wal_trace, tmp_path, monkeypatch, partitioned):
    from gpuvar.ingest import nsys_sqlite

    if partitioned:
        monkeypatch.setattr(nsys_sqlite, "PARTITION_MIN_ROWS", 100)
    wal = wal_trace.with_name(wal_trace.name + "-wal")
    before = (_digest(wal_trace), _digest(wal))
    report = ingest(wal_trace, tmp_path / "out")
    assert wal.exists(), "the WAL was checkpointed into the database and removed"
    assert (_digest(wal_trace), _digest(wal)) == before, "the input (database or its WAL) was written"
    assert report["tables"]["kernels"]["rows_read"] == ROWS + 1, "the kernel in the WAL is read"


def test_read_of_a_wal_database_leaves_it_as_it_was(wal_trace, tmp_path, run_cli):
    wal = wal_trace.with_name(wal_trace.name + "-wal")
    before = (_digest(wal_trace), _digest(wal))
    assert run_cli("read", wal_trace, "-o", tmp_path / "raw").returncode == 0
    assert wal.exists(), "the WAL was checkpointed into the database and removed"
    assert (_digest(wal_trace), _digest(wal)) == before
