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
  * ingest.json `host`: the top-level `host_name` (or `hostname`) where the trace has one; `devices[].uuid`: a
    deviceProperties `uuid` where a build writes one (gpuvar.ingest.gpu_identity).
launch_id = row rank by (start, correlation), from 0. Events with a missing or non-numeric ts/dur, or a negative
dur, are dropped and counted.

Two steps (gpuvar.ingest.raw). read_raw streams the trace once (see kineto_pieces) into raw tables that keep the
JSON keys as column names: `events` (the kernel, gpu_memcpy and gpu_memset events in file order: cat, name, ts
as an exact decimal in µs (12 decimals; more are rounded to odd, so the ns rounding stays exact), dur (µs),
args.<key> for the args above, args.grid[0..2], args.block[0..2], args.kind), `cuda_profiler_range` (cat,
name, ts, dur, args.<counter>), and the host events that place each launch (read by gpuvar.ingest.call_sites,
not by normalize): `cpu_ops` (cat cpu_op / user_annotation: cat, name, ts, dur, pid, tid, args.External id, and
the input shapes of record_shapes=True as dictionary-encoded compact JSON text: args.Input Dims, args.Input type,
args.Concrete Inputs, each present only when some op carries it; read by gpuvar.ingest.shapes) and
`runtime` (cat cuda_runtime / cuda_driver: the same and args.correlation); raw.info holds the other top-level keys (`top`: deviceProperties,
distributedInfo, schemaVersion, ...), the number of trace events and the count of each GPU category.
normalize selects kernels and copies by cat, converts µs to ns and renames (docs/raw-rocpd-kineto.md).
"""

from __future__ import annotations

import gc
import io
import json
import multiprocessing as mp
import os
import re
import signal
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from decimal import ROUND_HALF_EVEN
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar import progress
from gpuvar.errors import InputError
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.compression import open_binary
from gpuvar.ingest.json_stream import TraceStream
from gpuvar.ingest.kineto_pieces import DIMS, GPU_CATS, HOST_TABLES, HOST_TEXT_ARGS, RANGE_CAT, process_piece
from gpuvar.ingest.kineto_pieces import piece_at_in_worker as _piece_at_in_worker
from gpuvar.ingest.kineto_pieces import piece_in_worker as _piece_in_worker
from gpuvar.ingest.kineto_values import DIM_AXES, TS_TYPE, join_ts, ts_decimal
from gpuvar.ingest.nsys import MEMCPY_OPER_FALLBACK, copy_kind_short
from gpuvar.ingest.raw import RawTrace, ReadOptions
from gpuvar.schema import int_column

FORMAT = "pytorch-kineto"
PARALLEL_MIN_BYTES = 48 << 20  # smaller traces: starting worker processes costs more than it saves
DEFAULT_OPTIONS = ReadOptions()  # (no read option applies to Kineto)
EVENTS, RANGES = "events", "cuda_profiler_range"  # raw table names
_INT64_MIN = np.iinfo(np.int64).min
_KINETO_MARKERS = re.compile(
    rb'"(schemaVersion|deviceProperties|distributedInfo)"|"cat"\s*:\s*"(kernel|gpu_memcpy|cpu_op|cuda_runtime)"'
)
COPY_CODES = {copy_kind_short(v): k for k, v in MEMCPY_OPER_FALLBACK.items()}
_COPY_NAME = re.compile(r"^\s*Memcpy\s+(\S+)\s*(?:\((.*)\))?")
KERNEL_ARGS = {  # Kineto arg -> canonical (or gpuvar extra) column
    "device": "device_id",
    "stream": "stream_id",
    "correlation": "correlation_id",
    "registers per thread": "registers_per_thread",
    "shared memory": "lds_per_workgroup",
    "blocks per SM": "blocks_per_sm",
    "warps per SM": "warps_per_sm",
    "est. achieved occupancy %": "est_achieved_occupancy_pct",
    "External id": "external_id",
}
COPY_ARGS = {
    "device": "device_id",
    "stream": "stream_id",
    "correlation": "correlation_id",
    "bytes": "bytes",
    "memory bandwidth (GB/s)": "bandwidth_gb_s",
    "External id": "external_id",
}
FLOAT_COLUMNS = {"blocks_per_sm", "warps_per_sm", "est_achieved_occupancy_pct", "bandwidth_gb_s"}
DIM_COLUMNS = {f"args.{dim}{axis}": f"{dim}_{xyz}" for dim in DIMS for axis, xyz in zip(DIM_AXES, "xyz")}


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


# --- read: the trace as raw tables ---------------------------------------------------------------------------


class _Gpu:
    """The GPU event columns (or, with other `cats`, one host table's), gathered piece by piece: piece
    dictionaries mapped to global ones, ts parsed. `optional`: dictionary columns left out of the table when no
    row has a value (the input-shape texts of a trace recorded without shapes)."""

    def __init__(self, cats: tuple = GPU_CATS, dictionaries: tuple = ("name", "args.kind"), optional: tuple = ()):
        self.cats = cats
        self.optional = frozenset(optional)
        self.dicts: dict[str, dict] = {key: {} for key in (*dictionaries, *optional)}
        self.chunks: dict[str, list] = {}
        self.rows = 0

    def extend(self, cols: dict) -> None:
        n = len(cols["cat"])
        for key, value in cols.items():
            if key in self.dicts:
                uniques, codes = value
                lookup = self.dicts[key]
                glob = np.array([lookup.setdefault(u, len(lookup)) for u in uniques] + [-1], dtype=np.int32)
                value = glob[codes]  # (a null's code -1 picks the -1 appended)
            self.chunks.setdefault(key, []).append(value)  # (ts: parsed by process_piece, in the worker)
        self.rows += n

    def table(self) -> pa.Table:
        columns = {}
        for key, chunks in self.chunks.items():
            if key in self.optional and not self.dicts[key]:
                continue
            if key in self.dicts:
                codes = np.concatenate(chunks)
                mask = codes < 0
                indices = pa.array(np.where(mask, 0, codes), mask=mask if mask.any() else None)
                columns[key] = pa.DictionaryArray.from_arrays(indices, pa.array(list(self.dicts[key]), pa.string()))
            elif key == "cat":
                columns[key] = pa.DictionaryArray.from_arrays(pa.array(np.concatenate(chunks)), pa.array(self.cats))
            elif key == "ts":
                columns[key] = pa.chunked_array(chunks, type=TS_TYPE)
            else:  # numbers: float64 where a piece needed it (exact integers otherwise), NaN -> null
                floats = any(c.dtype.kind == "f" for c in chunks)
                columns[key] = pa.chunked_array(
                    [pa.array(c.astype(np.float64, copy=False) if floats else c, from_pandas=True) for c in chunks]
                )
        return pa.table(columns)


def _range_table(rows: list[tuple]) -> pa.Table:
    """cuda_profiler_range events: their fields and args.<counter> (a counter mixing types is kept as text)."""
    name, ts, dur, args = zip(*rows)
    columns = {
        "cat": pa.array([RANGE_CAT] * len(rows), pa.string()),
        "name": pa.array(name, pa.string()),
        "ts": ts_decimal(join_ts(ts), len(rows)),
        "dur": pa.array(np.array(dur), from_pandas=True),
    }
    counters = pd.DataFrame([a if isinstance(a, dict) else {} for a in args])
    for key in counters.columns:
        columns[f"args.{key}"] = _loose(counters[key])
    return pa.table(columns)


def _loose(values) -> pa.Array:
    """Values of any JSON type as one Arrow column: typed where Arrow can, else text (strings as they are,
    other values as JSON)."""
    values = pd.Series(list(values), dtype=object)
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([v if isinstance(v, str) or v is None else json.dumps(v) for v in values], pa.string())


def _workers(path: Path) -> int:
    """Worker processes for the decode: 2 (or GPUVAR_KINETO_WORKERS) for a big trace on a machine with the cores
    and fork; 0 (in-process) otherwise."""
    from gpuvar.ingest.footprint import uncompressed_size, usable_cores

    try:
        wanted = int(os.environ.get("GPUVAR_KINETO_WORKERS", "2"))
        cores = usable_cores()
        size = uncompressed_size(Path(path))  # (a gzip file's own record of it: JSON shrinks 5-15x)
    except (ValueError, OSError):
        return 0
    if wanted < 2 or cores < 2 or size < PARALLEL_MIN_BYTES or "fork" not in mp.get_all_start_methods():
        return 0
    return min(wanted, cores)


def _remote(pool: ProcessPoolExecutor, path: Path, fh):
    """TraceStream's `remote`: a piece to decode in a worker. An uncompressed file is read by the worker itself
    at the piece's offset (the main process sends offset, size and the piece's ends to check); the decompressed
    content of a compressed one travels to the worker through a pipe."""
    if isinstance(fh, io.BufferedReader):  # the file as it is (open_binary adds no decompressor)

        def submit(data, at: int):  # (data: a memoryview of the mapped file)
            return pool.submit(_piece_at_in_worker, str(path), at, len(data), bytes(data[:32]) + bytes(data[-32:]))

    else:

        def submit(data: bytes, at: int):
            return pool.submit(_piece_in_worker, data)

    return submit


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_start(parent: int) -> None:
    """A decode worker's first act: die with its parent, and let go of the parent's terminal and pipes.

    A parent killed with SIGKILL (by a user, the OOM killer, a batch system) runs no cleanup, and its workers
    (~110 MB each) lived on holding its stdout, so `gpuvar ingest big.json | cat` never ended. The kernel now
    sends the worker SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG; on Linux, where fork is used), and
    its stdin, stdout and stderr are /dev/null: it reports only through the pool's pipes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the descriptors below still free the parent's pipes
        pass
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _read_events(path: Path, gpu: _Gpu, counts: Counter, ranges: list, host: dict[str, _Gpu]) -> TraceStream:
    """Stream the trace once, filling the tables; returns the stream (top-level keys, whether the array was seen).

    Big traces are decoded by worker processes (fork: they need no imports), pieces in order, the main
    process reading, cutting and gathering the columns; see TraceStream.pieces for how a wrong cut is redone."""
    from gpuvar.ingest.footprint import uncompressed_size

    workers = _workers(path)
    pool = None
    if workers:
        context = mp.get_context("fork")
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start, initargs=(os.getpid(),))
    try:
        with open_binary(path) as fh:
            # workers read an uncompressed trace themselves: here the file is mapped, only the cuts are read
            stream = TraceStream(fh, path, mapped=pool is not None and isinstance(fh, io.BufferedReader))
            remote = _remote(pool, path, fh) if pool is not None else None
            meter = progress.start("reading the Kineto trace", uncompressed_size(path), "bytes")
            for part in stream.pieces(process_piece, remote=remote, depth=workers + 1):
                progress.at(meter, stream.offset + stream.pos)
                counts["events"] += part["events"]
                counts.update({f"cat:{k}": v for k, v in part["categories"].items()})
                ranges.extend(part["ranges"])
                if part["gpu"] is not None:
                    gpu.extend(part["gpu"])
                for table, cols in part["host"].items():
                    host[table].extend(cols)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return stream


def read_raw(path: Path, options: ReadOptions = DEFAULT_OPTIONS) -> RawTrace:
    """The GPU events of a Kineto trace (.json, .json.gz, .pt.trace.json.gz; any compression by content) as raw
    tables with the JSON keys as column names, and the other top-level keys in raw.info."""
    path = Path(path)
    gpu, ranges, counts = _Gpu(), [], Counter()
    host = {
        table: _Gpu(cats, ("name",), tuple(f"args.{key}" for key in HOST_TEXT_ARGS[table]))
        for table, (cats, _) in HOST_TABLES.items()
    }
    gc_was_on = gc.isenabled()
    gc.disable()  # the decode allocates millions of acyclic objects: collection passes would dominate
    try:
        stream = _read_events(path, gpu, counts, ranges, host)
    finally:
        if gc_was_on:
            gc.enable()
    if not stream.found_array:
        raise InputError(path, "JSON object has no traceEvents array")
    categories = {k[4:]: v for k, v in sorted(counts.items()) if k.startswith("cat:")}
    kernels = categories.get("kernel", 0)
    if not kernels and not ranges:
        raise InputError(
            path,
            "Kineto trace has no GPU kernel events (cat 'kernel'): was the profiler run with ProfilerActivity.CUDA?",
        )
    raw = RawTrace(FORMAT, str(path), {EVENTS: gpu.table()} if gpu.rows else {})
    if ranges:
        raw.tables[RANGES] = _range_table(ranges)
    for table, columns in host.items():  # (normalize does not read them: gpuvar.ingest.call_sites does)
        if columns.rows:
            raw.tables[table] = columns.table()
    raw.rows_read["kernels"] = kernels or len(ranges)
    copies = categories.get("gpu_memcpy", 0) + categories.get("gpu_memset", 0)
    if copies:
        raw.rows_read["memcpy"] = copies
    raw.info.update({"top": stream.top, "events": counts["events"], "categories": categories})
    return raw


# --- normalize ---------------------------------------------------------------------------------------------


def _codes(column) -> tuple[np.ndarray, list]:
    """A dictionary (or text) column as (int32 codes, -1 for null; its distinct values): what Parquet gives back
    may be chunked, with a dictionary of its own per chunk, or plain text."""
    lookup: dict = {}
    parts = []
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)
        glob = [-1 if v is None else lookup.setdefault(v, len(lookup)) for v in chunk.dictionary.to_pylist()]
        indices = pc.fill_null(chunk.indices.cast(pa.int32()), -1).to_numpy(zero_copy_only=False)
        parts.append(np.array(glob + [-1], dtype=np.int32)[indices])  # (-1 picks the -1 appended)
    return (np.concatenate(parts) if parts else np.zeros(0, np.int32)), list(lookup)


def _subset_codes(codes: np.ndarray, values: list) -> tuple[np.ndarray, list]:
    """Codes of a row subset renumbered in first-seen order (the order the rows name them), with their values."""
    local, seen = pd.factorize(codes)
    present = seen >= 0
    if not present.all():  # a null code (-1) stays null
        remap = np.where(present, np.cumsum(present) - 1, -1)
        return remap[local].astype(np.int32), [values[c] for c in seen[present]]
    return local.astype(np.int32), [values[c] for c in seen]


def us_to_ns(ts) -> tuple[np.ndarray, np.ndarray]:
    """Exact decimal µs -> (int64 ns, rounded half-to-even; null mask): null where missing or beyond int64."""
    ts = ts.combine_chunks() if isinstance(ts, pa.ChunkedArray) else ts
    if not len(ts):
        return np.zeros(0, np.int64), np.zeros(0, bool)
    try:
        ns = pc.round(ts.cast(TS_TYPE), 3, round_mode="half_to_even").cast(pa.decimal128(38, 3))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # beyond 38 digits after rounding: per value
        return _us_to_ns_slow(ts.to_pylist())
    words = np.frombuffer(ns.buffers()[1], dtype=np.int64)[2 * ns.offset : 2 * (ns.offset + len(ns))]
    low, high = words[0::2], words[1::2]  # the 128-bit unscaled value (ns), little-endian
    null = pc.is_null(ns).to_numpy(zero_copy_only=False) | (high != (low >> 63)) | (low == _INT64_MIN)
    return np.where(null, 0, low), null


def _us_to_ns_slow(values: list) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for value in values:
        ns = None if value is None else (value * 1000).to_integral_value(rounding=ROUND_HALF_EVEN)
        out.append(int(ns) if ns is not None and abs(ns) < 2**63 else None)
    null = np.array([v is None for v in out], dtype=bool)
    return np.array([0 if v is None else v for v in out], dtype=np.int64), null


def _number(column, rows: np.ndarray, floats: bool):
    """A raw number column for `rows`: float64, or int64 numpy where those rows hold integers only (the column is
    float64 when another category lacks the key), else the float64 values (NaN: missing or not a number); a
    fraction in a launch configuration count is nulled and counted after normalize (sanity.null_fractional_counts)
    instead of rounded."""
    values = column.to_numpy()[rows]
    if floats or values.dtype.kind in "iu":
        return values
    if np.isfinite(values).all() and (np.abs(values) < 2.0**53).all() and (values == np.round(values)).all():
        return values.astype(np.int64)
    return values.astype(np.float64, copy=False)


def _timing(ts_ns: tuple, dur: np.ndarray, out: ReaderOutput, table: str) -> tuple[dict, np.ndarray]:
    """start/end/duration in ns; returns the columns and the keep mask after the documented drops."""
    start, start_null = ts_ns
    bad_dur = ~np.isfinite(dur) | (np.abs(dur) >= 2.0**53 / 1000)
    missing = start_null | bad_dur
    negative = ~missing & (dur < 0)
    out.drop(table, "missing or non-numeric ts/dur", int(missing.sum()))
    out.drop(table, "negative dur (end before start)", int(negative.sum()))
    dur_ns = np.round(np.where(missing, 0, dur) * 1000).astype(np.int64)
    return {"start": start, "end": start + dur_ns, "duration": dur_ns}, ~(missing | negative)


def _launch_ids(start: np.ndarray, corr) -> np.ndarray:
    """Rank of each row by (start, correlation), from 0."""
    if len(start) < 2 or (start[1:] > start[:-1]).all():
        return np.arange(len(start), dtype=np.int64)
    corr = (
        np.zeros(len(start), np.int64)
        if corr is None
        else np.asarray(int_column(pd.Series(corr)).fillna(-1), dtype=np.int64)
    )
    order = np.lexsort((corr, start))
    launch = np.empty(len(order), dtype=np.int64)
    launch[order] = np.arange(len(order), dtype=np.int64)
    return launch


def _wave_sizes(device, warp: dict[int, int]) -> np.ndarray:
    dev = np.asarray(int_column(pd.Series(device)).fillna(-1), dtype=np.int64)
    if not warp:
        return np.full(len(dev), 32, dtype=np.int64)
    return (
        np.array([warp.get(int(d), 32) for d in dev], dtype=np.int64)
        if len(set(warp.values())) > 1
        else np.full(len(dev), next(iter(warp.values())), dtype=np.int64)
    )


class _Events:
    """The raw events table, decoded once for both canonical tables."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.cat_codes, self.cats = _codes(table.column("cat"))
        self.ts_ns = us_to_ns(table.column("ts"))
        self.dur = table.column("dur").to_numpy()

    def rows(self, *cats: str) -> np.ndarray:
        wanted = [i for i, cat in enumerate(self.cats) if cat in cats]
        return np.flatnonzero(np.isin(self.cat_codes, wanted))

    def columns(self, rows: np.ndarray, args: dict[str, str], out: ReaderOutput, table: str, dims: bool = False):
        """Canonical columns of `rows` (name codes and values last) and the keep mask after the drops."""
        cols = {}
        for key, column in args.items():
            cols[column] = _number(self.table.column(f"args.{key}"), rows, floats=column in FLOAT_COLUMNS)
        if dims:
            for key, column in DIM_COLUMNS.items():
                cols[column] = _number(self.table.column(key), rows, floats=False)
        timing, keep = _timing((self.ts_ns[0][rows], self.ts_ns[1][rows]), self.dur[rows], out, table)
        cols.update(timing)
        codes, names = _codes(self.table.column("name"))
        return cols, keep, _subset_codes(codes[rows], names)


def _finish(cols: dict, keep: np.ndarray) -> pd.DataFrame:
    # copy=False: the columns stay separate arrays (they are fresh here); copying them into 2-D blocks per
    # dtype first took most of normalize's time, and finalize reads them one column at a time anyway
    frame = pd.DataFrame(cols, copy=False)
    if not keep.all():
        frame = frame.loc[keep].reset_index(drop=True)
    return frame


def _kernels(events: _Events, rows: np.ndarray, warp: dict, out: ReaderOutput) -> pd.DataFrame:
    cols, keep, (codes, names) = events.columns(rows, KERNEL_ARGS, out, "kernels", dims=True)
    cols["wave_size"] = _wave_sizes(cols["device_id"], warp)
    cols["kernel_name"] = pd.Categorical.from_codes(codes, categories=names)
    frame = _finish(cols, keep)
    frame["launch_id"] = _launch_ids(frame["start"].to_numpy(), frame["correlation_id"])
    return frame


def _copy_kinds(names: list, codes: np.ndarray, kinds: list) -> dict:
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
    kind = [k if k is not None else a for k, a in zip(kind, kinds)]
    return {
        "copy_kind_name": pd.Categorical(kind),
        "copy_kind": pd.array([COPY_CODES.get(k) for k in kind], dtype="Int64"),
        "memory_kinds": pd.Categorical([by_name[c][1] for c in codes]),
    }


def _memcpy(events: _Events, rows: np.ndarray, out: ReaderOutput) -> pd.DataFrame:
    cols, keep, (codes, names) = events.columns(rows, COPY_ARGS, out, "memcpy")
    kind_codes, kind_values = _codes(events.table.column("args.kind"))
    kinds = np.array(kind_values + [None], dtype=object)[kind_codes[rows]].tolist()
    cols.update(_copy_kinds(names, codes, kinds))
    cols["name"] = pd.Categorical.from_codes(codes, categories=names)
    frame = _finish(cols, keep)
    frame["launch_id"] = _launch_ids(frame["start"].to_numpy(), frame["correlation_id"])
    return frame


def _range_kernels(table: pa.Table) -> pd.DataFrame:
    """One row per CUPTI profiler range: counters as numeric columns, no timeline (like Nsight Compute data)."""
    counters = pd.DataFrame(
        {name[5:]: table.column(name).to_pandas() for name in table.column_names if name.startswith("args.")},
        index=range(table.num_rows),
    )
    counters = counters.apply(pd.to_numeric, errors="coerce") if len(counters.columns) else counters
    frame = pd.DataFrame({"kernel_name": pd.Categorical(table.column("name").to_pylist())})
    frame["launch_id"] = np.arange(len(frame), dtype=np.int64)
    return pd.concat([frame, counters.reset_index(drop=True)], axis=1)


def _notes(info: dict, out: ReaderOutput) -> tuple[dict[int, int], int | None]:
    """deviceProperties, distributedInfo and event counts as notes; returns (device -> warp size, rank)."""
    top, cats = info.get("top", {}), info.get("categories", {})
    warp, names = {}, []
    props = top.get("deviceProperties")
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and isinstance(p.get("id"), int):
            if isinstance(p.get("warpSize"), int) and p["warpSize"] > 0:
                warp[p["id"]] = p["warpSize"]
            names.append(f"{p['id']}: {p.get('name', '?')}")
            device = {"id": p["id"], "name": str(p.get("name", "?"))}
            if isinstance(p.get("numSms"), int):
                device["sm_count"] = p["numSms"]
            uuid = p.get("uuid", p.get("UUID"))
            if isinstance(uuid, str) and uuid.strip():  # not written by PyTorch's profiler; read where a build does
                device["uuid"] = uuid.strip()
            out.devices.append(device)
    if names:
        out.notes.append("GPUs (deviceProperties): " + "; ".join(names))
    host = next((top[k] for k in ("host_name", "hostname") if isinstance(top.get(k), str) and top[k].strip()), None)
    if host:  # Meta's Kineto builds write host_name; it names the machine for co-running (gpu_identity)
        out.host = host.strip()
        out.notes.append(f"host: {out.host}")
    dist = top.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and -(2**63) <= rank < 2**63 else None
    if rank is None and isinstance(dist, dict) and "rank" in dist:  # e.g. beyond int64: noted, not a traceback
        out.notes.append(f"distributedInfo: rank {str(dist['rank'])[:40]!r} is not an int64 (no rank column)")
    if rank is not None:
        extra = "".join(f", {k} {dist[k]}" for k in ("world_size", "backend") if k in dist)
        out.notes.append(f"distributedInfo: rank {rank}{extra} (recorded in the rank column)")
    if "schemaVersion" in top:
        out.notes.append(f"Kineto trace schemaVersion {top['schemaVersion']}")
    copies = cats.get("gpu_memcpy", 0) + cats.get("gpu_memset", 0)
    out.notes.append(
        f"{info.get('events', 0)} trace events, of which {cats.get('kernel', 0)} kernel, {copies} "
        f"gpu_memcpy/gpu_memset, {cats.get(RANGE_CAT, 0)} cuda_profiler_range"
    )
    return warp, rank


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernels (cat 'kernel', else the profiler ranges) and copies (gpu_memcpy, gpu_memset) with canonical names,
    ns times and the documented drops."""
    out = raw.start_output(None)
    warp, rank = _notes(raw.info, out)
    events = _Events(raw.tables[EVENTS]) if EVENTS in raw.tables else None
    kernel_rows = events.rows("kernel") if events is not None else np.zeros(0, np.int64)
    n_ranges = raw.tables[RANGES].num_rows if RANGES in raw.tables else 0
    if len(kernel_rows):
        out.kernels = _kernels(events, kernel_rows, warp, out)
        if n_ranges:
            out.notes.append(f"{n_ranges} cuda_profiler_range events not read: they cannot be matched to kernel events")
    elif n_ranges:
        out.kernels = _range_kernels(raw.tables[RANGES])
        out.kernels["wave_size"] = _wave_sizes(np.full(len(out.kernels), -1), warp)
        out.notes.append(
            f"no kernel events: {n_ranges} cuda_profiler_range events (CUPTI range profiler, "
            "one per kernel) read as kernels with their counters; their ts/dur time the profiler's "
            "replay, so start, end and duration are null"
        )
    else:
        raise InputError(raw.source, "Kineto trace has no GPU kernel events (cat 'kernel')")
    copy_rows = events.rows("gpu_memcpy", "gpu_memset") if events is not None else np.zeros(0, np.int64)
    if len(copy_rows):
        out.memcpy = _memcpy(events, copy_rows, out)
    if rank is not None:
        out.kernels["rank"] = np.full(len(out.kernels), rank, dtype=np.int64)
        if out.memcpy is not None:
            out.memcpy["rank"] = np.full(len(out.memcpy), rank, dtype=np.int64)
    return out


def read(path: Path) -> ReaderOutput:
    """Kernels and copies of a Kineto trace (.json, .json.gz, .pt.trace.json.gz; any compression by content)."""
    return normalize(read_raw(path))
