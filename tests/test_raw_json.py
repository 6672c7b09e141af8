"""The read/normalize split of the rocpd and Kineto readers (issue 16 item 7): read_raw keeps the vendor's tables
as read (their own column names, every row), normalize maps them, and a raw read stored as Parquet and loaded
back normalizes to exactly what the one-step read gives."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest
from conftest import REAL_DATA, real_file

from gpuvar.ingest import kineto, rocpd
from gpuvar.ingest.raw import load_raw, roundtrip, write_raw

ROCPD = "rocpd-sqlite/rocprofsys-transpose-w7800/rocpd-3638851.db"
KINETO = "pytorch-kineto-trace"
KINETO_REAL = (
    sorted(p.relative_to(REAL_DATA).as_posix() for p in (REAL_DATA / KINETO).glob("*/*.json*"))
    if (REAL_DATA / KINETO).is_dir()
    else []
)


def assert_same_output(a, b) -> None:
    """Two ReaderOutputs are the same: frames (values, dtypes, column order, categories), accounting, notes."""
    for table in ("kernels", "memcpy"):
        left, right = getattr(a, table), getattr(b, table)
        assert (left is None) == (right is None), table
        if left is not None:
            pd.testing.assert_frame_equal(left, right, check_exact=True)
    assert a.rows_read == b.rows_read
    assert {t: dict(c) for t, c in a.dropped.items()} == {t: dict(c) for t, c in b.dropped.items()}
    assert a.notes == b.notes and a.format == b.format


def rocpd_copy(tmp_path, *statements: str):
    """A writable copy of the real rocprof-sys database with `statements` run ('{u}' = the table suffix)."""
    path = tmp_path / "edited.db"
    shutil.copyfile(real_file(ROCPD), path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    uuid = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'uuid'").fetchone()[0]
    for sql in statements:
        con.execute(sql.format(u=uuid))
    con.commit()
    con.close()
    return path


def kineto_trace(tmp_path, events, **top):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return path


# --- rocpd ------------------------------------------------------------------------------------------------
def test_rocpd_raw_tables_keep_the_relations_and_their_column_names():
    path = real_file(ROCPD)
    raw = rocpd.read_raw(path)
    assert raw.format == "rocpd-sqlite" and raw.source == str(path)
    dispatch = raw.tables["rocpd_kernel_dispatch"]
    assert {
        "kernel_id",
        "agent_id",
        "start",
        "end",
        "grid_size_x",
        "workgroup_size_x",
        "group_segment_size",
        "event_id",
    } <= set(dispatch.column_names)
    assert not {"kernel_name", "grid_x", "block_x", "duration", "Start_Timestamp", "launch_id"} & set(
        dispatch.column_names
    )
    assert {"display_name", "kernel_name", "arch_vgpr_count", "sgpr_count"} <= set(
        raw.tables["rocpd_info_kernel_symbol"].column_names
    )
    assert {"size", "name_id", "src_agent_id", "dst_agent_id"} <= set(raw.tables["rocpd_memory_copy"].column_names)
    assert {"id", "stack_id"} <= set(raw.tables["rocpd_event"].column_names)
    assert "MEMORY_COPY_HOST_TO_DEVICE" in raw.tables["rocpd_string"].column("string").to_pylist()
    # values as stored: integer ns timestamps and work-item grid sizes, in the relation's row order
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute('SELECT start, "end", grid_size_x FROM rocpd_kernel_dispatch').fetchall()
    con.close()
    assert list(zip(*(dispatch.column(c).to_pylist() for c in ("start", "end", "grid_size_x")))) == rows
    assert raw.rows_read == {"kernels": 1004, "memcpy": 48} and raw.info == {"by_guid": False}


def test_rocpd_raw_keeps_the_dispatches_normalize_drops(tmp_path):
    path = rocpd_copy(
        tmp_path, "UPDATE rocpd_info_kernel_symbol{u} SET display_name = '', kernel_name = '' WHERE id = 2"
    )
    raw = rocpd.read_raw(path)
    out = rocpd.normalize(raw)
    assert raw.tables["rocpd_kernel_dispatch"].num_rows == 1004 and not raw.dropped
    assert len(out.kernels) == 1000 and dict(out.dropped["kernels"]) == {"missing kernel name": 4}
    assert out.rows_read["kernels"] == 1004


def test_rocpd_merged_database_reads_guids_and_round_trips(tmp_path):
    path = rocpd_copy(tmp_path)
    con = sqlite3.connect(path)
    uuid = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'uuid'").fetchone()[0]
    for (table,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd%'"
    ).fetchall():
        base = table[: -len(uuid)]
        con.execute(f'CREATE TABLE "{base}_b" AS SELECT * FROM "{table}"')
        if "guid" in [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]:
            con.execute(f"UPDATE \"{base}_b\" SET guid = 'second'")
        con.execute(f'DROP VIEW IF EXISTS "{base}"')
        con.execute(f'CREATE VIEW "{base}" AS SELECT * FROM "{table}" UNION ALL SELECT * FROM "{base}_b"')
    con.execute("UPDATE rocpd_info_process_b SET pid = 4242")
    con.commit()
    con.close()
    raw = rocpd.read_raw(path)
    assert raw.info["by_guid"] and "guid" in raw.tables["rocpd_kernel_dispatch"].column_names
    out = rocpd.normalize(roundtrip(raw, tmp_path / "raw"))
    assert_same_output(out, rocpd.read(path))
    assert sorted(out.kernels["process_id"].value_counts().tolist()) == [1004, 1004]


def test_rocpd_normalize_of_a_stored_raw_read_equals_read(tmp_path):
    edited = rocpd_copy(
        tmp_path,
        "DELETE FROM rocpd_info_kernel_symbol{u} WHERE id = 2",
        "UPDATE rocpd_memory_copy{u} SET name_id = 9999 WHERE id <= 3",
    )
    for path in (real_file(ROCPD), edited):
        stored = roundtrip(rocpd.read_raw(path), tmp_path / f"raw-{path.stem}")
        assert_same_output(rocpd.normalize(stored), rocpd.read(path))


# --- Kineto ------------------------------------------------------------------------------------------------
def test_kineto_raw_events_keep_the_json_keys(tmp_path):
    from gpuvar.demo.kineto_writer import write_kineto_demo

    path = tmp_path / "rank1.json.gz"
    summary = write_kineto_demo(path, 500, seed=2, rank=1, world=2)
    raw = kineto.read_raw(path)
    events = raw.tables["events"]
    assert {
        "cat",
        "name",
        "ts",
        "dur",
        "args.device",
        "args.stream",
        "args.correlation",
        "args.registers per thread",
        "args.shared memory",
        "args.grid[0]",
        "args.block[2]",
        "args.bytes",
        "args.memory bandwidth (GB/s)",
        "args.External id",
        "args.kind",
    } <= set(events.column_names)
    assert not {"start", "duration", "device_id", "grid_x", "kernel_name", "launch_id"} & set(events.column_names)
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    source = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert events.num_rows == len(source) == summary["kernel"] + summary["gpu_memcpy"] + summary["gpu_memset"]
    # file order, JSON values: ts exact in µs, dur in µs, args under their keys
    assert events.column("cat").to_pylist() == [e["cat"] for e in source]
    assert events.column("ts").to_pylist() == [Decimal(e["ts"]) for e in source]
    assert events.column("dur").to_pylist() == [float(e["dur"]) for e in source]
    assert events.column("args.correlation").to_pylist() == [e["args"]["correlation"] for e in source]
    grids = [e["args"].get("grid", [None] * 3) for e in source]
    assert events.column("args.grid[1]").to_pylist() == [g[1] for g in grids]
    assert raw.info["top"]["distributedInfo"] == doc["distributedInfo"]
    assert raw.info["categories"]["kernel"] == summary["kernel"]
    assert raw.info["events"] == len(doc["traceEvents"])
    assert raw.rows_read == {"kernels": summary["kernel"], "memcpy": summary["gpu_memcpy"] + summary["gpu_memset"]}


def test_kineto_raw_keeps_the_events_normalize_drops(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7}}
        for ts, dur in [(10, 1), ("abc", 1), (None, 1), (12, -3), (13, "x"), (14.5, 2)]
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 9, "dur": 1})  # a host table of its own
    raw = kineto.read_raw(kineto_trace(tmp_path, events))
    out = kineto.normalize(raw)
    assert raw.tables["events"].num_rows == 6 and not raw.dropped
    assert raw.tables["events"].column("ts").null_count == 2 and raw.tables["events"].column("dur").null_count == 1
    assert len(out.kernels) == 2 and out.rows_read["kernels"] == 6
    assert dict(out.dropped["kernels"]) == {"missing or non-numeric ts/dur": 3, "negative dur (end before start)": 1}
    assert raw.info["categories"] == {"cpu_op": 1, "kernel": 6} and raw.info["events"] == 7
    assert raw.tables["cpu_ops"].column("name").to_pylist() == ["aten::mm"] and "runtime" not in raw.tables


def test_kineto_timestamps_are_exact_from_raw_decimal_to_ns(tmp_path):
    texts = ["1700000000000017.4575", "1700000000000017.4585", "1700000000000017.000500000000001", "-2.0005"]
    body = ",".join(
        f'{{"cat": "kernel", "name": "k", "ts": {t}, "dur": 1, "args": {{"correlation": {i}}}}}'
        for i, t in enumerate(texts)
    )
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + body + "]}")
    raw = kineto.read_raw(path)
    kept = [Decimal(t) for t in texts]
    kept[2] = Decimal("1700000000000017.000500000001")  # beyond 12 decimals: rounded to odd, the tie stays broken
    assert raw.tables["events"].column("ts").to_pylist() == kept
    start = kineto.normalize(raw).kernels.sort_values("correlation_id")["start"].tolist()
    assert start == [1700000000000017458, 1700000000000017458, 1700000000000017001, -2000]  # half to even


def test_kineto_profiler_ranges_are_a_raw_table_of_their_own():
    relative = f"{KINETO}/hta-a100-cupti-profiler-counters/cupti_profiler_trace.json.gz"
    raw = kineto.read_raw(real_file(relative))
    assert "events" not in raw.tables
    ranges = raw.tables["cuda_profiler_range"]
    counter = "args.smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
    assert {"name", "ts", "dur", counter} <= set(ranges.column_names)
    assert raw.rows_read == {"kernels": ranges.num_rows} == {"kernels": 77}


def test_kineto_normalize_does_not_depend_on_dictionary_order_or_chunks(tmp_path):
    """Parquet gives dictionaries back re-ordered, per row group: normalize renumbers names as the rows name them."""
    from gpuvar.demo.kineto_writer import write_kineto_demo

    path = tmp_path / "t.json"
    write_kineto_demo(path, 400, seed=4, rank=0)
    raw = kineto.read_raw(path)
    events = raw.tables["events"]
    half = events.num_rows // 2
    pieces = []
    for part in (events.slice(0, half), events.slice(half)):
        columns = {}
        for name in part.column_names:
            column = part.column(name)
            if pa.types.is_dictionary(column.type):  # a fresh dictionary, in reverse first-seen order
                values = column.cast(pa.string()).combine_chunks()
                seen = [v for v in pd.unique(values.to_numpy(zero_copy_only=False)) if v is not None]
                order = pa.array(list(reversed(seen)), pa.string())
                column = pa.DictionaryArray.from_arrays(pa.compute.index_in(values, order).cast(pa.int32()), order)
            columns[name] = column
        pieces.append(pa.table(columns))
    raw.tables["events"] = pa.concat_tables(pieces)
    assert raw.tables["events"].column("name").num_chunks == 2
    assert_same_output(kineto.normalize(raw), kineto.read(path))


@pytest.mark.parametrize("relative", KINETO_REAL)
def test_kineto_real_traces_normalize_from_stored_raw_exactly_as_read(relative, tmp_path):
    path = real_file(relative)
    stored = roundtrip(kineto.read_raw(path), tmp_path / "raw")
    assert_same_output(kineto.normalize(stored), kineto.read(path))


def test_kineto_demo_traces_normalize_from_stored_raw_exactly_as_read(tmp_path):
    from gpuvar.demo.kineto_writer import write_kineto_demo

    for rank, name in enumerate(("kineto_rank0.json.gz", "kineto_rank1.json.gz")):
        path = tmp_path / name
        write_kineto_demo(path, 2000, seed=0, rank=rank, world=2)
        raw = kineto.read_raw(path)
        write_raw(raw, tmp_path / f"raw{rank}")
        stored = load_raw(tmp_path / f"raw{rank}")
        assert stored.tables["events"].schema == raw.tables["events"].schema
        assert_same_output(kineto.normalize(stored), kineto.read(path))


def test_kineto_values_of_the_wrong_type_survive_the_raw_round_trip(tmp_path):
    """Odd values keep their meaning through Parquet: fractional or huge ids, a name that is not a string, grid
    lists of the wrong length, args that are not an object, counters of mixed types."""

    def kernel(i, **change):
        event = {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i % 3}",
            "ts": 1700000000000000.125 + i,
            "dur": 2.5,
            "args": {
                "device": 0,
                "stream": 7,
                "correlation": i,
                "grid": [i + 1, 1, 1],
                "block": [64, 1, 1],
                "registers per thread": 32,
                "blocks per SM": 0.5,
            },
        }
        event.update({k: v for k, v in change.items() if k != "args"})
        event["args"].update(change.get("args", {}))
        return event

    events = [kernel(i) for i in range(20)]
    events += [
        kernel(20, name=17),
        kernel(21, args={"device": 2**70, "stream": "7", "grid": [1, 2]}),
        kernel(22, args={"registers per thread": 2.5, "block": None}),
        {**kernel(23), "args": [1, 2]},
        kernel(24, ts="abc"),
        kernel(25, dur=-1),
        kernel(26, ts=1.7e15),
    ]
    events += [
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pinned -> Device)",
            "ts": 1700000000000100 + i,
            "dur": 1,
            "args": {"device": 0, "stream": 7, "correlation": 100 + i, "bytes": b, "kind": k},
        }
        for i, (b, k) in enumerate([(1024, "HtoD"), ("12", 5), (None, None)])
    ]
    events += [
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "ts": 1700000000000200,
            "dur": 1,
            "args": {"device": 0, "bytes": 8},
        }
    ]
    events += [
        {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": "r",
            "ts": 1,
            "dur": 1,
            "args": {"a": 1, "b": "x" if i else 2.5, "c": [1] if i else None},
        }
        for i in range(2)
    ]
    path = kineto_trace(
        tmp_path,
        events,
        distributedInfo={"rank": 3, "world_size": 4},
        deviceProperties=[{"id": 0, "name": "GPU", "warpSize": 32}],
    )
    raw = kineto.read_raw(path)
    stored = roundtrip(raw, tmp_path / "raw")
    assert stored.info == json.loads(json.dumps(raw.info))
    out = kineto.normalize(stored)
    assert_same_output(out, kineto.read(path))
    assert out.rows_read == {"kernels": 27, "memcpy": 4} and len(out.kernels) == 25
    assert set(out.kernels["rank"]) == {3}
    assert stored.tables["cuda_profiler_range"].column("args.b").to_pylist() == ["2.5", "x"]  # mixed: kept as text
