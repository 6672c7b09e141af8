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
