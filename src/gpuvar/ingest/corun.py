"""Kernels of other processes on the same physical GPU at the same time (issue 34 item 4).

Why: several processes can share one GPU (ranks of a job on a one-GPU node, an inference server beside a
training job, MPS clients). The GPU time-slices or co-schedules them, so a launch that overlaps another
process's kernels can take many times its usual time. On the real two-rank gloo recording (both ranks on one
H100) an 8 us relu took up to 1.8 ms while the other rank's GEMMs ran. The per-rank context columns
(gpuvar.ingest.context: one timeline per rank and device) cannot see that: each rank file only records its own
kernels. These columns are computed where one table holds the kernels of several processes: the merged
multi-rank ingest (gpuvar.ingest.merge, used by `merge: true` datasets and `gpuvar explain a b`) and a single
trace that recorded several processes (Nsight Systems can).

`corun_columns(kernels, gpu, process)` returns float64 arrays aligned with the rows, given per row an int64
code of its physical GPU and of its process (-1: unknown; gpuvar.ingest.gpu_identity decides both and writes
how in ingest.json's notes). Intervals are half-open, [start, end), as in context.py: a kernel of another
process that ends exactly when the launch starts does not overlap it.

  ctx_other_process_kernels  kernels of other processes on the same physical GPU overlapping the launch (count).
  ctx_other_process_overlap  share (0..1) of the launch's own interval [start, end) covered by the union of
                             those kernels: 1.0 when another process had work on the GPU for the whole launch.
                             A zero-length launch gets 1.0 if such a kernel overlaps it (count > 0), else 0.0.

NaN for a launch whose physical GPU or process is unknown, or with a null start/end or end < start (and such
kernels count for no other launch).

Why a cause and not a consequence: another process's kernels are set by that process, not by this launch, so
these are context (role `context`, tier 0, in data/feature_roles.csv; the `ctx_.*` rule). The caveat, as for
context.py's columns: the overlap is measured over the launch's own interval, so a launch that is longer for
any reason overlaps more of the other processes' work (reverse causation by construction). Measured on the real
pair h100-2rank-gloo (3,036 launches; in brackets a second recording of the same program, with rank 0 as the
rank whose rows vary, 3,060 launches), on the rank whose work varies:
  * the share's R² with the relu's duration is 0.998 (0.992), the count's 0.998 (0.992); with the GEMMs'
    0.74 (0.75) over all GEMMs, 0.98 (0.99) within a launch configuration;
  * the relu launches > 5x the median of their kernel and launch configuration: 2 (7), of which 2 (6) have
    share > 0.5 (the other one overlaps only a 1.3 us copy of the other rank); GEMM launches > 2x: 13 (13),
    all with share > 0.5 (none reaches 5x);
  * lengthening every launch by 10 % changes the share by > 0.05 in 2 (6) launches and the count in none; by
    50 % in 192 (157) and 259 (244);
  * but with every end set to start + the median duration of its (rank, kernel, launch configuration), no
    outlier keeps any overlap (relu R² 0.000): the other rank's kernels start *inside* the stretched launch. The GPU time-slices the two
    processes' contexts: the launch waits while the other process runs. So the column is the cause and, at
    the same time, something only a long launch can show; read it as "another process ran on this GPU
    during the launch", not as "was running when it started".
The counterweight: on the rank whose work is fixed, 150 (190) launches have share > 0.5 and ran at their kernel's
median time (at most 1.11x): a high share does not make a launch long by construction.

No Python loop over rows. The count is all kernels of the GPU overlapping the launch minus those of its own
process (searchsorted over sorted starts and ends, context._overlaps). The share needs the union of the other
processes' intervals: each kernel is replicated once for every other process of its GPU (a (GPU, process)
pair is one timeline of "others"; n x processes-per-GPU rows), each such timeline is merged into disjoint
segments by a running maximum of ends in one sorted key space (pair x span + time), and the covered length of
[start, end) is F(end) - F(start) with F the cumulative covered length, found by searchsorted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.ingest.context import TimelineKeys, arrow_floats, overlaps

COLUMNS = ("ctx_other_process_kernels", "ctx_other_process_overlap")


def corun_columns(kernels: pd.DataFrame, gpu: np.ndarray, process: np.ndarray) -> dict[str, np.ndarray]:
    """The two columns of the module docstring for `kernels` (start, end), given each row's physical-GPU and
    process codes (int64, -1 unknown)."""
    start = kernels["start"].to_numpy(dtype=np.int64, na_value=0)
    end = kernels["end"].to_numpy(dtype=np.int64, na_value=0)
    timed = kernels["start"].notna().to_numpy() & kernels["end"].notna().to_numpy() & (end >= start)
    return corun_arrays(start, end, timed, gpu, process)


def corun_arrays(start, end, timed, gpu, process) -> dict[str, np.ndarray]:
    """corun_columns of int64 start and end times, `timed` where both are known and end >= start."""
    gpu, process = np.asarray(gpu, np.int64), np.asarray(process, np.int64)
    rows = np.flatnonzero(timed & (gpu >= 0) & (process >= 0))
    count_col, share_col = np.full(len(start), np.nan), np.full(len(start), np.nan)
    if len(rows):
        count, share = _corun(start[rows], end[rows], gpu[rows], process[rows])
        count_col[rows], share_col[rows] = count, share
    return {COLUMNS[0]: count_col, COLUMNS[1]: share_col}


def _corun(s: np.ndarray, e: np.ndarray, gpu: np.ndarray, process: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    g = pd.factorize(gpu)[0].astype(np.int64)
    pairs = pd.MultiIndex.from_arrays([g, process])
    gp, uniq = pd.factorize(pairs, sort=True)  # (gpu, process) pairs sorted by gpu, then process
    gp = gp.astype(np.int64)
    keys = TimelineKeys([s, e], len(uniq) + 1)
    on_gpu, _ = overlaps(keys, g, s, e, g, s, e)
    own, _ = overlaps(keys, gp, s, e, gp, s, e)
    count = (on_gpu - own).astype(np.float64)

    # the others of each (gpu, process) pair: every kernel of the gpu, replicated to each other process of it
    pair_gpu = uniq.get_level_values(0).to_numpy(np.int64)
    first = np.searchsorted(pair_gpu, np.arange(g.max() + 1))
    n_pairs = np.bincount(pair_gpu, minlength=g.max() + 1)
    reps = n_pairs[g]
    src = np.repeat(np.arange(len(s)), reps)
    target = np.repeat(first[g], reps) + (np.arange(len(src)) - np.repeat(np.cumsum(reps) - reps, reps))
    keep = target != gp[src]
    src, target = src[keep], target[keep]
    covered = _covered(keys, target, s[src], e[src], gp, s, e)
    length = (e - s).astype(np.float64)
    share = np.divide(covered, length, out=np.zeros(len(s)), where=length > 0)
    share[length == 0] = (count[length == 0] > 0).astype(np.float64)
    return count, np.clip(share, 0.0, 1.0)


def _covered(keys: TimelineKeys, ig, ia, ib, qg, qs, qe) -> np.ndarray:
    """Length of [qs, qe) covered by the union of the intervals [ia, ib) of the same group (ns)."""
    if len(ia) == 0:
        return np.zeros(len(qs))
    ka = keys.key(ig, ia)
    order = np.argsort(ka, kind="stable")
    ka, kb = ka[order], keys.key(ig, ib)[order]
    ra, rb, rg = ia[order], ib[order], ig[order]
    # a new segment where an interval starts after every earlier one (same group: keys of a later group are
    # larger than any end of an earlier one) has ended
    reach = np.maximum.accumulate(kb)
    new = np.ones(len(ka), bool)
    new[1:] = ka[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    seg_a, seg_g = ra[heads], rg[heads]
    seg_b = np.maximum.reduceat(rb, heads)  # real ends: order-preserving keys, so the largest key end is it
    seg_ka = ka[heads]
    cum = np.concatenate(([0], np.cumsum(seg_b - seg_a)))

    def covered_before(group, t):
        """Covered length of (-inf, t) in the group's timeline."""
        k = np.searchsorted(seg_ka, keys.key(group, t), side="left")  # segments starting before t
        last = np.maximum(k - 1, 0)
        spill = np.where((k > 0) & (seg_g[last] == group), np.maximum(seg_b[last] - t, 0), 0)
        return (cum[k] - spill).astype(np.float64)

    return covered_before(qg, qe) - covered_before(qg, qs)


def single_trace_arrays(kernels, recorded) -> tuple[dict, list[str]]:
    """The columns as Arrow float64 arrays for one file's canonical kernels (Arrow) when it holds kernels of two
    or more processes (process_id), with the notes that say how the GPU was named; ({}, []) otherwise (one
    process, no process id, no timeline)."""

    from gpuvar.ingest.gpu_identity import single_trace_gpus

    names = ("start", "end", "device_id", "process_id")
    if not set(names) <= set(kernels.column_names) or kernels.column("process_id").null_count == kernels.num_rows:
        return {}, []
    frame = kernels.select(list(names)).to_pandas()
    if not frame["start"].notna().any() or frame["process_id"].nunique() < 2:
        return {}, []
    process = frame["process_id"].to_numpy(dtype=np.int64, na_value=-1)
    process = np.where(process >= 0, pd.factorize(process)[0], -1).astype(np.int64)
    gpu, notes = single_trace_gpus(recorded, frame["device_id"], frame["process_id"])
    columns = corun_columns(frame, gpu, process)
    count = columns[COLUMNS[0]]
    notes.append(corun_note(int(np.nansum(count > 0)), len(count), frame["process_id"].nunique()))
    return arrow_floats(columns), notes


def corun_note(overlapping: int, launches: int, processes: int) -> str:
    """The note on how many launches ran beside another process's kernels."""
    return (
        f"co-running: {overlapping} of {launches} launches overlap kernels of another process on their GPU "
        f"({processes} processes)"
    )


def set_columns(kernels, arrays: dict):
    """The kernels Arrow table with these columns set (the schema's null placeholders replaced, else appended)."""
    for name, values in arrays.items():
        if name in kernels.column_names:
            kernels = kernels.set_column(kernels.column_names.index(name), name, values)
        else:
            kernels = kernels.append_column(name, values)
    return kernels
