"""PyTorch profiler (Kineto) traces: every real trace ingests with row counts and values checked against the
source events, read independently here with json + gzip."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REAL_DATA, real_file

from gpuvar.ingest import ingest, load
from gpuvar.ingest.detect import detect
from gpuvar.ingest.json_stream import DecodeFailed, TraceStream

KINETO = "pytorch-kineto-trace"
REAL = (
    sorted(p.relative_to(REAL_DATA).as_posix() for p in (REAL_DATA / KINETO).glob("*/*.json*"))
    if (REAL_DATA / KINETO).is_dir()
    else []
)
COPY_CODES = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}


def source(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def events(doc: dict, *cats: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") in cats]


def ns(value) -> int:
    return int((Decimal(value) * 1000).to_integral_value())


def rows_by_key(table) -> dict:
    """(correlation id, start) -> row: one correlation id can launch several kernels (graphs, libraries)."""
    return {(r["correlation_id"], r["start"]): r for r in table.to_pylist()}


def test_real_traces_are_present():
    if not (REAL_DATA / KINETO).is_dir():
        pytest.skip(f"real profiler files not found at {REAL_DATA}")
    assert len(REAL) >= 6, REAL


@pytest.mark.parametrize("relative", REAL)
def test_every_real_trace_ingests_with_counts_from_the_source(relative, tmp_path):
    path = real_file(relative)
    doc = source(path)
    kernels, copies = events(doc, "kernel"), events(doc, "gpu_memcpy", "gpu_memset")
    expected = len(kernels) or len(events(doc, "cuda_profiler_range"))
    assert detect(path).FORMAT == "pytorch-kineto"
    report = ingest(path, tmp_path / "out")
    assert report["format"] == "pytorch-kineto"
    k = report["tables"]["kernels"]
    assert k["rows_read"] == expected and k["balanced"]
    assert k["rows_written"] == expected - sum(k["dropped"].values())
    assert k["dropped"] == {}  # the real traces are clean: every kernel event is a row
    if copies:
        m = report["tables"]["memcpy"]
        assert m["rows_read"] == m["rows_written"] == len(copies)
    table = pq.read_table(tmp_path / "out" / "kernels.parquet")
    assert table.num_rows == expected
    rank = (doc.get("distributedInfo") or {}).get("rank")
    assert set(table.column("rank").to_pylist()) == ({rank} if rank is not None else {None})


@pytest.mark.parametrize("relative", [r for r in REAL if "cupti" not in r])
def test_kernel_values_match_the_source_event(relative):
    path = real_file(relative)
    doc = source(path)
    warp = {p["id"]: p["warpSize"] for p in doc.get("deviceProperties", [])}
    _, kernels, _ = load(path)
    rows = rows_by_key(kernels)
    for event in events(doc, "kernel")[:: max(1, len(rows) // 50)]:
        args, row = event["args"], rows[(event["args"]["correlation"], ns(event["ts"]))]
        assert row["kernel_name"] == event["name"]
        assert row["device_id"] == args["device"] and row["stream_id"] == args["stream"]
        assert row["start"] == ns(event["ts"])
        assert row["duration"] == ns(event["dur"]) and row["end"] == row["start"] + row["duration"]
        assert row["wave_size"] == warp.get(args["device"], 32)
        if "grid" in args:
            assert [row["grid_x"], row["grid_y"], row["grid_z"]] == args["grid"]
            assert [row["block_x"], row["block_y"], row["block_z"]] == args["block"]
            assert row["grid_size"] == args["grid"][0] * args["grid"][1] * args["grid"][2]
            assert row["registers_per_thread"] == args["registers per thread"]
            assert row["lds_per_workgroup"] == args["shared memory"]
            assert row["blocks_per_sm"] == pytest.approx(float(args["blocks per SM"]))
            assert row["est_achieved_occupancy_pct"] == pytest.approx(float(args["est. achieved occupancy %"]))
        else:  # ROCm builds carry no launch configuration
            assert row["grid_x"] is None and row["registers_per_thread"] is None


@pytest.mark.parametrize("relative", [r for r in REAL if "cupti" not in r])
def test_copy_values_match_the_source_event(relative):
    path = real_file(relative)
    doc = source(path)
    _, _, memcpy = load(path)
    rows = memcpy.to_pylist()
    assert len(rows) == len(events(doc, "gpu_memcpy", "gpu_memset"))
    by_key = {(r["correlation_id"], r["start"]): r for r in rows}
    for event in events(doc, "gpu_memcpy", "gpu_memset"):
        args, row = event["args"], by_key[(event["args"]["correlation"], ns(event["ts"]))]
        assert row["bytes"] == args.get("bytes")
        if event["cat"] == "gpu_memset":
            assert row["copy_kind_name"] == "Memset" and row["copy_kind"] is None
        else:
            kind = event["name"].split()[1]
            assert row["copy_kind_name"] == kind and row["copy_kind"] == COPY_CODES[kind]
            if "memory bandwidth (GB/s)" in args:
                assert row["bandwidth_gb_s"] == pytest.approx(float(args["memory bandwidth (GB/s)"]))


def test_fractional_microseconds_become_exact_nanoseconds():
    """ts ~1.7e15 µs with a ns fraction: a float would be off by up to 125 ns; the text is converted exactly."""
    path = real_file(f"{KINETO}/hta-v100-resnet-rank0/rank-0.pt.trace.json.gz")
    _, kernels, _ = load(path)
    row = rows_by_key(kernels)[(135071, 1712195495505582988)]
    assert row["start"] == 1712195495505582988 and row["duration"] == 4928


def test_rocm_trace_takes_wave_size_and_copy_kind_from_the_trace():
    path = real_file(f"{KINETO}/hta-mi250-minitoy-rocm62/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    out, kernels, memcpy = load(path)
    assert set(kernels.column("wave_size").to_pylist()) == {64}
    assert set(kernels.column("device_id").to_pylist()) == {2}
    assert memcpy.column("copy_kind_name").to_pylist() == ["HtoD", "HtoD"]


def test_cupti_profiler_ranges_become_kernel_rows_with_counters():
    path = real_file(f"{KINETO}/hta-a100-cupti-profiler-counters/cupti_profiler_trace.json.gz")
    doc = source(path)
    ranges = events(doc, "cuda_profiler_range")
    out, kernels, memcpy = load(path)
    assert kernels.num_rows == len(ranges) == 77 and memcpy is None
    assert kernels.column("start").null_count == kernels.num_rows  # the ranges time the replay, not the kernel
    counter = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
    assert kernels.column(counter).to_pylist() == [r["args"][counter] for r in ranges]
    assert kernels.column("kernel_name").to_pylist() == [r["name"] for r in ranges]
    assert any("cuda_profiler_range" in n for n in out.notes)


def test_uncompressed_json_and_rank_note(tmp_path):
    path = real_file(f"{KINETO}/hta-a100-alexnet/alexnet_trace.json.gz")
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    report = ingest(plain, tmp_path / "out")
    assert report["format"] == "pytorch-kineto" and report["tables"]["kernels"]["rows_written"] == 79
    assert any(n.startswith("distributedInfo: rank 0") for n in report["notes"])


def test_stream_cuts_pieces_at_element_boundaries_even_with_braces_in_strings(tmp_path):
    """Names holding '},{' make the fast cut guess wrong; the decoder proves each cut, so no event is lost."""
    evil = [
        {"cat": "kernel", "name": "k}, {" * (i % 3) + f"_{i}", "ts": i, "dur": 1, "args": {"x": [{"a": 1}, {}]}}
        for i in range(3000)
    ]
    doc = {"traceEvents": evil, "distributedInfo": {"rank": 3}, "deviceProperties": []}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1))
    seen = []

    def decode(data: bytes) -> list:
        try:
            return json.loads(data)
        except ValueError as exc:
            raise DecodeFailed(str(exc)) from None

    with open(path, "rb") as fh:
        stream = TraceStream(fh, path, chunk=4096)
        for piece in stream.pieces(decode):
            seen.extend(piece)
    assert seen == evil and stream.top == {"distributedInfo": {"rank": 3}, "deviceProperties": []}


def test_generated_trace_round_trips(tmp_path):
    from gpuvar.demo.kineto_writer import write_kineto_demo

    summary = write_kineto_demo(tmp_path / "r1.json.gz", 3000, seed=5, rank=1, world=2)
    again = write_kineto_demo(tmp_path / "again.json.gz", 3000, seed=5, rank=1, world=2)
    assert gzip.decompress((tmp_path / "r1.json.gz").read_bytes()) == gzip.decompress(
        (tmp_path / "again.json.gz").read_bytes()
    )
    doc = source(tmp_path / "r1.json.gz")
    assert len(events(doc, "kernel")) == summary["kernel"] == 3000
    report = ingest(tmp_path / "r1.json.gz", tmp_path / "out")
    assert report["tables"]["kernels"]["rows_written"] == 3000
    assert report["tables"]["memcpy"]["rows_written"] == summary["gpu_memcpy"] + summary["gpu_memset"]
    assert again["kernel"] == 3000


@pytest.mark.parametrize("mapped", [False, True])
def test_pieces_decoded_elsewhere_are_redone_here_when_a_cut_was_wrong(tmp_path, mapped):
    """The pipelined path: a wrong fast cut (a '},{' inside a name) comes back None from the 'worker' and is
    read again in-process; every event arrives once, in order (the file read, or memory-mapped)."""
    from concurrent.futures import Future

    evil = [
        {"cat": "kernel", "name": "k}, {" * (i % 5 == 0) + f"_{i}", "ts": i, "args": {"g": [{}, {}]}}
        for i in range(4000)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evil, "distributedInfo": {"rank": 2}}))

    def decode(data: bytes) -> list:
        try:
            return json.loads(data)
        except ValueError as exc:
            raise DecodeFailed(str(exc)) from None

    calls = {"remote": 0, "redone": 0}

    content = path.read_bytes()

    def remote(data: bytes, at: int) -> Future:
        calls["remote"] += 1
        assert content[at : at + len(data)] == data  # where a worker would read the piece from the file
        future = Future()
        try:
            future.set_result(json.loads(b"[" + data + b"]"))
        except ValueError:
            calls["redone"] += 1
            future.set_result(None)
        return future

    seen = []
    with open(path, "rb") as fh:
        stream = TraceStream(fh, path, chunk=2048, mapped=mapped)
        assert stream.mapped == mapped
        for piece in stream.pieces(decode, remote=remote, depth=3):
            seen.extend(piece)
    assert seen == evil and stream.top == {"distributedInfo": {"rank": 2}}
    assert calls["remote"] > 10 and calls["redone"] > 0


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])  # workers read the file / get the piece through a pipe
def test_worker_processes_give_the_same_tables(tmp_path, monkeypatch, name):
    from gpuvar.demo.kineto_writer import write_kineto_demo
    from gpuvar.ingest import kineto

    trace = tmp_path / name
    write_kineto_demo(trace, 4000, seed=9, rank=0)
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr("gpuvar.ingest.json_stream.CHUNK", 256 << 10)
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "0")
    assert kineto._workers(trace) == 0
    _, k_seq, m_seq = load(trace)
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "2")
    if kineto._workers(trace) != 2:
        pytest.skip("needs 2 cores and fork")
    _, k_par, m_par = load(trace)
    assert k_par.equals(k_seq) and m_par.equals(m_seq) and k_par.num_rows == 4000


def test_a_gzip_trace_is_decoded_in_workers_by_the_size_it_unpacks_to(tmp_path, monkeypatch):
    """Whether worker processes decode a trace follows its JSON's size: for a .gz the size gzip records, not the
    compressed size times a guess (a trace of repeated events shrinks 10x and more)."""
    import gzip
    import os

    from gpuvar.ingest import kineto

    body = b'{"traceEvents": [' + b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1},' * 40_000
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(body + b"{}]}", 6))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "2")
    assert trace.stat().st_size * 8 < len(body) // 2
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", len(body) // 2)  # below the JSON, above 8x the file
    assert kineto._workers(trace) == 2
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", len(body) * 2)
    assert kineto._workers(trace) == 0


def test_long_metadata_before_the_events_is_still_detected(tmp_path):
    """traceEvents beyond the 64 KiB sniffing window: schemaVersion + deviceProperties identify the trace."""
    props = [{"id": i, "name": "GPU " + "x" * 200, "warpSize": 32} for i in range(400)]
    events = [{"cat": "kernel", "name": "k", "ts": 5, "dur": 1, "args": {"device": 0}}]
    path = tmp_path / "late.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}))
    assert path.read_bytes().find(b"traceEvents") > 65536
    assert detect(path).FORMAT == "pytorch-kineto"
    assert ingest(path, tmp_path / "out")["tables"]["kernels"]["rows_written"] == 1


KERNEL_EVENT = {
    "ph": "X",
    "cat": "kernel",
    "name": "k",
    "pid": 0,
    "tid": 7,
    "ts": 1.0,
    "dur": 2.0,
    "args": {"device": 0, "stream": 7, "correlation": 1, "grid": [1, 1, 1], "block": [32, 1, 1]},
}


def test_deeply_nested_value_is_a_one_line_error(tmp_path, run_cli):
    """msgspec raises RecursionError on a value nested ~1000+ deep: it was a traceback, now the one-line
    malformed-JSON error every undecodable event gives."""
    nested = "[" * 100_000 + "0" + "]" * 100_000
    event = json.dumps(KERNEL_EVENT)[:-1] + ', "x": ' + nested + "}"
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + json.dumps(KERNEL_EVENT) + ", " + event + "]}")
    proc = run_cli("ingest", path, "-o", tmp_path / "out")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}: malformed JSON" in proc.stderr and "recursion" in proc.stderr


def test_rank_beyond_int64_is_noted_not_a_traceback(tmp_path):
    """distributedInfo.rank = 2**70 raised OverflowError building the rank column; now no rank column, a note."""
    path = tmp_path / "rank.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 2**70, "world_size": 2}, "traceEvents": [KERNEL_EVENT]}))
    report = ingest(path, tmp_path / "out")
    assert report["tables"]["kernels"]["rows_written"] == 1
    assert any("rank '1180591620717411303424' is not an int64" in n for n in report["notes"])
    assert (
        "rank" not in pq.read_schema(tmp_path / "out" / "kernels.parquet").names
        or pq.read_table(tmp_path / "out" / "kernels.parquet").column("rank").null_count == 1
    )


def _same(a, b, where="piece") -> None:
    """Deep equality of two piece results: numpy arrays by dtype and values (NaN equal to NaN)."""
    import numpy as np

    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, pa.Array):
        assert a.type == b.type and a.equals(b), where
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, where


_ODD_EVENTS = [  # values the typed pass refuses or reads specially, among ordinary events
    {"cat": "kernel", "name": None, "ts": 5, "dur": None, "pid": "Spans", "args": {"grid": None, "device": 2**63}},
    {"cat": "kernel", "ts": 6, "args": {"grid": [1, 2, 3], "block": [4, 5, 6], "shared memory": 1.5}},
    {"cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 7.25, "dur": 1, "args": None},
    {"cat": "gpu_memset", "name": "Memset (Device)", "ts": 8, "dur": 2, "args": {"kind": None, "bytes": 2**70}},
    {"cat": "cpu_op", "name": "aten::mm", "ts": 9, "dur": 3, "pid": 1.5, "tid": None, "args": {"External id": 9}},
    {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10, "args": {"correlation": -1, "External id": 9}},
    {"cat": "ac2g", "name": "ac2g", "ph": "f", "id": 3, "ts": 11, "pid": 0, "tid": 7},
]
_REFUSED = [  # each makes the typed pass hand the piece to the field-by-field read
    {"cat": "kernel", "name": "k", "ts": 12, "args": {"device": True}},
    {"cat": "cpu_op", "name": "op", "ts": 13, "pid": False},
    {"cat": "kernel", "name": "k", "ts": 14, "args": {"grid": [1, 2]}},
    {"cat": "gpu_memcpy", "name": 7, "ts": 15},
    {"cat": "kernel", "name": "k", "ts": 16, "args": {"grid": [2**63, 1, 1]}},
    {"cat": "gpu_memcpy", "name": "m", "ts": 17, "args": {"kind": 3}},
    {"cat": "cuda_profiler_range", "name": "r", "ts": 18, "args": {"sm__cycles": 5}},
]


@pytest.mark.parametrize("sub_piece", [300, 4096, None])
@pytest.mark.parametrize("odd", [None, *range(len(_REFUSED))])
def test_the_typed_pass_reads_a_piece_as_the_field_by_field_read(monkeypatch, sub_piece, odd):
    """process_piece (typed, in sub-pieces whose columns are concatenated) gives exactly what _process_raw gives,
    or leaves the piece to it."""
    import random

    from gpuvar.demo.kineto_writer import write_kineto_demo
    from gpuvar.ingest import kineto_pieces
    from gpuvar.ingest.kineto_values import ts_decimal

    if sub_piece:
        monkeypatch.setattr(kineto_pieces, "SUB_PIECE", sub_piece)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_kineto_demo(Path(tmp) / "t.json", 60, seed=4, rank=0)
        events = json.loads((Path(tmp) / "t.json").read_text())["traceEvents"]
    events = events + _ODD_EVENTS * 3 + ([_REFUSED[odd]] if odd is not None else [])
    random.Random(odd).shuffle(events)
    data = json.dumps(events, indent=1).encode()
    whole = kineto_pieces._process_raw(data)
    if odd is not None:
        with pytest.raises((kineto_pieces._Refused, ValueError)):
            kineto_pieces._strict_piece(data)
    else:
        _same(kineto_pieces._strict_piece(data), whole)
    result = kineto_pieces.process_piece(data)  # either, and the ts texts parsed
    for cols in [whole["gpu"], *whole["host"].values()]:
        cols["ts"] = ts_decimal(cols["ts"], len(cols["cat"]))
    _same(result, whole)
    assert result["events"] == len(events)


@pytest.mark.parametrize("relative", [r for r in REAL if "h100-varlen-transformer" in r or "recsys" in r])
def test_the_typed_pass_reads_a_real_trace_as_the_field_by_field_read(relative, monkeypatch):
    from gpuvar.ingest import kineto_pieces

    with gzip.open(real_file(relative), "rb") as fh:
        data = json.dumps(json.load(fh)["traceEvents"]).encode()
    whole = kineto_pieces._process_raw(data)
    for sub_piece in (64 << 10, 1 << 30):
        monkeypatch.setattr(kineto_pieces, "SUB_PIECE", sub_piece)
        _same(kineto_pieces._strict_piece(data), whole)
