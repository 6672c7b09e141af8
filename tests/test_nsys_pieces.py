"""An Nsight Systems export ingested in pieces (gpuvar.ingest.nsys_pieces, issue 38) writes the files the
in-memory ingest writes, byte for byte, with the same report, while holding a piece and its neighbours at a time.

The planted export (gpuvar.demo.planted_pieces) holds every case a piece boundary could get wrong; the real 2-GPU
exports are checked as recorded (with their CUDA API calls and NVTX ranges) and with their host tables removed."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import real_file
from ingest_compare import assert_same_as_memory

from gpuvar.demo.planted_pieces import write_pieces_trap
from gpuvar.ingest import ingest
from gpuvar.ingest.nsys_pieces import PieceSettings, plan_reason

REAL = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after"
IN_MEMORY = PieceSettings(above=None)
TABLES = ("kernels.parquet", "memcpy.parquet")


def _both(source: Path, tmp: Path, rows: int) -> tuple[dict, dict]:
    """(in-memory report, pieces report) with the files in tmp/memory and tmp/pieces."""
    memory = ingest(source, tmp / "memory", pieces=IN_MEMORY)
    pieces = ingest(source, tmp / "pieces", pieces=PieceSettings(above=0, rows=rows))
    return memory, pieces


def _same(tmp: Path, memory: dict, pieces: dict) -> None:
    for name in TABLES:
        assert (tmp / "memory" / name).read_bytes() == (tmp / "pieces" / name).read_bytes(), name
    on_disk = json.loads((tmp / "pieces" / "ingest.json").read_text())
    assert on_disk["pieces"] == pieces["pieces"]
    for report in (memory, pieces):
        report.pop("seconds")
    pieces = dict(pieces)
    pieces.pop("pieces")
    assert pieces == memory


def _edited(source: Path, target: Path, *statements: str) -> Path:
    """A copy of an export with SQL statements applied."""
    shutil.copyfile(source, target)
    con = sqlite3.connect(target)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return target


@pytest.fixture(scope="module")
def trap(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trap") / "trap.sqlite"
    write_pieces_trap(path, loops=400, seed=3)
    return path


def test_planted_export_in_pieces_is_the_in_memory_bytes(trap, tmp_path):
    memory, pieces = _both(trap, tmp_path, rows=150)
    held = pieces["pieces"]
    rows = memory["tables"]["kernels"]["rows_written"]
    assert held["count"] >= 15
    assert held["most_kernel_rows_held"] < rows / 5  # a piece and its neighbours, never the trace
    notes = " | ".join(memory["notes"])
    for trap_note in (
        "iterations from the repeating launch pattern",
        "co-running:",
        "processes 2002 see other",
        "id missing from StringIds",
    ):
        assert trap_note in notes  # each trap is in the file, so the comparison below covers it
    assert memory["tables"]["kernels"]["dropped"] == {"end before start": 5, "null start/end timestamp": 3}
    assert memory["tables"]["kernels"]["duplicate_rows"] == 1
    _same(tmp_path, memory, pieces)


@pytest.mark.parametrize("rows", [40, 1000])
def test_piece_size_does_not_change_the_files(trap, tmp_path, rows):
    _same(tmp_path, *_both(trap, tmp_path, rows=rows))


@pytest.mark.parametrize("name", ["mfu_2gpu_before.sqlite", "mfu_2gpu_after.sqlite"])
def test_real_exports_without_host_tables_in_pieces(name, tmp_path):
    drops = ("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME", "DROP TABLE NVTX_EVENTS")
    source = _edited(real_file(f"{REAL}/{name}"), tmp_path / name, *drops)
    memory, pieces = _both(source, tmp_path, rows=200)
    assert pieces["pieces"]["count"] >= 15
    assert pieces["pieces"]["copies"] == "rowid ranges (stored in start order)"  # as nsys stores them
    assert any("2 processes" in n for n in memory["notes"])  # two GPUs, two processes: co-running columns
    _same(tmp_path, memory, pieces)


@pytest.mark.parametrize("name", ["mfu_2gpu_before.sqlite", "mfu_2gpu_after.sqlite"])
def test_real_exports_with_launch_calls_in_pieces(name, tmp_path):
    """A real capture with CUDA API calls and emit_nvtx ranges: each launch's op, iteration and numbering come
    from the sweep in call order (gpuvar.ingest.nsys_host_facts), the files are the in-memory bytes."""
    source = real_file(f"{REAL}/{name}")
    assert plan_reason(source, PieceSettings(above=0)) is None
    memory, pieces = _both(source, tmp_path, rows=200)
    assert pieces["pieces"]["count"] >= 15
    sites = next(n for n in memory["notes"] if "call sites:" in n)
    assert "launch_op from NVTX range" in sites and "by op occurrence in the step" in sites
    _same(tmp_path, memory, pieces)


def test_kernels_out_of_start_order_are_ingested_in_memory(trap, tmp_path):
    shuffled = _edited(
        trap,
        tmp_path / "shuffled.sqlite",
        "CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC",
        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
        "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL",
    )
    memory, pieces = _both(shuffled, tmp_path, rows=150)
    assert "pieces" not in pieces
    _same_without_pieces = {k: v for k, v in pieces.items() if k != "seconds"}
    memory.pop("seconds")
    assert _same_without_pieces == memory
    for name in TABLES:
        assert (tmp_path / "memory" / name).read_bytes() == (tmp_path / "pieces" / name).read_bytes()


def test_workflow_read_and_normalize_in_pieces_are_the_ingest_bytes(trap, tmp_path):
    """The workflow's two steps (`gpuvar read` range by range, `gpuvar normalize` in pieces from the raw Parquet)
    write what one in-memory `gpuvar ingest` writes; the raw tables read back whole normalize the same too."""
    from gpuvar.ingest import normalize_folder
    from gpuvar.ingest.nsys_sources import write_raw_in_ranges

    rows = ingest(trap, tmp_path / "memory", pieces=IN_MEMORY)["tables"]["kernels"]["rows_read"]
    tables = write_raw_in_ranges(trap, tmp_path / "raw", True, 100)
    assert tables["cupti_activity_kind_kernel"] == rows
    pieces = normalize_folder(tmp_path / "raw", tmp_path / "pieces", pieces=PieceSettings(above=0, rows=150))
    assert pieces["pieces"]["count"] >= 15
    whole = normalize_folder(tmp_path / "raw", tmp_path / "whole", pieces=IN_MEMORY)
    assert "pieces" not in whole
    assert_same_as_memory(tmp_path / "memory", {tmp_path / "pieces": pieces, tmp_path / "whole": whole})


def test_sparse_and_extreme_rowids_in_pieces(trap, tmp_path):
    """Rowids far apart and the largest one SQLite allows: pieces are runs of rows, not rowid arithmetic."""
    sparse = tmp_path / "sparse.sqlite"
    shutil.copyfile(trap, sparse)
    con = sqlite3.connect(sparse)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        last = con.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
        con.execute(f"UPDATE {table} SET rowid = 9223372036854775807 WHERE rowid = {last}")
        con.execute(f"UPDATE {table} SET rowid = rowid * 1099511627776 WHERE rowid < {last}")  # 2**40 apart
    con.commit()
    con.close()
    memory, pieces = _both(sparse, tmp_path, rows=150)
    assert pieces["pieces"]["count"] >= 15
    _same(tmp_path, memory, pieces)


def test_epoch_nanosecond_times_in_pieces(trap, tmp_path):
    """Times beyond 2**53 ns (an epoch clock): the pieces compare and cut exact integers, never float64."""
    epoch = tmp_path / "epoch.sqlite"
    shutil.copyfile(trap, epoch)
    con = sqlite3.connect(epoch)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        con.execute(f"UPDATE {table} SET start = start + 1700000000000000001, end = end + 1700000000000000001")
    con.commit()
    con.close()
    memory, pieces = _both(epoch, tmp_path, rows=150)
    _same(tmp_path, memory, pieces)


def test_an_export_that_would_not_fit_whole_is_taken_in_pieces(trap, tmp_path, monkeypatch):
    """Below the row threshold too, where the export held whole would take more memory than is available (a small
    Slurm job, a laptop): in pieces, with the same files, by `gpuvar ingest` and by the workflow's read and
    normalize; with the memory there, whole as before."""
    from gpuvar.cli import main
    from gpuvar.ingest import footprint, normalize_folder

    monkeypatch.setattr(footprint, "available_bytes", lambda: 64 << 30)
    assert plan_reason(trap, PieceSettings()) == "fewer than 2000000 kernel rows"
    memory = ingest(trap, tmp_path / "memory")
    assert "pieces" not in memory
    monkeypatch.setattr(footprint, "available_bytes", lambda: 1 << 20)
    assert plan_reason(trap, PieceSettings()) is None
    assert plan_reason(trap, PieceSettings(when_short=False)) == "fewer than 2000000 kernel rows"
    pieces = ingest(trap, tmp_path / "pieces")
    _same(tmp_path, memory, dict(pieces))
    assert main(["read", str(trap), "-o", str(tmp_path / "raw")]) == 0
    normalized = normalize_folder(tmp_path / "raw", tmp_path / "normalized")
    assert normalized["pieces"]["count"] >= 1
    assert_same_as_memory(tmp_path / "memory", {tmp_path / "normalized": normalized})


def test_pieces_prepared_by_worker_processes_are_the_same_bytes(trap, tmp_path):
    """`--workers 2`: the pieces fetched and normalized in two processes ahead of the one being written
    (gpuvar.ingest.nsys_piece_work), the launch ids offset after, the drops and unresolved names summed in piece
    order: the in-memory bytes and report, from the export and from the raw tables of `gpuvar read`."""
    from gpuvar.ingest import normalize_folder
    from gpuvar.ingest.nsys_sources import write_raw_in_ranges

    memory = ingest(trap, tmp_path / "memory", pieces=IN_MEMORY)
    pieces = ingest(trap, tmp_path / "pieces", pieces=PieceSettings(above=0, rows=60, workers=2))
    assert pieces["pieces"]["count"] >= 30
    _same(tmp_path, memory, pieces)
    write_raw_in_ranges(trap, tmp_path / "raw", True, 100)
    normalized = normalize_folder(tmp_path / "raw", tmp_path / "normalized", PieceSettings(above=0, workers=1, rows=90))
    assert normalized["pieces"]["count"] >= 20
    assert_same_as_memory(tmp_path / "memory", {tmp_path / "normalized": normalized})
    assert not list((tmp_path / "pieces").glob(".gpuvar-pieces-*"))  # the workers' files went with the folder


def test_real_export_with_launch_calls_prepared_by_workers(tmp_path):
    """The real 2-GPU capture with its CUDA API calls: the kept rows' rowids (for the launches' facts) come back
    from the workers with each piece."""
    source = real_file(f"{REAL}/mfu_2gpu_after.sqlite")
    memory = ingest(source, tmp_path / "memory", pieces=IN_MEMORY)
    pieces = ingest(source, tmp_path / "pieces", pieces=PieceSettings(above=0, rows=300, workers=2))
    assert pieces["pieces"]["count"] >= 10
    _same(tmp_path, memory, pieces)


def test_a_worker_killed_is_one_line_naming_the_export(trap, tmp_path, monkeypatch):
    """A worker process that dies (the out-of-memory killer) stops the ingest with one StageError line naming the
    export; no table is left in the output folder."""
    import os
    import signal

    from gpuvar.errors import StageError
    from gpuvar.ingest.nsys_piece_work import PieceWork

    take = PieceWork.take

    def killed(self, task):
        ready = take(self, task)  # (the pool's processes exist once a task is back)
        for pid in list(self.pool._processes):
            os.kill(pid, signal.SIGKILL)
        return ready

    monkeypatch.setattr(PieceWork, "take", killed)
    with pytest.raises(StageError, match=r"trap\.sqlite: a worker preparing its pieces .* killed \(out of memory\?\)"):
        ingest(trap, tmp_path / "out", pieces=PieceSettings(above=0, rows=100, workers=1))
    assert not list((tmp_path / "out").glob("*.parquet"))


@pytest.mark.parametrize("null_start", [False, True])
def test_copies_stored_in_start_order_are_fetched_by_rowid_range(trap, tmp_path, null_start):
    """Copies stored in start order (as nsys stores them) are fetched piece by piece by rowid range instead of
    being sorted into files first (nsys_plan.copy_ranges): the planted copies (lasting many iterations, before the
    first kernel and after the last, on kernels' boundaries) re-stored in start order give the in-memory bytes.
    A null start among them takes the files (its bucket is the first), with the same bytes."""
    statements = [
        "CREATE TABLE c AS SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start, rowid",
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY SELECT * FROM c",
        "DROP TABLE c",
    ]
    if null_start:
        statements.append("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = NULL WHERE rowid = 40")
    source = _edited(trap, tmp_path / "sorted.sqlite", *statements)
    memory = ingest(source, tmp_path / "memory", pieces=IN_MEMORY)
    for workers in (0, 2):
        pieces = ingest(source, tmp_path / "pieces", pieces=PieceSettings(above=0, rows=70, workers=workers))
        way = "sorted into files" if null_start else "rowid ranges (stored in start order)"
        assert pieces["pieces"]["copies"] == way
        assert pieces["pieces"]["count"] >= 20
        _same(tmp_path, dict(memory), pieces)


def test_the_demo_exports_store_their_copies_in_start_order(tmp_path):
    """The demo's Nsight Systems export stores kernels and copies by start, as every real export does (its copies
    are made a chunk of launches at a time, and a chunk's last copies may start after the next chunk's first)."""
    import numpy as np

    from gpuvar.demo.nsys_writer import write_nsys_demo

    write_nsys_demo(tmp_path / "demo.sqlite", 600_000, seed=1)
    con = sqlite3.connect(tmp_path / "demo.sqlite")
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        starts = np.array([r[0] for r in con.execute(f"SELECT start FROM {table} ORDER BY rowid")])
        assert len(starts) > 100_000 and (np.diff(starts) >= 0).all(), table
    con.close()
