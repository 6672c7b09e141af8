"""PyTorch profiler (Kineto) Chrome-trace JSON: GPU kernels and memory copies/sets.

Events (`traceEvents`, streamed: see json_stream): `cat: kernel` -> kernels table; `gpu_memcpy` and `gpu_memset`
-> memcpy table; without any kernel event, `cuda_profiler_range` events (Kineto's CUPTI range profiler: one
range per kernel, args = the requested counters) become the kernel rows, counters as numeric columns, with
null start/end (the range's ts/dur time the replay, not the kernel; a note says so).
  * ts/dur are microseconds. ts (epoch µs with a fraction, ~1.7e15) is converted from its decimal text exactly,
    rounded half-to-even to integer ns (a float has only ~0.25 µs resolution there); dur is small enough for
    float arithmetic (rounded to ns).
  * args: device, stream, correlation, grid [x,y,z], block [x,y,z], registers per thread, shared memory
    (Kineto reports static + dynamic shared memory: lds_per_workgroup), blocks per SM, warps per SM,
    est. achieved occupancy %, queued, context, External id. ROCm builds carry only device, stream, correlation
    and kind; their launch columns are null.
  * copies: bytes, memory bandwidth (GB/s); the kind comes from the name ('Memcpy HtoD (Pageable -> Device)' ->
    copy_kind_name 'HtoD', copy_kind 1, memory_kinds 'Pageable -> Device', as the nsys reader spells them);
    memsets are kept with copy_kind_name 'Memset' and a null copy_kind.
  * wave_size: deviceProperties[].warpSize of the event's device (64 on AMD), else 32.
  * rank: distributedInfo.rank when the trace has it (a note records rank and world size).
launch_id = row rank by (start, correlation), from 0. Events with a missing or non-numeric ts/dur, or a negative
dur, are dropped and counted.
"""

from __future__ import annotations

import gc
import io
import multiprocessing as mp
import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal, InvalidOperation
from itertools import compress, repeat
from operator import attrgetter, eq
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from gpuvar.errors import InputError
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.compression import compression_of, open_binary, read_raw_head
from gpuvar.ingest.json_stream import DecodeFailed, TraceStream
from gpuvar.ingest.nsys import MEMCPY_OPER_FALLBACK, copy_kind_short
from gpuvar.schema import int_column

FORMAT = "pytorch-kineto"
PARALLEL_MIN_BYTES = 48 << 20  # smaller traces: starting worker processes costs more than it saves
_NULL = msgspec.Raw(b"null")
_KINETO_MARKERS = re.compile(
    rb'"(schemaVersion|deviceProperties|distributedInfo)"|"cat"\s*:\s*"(kernel|gpu_memcpy|cpu_op|cuda_runtime)"'
)
COPY_CODES = {copy_kind_short(v): k for k, v in MEMCPY_OPER_FALLBACK.items()}
_COPY_NAME = re.compile(r"^\s*Memcpy\s+(\S+)\s*(?:\((.*)\))?")
KERNEL_ARGS = {  # Kineto arg -> canonical (or gpuvar extra) column
    "device": "device_id", "stream": "stream_id", "correlation": "correlation_id",
    "registers per thread": "registers_per_thread", "shared memory": "lds_per_workgroup",
    "blocks per SM": "blocks_per_sm", "warps per SM": "warps_per_sm",
    "est. achieved occupancy %": "est_achieved_occupancy_pct", "External id": "external_id",
}
COPY_ARGS = {
    "device": "device_id", "stream": "stream_id", "correlation": "correlation_id", "bytes": "bytes",
    "memory bandwidth (GB/s)": "bandwidth_gb_s", "External id": "external_id",
}
FLOAT_COLUMNS = {"blocks_per_sm", "warps_per_sm", "est_achieved_occupancy_pct", "bandwidth_gb_s"}


class _Event(msgspec.Struct, gc=False):
    """The fields read from every event; ts and args stay raw until the event is known to matter.

    gc=False: millions of these are alive at once, and cyclic-GC passes over them cost more than the decode."""

    cat: str | None = None
    name: msgspec.Raw = _NULL
    ts: msgspec.Raw = _NULL
    dur: msgspec.Raw = _NULL
    args: msgspec.Raw = _NULL


def _args_struct(name: str, mapping: dict[str, str], raw: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> type:
    fields = [(col, Any, msgspec.field(default=None, name=key)) for key, col in mapping.items()]
    fields += [(key, msgspec.Raw, msgspec.field(default=_NULL)) for key in raw]
    fields += [(key, Any, msgspec.field(default=None)) for key in extra]
    return msgspec.defstruct(name, fields, gc=False)


_CAT, _NAME, _TS, _DUR = attrgetter("cat"), attrgetter("name"), attrgetter("ts"), attrgetter("dur")
_COPY_CATS = frozenset(("gpu_memcpy", "gpu_memset"))
_KernelArgs = _args_struct("_KernelArgs", KERNEL_ARGS, raw=("grid", "block"))
_CopyArgs = _args_struct("_CopyArgs", COPY_ARGS, extra=("kind",))
_DIMS = re.compile(rb"(?:\[-?\d+,-?\d+,-?\d+\],)*\[-?\d+,-?\d+,-?\d+\]")
_EVENTS = msgspec.json.Decoder(list[_Event])
_ANY = msgspec.json.Decoder()
_DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)  # ValidationError is a DecodeError
_STRINGS = msgspec.json.Decoder(list[str])
_FLOATS = msgspec.json.Decoder(list[float | None])
_ARGS = {
    "kernel": msgspec.json.Decoder(list[_KernelArgs | None]),
    "copy": msgspec.json.Decoder(list[_CopyArgs | None]),
}


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object with, in the first 64 KiB, a traceEvents key and a Kineto marker (schemaVersion,
    deviceProperties, distributedInfo, or a kernel / cpu_op / cuda_runtime event), or both schemaVersion and
    deviceProperties (metadata so long that the events start later)."""
    if Path(path).is_dir():
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return False
    if b'"traceEvents"' in text:
        return _KINETO_MARKERS.search(text) is not None
    return b'"schemaVersion"' in text and b'"deviceProperties"' in text


# --- decoding ----------------------------------------------------------------------------------------------


def _decode_events(data: bytes) -> list:
    """Typed decode of one piece; elements that are not objects are skipped (they carry no GPU activity)."""
    try:
        return _EVENTS.decode(data)
    except msgspec.ValidationError:
        pass
    except _DECODE_ERRORS as exc:
        raise DecodeFailed(str(exc)) from None
    try:
        items = _ANY.decode(data)
    except _DECODE_ERRORS as exc:
        raise DecodeFailed(str(exc)) from None
    events = []
    for item in items:
        if isinstance(item, dict):
            try:
                events.append(_EVENTS.decode(b"[" + msgspec.json.encode(item) + b"]")[0])
            except (*_DECODE_ERRORS, TypeError):
                continue
    return events


def _json(raw):
    """One raw JSON value decoded, or None when it cannot be (invalid UTF-8 in a string, ...)."""
    try:
        return _ANY.decode(raw)
    except (*_DECODE_ERRORS, TypeError):
        return None


def _decode_args(kind: str, raws: list) -> list:
    """Args objects of one piece's events in one decode call; an event whose args do not fit gets None."""
    try:
        return _ARGS[kind].decode(b"[" + b",".join(raws) + b"]")
    except _DECODE_ERRORS:
        out = []
        for raw in raws:
            try:
                out.append(_ARGS[kind].decode(b"[" + bytes(raw) + b"]")[0])
            except _DECODE_ERRORS:
                out.append(None)
        return out


def _decode_names(raws: list) -> list:
    """Raw JSON names -> str (a name that is not a string keeps its JSON text, invalid UTF-8 replaced)."""
    try:
        return _STRINGS.decode(b"[" + b",".join(raws) + b"]")
    except _DECODE_ERRORS:
        names = []
        for raw in raws:
            value = _json(raw)
            names.append(value if isinstance(value, str) else bytes(raw).decode("utf-8", "replace"))
        return names


def dur_to_us(raws: list) -> np.ndarray:
    """Raw JSON dur texts -> float64 µs (NaN when not a number)."""
    if not raws:
        return np.array([], dtype=np.float64)
    try:
        return np.array(_FLOATS.decode(b"[" + b",".join(raws) + b"]"), dtype=np.float64)
    except (*_DECODE_ERRORS, TypeError, ValueError):
        return _numbers([_json(r) for r in raws], floats=True)


def ts_to_ns(joined: bytes, n: int) -> pa.Array:
    """n raw JSON ts texts (µs) joined by newlines -> int64 ns, exact decimal arithmetic, half-to-even; null
    where not a number (a JSON ts text never holds a raw newline: strings escape it)."""
    if not n:
        return pa.array([], type=pa.int64())
    try:
        table = pcsv.read_csv(
            io.BytesIO(joined),
            read_options=pcsv.ReadOptions(column_names=["v"]),
            parse_options=pcsv.ParseOptions(quote_char=False),
            convert_options=pcsv.ConvertOptions(column_types={"v": pa.decimal128(28, 9)}, null_values=["null"]),
        )
        values = table.column("v")
        if len(values) == n:
            scaled = pc.multiply(values, pa.scalar(1000, pa.decimal128(4, 0)))
            return pc.cast(pc.round(scaled, 0, round_mode="half_to_even"), pa.int64()).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    texts = joined.split(b"\n")
    return pa.array([_ts_one(t) for t in texts] if len(texts) == n else [None] * n, type=pa.int64())


def _ts_one(text: bytes) -> int | None:
    try:
        value = (Decimal(text.decode("ascii")) * 1000).to_integral_value()
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    return int(value) if value.is_finite() and abs(value) < 2**63 else None


def _numbers(values: list, floats: bool = False) -> np.ndarray | pd.Series:
    """Column values as int64 / float64 numpy (fast path) or a nullable Series (None, strings, bools)."""
    if floats:
        try:
            return np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            pass
    else:
        try:
            arr = np.array(values)
        except (TypeError, ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind == "i" and arr.shape == (len(values),):
            return arr.astype(np.int64, copy=False)
    series = pd.Series(values, dtype=object)
    series = series.where(series.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)))
    numeric = pd.to_numeric(series, errors="coerce").astype("float64")
    return numeric if floats else int_column(numeric)  # NaN, inf and values beyond int64 become null


def _dims(raws: list, prefix: str) -> dict:
    """Raw [x, y, z] JSON lists -> prefix_x/_y/_z columns; null where the value is not a 3-list of integers.

    The usual case is parsed as text in one numpy call (a regular expression first proves every value is a
    3-list of integers): building a Python list per launch would cost more than decoding the event."""
    if raws:
        text = b",".join(raws).translate(None, b" \t\r\n")
        if _DIMS.fullmatch(text):
            arr = np.fromstring(text.translate(None, b"[]"), dtype=np.int64, sep=",").reshape(len(raws), 3)
            return {f"{prefix}_{a}": arr[:, i] for i, a in enumerate("xyz")}
    values = [_json(r) for r in raws]
    cols = {}
    for i, axis in enumerate("xyz"):
        cols[f"{prefix}_{axis}"] = _numbers([v[i] if isinstance(v, list) and len(v) == 3 else None for v in values])
    return cols


# --- one piece of the event array ----------------------------------------------------------------------------


def _columns(events: list, args: list, mapping: dict[str, str], empty, dims=(), extra=()) -> dict:
    """Compact, picklable columns of one piece's events of one table (no reference to the piece's bytes).

    names: the piece's distinct names, name_code: index into them; ts_raw: the ts texts joined by newlines (the
    exact conversion needs pyarrow, which runs in the main process only)."""
    codes, uniques = pd.factorize(np.array(_decode_names(list(map(_NAME, events))), dtype=object),
                                  use_na_sentinel=False)
    if None in args:
        args = [a if a is not None else empty for a in args]
    cols = {
        "names": [u if isinstance(u, str) else str(u) for u in uniques],
        "name_code": codes.astype(np.int32),
        "ts_raw": b"\n".join(map(_TS, events)),
        "dur_us": dur_to_us(list(map(_DUR, events))),
    }
    for column in mapping.values():
        cols[column] = _numbers(list(map(attrgetter(column), args)), floats=column in FLOAT_COLUMNS)
    for field in dims:
        cols.update(_dims(list(map(attrgetter(field), args)), field))
    for field in extra:
        cols[field] = list(map(attrgetter(field), args))
    return cols


def process_piece(data: bytes) -> dict:
    """Decode one piece (`[event, ...]` bytes) into compact columns per table; DecodeFailed when not valid JSON."""
    events = _decode_events(data)
    cats = list(map(_CAT, events))  # selections below run in C (map + compress), not a Python loop per event
    ks = list(compress(events, map(eq, cats, repeat("kernel"))))  # (str.__eq__(None) is NotImplemented: truthy)
    cs = list(compress(events, map(_COPY_CATS.__contains__, cats)))
    rs = list(compress(events, map(eq, cats, repeat("cuda_profiler_range"))))
    part = {"events": len(events), "kernel": None, "copy": None,
            "ranges": [(_decode_names([e.name])[0], _json(e.args)) for e in rs]}
    del events
    if ks:
        part["kernel"] = _columns(ks, _decode_args("kernel", [e.args for e in ks]), KERNEL_ARGS, _KernelArgs(),
                                  dims=("grid", "block"))
    if cs:
        part["copy"] = _columns(cs, _decode_args("copy", [e.args for e in cs]), COPY_ARGS, _CopyArgs(),
                                extra=("kind",))
    return part


def _piece_in_worker(piece: bytes) -> dict | None:
    """process_piece of `[piece]` in a worker process: None tells the main process the cut was wrong (it re-reads
    there)."""
    gc.disable()
    try:
        return process_piece(b"[" + piece + b"]")
    except DecodeFailed:
        return None


# --- accumulation ------------------------------------------------------------------------------------------


class _Table:
    """Columns of one output table, gathered piece by piece; names mapped to one global dictionary."""

    def __init__(self):
        self.names: dict[str, int] = {}
        self.parts: list[dict] = []
        self.rows = 0

    def extend(self, cols: dict) -> None:
        glob = np.array([self.names.setdefault(n, len(self.names)) for n in cols.pop("names")], dtype=np.int32)
        cols["name_code"] = glob[cols["name_code"]]
        n = len(cols["name_code"])
        cols["ts_ns"] = ts_to_ns(cols.pop("ts_raw"), n)
        self.parts.append(cols)
        self.rows += n

    def frame(self) -> dict:
        if not self.parts:
            return {}
        cols = {}
        for key in self.parts[0]:
            values = [p[key] for p in self.parts]
            if isinstance(values[0], pa.Array):
                cols[key] = pa.chunked_array(values, type=pa.int64())
            elif isinstance(values[0], list):
                cols[key] = [v for part in values for v in part]
            elif all(isinstance(v, np.ndarray) for v in values):
                cols[key] = np.concatenate(values)
            else:
                cols[key] = pd.concat([pd.Series(v) for v in values], ignore_index=True)
        return cols


# --- frames ------------------------------------------------------------------------------------------------


def _timing(cols: dict, out: ReaderOutput, table: str) -> tuple[dict, np.ndarray]:
    """start/end/duration in ns; returns the columns and the keep mask after the documented drops."""
    start = cols.pop("ts_ns")
    start_np = pc.fill_null(start, 0).to_numpy()
    start_null = pc.is_null(start).to_numpy(zero_copy_only=False)
    dur = np.asarray(cols.pop("dur_us"), dtype=np.float64)
    bad_dur = ~np.isfinite(dur) | (np.abs(dur) >= 2.0**53 / 1000)
    missing = start_null | bad_dur
    negative = ~missing & (dur < 0)
    out.drop(table, "missing or non-numeric ts/dur", int(missing.sum()))
    out.drop(table, "negative dur (end before start)", int(negative.sum()))
    dur_ns = np.round(np.where(missing, 0, dur) * 1000).astype(np.int64)
    keep = ~(missing | negative)
    cols["start"] = start_np
    cols["end"] = start_np + dur_ns
    cols["duration"] = dur_ns
    return cols, keep


def _launch_ids(start: np.ndarray, corr) -> np.ndarray:
    """Rank of each row by (start, correlation), from 0."""
    if len(start) < 2 or (start[1:] > start[:-1]).all():
        return np.arange(len(start), dtype=np.int64)
    corr = np.zeros(len(start), np.int64) if corr is None else np.asarray(
        int_column(pd.Series(corr)).fillna(-1), dtype=np.int64)
    order = np.lexsort((corr, start))
    launch = np.empty(len(order), dtype=np.int64)
    launch[order] = np.arange(len(order), dtype=np.int64)
    return launch


def _names(codes: np.ndarray, names: dict[str, int]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=list(names))


def _finish(cols: dict, keep: np.ndarray, names: dict) -> pd.DataFrame:
    cols["kernel_name"] = _names(cols.pop("name_code"), names)
    frame = pd.DataFrame({k: (v if not isinstance(v, list) else pd.Series(v, dtype=object)) for k, v in cols.items()})
    if not keep.all():
        frame = frame.loc[keep].reset_index(drop=True)
    return frame


def _wave_sizes(device, warp: dict[int, int]) -> np.ndarray:
    dev = np.asarray(int_column(pd.Series(device)).fillna(-1), dtype=np.int64)
    if not warp:
        return np.full(len(dev), 32, dtype=np.int64)
    return np.array([warp.get(int(d), 32) for d in dev], dtype=np.int64) if len(set(warp.values())) > 1 else \
        np.full(len(dev), next(iter(warp.values())), dtype=np.int64)


def _kernels(table: _Table, warp: dict, out: ReaderOutput) -> pd.DataFrame:
    cols, keep = _timing(table.frame(), out, "kernels")
    cols["wave_size"] = _wave_sizes(cols["device_id"], warp)
    frame = _finish(cols, keep, table.names)
    frame["launch_id"] = _launch_ids(frame["start"].to_numpy(), frame["correlation_id"])
    return frame


def _copy_kinds(names: dict[str, int], codes: np.ndarray, kinds: list) -> dict:
    """copy_kind_name / copy_kind / memory_kinds from the event name ('Memcpy HtoD (Pageable -> Device)');
    ROCm's args.kind ('HtoD') when the name has none; memsets are 'Memset'."""
    by_name = []
    for name in names:
        m = _COPY_NAME.match(name)
        if m:
            by_name.append((m.group(1), m.group(2)))
        elif name.strip().lower().startswith("memset"):
            by_name.append(("Memset", None))
        else:
            by_name.append((None, None))
    kind = [by_name[c][0] for c in codes]
    kind = [k if k is not None else (a if isinstance(a, str) else None) for k, a in zip(kind, kinds)]
    return {
        "copy_kind_name": pd.Categorical(kind),
        "copy_kind": pd.array([COPY_CODES.get(k) for k in kind], dtype="Int64"),
        "memory_kinds": pd.Categorical([by_name[c][1] for c in codes]),
    }


def _memcpy(table: _Table, out: ReaderOutput) -> pd.DataFrame:
    cols, keep = _timing(table.frame(), out, "memcpy")
    cols.update(_copy_kinds(table.names, cols["name_code"], cols.pop("kind")))
    cols["name"] = _names(cols.pop("name_code"), table.names)
    frame = pd.DataFrame(cols)
    if not keep.all():
        frame = frame.loc[keep].reset_index(drop=True)
    frame["launch_id"] = _launch_ids(frame["start"].to_numpy(), frame["correlation_id"])
    return frame


def _range_kernels(ranges: list[tuple[str, dict]]) -> pd.DataFrame:
    """One row per CUPTI profiler range: counters as numeric columns, no timeline (like Nsight Compute data)."""
    counters = pd.DataFrame([args if isinstance(args, dict) else {} for _, args in ranges])
    counters = counters.apply(pd.to_numeric, errors="coerce") if len(counters.columns) else counters
    frame = pd.DataFrame({"kernel_name": pd.Categorical([n for n, _ in ranges])})
    frame["launch_id"] = np.arange(len(frame), dtype=np.int64)
    return pd.concat([frame, counters.reset_index(drop=True)], axis=1)


# --- entry point -------------------------------------------------------------------------------------------


def _notes(top: dict, counts: dict, out: ReaderOutput) -> tuple[dict[int, int], int | None]:
    """deviceProperties, distributedInfo and event counts as notes; returns (device -> warp size, rank)."""
    warp, names = {}, []
    props = top.get("deviceProperties")
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and isinstance(p.get("id"), int):
            if isinstance(p.get("warpSize"), int) and p["warpSize"] > 0:
                warp[p["id"]] = p["warpSize"]
            names.append(f"{p['id']}: {p.get('name', '?')}")
    if names:
        out.notes.append("GPUs (deviceProperties): " + "; ".join(names))
    info = top.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    if rank is not None:
        extra = "".join(f", {k} {info[k]}" for k in ("world_size", "backend") if k in info)
        out.notes.append(f"distributedInfo: rank {rank}{extra} (recorded in the rank column)")
    if "schemaVersion" in top:
        out.notes.append(f"Kineto trace schemaVersion {top['schemaVersion']}")
    out.notes.append(f"{counts['events']} trace events, of which {counts['kernel']} kernel, {counts['copy']} "
                     f"gpu_memcpy/gpu_memset, {counts['range']} cuda_profiler_range")
    return warp, rank


def _workers(path: Path) -> int:
    """Worker processes for the decode: 2 (or GPUVAR_KINETO_WORKERS) for a big trace on a machine with the cores
    and fork; 0 (in-process) otherwise."""
    try:
        wanted = int(os.environ.get("GPUVAR_KINETO_WORKERS", "2"))
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        size = os.path.getsize(path)
    except (ValueError, OSError):
        return 0
    compressed = size * 8 if compression_of(read_raw_head(path)) else size  # a rough decompressed size
    if wanted < 2 or cores < 2 or compressed < PARALLEL_MIN_BYTES or "fork" not in mp.get_all_start_methods():
        return 0
    return min(wanted, cores)


def _read_events(path: Path, kernels: _Table, copies: _Table, counts: Counter, ranges: list) -> TraceStream:
    """Stream the trace once, filling the tables; returns the stream (top-level keys, whether the array was seen).

    Big traces are decoded by worker processes (fork: they need no imports), pieces in order, the main
    process reading, cutting and converting timestamps; see TraceStream.pieces for how a wrong cut is redone."""
    workers = _workers(path)
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) if workers else None
    try:
        with open_binary(path) as fh:
            stream = TraceStream(fh, path)
            remote = (lambda data: pool.submit(_piece_in_worker, data)) if pool else None
            for part in stream.pieces(process_piece, remote=remote, depth=workers + 1):
                counts["events"] += part["events"]
                ranges.extend(part["ranges"])
                counts["range"] += len(part["ranges"])
                if part["kernel"] is not None:
                    counts["kernel"] += len(part["kernel"]["name_code"])
                    kernels.extend(part["kernel"])
                if part["copy"] is not None:
                    counts["copy"] += len(part["copy"]["name_code"])
                    copies.extend(part["copy"])
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return stream


def read(path: Path) -> ReaderOutput:
    """Kernels and copies of a Kineto trace (.json, .json.gz, .pt.trace.json.gz; any compression by content)."""
    path = Path(path)
    out = ReaderOutput(format=FORMAT, kernels=None)
    kernels, copies, ranges = _Table(), _Table(), []
    counts: Counter = Counter()
    gc_was_on = gc.isenabled()
    gc.disable()  # the decode allocates millions of acyclic objects: collection passes would dominate
    try:
        stream = _read_events(path, kernels, copies, counts, ranges)
    finally:
        if gc_was_on:
            gc.enable()
    if not stream.found_array:
        raise InputError(path, "JSON object has no traceEvents array")
    warp, rank = _notes(stream.top, counts, out)
    if kernels.rows:
        out.rows_read["kernels"] = kernels.rows
        out.kernels = _kernels(kernels, warp, out)
        if ranges:
            out.notes.append(f"{len(ranges)} cuda_profiler_range events not read: they cannot be matched "
                             "to kernel events")
    elif ranges:
        out.rows_read["kernels"] = len(ranges)
        out.kernels = _range_kernels(ranges)
        out.kernels["wave_size"] = _wave_sizes(np.full(len(out.kernels), -1), warp)
        out.notes.append(f"no kernel events: {len(ranges)} cuda_profiler_range events (CUPTI range profiler, "
                         "one per kernel) read as kernels with their counters; their ts/dur time the profiler's "
                         "replay, so start, end and duration are null")
    else:
        raise InputError(path, "Kineto trace has no GPU kernel events (cat 'kernel'): was the profiler run with "
                               "ProfilerActivity.CUDA?")
    if copies.rows:
        out.rows_read["memcpy"] = copies.rows
        out.memcpy = _memcpy(copies, out)
    if rank is not None:
        out.kernels["rank"] = np.full(len(out.kernels), rank, dtype=np.int64)
        if out.memcpy is not None:
            out.memcpy["rank"] = np.full(len(out.memcpy), rank, dtype=np.int64)
    return out
