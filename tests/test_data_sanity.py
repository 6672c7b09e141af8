"""Data sanity at ingest: impossible durations are dropped and counted, a trace without one usable kernel is an
error saying why, exact duplicate rows are counted (and kept), a symlink loop is named as such."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from gpuvar.errors import InputError
from gpuvar.ingest import ingest
from gpuvar.ingest.sanity import NEGATIVE_DURATION

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def demo_sqlite(tmp_path_factory) -> Path:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = tmp_path_factory.mktemp("nsys") / "demo.sqlite"
    write_nsys_demo(path, 200, 1, 0)
    return path


def _edited(demo_sqlite: Path, tmp_path: Path, *statements: str) -> Path:
    path = tmp_path / "edited.sqlite"
    shutil.copy(demo_sqlite, path)
    with sqlite3.connect(path) as con:
        for statement in statements:
            con.executescript(statement)
    return path


def test_end_minus_start_beyond_int64_is_dropped_not_negative(demo_sqlite, tmp_path):
    """end - start overflows int64 (extreme times): the row would get a huge negative duration; it is dropped."""
    path = _edited(
        demo_sqlite,
        tmp_path,
        f"UPDATE {KERNELS} SET start = {-(2**63) + 5}, end = {2**63 - 5} "
        f"WHERE rowid IN (SELECT rowid FROM {KERNELS} LIMIT 2)",
    )
    report = ingest(path, tmp_path / "out")
    kernels = report["tables"]["kernels"]
    assert kernels["dropped"] == {NEGATIVE_DURATION: 2}
    assert kernels["rows_read"] == 200 and kernels["rows_written"] == 198
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "out" / "kernels.parquet", columns=["duration"]).column(0).to_numpy().min() >= 0


@pytest.mark.parametrize(
    "statement, message",
    [
        (f"DELETE FROM {KERNELS}", "no kernel rows in the file (a trace with only memory copies"),
        (
            f"CREATE TABLE k AS SELECT * FROM {KERNELS}; DROP TABLE {KERNELS}; ALTER TABLE k RENAME TO {KERNELS}; "
            f"UPDATE {KERNELS} SET start = NULL",
            "no usable kernel rows: all 200 were dropped (200 null start/end",
        ),
        (f"UPDATE {KERNELS} SET end = start - 1", "no usable kernel rows: all 200 were dropped (200 end before start)"),
    ],
)
def test_zero_usable_kernels_is_an_error_saying_why(demo_sqlite, tmp_path, run_cli, statement, message):
    path = _edited(demo_sqlite, tmp_path, statement)
    with pytest.raises(InputError, match=re.escape(message)):
        ingest(path, tmp_path / "out")
    proc = run_cli("ingest", path, "-o", tmp_path / "cli")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in proc.stderr, proc.stderr
    assert not (tmp_path / "cli" / "kernels.parquet").exists()  # as for a file without a kernel table


def test_exact_duplicate_rows_are_counted_and_kept(demo_sqlite, tmp_path):
    path = _edited(demo_sqlite, tmp_path, f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS} LIMIT 3")
    report = ingest(path, tmp_path / "out")
    kernels = report["tables"]["kernels"]
    assert kernels["duplicate_rows"] == 3
    assert kernels["rows_read"] == kernels["rows_written"] == 203  # kept: the rule is count and report
    assert ingest(demo_sqlite, tmp_path / "clean")["tables"]["kernels"]["duplicate_rows"] == 0


def test_symlink_loop_is_named(tmp_path, run_cli):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for args in (
        ["ingest", tmp_path / "a", "-o", tmp_path / "o"],
        ["ingest", tmp_path / "a", "--format", "nsys-sqlite", "-o", tmp_path / "o"],
        ["bin", tmp_path / "a", "-o", tmp_path / "o"],
        ["causal", tmp_path / "a", "--target", "memory_stall", "-o", tmp_path / "o"],
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2 and f"{tmp_path / 'a'}: symlink loop" in proc.stderr, proc.stderr
