"""One piece of a Kineto `traceEvents` array decoded into compact, picklable columns (run in worker processes).

Only the GPU activity events are decoded in full: `kernel`, `gpu_memcpy` and `gpu_memset` (GPU_CATS, one table
in file order) and `cuda_profiler_range` (a list: their args are arbitrary counters). The host events that say
where and when a kernel was launched are decoded in part (HOST_TABLES: cat, name, ts, dur, pid, tid and the one
or two args keys that link them: External id, correlation): `cpu_op` / `user_annotation` and `cuda_runtime` /
`cuda_driver`. The others are counted. The ops also keep their input shapes as JSON text (HOST_TEXT_ARGS, see
kineto_values.text_column).
Values keep the JSON key they came from (ARGS) and their JSON meaning: no unit conversion, no renaming.
  * cat, name, ts, dur, args, pid, tid: ph is not read; pid and tid (small scalars) are decoded as they are and
    used on host events only (on GPU events they repeat args.device and args.stream);
  * ts: its JSON text, converted once the piece's columns are built to an exact decimal
    (kineto_values.ts_decimal);
  * dur -> float64 µs (NaN where not a number); integer args -> int64, or float64 where a value of the piece is
    not an integer or is missing (NaN where not a number); float args -> float64;
  * name, args.kind -> a piece dictionary (text; a name that is not a string keeps its JSON text, a kind that is
    not a string is null);
  * args.grid / args.block ([x, y, z]) -> three columns each (NaN where the value is not a 3-list of numbers);
  * each args key is read on the categories whose mapping uses it (KERNEL_KEYS, COPY_KEYS), as the reader always
    did: decoding every key on every GPU event cost 12 % more (args.kind: on copies, the copy kind of ROCm).
"""

from __future__ import annotations

import gc
import re
from collections import Counter
from collections.abc import Iterator
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Any

import msgspec
import numpy as np

from gpuvar.ingest.json_stream import DecodeFailed
from gpuvar.ingest.kineto_values import (
    ANY_JSON,
    DECODE_ERRORS,
    DIM_AXES,
    NULL,
    decode_each,
    decode_names,
    decode_texts,
    dim_columns,
    dur_to_us,
    join_ts,
    json_value,
    numbers,
    piece_dictionary,
    text_column,
    ts_decimal,
)

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RANGE_CAT = "cuda_profiler_range"
FLOAT_ARGS = ("blocks per SM", "warps per SM", "est. achieved occupancy %", "memory bandwidth (GB/s)")
ARGS = (
    "device",
    "stream",
    "correlation",
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "warps per SM",
    "est. achieved occupancy %",
    "External id",
    "bytes",
    "memory bandwidth (GB/s)",
)  # raw column order
DIMS = ("grid", "block")
KERNEL_KEYS = frozenset(
    (
        "device",
        "stream",
        "correlation",
        "registers per thread",
        "shared memory",
        "blocks per SM",
        "warps per SM",
        "est. achieved occupancy %",
        "External id",
        *DIMS,
    )
)
COPY_KEYS = frozenset(("device", "stream", "correlation", "bytes", "memory bandwidth (GB/s)", "External id"))


class _Event(msgspec.Struct, gc=False):
    """The fields read from every event; most stay raw until the event is known to matter.

    gc=False: millions of these are alive at once, and cyclic-GC passes over them cost more than the decode."""

    cat: str | None = None
    name: msgspec.Raw = NULL
    ts: msgspec.Raw = NULL
    dur: msgspec.Raw = NULL
    args: msgspec.Raw = NULL
    pid: Any = None  # (decoded as they are: cheaper than a Raw slice; a named track's text is kept)
    tid: Any = None


HOST_TABLES = {  # raw table -> (its categories, the args keys read on them)
    "cpu_ops": (("cpu_op", "user_annotation"), ("External id",)),
    "runtime": (("cuda_runtime", "cuda_driver"), ("correlation", "External id")),
}
# args keys kept as JSON text (a dictionary column per raw table): the input shapes that
# torch.profiler.profile(record_shapes=True) writes on every op (gpuvar.ingest.shapes reads them)
HOST_TEXT_ARGS = {"cpu_ops": ("Input Dims", "Input type", "Concrete Inputs"), "runtime": ()}
_TEXT_FIELDS = {"Input Dims": "dims", "Input type": "types", "Concrete Inputs": "concrete"}  # attribute names
_HOST_CODE = {cat: i + 1 for i, cat in enumerate(c for cats, _ in HOST_TABLES.values() for c in cats)}  # 1-based
_HostArgs = msgspec.defstruct(
    "_HostArgs",
    [("external", Any, msgspec.field(default=None, name="External id")), ("correlation", Any, None)]
    + [(attr, msgspec.Raw, msgspec.field(default=NULL, name=key)) for key, attr in _TEXT_FIELDS.items()],
    gc=False,
)
_HOST_GETTERS = {"External id": attrgetter("external"), "correlation": attrgetter("correlation")}
_TEXT_GETTERS = {key: attrgetter(attr) for key, attr in _TEXT_FIELDS.items()}


_Args = msgspec.defstruct(
    "_Args",
    [(f"a{i}", Any, msgspec.field(default=None, name=key)) for i, key in enumerate(ARGS)]
    + [(dim, msgspec.Raw, msgspec.field(default=NULL)) for dim in DIMS]
    + [("kind", msgspec.Raw, msgspec.field(default=NULL))],
    gc=False,
)
_ARG_GETTERS = [attrgetter(f"a{i}") for i in range(len(ARGS))]
_CAT, _NAME, _TS, _DUR, _KIND = (
    attrgetter("cat"),
    attrgetter("name"),
    attrgetter("ts"),
    attrgetter("dur"),
    attrgetter("kind"),
)
_CAT_CODE = {cat: i + 1 for i, cat in enumerate(GPU_CATS)}  # 1-based: a code also selects (0 is falsy)
_EVENTS = msgspec.json.Decoder(list[_Event])
_ARGS = msgspec.json.Decoder(list[_Args | None])
_HOST_ARGS = msgspec.json.Decoder(list[_HostArgs | None])
_PID, _TID = attrgetter("pid"), attrgetter("tid")


def _decode_events(data: bytes) -> list:
    """Typed decode of one piece; elements that are not objects are skipped (they carry no GPU activity)."""
    try:
        return _EVENTS.decode(data)
    except msgspec.ValidationError:
        pass
    except DECODE_ERRORS as exc:
        raise DecodeFailed(str(exc)) from None
    try:
        items = ANY_JSON.decode(data)
    except DECODE_ERRORS as exc:
        raise DecodeFailed(str(exc)) from None
    events = []
    for item in items:
        if isinstance(item, dict):
            try:
                events.append(_EVENTS.decode(b"[" + msgspec.json.encode(item) + b"]")[0])
            except (*DECODE_ERRORS, TypeError):
                continue
    return events


def _decode_args(raws: list) -> list:
    """Args objects of one piece's events in one decode call; an event whose args do not fit gets None."""
    return decode_each(_ARGS, raws)


def _gpu_columns(events: list, cat: np.ndarray) -> dict:
    """Columns of one piece's GPU events (raw fields decoded here), no reference to the piece's bytes."""
    args = _decode_args(list(map(attrgetter("args"), events)))
    if None in args:
        empty = _Args()
        args = [a if a is not None else empty for a in args]
    return _gpu_table(
        cat,
        decode_names(list(map(_NAME, events))),
        join_ts(map(_TS, events)),
        dur_to_us(list(map(_DUR, events))),
        args,
    )


def _gpu_table(cat: np.ndarray, names: list, ts: bytes, dur: np.ndarray, args: list, strict: bool = False) -> dict:
    """The GPU event columns from their decoded fields: name texts, ts texts joined by newlines, dur µs, args
    objects (_Args, or _StrictArgs when `strict`: the same attribute names, grid, block and kind decoded). Each
    args key is read on the events of the categories that carry it (KERNEL_KEYS, COPY_KEYS; null elsewhere), as
    the mapping uses them."""
    names, name_code = piece_dictionary(names)
    cols = {
        "cat": cat,
        "name": ([u if isinstance(u, str) else str(u) for u in names], name_code),
        "ts": ts,
        "dur": dur,
    }
    n = len(cat)
    kernel = cat == 0
    groups = [(KERNEL_KEYS, np.flatnonzero(kernel)), (COPY_KEYS, np.flatnonzero(~kernel))]
    if kernel.all() or not kernel.any():
        groups = [(keys, None) for keys, rows in groups if len(rows)]  # one category: no scatter
    subsets = {
        id(KERNEL_KEYS): list(compress(args, kernel.tolist())),  # (Python bools: numpy ones are slow)
        id(COPY_KEYS): list(compress(args, (~kernel).tolist())),
    }
    for key, get in zip(ARGS, _ARG_GETTERS):
        parts = [
            (rows, numbers(list(map(get, subsets[id(keys)])), floats=key in FLOAT_ARGS))
            for keys, rows in groups
            if key in keys
        ]
        cols[f"args.{key}"] = _scatter(n, parts)
    kinds = list(map(_KIND, subsets[id(COPY_KEYS)]))
    kinds, kind_code = piece_dictionary(kinds if strict else decode_texts(kinds))
    codes = np.full(n, -1, dtype=np.int32)
    codes[~kernel] = kind_code
    cols["args.kind"] = (kinds, codes)
    for dim in DIMS:
        parts = {}
        for keys, rows in groups:
            if dim in keys:
                dims = (_typed_dims if strict else dim_columns)(list(map(attrgetter(dim), subsets[id(keys)])), dim)
                for name, values in dims.items():
                    parts.setdefault(name, []).append((rows, values))
        for name in (f"{dim}{axis}" for axis in DIM_AXES):
            cols[f"args.{name}"] = _scatter(n, parts.get(name, []))
    return cols


def _scatter(n: int, parts: list[tuple]) -> np.ndarray:
    """One column from (rows, values) parts (rows None: all rows); NaN for rows of no part, int64 when every row
    has an integer."""
    if len(parts) == 1 and parts[0][0] is None:
        return parts[0][1]
    covered = sum(n if rows is None else len(rows) for rows, _ in parts) == n
    ints = covered and all(values.dtype.kind == "i" for _, values in parts)
    out = np.empty(n, np.int64) if ints else np.full(n, np.nan)
    for rows, values in parts:
        out[rows if rows is not None else slice(None)] = values
    return out


def _host_args(raws: list) -> list:
    """The linking args (External id, correlation) and input shapes (raw) of host events; an event whose args do
    not fit gets None."""
    return decode_each(_HOST_ARGS, raws)


def _host_columns(events: list, cat: np.ndarray, table: str) -> dict:
    """Columns of one piece's host events of one raw table (raw fields decoded here)."""
    args = _host_args(list(map(attrgetter("args"), events)))
    empty = _HostArgs()
    args = [a if a is not None else empty for a in args]
    names, dur = decode_names(list(map(_NAME, events))), dur_to_us(list(map(_DUR, events)))
    getters = [(key, _HOST_GETTERS[key]) for key in HOST_TABLES[table][1]]
    return _host_table(table, events, cat, names, dur, args, getters)


def _host_table(table: str, events: list, cat: np.ndarray, names: list, dur: np.ndarray, args: list, getters: list):
    """Columns of one piece's host events of one raw table: cat code, name (piece dictionary), ts text, dur, pid,
    tid, args.<key> (int64, or float64 with NaN where missing); `getters`: (key, its getter on the args);
    args.<text key> for each key of the table's HOST_TEXT_ARGS (text_column)."""
    names, name_code = piece_dictionary(names)
    cols = {
        "cat": cat,
        "name": ([u if isinstance(u, str) else str(u) for u in names], name_code),
        "ts": join_ts(map(_TS, events)),
        "dur": dur,
        "pid": numbers(list(map(_PID, events))),  # (NaN where one is not a number: a named track)
        "tid": numbers(list(map(_TID, events))),
    }
    for key, get in getters:
        cols[f"args.{key}"] = numbers(list(map(get, args)))
    for key in HOST_TEXT_ARGS[table]:
        cols[f"args.{key}"] = text_column(list(map(_TEXT_GETTERS[key], args)))
    return cols


def _range_rows(events: list) -> list[tuple]:
    """(name, ts text, dur µs, args dict or None) of each cuda_profiler_range event."""
    return [(decode_names([e.name])[0], bytes(e.ts), dur_to_us([e.dur])[0], json_value(e.args)) for e in events]


def process_piece(data: bytes) -> dict:
    """Decode one piece (`[event, ...]` bytes): GPU event columns, range rows, category counts; DecodeFailed when
    not valid JSON.

    The usual piece is read by the typed pass (_strict_piece: every field decoded at once, ~1 MB at a time).
    A piece it refuses (a value of a type no trace we know writes there, a cut it guessed wrong, a
    cuda_profiler_range event: arbitrary counters) is read field by field (_process_raw), as it always was;
    the typed pass accepts a piece only where both give the same columns."""
    try:
        result = _strict_piece(data)
    except (_Refused, *DECODE_ERRORS):
        result = _process_raw(data)
    for cols in [result["gpu"], *result["host"].values()]:
        if cols is not None:  # the exact decimal ts, parsed here (a worker) rather than where pieces are gathered
            cols["ts"] = ts_decimal(cols["ts"], len(cols["cat"]))
    return result


def _process_raw(data) -> dict:
    """process_piece's field-by-field decode: raw fields first, each decoded on the events that need it."""
    events = _decode_events(data)
    cats = list(map(_CAT, events))
    codes = list(map(_CAT_CODE.get, cats))  # None for the other categories; selections run in C (map + compress)
    gpu = list(compress(events, codes))
    ranges = list(compress(events, map(eq, cats, repeat(RANGE_CAT))))  # (str.__eq__(None) is NotImplemented)
    host = {}
    for table, picked, cat in _host_selections(events, cats):
        host[table] = _host_columns(picked, cat, table)
    cat = np.array(list(filter(None, codes)), dtype=np.int8) - 1
    n = len(events)
    del events, cats, codes  # freed before the columns are built: their memory is reused (faster)
    return _result(n, _gpu_columns(gpu, cat) if gpu else None, host, _range_rows(ranges))


def _host_selections(events: list, cats: list) -> Iterator[tuple]:
    """(raw table, its events, their category codes) of each host table with events here."""
    host_codes = list(map(_HOST_CODE.get, cats))  # one pass for both host tables; None for the other categories
    chosen = list(compress(events, host_codes))
    if not chosen:
        return
    host_cat = np.array(list(filter(None, host_codes)), dtype=np.int8) - 1
    del host_codes
    first = 0
    for table, (table_cats, _) in HOST_TABLES.items():
        mine = (host_cat >= first) & (host_cat < first + len(table_cats))
        if mine.any():
            picked = chosen if mine.all() else list(compress(chosen, mine.tolist()))
            yield table, picked, host_cat[mine] - first
        first += len(table_cats)


def _result(n: int, gpu: dict | None, host: dict, ranges: list) -> dict:
    """A piece's result: event count, category counts (from the columns), columns, range rows."""
    counts = Counter(dict(zip(GPU_CATS, np.bincount(gpu["cat"], minlength=3).tolist()))) if gpu else Counter()
    counts[RANGE_CAT] = len(ranges)
    for table, host_cols in host.items():
        cats_of = HOST_TABLES[table][0]
        counts.update(dict(zip(cats_of, np.bincount(host_cols["cat"], minlength=len(cats_of)).tolist())))
    return {"events": n, "categories": +counts, "gpu": gpu, "ranges": ranges, "host": host}


# --- the typed pass -----------------------------------------------------------------------------------------
#
# Every field the columns need is decoded at once, to the type the columns take, so that no value is decoded
# twice and each event is visited once per column rather than once per raw field plus once per decode. The
# types are strict: a number where a number is read (never a bool, a string or a list), a 3-list of integers for
# grid and block, a string (or null) for name and args.kind. Where every value has such a type, the columns
# _process_raw builds are element-wise: each value's column entry depends on the value alone, and a column's
# type (int64, or float64 once one entry needs it) on whether every entry is an integer. So the piece can be
# decoded in sub-pieces of SUB_PIECE bytes and their columns concatenated: decoding 1 MB at a time keeps the
# decoded events in the CPU cache, which made the decode of an 8 MB piece ~1.5x faster. Anything else raises
# and the piece is read by _process_raw.

SUB_PIECE = 1 << 19
_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # '},{' between two events (a guess: proven by the decode)
_Number = int | float | None
_Dim = tuple[int, int, int] | None


class _Refused(Exception):
    """The typed pass cannot read this piece: _process_raw reads it."""


_StrictArgs = msgspec.defstruct(  # _Args' attributes, typed, and the ops' input shapes (raw: any JSON value)
    "_StrictArgs",
    [(f"a{i}", _Number, msgspec.field(default=None, name=key)) for i, key in enumerate(ARGS)]
    + [(dim, _Dim, None) for dim in DIMS]
    + [("kind", str | None, None)]
    + [(attr, msgspec.Raw, msgspec.field(default=NULL, name=key)) for key, attr in _TEXT_FIELDS.items()],
    gc=False,
)


class _Strict(msgspec.Struct, gc=False):
    """An event as the typed pass reads it (a null or missing name reads as its raw text 'null', a null or
    missing dur as NaN, null or missing args as empty: as _process_raw reads them)."""

    cat: str | None = None
    name: str | None = None
    ts: msgspec.Raw = NULL
    dur: float | None = None
    args: _StrictArgs | None = None  # type: ignore[valid-type]
    pid: int | float | str | None = None
    tid: int | float | str | None = None


_STRICT = msgspec.json.Decoder(list[_Strict])
_STRICT_EMPTY = _StrictArgs()
_STRICT_HOST_GETTERS = {"External id": _ARG_GETTERS[ARGS.index("External id")], "correlation": _ARG_GETTERS[2]}
_ARGS_OF = attrgetter("args")


def _strict_piece(data) -> dict:
    """The typed pass over one piece, sub-piece by sub-piece (_Refused or a decode error where it cannot)."""
    parts = []
    for sub in _sub_pieces(data):
        events = _STRICT.decode(sub)
        del sub
        parts.append(_strict_columns(events))
        del events
    return parts[0] if len(parts) == 1 else _merge(parts)


def _sub_pieces(data) -> Iterator[bytes]:
    """`[events]` of about SUB_PIECE bytes each, cut at a '},{' between events (a cut inside a string or a
    nested value leaves a sub-piece that is not valid JSON: the decode refuses it)."""
    n = len(data)
    if n <= 2 * SUB_PIECE or data[:1] != b"[" or data[-1:] != b"]":
        yield data
        return
    view, start = memoryview(data), 1
    while n - 1 - start > 2 * SUB_PIECE:
        brace = data.rfind(b"}", start, start + SUB_PIECE)
        while brace >= 0 and not (m := _CUT.match(data, brace)):
            brace = data.rfind(b"}", start, brace)
        if brace < 0:
            break
        yield b"[" + view[start : brace + 1] + b"]"
        start = m.end() - 1  # the next event's '{'
    yield b"[" + view[start : n - 1] + b"]"


def _strict_columns(events: list) -> dict:
    cats = list(map(_CAT, events))
    if RANGE_CAT in cats:
        raise _Refused
    codes = list(map(_CAT_CODE.get, cats))
    gpu = list(compress(events, codes))
    host = {}
    for table, picked, cat in _host_selections(events, cats):
        names, dur, args = _strict_fields(picked)
        getters = [(key, _STRICT_HOST_GETTERS[key]) for key in HOST_TABLES[table][1]]
        host[table] = _host_table(table, picked, cat, names, dur, args, getters)
    cat = np.array(list(filter(None, codes)), dtype=np.int8) - 1
    n = len(events)
    del events, cats, codes
    cols = None
    if gpu:
        names, dur, args = _strict_fields(gpu)
        cols = _gpu_table(cat, names, join_ts(map(_TS, gpu)), dur, args, strict=True)
    return _result(n, cols, host, [])


def _strict_fields(events: list) -> tuple[list, np.ndarray, list]:
    """Names ('null' where null or missing), dur (NaN where null or missing), args (empty where null or
    missing)."""
    names = list(map(_NAME, events))
    if None in names:
        names = ["null" if v is None else v for v in names]
    dur = np.array(list(map(_DUR, events)), dtype=np.float64)
    args = list(map(_ARGS_OF, events))
    if None in args:
        args = [_STRICT_EMPTY if a is None else a for a in args]
    return names, dur, args


def _typed_dims(values: list, key: str) -> dict:
    """dim_columns of decoded [x, y, z] integer lists (None where null or missing)."""
    given = None
    if None in values:
        given = np.array([v is not None for v in values])
        values = [v for v in values if v is not None]
    try:
        arr = np.array(values, dtype=np.int64).reshape(-1, 3)
    except OverflowError:  # beyond int64: as dim_columns reads it
        raise _Refused from None
    if given is not None:
        full = np.full((len(given), 3), np.nan)
        full[given] = arr
        arr = full
    return {f"{key}{axis}": arr[:, i] for i, axis in enumerate(DIM_AXES)}


def _merge(parts: list[dict]) -> dict:
    """One piece's result from its sub-pieces' (the typed pass: every column is element-wise)."""
    gpu = [p["gpu"] for p in parts if p["gpu"] is not None]
    host = {}
    for table in HOST_TABLES:
        cols = [p["host"][table] for p in parts if table in p["host"]]
        if cols:
            host[table] = _merge_columns(cols)
    return _result(sum(p["events"] for p in parts), _merge_columns(gpu) if gpu else None, host, [])


def _merge_columns(parts: list[dict]) -> dict:
    out = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if isinstance(first, tuple):  # a dictionary: (distinct values in first-seen order, codes; -1: null)
            lookup: dict = {}
            codes = [
                np.array([lookup.setdefault(u, len(lookup)) for u in uniques] + [-1], dtype=np.int32)[sub]
                for uniques, sub in values
            ]
            out[key] = (list(lookup), np.concatenate(codes))
        elif isinstance(first, bytes):  # ts texts
            out[key] = b"\n".join(values)
        elif len({v.dtype for v in values}) == 1:
            out[key] = np.concatenate(values)
        else:  # int64 and float64 parts: float64, as one decode of all the values gives
            out[key] = np.concatenate([v.astype(np.float64) for v in values])
    return out


def piece_in_worker(piece: bytes) -> dict | None:
    """process_piece of `[piece]` in a worker process: None tells the main process the cut was wrong (it re-reads
    there)."""
    gc.disable()
    try:
        return process_piece(b"[" + piece + b"]")
    except DecodeFailed:
        return None


def piece_at_in_worker(path: str, offset: int, size: int, ends: bytes) -> dict | None:
    """piece_in_worker of the `size` bytes at `offset` of the (uncompressed) file `path`, read here: the piece does
    not travel through a pipe (for 8 MB pieces that copy cost more than a third of the decode). `ends`: the
    piece's first and last 32 bytes as the main process read them; None when the file does not hold them there
    (changed since), and the main process then decodes the piece it read itself."""
    gc.disable()
    data = bytearray(size + 2)  # `[piece]`, read in place: no further copy (msgspec reads a bytearray as it is)
    data[0], data[-1] = 0x5B, 0x5D
    view, got = memoryview(data)[1:-1], 0
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset)
        while got < size and (n := fh.readinto(view[got:])):
            got += n
    del view  # (an exported buffer would pin the bytearray)
    k = min(32, size)
    if got != size or data[1 : 1 + k] + data[1 + size - k : 1 + size] != ends:
        return None
    try:
        return process_piece(data)
    except DecodeFailed:
        return None
