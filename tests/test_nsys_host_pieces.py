"""A big Nsight Systems export with CUDA API calls, ingested in pieces (gpuvar.ingest.nsys_host_facts, issue 38),
writes the bytes of the in-memory ingest: each launch's op, step, op occurrence, call index and call site come from
one sweep in call order, whichever way the trace marks its steps.

The real 2-GPU capture (emit_nvtx ranges, two launching threads per process, steps from the launch pattern) is
changed the ways a real capture differs: NVTX step ranges (on two threads), cudaDeviceSynchronize calls, epoch
nanosecond times, a call recorded twice, NVTX ranges that record input shapes; the planted export
(gpuvar.demo.planted_host_pieces) holds the host-side traps in each way of marking steps."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import real_file
from ingest_compare import assert_same_as_memory

from gpuvar.ingest import ingest
from gpuvar.ingest.nsys_pieces import PieceSettings

REAL = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_after.sqlite"
IN_MEMORY = PieceSettings(above=None)
EPOCH_NS = 1_700_000_000_000_000_000


def _variant(tmp: Path, change) -> Path:
    path = tmp / "variant.sqlite"
    shutil.copyfile(real_file(REAL), path)
    con = sqlite3.connect(path)
    lo, hi = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    threads = [
        r[0]
        for r in con.execute(
            "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 2"
        )
    ]
    change(con, lo, hi, threads)
    con.commit()
    con.close()
    return path


def _step_ranges(con, lo, hi, threads):
    """Twelve 'train step N' ranges, N from 5, alternating between the two busiest launching threads."""
    span = (hi - lo) // 12
    for i in range(12):
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
            (lo + i * span, lo + (i + 1) * span - 1, f"train step {i + 5}", threads[i % 2]),
        )


def _syncs(con, lo, hi, threads):
    """Eight cudaDeviceSynchronize calls spread over the capture."""
    name = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    con.execute("INSERT INTO StringIds VALUES (?, 'cudaDeviceSynchronize_v3020')", (name,))
    span = (hi - lo) // 9
    for i in range(1, 9):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
            " returnValue) VALUES (?, ?, 1, ?, ?, ?, 0)",
            (lo + i * span, lo + i * span + 1000, threads[0], 10**8 + i, name),
        )


def _epoch(con, lo, hi, threads):
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
    ):
        con.execute(f"UPDATE {table} SET start = start + {EPOCH_NS}, end = end + {EPOCH_NS}")


def _calls_twice(con, lo, hi, threads):
    """Every 50th call recorded again 5 ns later: the first record is the launch's call, as in memory."""
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start + 5, end + 5, eventClass, globalTid, correlationId,"
        " nameId, returnValue, callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid % 50 = 0"
    )


def _both(source: Path, tmp: Path, rows: int = 250) -> tuple[dict, dict]:
    memory = ingest(source, tmp / "memory", pieces=IN_MEMORY)
    pieces = ingest(source, tmp / "pieces", pieces=PieceSettings(above=0, rows=rows))
    for name in ("kernels.parquet", "memcpy.parquet"):
        assert (tmp / "memory" / name).read_bytes() == (tmp / "pieces" / name).read_bytes(), name
    return memory, pieces


def _same_report(memory: dict, pieces: dict) -> None:
    memory, pieces = dict(memory), dict(pieces)
    for report in (memory, pieces):
        report.pop("seconds")
    pieces.pop("pieces")
    assert pieces == memory


def _sites_note(report: dict) -> str:
    return next(n for n in report["notes"] if "call sites:" in n)


@pytest.mark.parametrize(
    "change, steps",
    [
        (_step_ranges, "12 steps from NVTX step ranges"),
        (_syncs, "9 steps from cudaDeviceSynchronize (8 calls)"),
        (_epoch, "iterations from the repeating launch pattern"),
        (_calls_twice, "iterations from the repeating launch pattern"),
    ],
    ids=["nvtx-steps", "syncs", "epoch-ns", "calls-twice"],
)
def test_real_capture_variants_in_pieces_are_the_in_memory_bytes(tmp_path, change, steps):
    memory, pieces = _both(_variant(tmp_path, change), tmp_path)
    assert pieces["pieces"]["count"] >= 14
    note = _sites_note(memory)
    assert note.startswith(steps) or steps in note
    assert "launch_op from NVTX range for 3577 of 3587 kernels" in note
    _same_report(memory, pieces)


def test_step_numbers_that_come_back_continue_their_counts_after_a_spill(tmp_path, monkeypatch):
    """Step ranges numbered per epoch ('step 0'..'step 3' three times): the in-memory path numbers an op's instances
    over all ranges of one number, so the sweep's counters of a step must survive being spilled to the scratch
    database (two steps kept in memory here) and read back."""
    import gpuvar.ingest.nsys_host_sweep as sweep

    def epochs(con, lo, hi, threads):
        span = (hi - lo) // 12
        for i in range(12):
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                (lo + i * span, lo + (i + 1) * span - 1, f"step {i % 4}", threads[0]),
            )

    monkeypatch.setattr(sweep, "KEEP_STEPS", 2)
    memory, pieces = _both(_variant(tmp_path, epochs), tmp_path)
    assert "4 steps from NVTX step ranges" in _sites_note(memory)
    _same_report(memory, pieces)


def test_empty_grids_give_the_step_threads_of_memory(tmp_path):
    """Each step's threads are summed from the launch configurations read again bucket by bucket after the sweep
    (nsys_host_facts.step_threads): launches with an empty grid count as the in-memory path counts them."""

    def empty_grids(con, lo, hi, threads):
        _step_ranges(con, lo, hi, threads)
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 0 WHERE rowid % 7 = 0")

    memory, pieces = _both(_variant(tmp_path, empty_grids), tmp_path)
    assert pieces["pieces"]["count"] > 1
    _same_report(memory, pieces)


def _text_block_sizes(con, lo, hi, threads):
    """A block size stored as text in a column declared INTEGER (SQLite keeps it): connectorx refuses the column."""
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET blockZ = 'one' WHERE rowid % 13 = 0")


def test_a_column_connectorx_cannot_read_sends_the_export_to_memory(tmp_path):
    """An export whose launch configuration mixes types cannot be read range by range (connectorx): `gpuvar ingest`
    takes it whole, as the in-memory reader reads it (the value as text), instead of failing half-way."""
    source = _variant(tmp_path, _text_block_sizes)
    memory = ingest(source, tmp_path / "memory", pieces=IN_MEMORY)
    pieces = ingest(source, tmp_path / "pieces", pieces=PieceSettings(above=0, rows=250))
    assert "pieces" not in pieces
    for name in ("kernels.parquet", "memcpy.parquet"):
        assert (tmp_path / "memory" / name).read_bytes() == (tmp_path / "pieces" / name).read_bytes(), name
    _same_report(memory, pieces | {"pieces": None})
    assert sorted(p.name for p in (tmp_path / "pieces").iterdir()) == [
        "ingest.json",
        "kernels.parquet",
        "memcpy.parquet",
    ]


def test_gpuvar_read_of_such_an_export_reads_it_whole(tmp_path, monkeypatch, capsys):
    """`gpuvar read` of a big export copies its tables range by range; where connectorx cannot read one, it reads
    the export whole instead (one clean raw folder, exit 0)."""
    from gpuvar.cli import main
    from gpuvar.ingest import nsys_pieces

    source = _variant(tmp_path, _text_block_sizes)
    monkeypatch.setattr(nsys_pieces, "plan_reason", lambda path, settings: None)  # (as if above the threshold)
    assert main(["read", str(source), "-o", str(tmp_path / "raw")]) == 0
    manifest = json.loads((tmp_path / "raw" / "raw.json").read_text())
    assert "host_facts" not in manifest and manifest["tables"]["cupti_activity_kind_kernel"]["rows"] > 0


def test_launches_on_two_threads_keep_their_thread_in_the_call_site(tmp_path):
    """Ops launched from two threads (the main and the autograd thread) get '@t{n}' in every piece, numbered by
    the threads' first launch over the whole trace."""
    import pyarrow.parquet as pq

    memory, pieces = _both(_variant(tmp_path, _step_ranges), tmp_path, rows=100)
    sites = pq.read_table(tmp_path / "pieces" / "kernels.parquet", columns=["call_site"]).column(0).to_pylist()
    assert any("@t0" in s for s in sites) and any("@t1" in s for s in sites)


def test_ranges_that_record_shapes_give_the_size_features_in_pieces(tmp_path):
    """emit_nvtx(record_shapes=True) ranges: each launch's op's size features (op_numel, op_m, ...) are found in the
    sweep and written piece by piece, the in-memory bytes."""
    import pyarrow.parquet as pq

    def shapes(con, lo, hi, threads):
        con.execute(
            "UPDATE NVTX_EVENTS SET text = text || ', sizes = [[64, 128], [128, 32]]'"
            " WHERE rowid % 7 = 0 AND text LIKE 'aten::%'"
        )

    memory, pieces = _both(_variant(tmp_path, shapes), tmp_path)
    _same_report(memory, pieces)
    numel = pq.read_table(tmp_path / "pieces" / "kernels.parquet", columns=["op_numel"]).column(0)
    assert 0 < numel.null_count < len(numel)


@pytest.mark.parametrize("steps", ["nvtx", "sync", "none"])
@pytest.mark.parametrize("rows", [40, 300])
def test_planted_host_export_in_pieces_is_the_in_memory_bytes(tmp_path, steps, rows):
    """The planted export with every host-side trap (gpuvar.demo.planted_host_pieces: two launching threads, nested
    and equal-start ranges, a graph launch, a deep queue, launches without call or op, recorded shapes), in each
    way of marking steps."""
    from gpuvar.demo.planted_host_pieces import write_planted_host_export

    source = write_planted_host_export(tmp_path / f"{steps}.sqlite", loops=60, seed=1, steps=steps)
    memory, pieces = _both(source, tmp_path, rows=rows)
    assert pieces["pieces"]["count"] >= (40 if rows == 40 else 6)
    _same_report(memory, pieces)


@pytest.mark.parametrize("fetch", [7, 64])
def test_small_fetches_carry_the_open_ranges_across_batches(tmp_path, monkeypatch, fetch):
    """The sweep reads the launches and the op ranges a batch at a time (nsys_host_sql.FETCH_ROWS): the ranges still
    open at a batch's last call carry to the next batch of the thread, and a chunk of ranges may end anywhere.
    Tiny fetches put every boundary between nested ranges and their launches: the in-memory bytes still."""
    from gpuvar.demo.planted_host_pieces import write_planted_host_export
    from gpuvar.ingest import nsys_host_sql

    monkeypatch.setattr(nsys_host_sql, "FETCH_ROWS", fetch)
    for steps in ("nvtx", "none"):
        source = write_planted_host_export(tmp_path / f"{steps}.sqlite", loops=30, seed=3, steps=steps)
        memory, pieces = _both(source, tmp_path / steps, rows=100)
        _same_report(memory, pieces)


def test_scratch_database_is_removed(tmp_path):
    """The scratch database and the copy buckets live in a temporary folder inside the output, removed after."""
    _both(_variant(tmp_path, _syncs), tmp_path)
    left = sorted(p.name for p in (tmp_path / "pieces").iterdir())
    assert left == ["ingest.json", "kernels.parquet", "memcpy.parquet"]
    assert json.loads((tmp_path / "pieces" / "ingest.json").read_text())["pieces"]["count"] >= 14


@pytest.mark.parametrize("steps", ["sync", "none"])
def test_workflow_read_and_normalize_in_pieces_are_the_ingest_bytes(tmp_path, steps):
    """The workflow's two steps on an export with launch calls: `gpuvar read` copies the tables range by range and
    stores the launches' facts beside them (raw.json host_facts); `gpuvar normalize` takes the pieces with those
    facts. Both, and the raw tables normalized whole, write what one in-memory ingest writes."""
    from gpuvar.demo.planted_host_pieces import write_planted_host_export
    from gpuvar.ingest import normalize_folder
    from gpuvar.ingest.nsys_sources import write_raw_in_ranges

    source = write_planted_host_export(tmp_path / f"{steps}.sqlite", loops=40, seed=2, steps=steps)
    ingest(source, tmp_path / "memory", pieces=IN_MEMORY)
    write_raw_in_ranges(source, tmp_path / "raw", True, 100)
    manifest = json.loads((tmp_path / "raw" / "raw.json").read_text())
    assert set(manifest["host_facts"]) == {"kernels", "copies", "step_threads", "summary"}
    assert "cupti_activity_kind_runtime" in manifest["tables"] and "nvtx_events" in manifest["tables"]
    pieces = normalize_folder(tmp_path / "raw", tmp_path / "pieces", pieces=PieceSettings(above=0, rows=60))
    whole = normalize_folder(tmp_path / "raw", tmp_path / "whole", pieces=IN_MEMORY)
    assert pieces["pieces"]["count"] >= 20 and "pieces" not in whole
    assert_same_as_memory(tmp_path / "memory", {tmp_path / "pieces": pieces, tmp_path / "whole": whole})


def test_stored_facts_that_do_not_cover_the_kernels_send_normalize_to_memory(tmp_path):
    """A raw folder whose stored launch facts lack a row (a damaged or foreign file): `gpuvar normalize` takes the
    raw tables in memory, with the same files, instead of writing pieces with misplaced launches."""
    import pyarrow.parquet as pq

    from gpuvar.demo.planted_host_pieces import write_planted_host_export
    from gpuvar.ingest import normalize_folder
    from gpuvar.ingest.nsys_sources import write_raw_in_ranges

    source = write_planted_host_export(tmp_path / "sync.sqlite", loops=20, seed=3, steps="sync")
    ingest(source, tmp_path / "memory", pieces=IN_MEMORY)
    write_raw_in_ranges(source, tmp_path / "raw", True, 100)
    facts = tmp_path / "raw" / "host_kernel_facts.parquet"
    table = pq.read_table(facts)
    pq.write_table(table.slice(1), facts)
    report = normalize_folder(tmp_path / "raw", tmp_path / "out", pieces=PieceSettings(above=0, rows=60))
    assert "pieces" not in report
    for name in ("kernels.parquet", "memcpy.parquet"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "memory" / name).read_bytes()
