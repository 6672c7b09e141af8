"""The op a launch was made in, by time: of the ops open around its API call on the call's thread, the innermost.

Why apart: the one place where a launch is placed by time rather than by an id (Nsight Systems NVTX ranges; a Kineto
launch whose External id matches no op), and the one whose plain form, a stack swept per thread, was a Python loop
per launch (gpuvar.ingest.call_sites uses it; the streamed sweep of gpuvar.ingest.nsys_host_sweep keeps the stack,
with the same answers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def innermost_op(ops: pd.DataFrame, times: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Index (into ops) of the innermost op enclosing each (time, thread) query on that thread, -1 where none.

    The answer of a sweep per thread, queries in time order, ops pushed on a stack by (start, longest first) and
    ended ones popped off its top (as the streamed sweep of gpuvar.ingest.nsys_host_sweep does): every op open
    around a query is on the stack then, and those pushed after the top have ended, so the top is the last op in
    push order with start <= time <= end; for properly nested ranges, as profilers record them, the innermost.
    Found without a loop per query (last_open): a million queries took seconds of Python that held the GIL."""
    out = np.full(len(times), -1, dtype=np.int64)
    if not len(ops) or not len(times):
        return out
    o_thread = ops["thread"].to_numpy(np.int64)
    o_start, o_end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    times, threads = np.asarray(times, np.int64), np.asarray(threads, np.int64)
    for thread in np.unique(threads).tolist():
        mine = np.flatnonzero(o_thread == thread)
        if not len(mine):
            continue
        mine = mine[np.lexsort((-o_end[mine], o_start[mine]))]  # push order (ties: the ops' own order)
        queries = np.flatnonzero(threads == thread)
        last = last_open(o_start[mine], o_end[mine], times[queries])
        out[queries] = np.where(last >= 0, mine[last], -1)
    return out


def last_open(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time, the last position p of ops sorted by start with start[p] <= time <= end[p], -1 for none.

    The ops started by a time are a prefix of the order; the last op of the prefix usually holds the time (a launch
    sits in the op that started last). For the other times the prefix is cut back over runs of ops that all ended
    before the time, halving the run length each pass, on a table of the latest end over runs of 2^j ops (binary
    lifting: log2(ops) passes over those times only)."""
    cut = np.searchsorted(start, times, side="right")  # ops [0, cut) started by the time
    last = cut - 1
    holds = (cut > 0) & (end[np.maximum(last, 0)] >= times)
    rest = np.flatnonzero(~holds & (cut > 1))
    answer = np.where(holds, last, -1)
    if not len(rest):
        return answer
    order = rest[np.argsort(cut[rest], kind="stable")]  # (near-sequential reads of the table below)
    cut, t = cut[order] - 1, times[order]  # the last op of the prefix has ended: it is skipped
    levels = [end]  # levels[j][i]: the latest end among ops i .. i + 2^j - 1
    while 2 ** len(levels) <= len(end):
        half = 2 ** (len(levels) - 1)
        levels.append(np.maximum(levels[-1][:-half], levels[-1][half:]))
    for j in range(len(levels) - 1, -1, -1):  # skip back over each run of 2^j ops that all ended before the time
        size = 2**j
        can = np.flatnonzero(cut >= size)
        ended = can[levels[j][cut[can] - size] < t[can]]
        cut[ended] -= size
    found = cut > 0  # (end[cut - 1] >= time: the skip is the longest run of ended ops)
    answer[order[found]] = cut[found] - 1
    return answer
