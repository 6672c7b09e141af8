"""The host side of a trace: launching API calls, candidate launching ops, step ranges and device syncs.

Built once per trace from the raw tables (gpuvar.ingest.raw.RawTrace), before the canonical tables exist, so that
gpuvar.ingest.normalize_trace builds it in a thread beside the reader's normalize. gpuvar.ingest.call_sites then
places every launch on it (its op, step and call site). Formats without a host timeline (Nsight Compute, rocprof)
have none: their call sites come from the launch sequence alone (gpuvar.ingest.iterations).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
NVTX_STEP = re.compile(r"(?i)(?:^|[^a-z])(?:profiler_?step|step|iteration|iter)\s*[#:=_ -]?\s*(\d+)\s*$")
EMIT_NVTX_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$", re.S)
SYNC_NAME = re.compile(r"^cudaDeviceSynchronize(?:_v\d+)?$")
NVTX_PUSHPOP, NVTX_STARTEND = 59, 60
MISSING = np.iinfo(np.int64).min  # an int64 "null"
SHAPE_ARGS = {"args.Input Dims": "dims", "args.Input type": "types", "args.Concrete Inputs": "concrete"}


@dataclass
class HostTimeline:
    """The host-side facts of one trace, times in ns.

    calls: launching API calls (pid: -1 where the launches carry no process id; corr; ts; thread; ext: the
    call's External id or -1). ops: candidate launching ops (start, end, thread, name, ext or -1). steps: step
    ranges (start, end, number) or None. syncs: device synchronisations (start, end) or None."""

    calls: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame | None
    syncs: pd.DataFrame | None
    step_source: str  # how steps are marked: 'ProfilerStep#N ranges', 'NVTX step ranges'
    op_source: str


def ints(column, fill: int = -1) -> np.ndarray:
    """An Arrow (or pandas) number column as int64 numpy, `fill` where null or not finite. Values pass through
    float64 (integers beyond 2**53 round, as they always have: keys built from them must not change)."""
    if isinstance(column, (pa.Array, pa.ChunkedArray)) and pa.types.is_integer(column.type):
        # an integer column straight from its buffers: pandas' to_numeric costs ~10 ms per million rows
        if not column.null_count and len(column):
            bounds = pc.min_max(column)
            if -(2**53) < bounds["min"].as_py() and bounds["max"].as_py() < 2**53:  # float64 keeps them exact
                return np.asarray(column.to_numpy(), np.int64).copy()  # (the same values, 1 pass instead of 6)
        valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None
        values = np.asarray((pc.fill_null(column, 0) if column.null_count else column).to_numpy(), np.float64)
        ok = np.abs(values) < 2.0**63
        if valid is not None:
            ok &= valid
        return np.where(ok, np.where(ok, values, 0), fill).astype(np.int64)
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = column.to_pandas()
    values = pd.to_numeric(pd.Series(column), errors="coerce").astype("float64").to_numpy()
    ok = np.isfinite(values) & (np.abs(values) < 2.0**63)
    return np.where(ok, np.where(ok, values, 0), fill).astype(np.int64)


def texts(column) -> np.ndarray:
    """A text column as Python strings, None where missing. Read by Arrow itself: pandas 3's to_pandas() gives NaN
    for a missing string, and an NVTX range whose text sits in StringIds (`text` null, `textId` set) then kept NaN
    for a name (64 NCCL launches of a real capture lost their op)."""
    if column is None:
        return np.zeros(0, object)
    if pa.types.is_dictionary(column.type):  # (Arrow's to_numpy of a dictionary column fills nulls with a value)
        column = column.cast(column.type.value_type)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)


def _kineto_host(raw) -> HostTimeline | None:
    from gpuvar.ingest.kineto import us_to_ns

    runtime, cpu = raw.tables.get("runtime"), raw.tables.get("cpu_ops")
    if runtime is None:
        return None

    def timed(table):
        start, null = us_to_ns(table.column("ts"))
        dur = np.nan_to_num(table.column("dur").to_numpy(zero_copy_only=False), nan=0.0)
        thread = (ints(table.column("pid"), 0) << 32) | (ints(table.column("tid"), 0) & 0xFFFFFFFF)
        return start, start + np.round(dur * 1000).astype(np.int64), null, thread

    start, end, null, thread = timed(runtime)
    codes, values = codes_of(runtime.column("name"))
    sync_codes = [i for i, v in enumerate(values) if isinstance(v, str) and SYNC_NAME.match(v)]
    is_sync = np.isin(codes, sync_codes)  # (matched once per distinct name)
    ext = (
        ints(runtime.column("args.External id"))
        if "args.External id" in runtime.column_names
        else np.full(len(start), -1, np.int64)
    )
    corr = ints(runtime.column("args.correlation"))
    kept = ~null & (corr >= 0)  # (filtered as numpy: a DataFrame's boolean selection copies block by block)
    calls = pd.DataFrame(
        {
            "pid": np.full(int(kept.sum()), -1, np.int64),
            "corr": corr[kept],
            "ts": start[kept],
            "thread": thread[kept],
            "ext": ext[kept],
        }
    )
    syncs = pd.DataFrame({"start": start[is_sync & ~null], "end": end[is_sync & ~null]})
    ops = pd.DataFrame({"start": [], "end": [], "thread": [], "name": [], "ext": []})
    steps = None
    if cpu is not None and cpu.num_rows:
        o_start, o_end, o_null, o_thread = timed(cpu)
        name_codes, distinct = codes_of(cpu.column("name"))  # names matched once per distinct name
        o_names = np.array(distinct + [None], dtype=object)[name_codes]
        numbers = [step_number(PROFILER_STEP, n) for n in distinct] + [None]
        step_no = np.array(numbers, dtype=object)[name_codes]
        marker = np.array([n is not None for n in numbers], dtype=bool)[name_codes]
        keep = ~o_null & ~marker
        ops = pd.DataFrame(
            {
                "start": o_start[keep],
                "end": o_end[keep],
                "thread": o_thread[keep],
                "name": o_names[keep],
                "ext": ints(cpu.column("args.External id"))[keep],
            }
        )
        for key, column in SHAPE_ARGS.items():  # record_shapes traces: the op's input shapes (gpuvar.ingest.shapes)
            if key in cpu.column_names:
                ops[column] = texts(cpu.column(key))[keep]
        if (marker & ~o_null).any():
            sel = marker & ~o_null
            steps = pd.DataFrame({"start": o_start[sel], "end": o_end[sel], "number": step_no[sel].astype(np.int64)})
    return HostTimeline(calls, ops, steps, syncs if len(syncs) else None, "ProfilerStep#N ranges", "cpu_op")


def step_number(pattern: re.Pattern, name) -> int | None:
    """The step number a range's name gives under `pattern` (PROFILER_STEP, NVTX_STEP), None for a name that marks
    no step (or is no string). One definition for every path that tells step ranges from ops: the in-memory host
    timeline and the ingest in pieces (gpuvar.ingest.nsys_host_facts, nsys_host_sweep) must agree on which ranges
    are steps, or the same export would get other steps and ops in pieces than in memory."""
    m = pattern.search(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def _nsys_host(raw) -> HostTimeline | None:
    from gpuvar.ingest.nsys import RAW_NVTX, RAW_RUNTIME, RAW_STRINGS, pid_of

    runtime = raw.tables.get(RAW_RUNTIME)
    if runtime is None:
        return None
    strings = raw.tables.get(RAW_STRINGS)
    lookup = (
        dict(zip(ints(strings.column("id")).tolist(), texts(strings.column("value")).tolist()))
        if strings is not None
        else {}
    )
    tid = ints(runtime.column("globalTid"))
    start = ints(runtime.column("start"), MISSING)
    end = ints(runtime.column("end"), MISSING) if "end" in runtime.column_names else start
    calls = pd.DataFrame({"pid": pid_of(tid), "corr": ints(runtime.column("correlationId")), "ts": start})
    calls["thread"], calls["ext"] = tid, -1
    calls = calls[(start != MISSING) & (calls["corr"] >= 0)]
    syncs = None
    if "nameId" in runtime.column_names:
        name_ids = ints(runtime.column("nameId"))
        sync_ids = [i for i, v in lookup.items() if isinstance(v, str) and SYNC_NAME.match(v)]
        is_sync = np.isin(name_ids, sync_ids) & (start != MISSING)
        if is_sync.any():
            syncs = pd.DataFrame({"start": start[is_sync], "end": end[is_sync]})
    ops = pd.DataFrame({"start": [], "end": [], "thread": [], "name": [], "ext": []})
    steps = None
    nvtx = raw.tables.get(RAW_NVTX)
    if nvtx is not None and nvtx.num_rows:
        kind = ints(nvtx.column("eventType"))
        n_start, n_end = ints(nvtx.column("start"), MISSING), ints(nvtx.column("end"), MISSING)
        text = texts(nvtx.column("text")) if "text" in nvtx.column_names else np.full(len(kind), None, object)
        if "textId" in nvtx.column_names:
            ids = ints(nvtx.column("textId"))
            text = np.array([t if t is not None else lookup.get(i) for t, i in zip(text, ids)], dtype=object)
        timed = (n_start != MISSING) & (n_end != MISSING)
        ranges = timed & np.isin(kind, (NVTX_PUSHPOP, NVTX_STARTEND))
        step_no = np.array([step_number(NVTX_STEP, t) if r else None for t, r in zip(text, ranges)], dtype=object)
        marker = np.array([s is not None for s in step_no], dtype=bool)
        pushpop = timed & (kind == NVTX_PUSHPOP) & ~marker
        from gpuvar.ingest.shapes import nvtx_op_and_dims

        names, dims = nvtx_op_and_dims(text[pushpop])  # emit_nvtx's ", seq = N, ..." suffix removed
        ops = pd.DataFrame(
            {
                "start": n_start[pushpop],
                "end": n_end[pushpop],
                "thread": ints(nvtx.column("globalTid"))[pushpop],
                "name": np.asarray(names, dtype=object),
                "ext": -1,
            }
        )
        if any(d is not None for d in dims):  # emit_nvtx(record_shapes=True): sizes = [[...]]
            ops["dims"] = np.asarray(dims, dtype=object)
        if marker.any():
            steps = pd.DataFrame(
                {"start": n_start[marker], "end": n_end[marker], "number": step_no[marker].astype(np.int64)}
            )
    return HostTimeline(calls, ops, steps, syncs, "NVTX step ranges", "NVTX range")


HOSTS = {"pytorch-kineto": _kineto_host, "nsys-sqlite": _nsys_host}


def host_timeline(raw) -> HostTimeline | None:
    """The host facts of a raw trace (None for a format without a host timeline). It reads only the raw
    tables, so normalize_trace builds it in a thread while the reader's normalize runs."""
    builder = HOSTS.get(raw.format)
    return builder(raw) if builder is not None else None


def codes_of(column) -> tuple[np.ndarray, list]:
    """Codes of a string column (-1 for null)."""
    encoded = pc.dictionary_encode(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    codes = pc.fill_null(encoded.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return codes, encoded.dictionary.to_pylist()
