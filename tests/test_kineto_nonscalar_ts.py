"""A Kineto value that is not a number drops its own event only, under its own reason (issue 35, item 2).

Before: the ts texts of a decode piece were parsed together, one per line, so one `ts` holding an array or an
object with a raw newline (`[1,\\n2]`, valid JSON) shifted every line after it, and the whole piece's
timestamps became null: "all 2000 were dropped (missing or non-numeric ts/dur)" for the demo's rank-0 trace, or
every host op of the piece (then the kernels lost their call sites)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from gpuvar.ingest import ingest

BAD = "missing or non-numeric ts/dur"
TS = re.compile(rb'"ts": ([0-9.]+)')


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory) -> bytes:
    """The demo's kineto_rank0.json.gz (`gpuvar demo-data -o demo --seed 1`: 2000 kernels), decompressed."""
    from gpuvar.demo.kineto_writer import write_kineto_demo

    path = tmp_path_factory.mktemp("kineto") / "kineto_rank0.json.gz"
    write_kineto_demo(path, 2000, 1, rank=0, world=2)
    return gzip.decompress(path.read_bytes())


def _events(data: bytes, cat: bytes) -> list[re.Match]:
    """The `"ts": <number>` of each event of category `cat`, in file order (the demo writes ts after cat)."""
    marker = b'"cat": "' + cat + b'"'
    out, at = [], data.find(marker)
    while at >= 0:
        out.append(TS.search(data, at))
        at = data.find(marker, at + 1)
    return out


def _replace(data: bytes, matches: list[re.Match], field: bytes, value: bytes) -> bytes:
    """`data` with the value of `field` ("ts" or "dur") of each matched event replaced by `value`."""
    pieces, last = [], 0
    for m in matches:
        if field == b"ts":
            start, end = m.start(1), m.end(1)
        else:
            dur = re.compile(rb'"dur": ([0-9.]+)').search(data, m.end())
            start, end = dur.start(1), dur.end(1)
        pieces += [data[last:start], value]
        last = end
    return b"".join(pieces + [data[last:]])


def _ingest(tmp_path: Path, data: bytes) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    return ingest(path, tmp_path / "out")


@pytest.mark.parametrize("value", [b"[1,\n2]", b'{"a":\n1}', b"[1,\r2]", b"[[1],\r\n[2]]", b"[1, 2]"])
def test_reproducer_one_kernel_ts_with_a_raw_newline(demo_trace, tmp_path, value):
    kernels = _events(demo_trace, b"kernel")
    assert len(kernels) == 2000
    report = _ingest(tmp_path, _replace(demo_trace, [kernels[700]], b"ts", value))
    k = report["tables"]["kernels"]
    assert (k["rows_read"], k["rows_written"], k["dropped"]) == (2000, 1999, {BAD: 1})


@pytest.mark.parametrize("value", [b"[1,\n2]", b"{\n}"])
def test_one_kernel_dur_with_a_raw_newline(demo_trace, tmp_path, value):
    kernels = _events(demo_trace, b"kernel")
    k = _ingest(tmp_path, _replace(demo_trace, [kernels[3]], b"dur", value))["tables"]["kernels"]
    assert (k["rows_written"], k["dropped"]) == (1999, {BAD: 1})


def test_a_host_op_ts_with_a_raw_newline_costs_its_own_launch_only(demo_trace, tmp_path):
    """The host ops of a piece gave every kernel its launching op and call site: one bad op ts lost them all."""
    import pyarrow.parquet as pq

    clean = pq.read_table(_ingest(tmp_path / "a", demo_trace) and tmp_path / "a" / "out" / "kernels.parquet")
    ops = _events(demo_trace, b"cpu_op")
    damaged = _replace(demo_trace, [ops[10]], b"ts", b"[1,\n2]")
    _ingest(tmp_path / "b", damaged)
    after = pq.read_table(tmp_path / "b" / "out" / "kernels.parquet")
    assert after.num_rows == clean.num_rows
    lost = sum(a != b for a, b in zip(clean.column("launch_op").to_pylist(), after.column("launch_op").to_pylist()))
    assert lost <= 1, f"{lost} kernels lost their launching op"


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "two-workers"])
@pytest.mark.parametrize("value", [b"[1,\n2]", b'{"x": [\r\n1]}'])
def test_one_bad_ts_per_piece_at_every_position_in_the_piece(demo_trace, tmp_path, monkeypatch, workers, value):
    """Pieces of 16 KB (the decoder's cut, normally 8 MB): a bad ts every 37th kernel falls at the start, the
    middle and the end of pieces, in the typed pass and in the field-by-field one, in a worker or not. Exactly
    the damaged kernels are dropped; every other keeps its exact start."""
    import pyarrow.parquet as pq

    from gpuvar.ingest import json_stream, kineto

    monkeypatch.setattr(json_stream, "CHUNK", 16 << 10)
    if workers:
        monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
        monkeypatch.setenv("GPUVAR_KINETO_WORKERS", str(workers))
    else:
        monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "0")
    clean = pq.read_table(_ingest(tmp_path / "a", demo_trace) and tmp_path / "a" / "out" / "kernels.parquet")
    kernels = _events(demo_trace, b"kernel")
    bad = kernels[::37]
    report = _ingest(tmp_path / "b", _replace(demo_trace, bad, b"ts", value))
    k = report["tables"]["kernels"]
    assert (k["rows_read"], k["rows_written"], k["dropped"]) == (2000, 2000 - len(bad), {BAD: len(bad)})
    kept = pq.read_table(tmp_path / "b" / "out" / "kernels.parquet").column("start").to_pylist()
    bad_starts = set(clean.column("start").to_pylist()[::37])  # the demo's kernels are in start order
    assert sorted(kept) == sorted(s for s in clean.column("start").to_pylist() if s not in bad_starts)
