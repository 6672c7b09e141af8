"""The Nsight Systems readers' raw stage (issue 16 item 7): read_raw keeps the export's tables as fetched
(vendor column names, rowid order, every row; StringIds and the copy-kind enum as their own tables), normalize
maps them, and normalize(roundtrip(read_raw(f))) is what read(f) always returned -- so `gpuvar read` +
`gpuvar normalize` give the same kernels and copies as one-step ingest."""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import real_file
from fuzz_cases import SQLITE_MUTATIONS, mutate_sqlite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal
from test_ingest_nsys import REAL_FILES, minimal_export, sql

from gpuvar.demo import planted
from gpuvar.demo.nsys_writer import write_nsys_demo
from gpuvar.demo.planted_pair import write_pair
from gpuvar.errors import GpuvarError
from gpuvar.ingest import nsys, nsys_rep, nsys_sqlite
from gpuvar.ingest.raw import ReadOptions, roundtrip

MOCK = "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite"
MFU = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite"
LEAN = ReadOptions(keep_vendor_columns=False)
EXAMPLES = int(os.environ.get("GPUVAR_FUZZ_EXAMPLES", "40"))


def assert_same_output(one, two):
    """Two ReaderOutputs agree exactly: frames (values, dtypes, column order), accounting and notes."""
    assert_frame_equal(two.kernels, one.kernels, check_exact=True)
    assert (two.memcpy is None) == (one.memcpy is None)
    if one.memcpy is not None:
        assert_frame_equal(two.memcpy, one.memcpy, check_exact=True)
    assert (two.format, two.rows_read, two.dropped, two.notes) == (one.format, one.rows_read, one.dropped, one.notes)


def assert_split_is_read(path, tmp_path, keep=True):
    """The two-step path through Parquet gives read()'s result exactly; returns it."""
    one = nsys.read(path, keep_vendor_columns=keep)
    raw = roundtrip(nsys.read_raw(path, ReadOptions(keep_vendor_columns=keep)), tmp_path / f"raw-{keep}")
    assert_same_output(one, nsys.normalize(raw))
    return one


def columns_of(path, table):
    return [r[1] for r in sql(path, f'PRAGMA table_info("{table}")')]


def bad_rows_export(path):
    """Kernels with NULL / backwards timestamps and an id missing from StringIds; copies with an unknown kind."""
    gpid = (1 << 48) | (777 << 24) | 12
    rows = [
        (100, 200, 0, 7, 3, gpid, 1, 2, 4, 128, "x"),
        (50, 90, 0, 7, 1, gpid, 1, 2, 4, 128, None),
        (300, None, 0, 7, 5, gpid, 1, 2, 4, 128, None),
        (None, 400, 0, 7, 6, gpid, 1, 2, 4, 128, None),
        (500, 450, 0, 7, 7, gpid, 1, 2, 4, 128, None),
        (100, 150, 1, 8, 2, None, 99, 2, 8, 64, None),
    ]
    copies = [(10, 20, 0, 7, 1, 4096, 1), (30, None, 0, 7, 2, 4096, 2), (40, 60, 0, 7, 3, 8, 10)]
    return minimal_export(path, rows, copies)


# --- the raw tables are the export's ------------------------------------------------------------------------


def test_raw_tables_keep_the_vendor_names_ids_and_order(tmp_path):
    path = tmp_path / "rank0.sqlite"
    write_nsys_demo(path, 2000, seed=3)
    raw = nsys.read_raw(path)
    assert raw.format == "nsys-sqlite" and raw.source == str(path)
    assert set(raw.tables) == {
        "cupti_activity_kind_kernel",
        "cupti_activity_kind_memcpy",
        "stringids",
        "enum_cuda_memcpy_oper",
    }
    kernels, memcpy = raw.tables["cupti_activity_kind_kernel"], raw.tables["cupti_activity_kind_memcpy"]
    assert kernels.column_names == columns_of(path, "CUPTI_ACTIVITY_KIND_KERNEL")  # every column, table order
    assert {"start", "end", "demangledName", "shortName", "gridX", "globalPid"} <= set(kernels.column_names)
    assert not {"start_ns", "kernel_name", "grid_x", "duration", "launch_id", "process_id"} & set(kernels.column_names)
    assert {"copyKind", "bytes"} <= set(memcpy.column_names) and "copy_kind_name" not in memcpy.column_names
    # values as stored: name ids (not names), globalPid undecoded, rows in rowid order
    expected = sql(path, "SELECT start, demangledName, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")
    got = zip(*(kernels.column(c).to_pylist() for c in ("start", "demangledName", "globalPid")))
    assert list(got) == expected
    assert raw.tables["stringids"].column_names == ["id", "value"]
    assert (
        dict(zip(*raw.tables["enum_cuda_memcpy_oper"].select(["id", "name"]).to_pydict().values()))[1]
        == "CUDA_MEMCPY_KIND_HTOD"
    )
    assert raw.rows_read == {"kernels": 2000, "memcpy": memcpy.num_rows} and memcpy.num_rows > 0
    assert raw.info["keep_vendor_columns"] is True and raw.info["columns_not_read"] == {}
    meta = dict(raw.info["META_DATA_EXPORT"])
    assert (
        meta["EXPORT_SCHEMA_VERSION"]
        == sql(path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'")[0][0]
    )
    assert raw.notes == [] and raw.dropped == {}  # the words are normalize's


def test_partitioned_raw_read_is_in_rowid_order_not_start_order(tmp_path, monkeypatch):
    """Rows out of start order stay where the export put them (launch_id, normalize's job, orders them)."""
    starts = [500, 100, 400, 200, 300, 900, 0, 800]
    rows = [(s, s + 10, 0, 7, i, None, 1, 2, 1, 32, None) for i, s in enumerate(starts)]
    path = minimal_export(tmp_path / "shuffled.sqlite", rows)
    monkeypatch.setattr(nsys_sqlite, "PARTITION_MIN_ROWS", 0)
    raw = nsys.read_raw(path)
    assert raw.tables["cupti_activity_kind_kernel"].column("start").to_pylist() == starts
    out = nsys.normalize(raw)
    assert list(out.kernels["launch_id"]) == list(np.argsort(np.argsort(starts)))


def test_raw_keeps_the_rows_normalize_drops(tmp_path):
    path = bad_rows_export(tmp_path / "bad.sqlite")
    raw = nsys.read_raw(path)
    kernels = raw.tables["cupti_activity_kind_kernel"]
    assert kernels.num_rows == 6 and raw.rows_read == {"kernels": 6, "memcpy": 3} and raw.dropped == {}
    assert kernels.column("end").null_count == 1 and kernels.column("start").null_count == 1
    out = nsys.normalize(roundtrip(raw, tmp_path / "raw"))
    assert len(out.kernels) == 3 < kernels.num_rows
    assert out.dropped == {
        "kernels": {"null start/end timestamp": 2, "end before start": 1},
        "memcpy": {"null start/end timestamp": 1},
    }
    assert list(out.kernels["kernel_name"]) == ["void k<int>(int*)", "void k<int>(int*)", "<unknown string id 99>"]
    assert list(out.memcpy["copy_kind_name"]) == ["HtoD", "PtoP"]
    assert any("no ENUM_CUDA_MEMCPY_OPER table" in n for n in out.notes)


def test_lean_read_records_the_choice_and_the_columns_not_read(tmp_path):
    path = real_file(MOCK)
    raw = nsys.read_raw(path, LEAN)
    kernels = raw.tables["cupti_activity_kind_kernel"]
    assert set(kernels.column_names) <= set(nsys.KERNEL_NEEDED) | set(nsys.NAME_COLUMNS)
    assert "globalPid" in kernels.column_names and "contextId" not in kernels.column_names
    assert raw.info["keep_vendor_columns"] is False
    skipped = raw.info["columns_not_read"]["CUPTI_ACTIVITY_KIND_KERNEL"]
    assert "contextId" in skipped
    assert sorted(skipped + kernels.column_names) == sorted(columns_of(path, "CUPTI_ACTIVITY_KIND_KERNEL"))
    out = assert_split_is_read(path, tmp_path, keep=False)
    assert "globalPid" not in out.kernels.columns and "process_id" in out.kernels.columns


def test_metadata_facts_are_info_and_become_the_same_notes(tmp_path):
    sliced = nsys.read_raw(real_file(MFU))
    assert dict(sliced.info["META_DATA_EXPORT"])["DERIVED_WINDOW_NS"]
    out = nsys.normalize(roundtrip(sliced, tmp_path / "mfu"))
    assert out.notes[0].startswith("Nsight Systems 20") and any("DERIVED_WINDOW_NS" in n for n in out.notes)
    mock = nsys.read_raw(real_file(MOCK))
    assert mock.info["TARGET_INFO_GPU.name"] == [[0, "NVIDIA GeForce RTX 3080"]]
    assert mock.info["TARGET_INFO_CUDA_DEVICE.numMultiprocessors"] == [[0, 68]]
    out = nsys.normalize(roundtrip(mock, tmp_path / "mock"))
    assert out.notes[1:3] == [
        "GPUs (TARGET_INFO_GPU): 0: NVIDIA GeForce RTX 3080",
        "CUDA devices (TARGET_INFO_CUDA_DEVICE, no names): cudaId 0: 68 SMs",
    ]


def test_blob_and_null_metadata_survive_the_raw_manifest(tmp_path):
    """raw.info is JSON: a BLOB metadata value is stored as the text the note prints, a NULL name is kept."""
    path = minimal_export(tmp_path / "meta.sqlite", [(1, 2, 0, 7, 1, None, 1, 2, 1, 32, None)])
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value)")
    con.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
        [("EXPORT_PRODUCT_VERSION", b"\x01\x02"), (None, "x"), ("DERIVED_WINDOW_NS", 5)],
    )
    con.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (cudaId INTEGER, numMultiprocessors INTEGER)")
    con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 132)")
    con.commit()
    con.close()
    out = assert_split_is_read(path, tmp_path)
    assert out.notes[:3] == [
        "Nsight Systems b'\\x01\\x02' export (schema ?)",
        "time-sliced export: DERIVED_WINDOW_NS 5",
        "CUDA devices (TARGET_INFO_CUDA_DEVICE, no names): cudaId 0: 132 SMs",
    ]


def test_repeated_and_text_string_ids_resolve_as_before(tmp_path):
    """StringIds without a primary key: a repeated id takes its last row (as SQLite's dict did); a StringIds
    whose ids are stored as text is matched by value, not by Arrow type."""
    for name, strings in (("dup", [(1, "first"), (2, "k"), (1, "second")]), ("text", [("1", "t1"), ("x", "t2")])):
        path = tmp_path / f"{name}.sqlite"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE StringIds (id, value TEXT)")
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, demangledName INTEGER)")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 1)")
        con.commit()
        con.close()
        out = assert_split_is_read(path, tmp_path / name)
        assert list(out.kernels["kernel_name"]) == (["second"] if name == "dup" else ["<unknown string id 1>"])


# --- the split is the old one-step read -----------------------------------------------------------------------


def _no_connectorx(*args):
    raise RuntimeError("connectorx unavailable")


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize(
    "make", ["demo", "sqlite3_path", "pair", "planted", "bad", "no_memcpy", "empty_memcpy", "empty"]
)
def test_split_equals_read_on_demo_and_edge_files(make, keep, tmp_path, monkeypatch):
    path = tmp_path / f"{make}.sqlite"
    if make in ("demo", "sqlite3_path"):
        write_nsys_demo(path, 3000, seed=0)
        if make == "sqlite3_path":  # the fallback's Arrow types (NULL-only columns as text) survive Parquet too
            monkeypatch.setattr(nsys_sqlite, "fetch_connectorx", _no_connectorx)
    elif make == "empty":
        minimal_export(path, [], [])
    elif make == "pair":
        write_pair(tmp_path, 3000, seed=0)
        path = tmp_path / "pair_candidate.sqlite"
    elif make == "planted":
        planted.write_nsys(path, planted.traps(2000, 0))
    elif make == "bad":
        bad_rows_export(path)
    else:
        minimal_export(path, [(1, 2, 0, 7, 1, None, 1, 2, 1, 32, None)], [] if make == "empty_memcpy" else None)
    out = assert_split_is_read(path, tmp_path, keep)
    assert out.rows_read["kernels"] == len(out.kernels) + sum(out.dropped.get("kernels", {}).values())


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("relative", REAL_FILES)
def test_split_equals_read_on_real_exports(relative, keep, tmp_path):
    out = assert_split_is_read(real_file(relative), tmp_path, keep)
    assert len(out.kernels) == out.rows_read["kernels"] > 0


@pytest.mark.timeout(max(120, 2 * EXAMPLES))
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(mutation=st.sampled_from(SQLITE_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_damaged_exports_split_like_read(mutation, salt):
    """Whatever a damaged export gives read() -- a result or a one-line error -- the split gives too, and what
    read_raw returns can always be stored (JSON info, Parquet tables)."""
    seed = _seed_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.sqlite"
        path.write_bytes(mutate_sqlite(seed, mutation, random.Random(salt)))
        try:
            one = nsys.read(path)
        except GpuvarError as exc:
            with pytest.raises(GpuvarError) as err:
                nsys.normalize(roundtrip(nsys.read_raw(path), Path(tmp) / "raw"))
            assert str(err.value) == str(exc)
            return
        assert_same_output(one, nsys.normalize(roundtrip(nsys.read_raw(path), Path(tmp) / "raw")))


_SEED: list[bytes] = []


def _seed_bytes() -> bytes:
    if not _SEED:
        with tempfile.TemporaryDirectory() as tmp:
            write_nsys_demo(Path(tmp) / "seed.sqlite", 200, 1, 0)
            _SEED.append((Path(tmp) / "seed.sqlite").read_bytes())
    return _SEED[0]


# --- nsys-rep: the export is part of the read -------------------------------------------------------------


FAKE_NSYS = """#!{python}
import shutil, sys
args = sys.argv[1:]
assert args[:4] == ["export", "--type", "sqlite", "--output"], args
shutil.copyfile({sqlite!r}, args[4])
"""


def test_report_read_raw_exports_into_the_cache_and_normalizes_like_read_cached(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text(FAKE_NSYS.format(python=sys.executable, sqlite=str(real_file(MOCK))))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00\x01NSYS-REPORT-LIKE\x00" * 64)
    cache = tmp_path / "raw"
    raw = nsys_rep.read_raw(report, ReadOptions(cache_dir=cache))
    export = cache / "run.nsys-rep.sqlite"
    assert export.exists() and raw.info["export"] == str(export) and raw.info["export_reused"] is False
    assert (raw.format, raw.source) == ("nsys-rep", str(report))
    assert "cupti_activity_kind_kernel" in raw.tables and raw.notes[0].endswith(f"to {export}")
    two = nsys_rep.normalize(roundtrip(raw, cache))
    one = nsys_rep.read_cached(report, cache)  # the export is reused: only that note differs
    assert one.notes[0].endswith("(cached export reused)")
    one.notes[0] = two.notes[0]
    assert_same_output(one, two)
    assert two.format == "nsys-rep" and two.notes[1:] == nsys.read(real_file(MOCK)).notes
    lean = nsys_rep.read_raw(report, ReadOptions(keep_vendor_columns=False, cache_dir=cache))
    assert lean.info["export_reused"] is True
    assert "contextId" not in lean.tables["cupti_activity_kind_kernel"].column_names
