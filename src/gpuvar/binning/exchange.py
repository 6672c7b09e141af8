"""Phase 4b of the binning job: move rows to the rank that owns their bin.

Sorted path: a bin belongs to the lowest rank holding rows of it, so only the rows of a share's first bin move,
to the rank before (alltoall of one bin's rows). General path: allreduce of per-bin counts, bins go to ranks in
contiguous ranges balanced by rows, rows move with Alltoallv on numpy buffers. Either way the rows of a bin
reach its owner in file order whatever the rank count, which makes the statistics rank-count independent.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpuvar.binning.partition import bin_owners
from gpuvar.binning.timeline import Bins

TARGET = "__target"  # key of the target among the exchanged columns (the others are the features)


class Runs(NamedTuple):
    """Rows already cut into bins: bin ids[i] holds the rows starts[i] .. starts[i+1] (or the end)."""

    ids: np.ndarray
    starts: np.ndarray
    columns: dict[str, np.ndarray]


class Rows(NamedTuple):
    """Rows with their (non-decreasing) bin ids."""

    bins: np.ndarray
    columns: dict[str, np.ndarray]


Segment = Runs | Rows


def exchange_rows(comm, bins: Bins, ok: np.ndarray, columns: dict[str, np.ndarray]) -> list[Segment]:
    """This rank's bins with all their rows, as bin-aligned segments (bins non-decreasing within and across).

    `columns`: the TARGET column and the features, per share row; `ok`: rows with a target. Sorted input: each
    destination's rows are one slice, sent straight from the share's arrays (no send copy) and the rows a rank
    keeps are never copied: only the received rows and the few kept rows of bins shared with a neighbour are
    concatenated. Collective."""
    from mpi4py import MPI

    if bins.fast:
        return _exchange_runs(comm, bins, ok, columns)
    rank, size = comm.Get_rank(), comm.Get_size()
    idx = np.flatnonzero(ok) if not ok.all() else None
    rows = bins.rows if idx is None else bins.rows[idx]
    cols = {k: (v if idx is None else v[idx]) for k, v in columns.items()}
    if size == 1:  # one rank owns every bin: no counts, no exchange
        return [Rows(rows, cols) if _is_sorted(rows) else Rows(*_sorted_segment(rows, cols))]
    local_sorted = _is_sorted(rows)
    if local_sorted:  # counts from bin edges: O(bins log rows) instead of a pass over the rows
        counts = np.diff(np.searchsorted(rows, np.arange(bins.n_bins + 1), side="left")).astype(np.int64)
    else:
        counts = np.bincount(rows, minlength=bins.n_bins).astype(np.int64)
    total = np.empty_like(counts)
    comm.Allreduce(counts, total, op=MPI.SUM)
    del counts
    owners = bin_owners(total, size)
    first_bin = np.searchsorted(owners, np.arange(size + 1), side="left")  # owners is non-decreasing
    if local_sorted:
        cut = np.searchsorted(rows, first_bin, side="left")
    else:  # not sorted by start: group rows by owner first (costs a copy)
        order = np.argsort(owners[rows], kind="stable")
        rows, cols = rows[order], {k: v[order] for k, v in cols.items()}
        cut = np.searchsorted(owners[rows], np.arange(size + 1), side="left")
    send = np.diff(cut).astype(np.int64)
    recv = np.array(comm.alltoall(send.tolist()), dtype=np.int64)
    send[rank] = recv[rank] = 0  # kept rows stay where they are
    r_bins = _alltoallv(comm, rows, cut[:-1], send, recv)
    r_cols = {k: _alltoallv(comm, v, cut[:-1], send, recv) for k, v in cols.items()}
    n_low = int(recv[:rank].sum())
    own = slice(int(cut[rank]), int(cut[rank + 1]))
    low = (r_bins[:n_low], {k: v[:n_low] for k, v in r_cols.items()})
    own = (rows[own], {k: v[own] for k, v in cols.items()})
    high = (r_bins[n_low:], {k: v[n_low:] for k, v in r_cols.items()})
    return [Rows(*seg) for seg in _merge_segments(low, own, high, own_sorted=local_sorted)]


def _exchange_runs(comm, bins: Bins, ok: np.ndarray, columns: dict[str, np.ndarray]) -> list[Segment]:
    """Sorted file: only the rows of a share's first bin can move (to the rank before, whose last bin it
    continues), appended after the owner's own rows in rank order, which is file order."""
    ids, starts, n = bins.ids, bins.starts, len(ok)
    cols = columns
    if not ok.all():  # a row without a target is left out of every statistic, like the general path
        cols = {k: v if k == TARGET else np.where(ok, v, np.nan) for k, v in cols.items()}
    runs = comm.allgather((int(ids[0]), int(ids[-1])) if len(ids) else None)

    def owner(r: int) -> int:  # owner of rank r's first bin
        return min(q for q in range(r + 1) if runs[q] is not None and runs[q][1] >= runs[r][0])

    me = comm.Get_rank()
    first_end = int(starts[1]) if len(ids) > 1 else n
    send = [None] * comm.Get_size()
    give = len(ids) > 0 and owner(me) != me
    if give:
        send[owner(me)] = {k: v[:first_end] for k, v in cols.items()}
    got = [part for part in comm.alltoall(send) if part is not None]  # arrives in rank order
    lo = 1 if give else 0
    hi = len(ids) - 1 if got else len(ids)
    segments: list[Segment] = []
    if hi > lo:
        a, b = int(starts[lo]), (int(starts[hi]) if hi < len(ids) else n)
        segments.append(Runs(ids[lo:hi], starts[lo:hi] - a, {k: v[a:b] for k, v in cols.items()}))
    if got:
        a = int(starts[-1])
        joined = {k: np.concatenate([v[a:], *[p[k] for p in got]]) for k, v in cols.items()}
        segments.append(Runs(ids[-1:], np.zeros(1, np.int64), joined))
    return segments


def _alltoallv(comm, arr: np.ndarray, sdis: np.ndarray, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
    from mpi4py import MPI

    arr = np.ascontiguousarray(arr)
    typ = MPI._typedict[arr.dtype.char]
    rdis = np.concatenate(([0], np.cumsum(recv)[:-1]))
    out = np.empty(int(recv.sum()), dtype=arr.dtype)
    comm.Alltoallv([arr, (send.tolist(), [int(x) for x in sdis]), typ], [out, (recv.tolist(), rdis.tolist()), typ])
    return out


def _is_sorted(a: np.ndarray, step: int = 1 << 22) -> bool:
    """Non-decreasing? (chunked: no full-size temporary)."""
    for i in range(0, len(a), step):
        c = a[i : i + step + 1]
        if (c[1:] < c[:-1]).any():
            return False
    return True


def _sorted_segment(bins, cols):
    order = np.argsort(bins, kind="stable")
    return bins[order], {k: v[order] for k, v in cols.items()}


def _cat(*segs):
    return np.concatenate([s[0] for s in segs]), {k: np.concatenate([s[1][k] for s in segs]) for k in segs[0][1]}


def _cut(seg, a, b):
    return seg[0][a:b], {k: v[a:b] for k, v in seg[1].items()}


def _merge_segments(low, own, high, own_sorted: bool = False):
    """[received from lower ranks | kept | received from higher ranks] as bin-aligned segments.

    With a sorted file only the first and last kept bins can also hold received rows: those few kept rows are
    joined to the received ones; the rest of the kept rows stay a view. Anything else is sorted as a whole.
    """
    lb, ob, hb = low[0], own[0], high[0]
    if not len(ob) or not (_is_sorted(lb) and (own_sorted or _is_sorted(ob)) and _is_sorted(hb)):
        return [_sorted_segment(*_cat(low, own, high))]
    p = int(np.searchsorted(ob, lb[-1], side="right")) if len(lb) else 0
    q = int(np.searchsorted(ob, hb[0], side="left")) if len(hb) else len(ob)
    ordered = (not len(lb) or not len(ob) or lb[-1] <= ob[0]) and (not len(hb) or not len(ob) or ob[-1] <= hb[0])
    if not ordered or p > q or (len(lb) and len(hb) and lb[-1] > hb[0]):
        return [_sorted_segment(*_cat(low, own, high))]
    return [_cat(low, _cut(own, 0, p)), _cut(own, p, q), _cat(_cut(own, q, len(ob)), high)]
