"""Nsight Systems SQLite ingest and the demo nsys writer.

Real files are the nsys 2024.6 / 2026.1 / 2026.2 exports under nsys-sqlite/; NULL timestamps, unknown string
ids, missing enum tables and damaged files are checked on databases built here.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import real_file

from gpuvar.demo import synth
from gpuvar.demo.nsys_writer import write_nsys_demo
from gpuvar.ingest import ingest, load, nsys, nsys_sqlite
from gpuvar.ingest.compression import read_head
from gpuvar.ingest.detect import detect
from gpuvar.schema import canonical_columns

REAL_FILES = [
    "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite",
    "nsys-sqlite/nvfuser-matmul-h200-run2/report2.sqlite",
    "nsys-sqlite/nvfuser-matmul-h100/report1.sqlite",
    "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite",
    "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_after.sqlite",
    "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite",
]
H200 = "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite"
MFU = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite"
MOCK = "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite"


def sql(path, query, *args):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def read_tables(outdir):
    kernels = pq.read_table(outdir / "kernels.parquet").to_pandas()
    memcpy_path = outdir / "memcpy.parquet"
    return kernels, (pq.read_table(memcpy_path).to_pandas() if memcpy_path.exists() else None)


# --- real files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", REAL_FILES)
def test_real_export_ingests_every_row(relative, tmp_path):
    path = real_file(relative)
    assert detect(path) is nsys
    report = ingest(path, tmp_path)
    kernels, memcpy = read_tables(tmp_path)
    assert len(kernels) == sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] > 0
    assert len(memcpy) == sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0] > 0
    assert report["format"] == "nsys-sqlite"
    assert all(t["balanced"] for t in report["tables"].values())
    assert any(n.startswith("Nsight Systems 20") for n in report["notes"])
    assert kernels["kernel_name"].notna().all() and not kernels["kernel_name"].str.startswith("<unknown").any()
    assert (kernels["duration"] == kernels["end"] - kernels["start"]).all()
    assert sorted(kernels["launch_id"]) == list(range(len(kernels)))


def test_real_kernel_names_and_durations_match_sqlite(tmp_path):
    path = real_file(H200)
    ingest(path, tmp_path)
    kernels, _ = read_tables(tmp_path)
    expected = sql(
        path,
        "SELECT d.value, s.value, k.end - k.start, k.gridX, k.blockX, k.registersPerThread "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName "
        "JOIN StringIds s ON s.id = k.shortName ORDER BY k.start, k.correlationId",
    )
    got = kernels.sort_values("launch_id")
    cols = ["kernel_name", "kernel_short_name", "duration", "grid_x", "block_x", "registers_per_thread"]
    assert [tuple(r) for r in got[cols].itertuples(index=False)] == expected
    assert "nvfuser_none_f0_c0_r0_g0" in set(kernels["kernel_short_name"])
    first = got.iloc[0]
    assert first["kernel_short_name"] == "distribution_elementwise_grid_stride_kernel"
    assert (first["start"], first["duration"], first["correlation_id"]) == (770742793, 40641, 158)
    assert first["mangledName"].startswith("_ZN2at6native")
    assert first["process_id"] == 30156 and first["wave_size"] == 32
    assert first["lds_per_workgroup"] == first["static_shared_memory"] + first["dynamic_shared_memory"]


def test_real_copy_kind_names_resolved_from_enum(tmp_path):
    path = real_file(MFU)
    ingest(path, tmp_path)
    _, memcpy = read_tables(tmp_path)
    by_kind = dict(sql(path, "SELECT copyKind, COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"))
    assert by_kind == {1: 34, 8: 986}
    assert memcpy["copy_kind_name"].value_counts().to_dict() == {"DtoD": 986, "HtoD": 34}
    assert {"srcKind", "dstKind", "bytes", "copyCount"} <= set(memcpy.columns)
    assert memcpy["bytes"].sum() == sql(path, "SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]


def test_real_2026_columns_kept_and_process_id_decoded(tmp_path):
    path = real_file(MOCK)
    report = ingest(path, tmp_path)
    kernels, _ = read_tables(tmp_path)
    extras = {
        "qmdBulkReleaseDone",
        "qmdPreexitDone",
        "graphId",
        "clusterX",
        "clusterSchedulingPolicy",
        "maxActiveClusters",
        "sharedMemoryRequestedPercentage",
        "contextId",
        "globalPid",
        "gridId",
    }
    assert extras <= set(kernels.columns)
    pid = sql(path, "SELECT pid FROM TARGET_INFO_CUDA_DEVICE")[0][0]
    assert set(kernels["process_id"]) == {pid} == {91186}
    assert any("NVIDIA GeForce RTX 3080" in n for n in report["notes"])
    mfu = real_file(MFU)
    k2, _ = load(mfu)[1:]
    assert "tensorSizeMinusOneElements" in k2.column_names
    assert any("DERIVED_WINDOW_NS" in n for n in load(mfu)[0].notes)


@pytest.mark.parametrize("relative", [MOCK, H200])
def test_without_vendor_columns_the_canonical_columns_are_unchanged(relative, tmp_path, run_cli):
    """--no-keep-vendor-columns skips the export's other columns (named in a note), nothing else changes."""
    path = real_file(relative)
    full = ingest(path, tmp_path / "full")
    result = run_cli("ingest", path, "-o", tmp_path / "lean", "--no-keep-vendor-columns")
    assert result.returncode == 0, result.stderr
    lean = json.loads((tmp_path / "lean" / "ingest.json").read_text())
    for name in ("kernels", "memcpy"):
        a = pq.read_table(tmp_path / "lean" / f"{name}.parquet")
        b = pq.read_table(tmp_path / "full" / f"{name}.parquet")
        assert a.column_names == [c.column for c in canonical_columns(name)]
        assert a.equals(b.select(a.column_names)), name
        assert lean["tables"][name]["rows_written"] == full["tables"][name]["rows_written"]
        assert lean["tables"][name]["balanced"]
    skipped = [n for n in lean["notes"] if "vendor column(s) not read" in n]
    assert len(skipped) == 2 and "contextId" in skipped[0] and "globalPid" not in " ".join(skipped)
    assert "contextId" in pq.read_schema(tmp_path / "full" / "kernels.parquet").names


def test_partitioned_scan_is_put_back_in_table_order():
    """Partitions come back as interleaved batches: rows are returned in rowid order (overlaps sorted)."""
    batch = lambda ids: pa.RecordBatch.from_pydict({"rid": ids, "v": [i * 10 for i in ids]})  # noqa: E731
    shuffled = pa.Table.from_batches([batch([5, 6]), batch([1, 2]), batch([7]), batch([3, 4])])
    ordered = nsys_sqlite.in_rowid_order(shuffled, "rid")
    assert ordered.column("rid").to_pylist() == [1, 2, 3, 4, 5, 6, 7]
    assert ordered.column("v").to_pylist() == [10, 20, 30, 40, 50, 60, 70]
    overlapping = pa.Table.from_batches([batch([2, 9]), batch([1, 5])])
    assert nsys_sqlite.in_rowid_order(overlapping, "rid").column("rid").to_pylist() == [1, 2, 5, 9]


# --- demo writer round trip ---------------------------------------------------------------------------------


def test_demo_writer_round_trips_the_planted_columns(tmp_path):
    path = tmp_path / "demo.sqlite"
    counts = write_nsys_demo(path, 3000, seed=5, variant=1)
    chunks = list(synth.generate(3000, 5, 1))
    k = {c: np.concatenate([ch.kernels[c] for ch in chunks]) for c in chunks[0].kernels}
    m = {c: np.concatenate([ch.memcpy[c] for ch in chunks]) for c in chunks[0].memcpy}
    assert counts["kernels"] == 3000 and counts["memcpy"] == len(m["start"]) > 0
    assert [p.name for p in tmp_path.iterdir()] == ["demo.sqlite"]  # no temporary file left
    report = ingest(path, tmp_path / "out")
    kernels, memcpy = read_tables(tmp_path / "out")
    kernels = kernels.sort_values("launch_id").reset_index(drop=True)
    assert report["tables"]["kernels"]["rows_written"] == 3000
    for col in (
        "launch_id",
        "start",
        "end",
        "duration",
        "stream_id",
        "correlation_id",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "registers_per_thread",
        "static_shared_memory",
        "dynamic_shared_memory",
    ):
        np.testing.assert_array_equal(kernels[col].to_numpy(), k[col], err_msg=col)
    demangled, short = synth.kernel_names()
    assert list(kernels["kernel_name"]) == [demangled[i] for i in k["kernel_index"]]
    assert list(kernels["kernel_short_name"]) == [short[i] for i in k["kernel_index"]]
    assert set(kernels["process_id"]) == {4243}
    memcpy = memcpy.sort_values("start").reset_index(drop=True)
    order = np.argsort(m["start"], kind="stable")
    for col in ("start", "end", "bytes", "copy_kind", "correlation_id"):
        np.testing.assert_array_equal(memcpy[col].to_numpy(), m[col][order], err_msg=col)
    names = {1: "HtoD", 2: "DtoH", 8: "DtoD"}
    assert list(memcpy["copy_kind_name"]) == [names[x] for x in m["copy_kind"][order]]


def test_connectorx_and_sqlite3_paths_agree_on_an_awkward_path(tmp_path, monkeypatch):
    """Partitioned connectorx on a path with a space and '%': same rows as sqlite3, nothing created beside it."""
    folder = tmp_path / "my traces %20"
    path = folder / "rank 0.sqlite"
    write_nsys_demo(path, 2000, seed=1)
    monkeypatch.setattr(nsys_sqlite, "PARTITION_MIN_ROWS", 0)
    calls = []
    real_cx = nsys_sqlite.fetch_connectorx
    monkeypatch.setattr(nsys_sqlite, "fetch_connectorx", lambda *a: calls.append(a[1]) or real_cx(*a))
    fast = nsys.read(path)
    assert sorted(calls) == ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"]
    assert sorted(p.name for p in folder.iterdir()) == ["rank 0.sqlite"]

    def broken(*args):
        raise RuntimeError("connectorx unavailable")

    monkeypatch.setattr(nsys_sqlite, "fetch_connectorx", broken)
    slow = nsys.read(path)
    for a, b in ((fast.kernels, slow.kernels), (fast.memcpy, slow.memcpy)):
        assert list(a.columns) == list(b.columns)
        a = a.sort_values("launch_id").reset_index(drop=True)
        b = b.sort_values("launch_id").reset_index(drop=True)
        for col in a.columns:
            assert list(a[col].astype(object)) == list(b[col].astype(object)), col


# --- rows that are dropped or kept with a note --------------------------------------------------------------


def minimal_export(path, kernel_rows, memcpy_rows=None, strings=((1, "void k<int>(int*)"), (2, "k"))):
    """A small nsys-like export: nullable columns, optional memcpy table, no enum or metadata tables."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, "
        "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
        "shortName INTEGER, gridX INTEGER, blockX INTEGER, futureColumn TEXT)"
    )
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?)", kernel_rows)
    if memcpy_rows is not None:
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, "
            "streamId INTEGER, correlationId INTEGER, bytes INTEGER, copyKind INTEGER)"
        )
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?)", memcpy_rows)
    con.commit()
    con.close()
    return path


def test_bad_timestamps_dropped_and_counted_unknown_names_kept(tmp_path):
    gpid = (1 << 48) | (777 << 24) | 12
    rows = [
        (100, 200, 0, 7, 3, gpid, 1, 2, 4, 128, "x"),
        (50, 90, 0, 7, 1, gpid, 1, 2, 4, 128, None),
        (300, None, 0, 7, 5, gpid, 1, 2, 4, 128, None),  # null end
        (None, 400, 0, 7, 6, gpid, 1, 2, 4, 128, None),  # null start
        (500, 450, 0, 7, 7, gpid, 1, 2, 4, 128, None),  # end before start
        (100, 150, 1, 8, 2, None, 99, 2, 8, 64, None),  # unknown demangledName id, same start as row 0
    ]
    copies = [
        (10, 20, 0, 7, 1, 4096, 1),
        (30, None, 0, 7, 2, 4096, 2),
        (40, 60, 0, 7, 3, 8, 10),
        (70, 80, 0, 7, 4, 8, 42),
    ]
    path = minimal_export(tmp_path / "small.sqlite", rows, copies)
    report = ingest(path, tmp_path / "out")
    kernels, memcpy = read_tables(tmp_path / "out")
    assert report["tables"]["kernels"]["dropped"] == {"end before start": 1, "null start/end timestamp": 2}
    assert report["tables"]["kernels"]["rows_written"] == 3 and report["tables"]["kernels"]["balanced"]
    assert report["tables"]["memcpy"]["dropped"] == {"null start/end timestamp": 1}
    kernels = kernels.sort_values("launch_id")
    assert list(kernels["correlation_id"]) == [1, 2, 3]  # (start, correlationId) order
    assert list(kernels["kernel_name"]) == ["void k<int>(int*)", "<unknown string id 99>", "void k<int>(int*)"]
    assert kernels["process_id"].tolist()[0] == 777 and kernels["process_id"].isna().sum() == 1
    assert "futureColumn" in kernels.columns
    assert any("1 kernel row(s) have a demangledName id missing" in n for n in report["notes"])
    assert any("built-in" in n for n in report["notes"])  # no ENUM_CUDA_MEMCPY_OPER in this file
    assert list(memcpy.sort_values("start")["copy_kind_name"]) == ["HtoD", "PtoP", "copy kind 42"]


def test_export_without_memcpy_table_has_no_memcpy_output(tmp_path):
    path = minimal_export(tmp_path / "k.sqlite", [(1, 2, 0, 7, 1, None, 1, 2, 1, 32, None)])
    out, kernels, memcpy = load(path)
    assert memcpy is None and kernels.num_rows == 1
    assert any("no CUPTI_ACTIVITY_KIND_MEMCPY table" in n for n in out.notes)


# --- sniffing and errors ------------------------------------------------------------------------------------


def test_sniff_claims_nsys_exports_only(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE measurements (a INTEGER)")
    con.commit()
    con.close()
    csv = tmp_path / "x.csv"
    csv.write_text("start,end\n1,2\n")
    assert not nsys.sniff(other, read_head(other))
    assert not nsys.sniff(csv, read_head(csv))
    real = real_file(MOCK)
    assert nsys.sniff(real, read_head(real))


def _nokernel(tmp_path):
    path = tmp_path / "nokernel.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER)")
    con.commit()
    con.close()
    return path, "no CUPTI_ACTIVITY_KIND_KERNEL table: the capture recorded no CUDA kernels"


def _not_nsys(tmp_path):
    path = tmp_path / "plain.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    return path, "unrecognised format"


def _truncated(tmp_path):
    path = tmp_path / "cut.sqlite"
    path.write_bytes(real_file(MFU).read_bytes()[:200_000])
    return path, "SQLite database"


def _empty(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    return path, "empty file"


@pytest.mark.parametrize("make", [_nokernel, _not_nsys, _truncated, _empty])
def test_cli_reports_bad_files_on_one_line(make, tmp_path, run_cli):
    path, message = make(tmp_path)
    result = run_cli("ingest", path, "-o", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and message in result.stderr


def test_text_timestamps_are_an_input_error(tmp_path):
    path = tmp_path / "text.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start TEXT, end TEXT, shortName INTEGER)")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('12:00', '12:01', 1)")
    con.commit()
    con.close()
    from gpuvar.errors import InputError

    with pytest.raises(InputError, match="column start holds string values, not integer nanoseconds"):
        ingest(path, tmp_path / "out")


def test_truncated_file_says_it_is_truncated(tmp_path):
    path, _ = _truncated(tmp_path)
    with pytest.raises(Exception) as info:
        ingest(path, tmp_path / "out")
    assert "truncated SQLite database (200000 of" in str(info.value)


def test_corrupt_pages_give_input_error(tmp_path):
    """Garbage in the table pages (size intact) is reported, not raised as sqlite3.DatabaseError."""
    path = tmp_path / "corrupt.sqlite"
    shutil.copy(real_file(MOCK), path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page * 2 :] = b"\xff" * (len(data) - page * 2)
    path.write_bytes(bytes(data))
    from gpuvar.errors import InputError

    with pytest.raises(InputError) as info:
        ingest(path, tmp_path / "out")
    assert str(path) in str(info.value)


def test_copy_kind_stored_as_text_is_kept_as_its_name(tmp_path):
    """SQLite keeps text in an INTEGER column: copyKind 'HtoD' (another tool's export) raised ValueError with a
    traceback. Now the text is the copy kind's name, the numeric copy_kind is null, other rows are unchanged."""
    rows = [(1, 2, 0, 7, 1, None, 1, 2, 1, 32, None)]
    copies = [(10, 20, 0, 7, 1, 4096, 1), (30, 40, 0, 7, 2, 64, "HtoD"), (50, 60, 0, 7, 3, 8, 2)]
    path = minimal_export(tmp_path / "text.sqlite", rows, copies)
    report = ingest(path, tmp_path / "out")
    _, memcpy = read_tables(tmp_path / "out")
    assert report["tables"]["memcpy"]["balanced"] and report["tables"]["memcpy"]["rows_written"] == 3
    memcpy = memcpy.sort_values("start")
    assert list(memcpy["copy_kind_name"]) == ["HtoD", "HtoD", "DtoH"]
    assert memcpy["copy_kind"].isna().tolist() == [False, True, False]
