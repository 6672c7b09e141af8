"""Fuzzing the Kineto reader with the promise of tests/test_fuzz_readers.py: a damaged trace (malformed JSON,
truncated or corrupt gzip, values of the wrong type) is ingested with balanced counts, or rejected with a
one-line error naming the file. Never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import tempfile
from pathlib import Path

import pytest
from conftest import real_file
from fuzz_cases import BAD_VALUES, mutate_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvar.errors import GpuvarError
from gpuvar.ingest import ingest

EXAMPLES = int(os.environ.get("GPUVAR_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
BYTE_MUTATIONS = (
    "flip",
    "truncate",
    "truncate_newline",
    "drop_char",
    "insert_garbage",
    "gzip_truncate",
    "gzip_flip",
    "gzip_concat",
)
VALUE_MUTATIONS = (
    "ts",
    "dur",
    "args",
    "grid",
    "name",
    "cat",
    "event",
    "device",
    "bytes",
    "top",
    "shuffle",
    "duplicate",
    "empty",
)
WRONG = [None, "abc", "", [], [1, 2], {}, {"a": 1}, True, -1, 1.5, 1e308, 2**70, -(2**70), "1e400", "NaN"] + list(
    BAD_VALUES
)
_SEEDS: dict[str, bytes] = {}


def _seed(kind: str) -> bytes:
    """Decompressed JSON of a seed trace: a small generated one, or the real ROCm (MI250) trace."""
    if kind == "real_rocm":
        return gzip.decompress(
            real_file(
                "pytorch-kineto-trace/hta-mi250-minitoy-rocm62/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
            ).read_bytes()
        )
    if kind not in _SEEDS:
        from gpuvar.demo.kineto_writer import write_kineto_demo

        with tempfile.TemporaryDirectory() as tmp:
            write_kineto_demo(Path(tmp) / "seed.json", 120, seed=3, rank=1, world=2)
            _SEEDS[kind] = (Path(tmp) / "seed.json").read_bytes()
    return _SEEDS[kind]


def mutate_bytes(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    if mutation in ("flip", "truncate", "truncate_newline"):
        return mutate_text(data, mutation, rnd)
    if mutation == "drop_char":  # a lost brace, bracket, comma or quote: malformed JSON
        spots = [i for i, b in enumerate(data) if b in b'{}[],":']
        cut = rnd.choice(spots)
        return data[:cut] + data[cut + 1 :]
    if mutation == "insert_garbage":
        at = rnd.randrange(len(data))
        return data[:at] + rnd.choice([b"}", b"]", b",", b"{", b'"', b"\x00", b"\xff\xfe", b"NaN", b"//"]) + data[at:]
    packed = gzip.compress(data, mtime=0)
    if mutation == "gzip_truncate":
        return packed[: rnd.randrange(1, len(packed))]
    if mutation == "gzip_flip":
        buf = bytearray(packed)
        for _ in range(rnd.randint(1, 5)):
            buf[rnd.randrange(10, len(buf))] = rnd.randrange(256)
        return bytes(buf)
    return packed + packed[: rnd.randrange(len(packed))]  # gzip_concat: a second, partial member


def mutate_values(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """Valid JSON with values of the wrong type or shape (a re-serialised trace)."""
    doc = json.loads(data)
    events = doc["traceEvents"]
    gpu = [e for e in events if isinstance(e, dict) and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    picked = rnd.sample(gpu, rnd.randint(1, min(5, len(gpu)))) if gpu else []
    for e in picked:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if mutation in ("ts", "dur", "name", "cat"):
            e[mutation] = rnd.choice(WRONG)
        elif mutation == "args":
            e["args"] = rnd.choice(WRONG)
        elif mutation == "grid":
            args[rnd.choice(["grid", "block"])] = rnd.choice(WRONG + [[1, 2, 3, 4], [1.5, 2, 3], ["1", 2, 3]])
        elif mutation in ("device", "bytes"):
            args[
                {
                    "device": rnd.choice(["device", "stream", "correlation", "registers per thread"]),
                    "bytes": rnd.choice(["bytes", "memory bandwidth (GB/s)", "shared memory", "blocks per SM"]),
                }[mutation]
            ] = rnd.choice(WRONG)
    if mutation == "event":
        events[rnd.randrange(len(events))] = rnd.choice(WRONG)
    elif mutation == "top":
        key = rnd.choice(["traceEvents", "distributedInfo", "deviceProperties", "schemaVersion"])
        doc[key] = rnd.choice(WRONG + [{"rank": "x"}, [{"id": "0", "warpSize": 0}], [{"id": 0, "warpSize": -64}]])
    elif mutation == "shuffle":
        rnd.shuffle(events)
    elif mutation == "duplicate":
        events.extend(rnd.sample(gpu, len(gpu) // 2))
    elif mutation == "empty":
        doc["traceEvents"] = [e for e in events if rnd.random() < 0.02]
    return json.dumps(doc, indent=rnd.choice([None, 1])).encode()


def check_case(data: bytes, name: str) -> None:
    """Ingest succeeds with balanced counts, or fails with a one-line GpuvarError naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            report = ingest(path, Path(tmp) / "out", fmt="pytorch-kineto")
        except GpuvarError as exc:
            msg = str(exc)
            assert str(path) in msg and "\n" not in msg, msg
            return
        for table, t in report["tables"].items():
            assert t["rows_read"] == t["rows_written"] + sum(t["dropped"].values()), (table, t)


@pytest.mark.timeout(max(120, 3 * EXAMPLES))
@pytest.mark.parametrize("kind", ["generated", "real_rocm"])
@SETTINGS
@given(mutation=st.sampled_from(BYTE_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_kineto_byte_damage(kind, mutation, salt):
    check_case(mutate_bytes(_seed(kind), mutation, random.Random(salt)), "trace.pt.trace.json.gz")


@pytest.mark.timeout(max(120, 3 * EXAMPLES))
@pytest.mark.parametrize("kind", ["generated", "real_rocm"])
@SETTINGS
@given(mutation=st.sampled_from(VALUE_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_kineto_wrong_types(kind, mutation, salt):
    check_case(mutate_values(_seed(kind), mutation, random.Random(salt)), "trace.json")


def test_bad_ts_and_negative_dur_are_dropped_and_counted(tmp_path):
    events = [
        {"cat": "kernel", "name": "k", "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7}}
        for ts, dur in [(10, 1), ("abc", 1), (None, 1), (12, -3), (13, "x"), (14.5, 2)]
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    report = ingest(path, tmp_path / "out")
    k = report["tables"]["kernels"]
    assert (k["rows_read"], k["rows_written"]) == (6, 2)
    assert k["dropped"] == {"missing or non-numeric ts/dur": 3, "negative dur (end before start)": 1}


def _pieces(path: Path, remote: bool, mapped: bool = False) -> list:
    """Every piece's compact columns, read in-process or through the pipelined path (the worker function run
    in-process behind a Future), with small chunks so that a damaged file crosses many cuts."""
    from concurrent.futures import Future

    from gpuvar.ingest import kineto
    from gpuvar.ingest.compression import open_binary
    from gpuvar.ingest.json_stream import TraceStream

    def submit(data: bytes, at: int) -> Future:
        future = Future()
        future.set_result(kineto._piece_in_worker(data))
        return future

    with open_binary(path) as fh:
        stream = TraceStream(fh, path, chunk=4096, mapped=mapped)
        return [repr(_plain(p)) for p in stream.pieces(kineto.process_piece, remote=submit if remote else None)]


def _plain(value):
    """A piece's result with its Arrow arrays as (type, values): comparable by repr (an Arrow array's repr
    holds its address)."""
    import pyarrow as pa

    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, pa.Array):
        return (str(value.type), value.to_pylist())
    return value


@pytest.mark.timeout(max(120, 3 * EXAMPLES))
@SETTINGS
@given(mutation=st.sampled_from(BYTE_MUTATIONS[:5]), salt=st.integers(0, 2**32 - 1))
def test_pipelined_reading_matches_in_process_reading(mutation, salt):
    """Worker-decoded pieces (wrong cuts redone in-process) give exactly the in-process result, or the same error."""
    data = mutate_bytes(_seed("generated"), mutation, random.Random(salt))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_bytes(data)
        outcomes = []
        for remote, mapped in ((False, False), (True, False), (True, True)):
            try:
                outcomes.append(_pieces(path, remote, mapped))
            except GpuvarError as exc:  # the same error; where it is reported depends on where pieces were cut
                outcomes.append(re.sub(r"byte \d+", "byte N", str(exc)))
        assert outcomes[0] == outcomes[1] == outcomes[2]


# --- issue 35 item 2: values that are not numbers, where the decoder cuts its pieces ---------------------------
NON_SCALAR = (b"[1,\n2]", b'{"a":\n1}', b"[1,\r2]", b"[\r\n]", b'[{"x": [1,\n2]}]', b'{\n"ts": 1\n}', b"[1, 2]", b"{}")
NOT_A_NUMBER = "missing or non-numeric ts/dur"
_FIELD = {field: re.compile(rb'"' + field.encode() + rb'": (-?[0-9.]+)') for field in ("ts", "dur")}


def _boundary_trace() -> bytes:
    """The demo's Kineto trace of 500 kernels (kernels, copies, sets, host ops, runtime calls), decompressed."""
    if "boundary" not in _SEEDS:
        from gpuvar.demo.kineto_writer import write_kineto_demo

        with tempfile.TemporaryDirectory() as tmp:
            write_kineto_demo(Path(tmp) / "seed.json", 500, seed=1, rank=0, world=2)
            _SEEDS["boundary"] = (Path(tmp) / "seed.json").read_bytes()
    return _SEEDS["boundary"]


def _cuts(data: bytes, chunk: int) -> list[int]:
    """Where the decoder cuts `data` into pieces of about `chunk` bytes: the offset of each piece's first byte."""
    import io

    from gpuvar.ingest.json_stream import TraceStream
    from gpuvar.ingest.kineto_pieces import process_piece

    pieces = []

    def decode(piece: bytes):
        pieces.append(bytes(piece[1:-1]))  # `[piece]`
        return process_piece(piece)

    for _ in TraceStream(io.BytesIO(data), Path("cuts.json"), chunk=chunk).pieces(decode):
        pass
    starts, at = [], 0
    for piece in pieces:
        at = data.index(piece, at)
        starts.append(at)
        at += len(piece)
    return starts


def _damage_near_cuts(data: bytes, cat: str, field: str, value: bytes, chunk: int, side: str) -> tuple[bytes, int]:
    """`data` with `field` of the `cat` event nearest before and/or after a cut of the decoder (at most 40 cuts,
    spread over the file) set to `value`; (the damaged trace, events damaged)."""
    marker = b'"cat": "' + cat.encode() + b'"'
    spans, at = [], data.find(marker)
    while at >= 0:  # the demo writes ts and dur after cat, in each event
        m = _FIELD[field].search(data, at)
        spans.append((m.start(1), m.end(1)))
        at = data.find(marker, at + 1)
    cuts = _cuts(data, chunk)[1:]
    chosen = set()
    for cut in cuts[:: max(1, len(cuts) // 40)]:
        before = [s for s in spans if s[0] < cut]
        after = [s for s in spans if s[0] >= cut]
        if side in ("before", "both") and before:
            chosen.add(before[-1])
        if side in ("after", "both") and after:
            chosen.add(after[0])
    pieces, last = [], 0
    for start, end in sorted(chosen):
        pieces += [data[last:start], value]
        last = end
    return b"".join(pieces + [data[last:]]), len(chosen)


def _clean_tables() -> tuple[dict, int]:
    """The undamaged trace's ingest tables and its kernels without a launching op (read once: the reader gives
    the same for every piece size and worker count, which test_pipelined_reading_matches_in_process_reading and
    tests/test_ingest_kineto.py check)."""
    if "boundary_clean" not in _SEEDS:
        import pyarrow.parquet as pq

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "clean.json"
            path.write_bytes(_boundary_trace())
            tables = ingest(path, Path(tmp) / "out", fmt="pytorch-kineto")["tables"]
            missing = pq.read_table(Path(tmp) / "out" / "kernels.parquet").column("launch_op").null_count
        _SEEDS["boundary_clean"] = json.dumps([tables, missing]).encode()
    tables, missing = json.loads(_SEEDS["boundary_clean"])
    return tables, missing


@pytest.mark.long  # ~2 s a case (many small pieces, a worker pool): in `make test`, not `make test-fast`
@pytest.mark.timeout(max(120, 6 * EXAMPLES))
@settings(SETTINGS, max_examples=max(12, EXAMPLES // 3))
@given(
    chunk=st.sampled_from([1 << 10, 3 << 10, 16 << 10]),
    cat=st.sampled_from(["kernel", "gpu_memcpy", "cpu_op"]),
    field=st.sampled_from(["ts", "dur"]),
    value=st.sampled_from(NON_SCALAR),
    side=st.sampled_from(["before", "after", "both"]),
    workers=st.sampled_from([0, 2]),
)
def test_non_scalar_ts_and_dur_at_piece_boundaries(chunk, cat, field, value, side, workers):
    """A ts or dur that is an array or object (raw newlines, CR, nested) on the events at the decoder's cuts: only
    those events are dropped, each counted as not a number; a host op's loses at most its own kernel's launching op
    (the long run: GPUVAR_FUZZ_EXAMPLES=5000, a third of them here)."""
    import pyarrow.parquet as pq

    from gpuvar.ingest import json_stream, kineto

    damaged, n = _damage_near_cuts(_boundary_trace(), cat, field, value, chunk, side)
    assert n > 0
    clean, clean_missing = _clean_tables()
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(json_stream, "CHUNK", chunk)
        mp.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
        mp.setenv("GPUVAR_KINETO_WORKERS", str(workers))
        path = Path(tmp) / "damaged.json"
        path.write_bytes(damaged)
        tables = ingest(path, Path(tmp) / "out", fmt="pytorch-kineto")["tables"]
        missing = pq.read_table(Path(tmp) / "out" / "kernels.parquet").column("launch_op").null_count
    table = {"kernel": "kernels", "gpu_memcpy": "memcpy", "cpu_op": "kernels"}[cat]
    before, after = clean[table], tables[table]
    assert after["rows_read"] == before["rows_read"] == after["rows_written"] + sum(after["dropped"].values())
    if cat == "cpu_op":
        assert after["rows_written"] == before["rows_written"]
        assert missing - clean_missing <= n, "a damaged host op costs at most its own kernel's launching op"
    else:
        assert after["rows_written"] == before["rows_written"] - n
        assert after["dropped"] == {**before["dropped"], NOT_A_NUMBER: before["dropped"].get(NOT_A_NUMBER, 0) + n}
