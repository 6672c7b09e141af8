"""The general path of phase 4: bins of rows in any order (a file not sorted by start, several files binned as one
table, null start times), in bounded memory.

The pass over the share keeps each row with a target as (bin, target, features) in a Spill, in file order: in
memory up to ROUND_ROWS rows, in temporary files beyond (one per column, under TMPDIR, removed at the end), and
counts the rows per bin. The counts (allreduce: sum and largest share over the ranks) cut the bins into rounds of
contiguous bins holding at most ROUND_ROWS rows per rank; the spill is split by round (one more sequential pass,
when there are several). In each round the bins are dealt to the ranks by rows, each rank sends the round's rows
to their bins' owners (Alltoallv, rank order = file order), and each owner sorts them by bin (stable: file order
within a bin) and computes the statistics of whole bins. Rank 0 orders the statistics by round, then rank.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from gpuvar.binning.partition import bin_owners
from gpuvar.binning.per_bin import empty_statistics, rows_statistics

ROUND_ROWS = 1 << 21  # rows with a target a rank holds at once on the general path (in memory, then per round)
READ_ROWS = 1 << 18  # rows read back from a spill file at once

Columns = dict[str, np.ndarray]


class Spill:
    """Rows (bin, columns) kept in order: in memory up to `limit` rows (default ROUND_ROWS), then in files."""

    def __init__(self, names: list[str], limit: int | None = None, folder: Path | None = None):
        self.names, self.limit = names, ROUND_ROWS if limit is None else limit
        self.rows = 0
        self._memory: list[tuple[np.ndarray, Columns]] = []
        self._folder = folder  # where a file-backed spill writes (a fresh temporary folder when None)
        self._own_folder = False
        self._files: dict[str, Path] | None = None

    @property
    def in_memory(self) -> bool:
        return self._files is None

    @property
    def held_rows(self) -> int:
        return self.rows if self.in_memory else 0

    def add(self, bins: np.ndarray, cols: Columns) -> None:
        if not len(bins):
            return
        self.rows += len(bins)
        if self._files is None:
            self._memory.append((np.asarray(bins, np.int64), cols))
            if self.rows > self.limit:
                self._to_files()
        else:
            self._write(np.asarray(bins, np.int64), cols)

    def _to_files(self) -> None:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="gpuvar-bin-spill-"))
            self._own_folder = True
        tag = tempfile.mkdtemp(prefix="part-", dir=self._folder)
        self._files = {name: Path(tag) / f"{i}.bin" for i, name in enumerate(["bin", *self.names])}
        for path in self._files.values():
            path.write_bytes(b"")
        memory, self._memory = self._memory, []
        for bins, cols in memory:
            self._write(bins, cols)

    def _write(self, bins: np.ndarray, cols: Columns) -> None:
        for name, values in (("bin", bins), *((n, cols[n]) for n in self.names)):
            with open(self._files[name], "ab") as fh:
                np.ascontiguousarray(values).tofile(fh)

    def chunks(self):
        """(bins, columns) in the order added, a bounded piece at a time."""
        if self._files is None:
            yield from self._memory
            return
        handles = {name: open(path, "rb") for name, path in self._files.items()}
        try:
            while True:
                bins = np.fromfile(handles["bin"], dtype=np.int64, count=READ_ROWS)
                if not len(bins):
                    return
                yield bins, {n: np.fromfile(handles[n], dtype=np.float64, count=len(bins)) for n in self.names}
        finally:
            for fh in handles.values():
                fh.close()

    def split(self, cuts: np.ndarray) -> list[Spill]:
        """One spill per round (round k: bins cuts[k] .. cuts[k+1]-1), each in the order added; this one is
        emptied."""
        parts = [Spill(self.names, self.limit if self.in_memory else 0, self._folder) for _ in range(len(cuts) - 1)]
        for bins, cols in self.chunks():
            which = np.searchsorted(cuts, bins, side="right") - 1
            order = np.argsort(which, kind="stable")
            edges = np.searchsorted(which[order], np.arange(len(parts) + 1))
            for k in range(len(parts)):
                a, b = int(edges[k]), int(edges[k + 1])
                if b > a:
                    take = order[a:b]
                    parts[k].add(bins[take], {n: v[take] for n, v in cols.items()})
        self.clear()
        return parts

    def gather(self) -> tuple[np.ndarray, Columns]:
        """Every row, as one array per column."""
        pieces = list(self.chunks())
        if not pieces:
            return np.zeros(0, np.int64), {n: np.zeros(0) for n in self.names}
        bins = np.concatenate([p[0] for p in pieces])
        return bins, {n: np.concatenate([p[1][n] for p in pieces]) for n in self.names}

    def clear(self) -> None:
        self._memory = []
        if self._files is not None:
            for path in self._files.values():
                path.unlink(missing_ok=True)
        self._files = None
        self.rows = 0

    def close(self) -> None:
        """Remove what this spill wrote (its folder, when it made one)."""
        self.clear()
        if self._own_folder and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def plan_rounds(total: np.ndarray, most: np.ndarray, size: int, budget: int) -> np.ndarray:
    """Cuts of the bins into rounds of contiguous bins (round k: cuts[k] .. cuts[k+1]-1) holding at most
    size * budget rows in all and at most `budget` of any one rank (a round has at least one bin)."""
    n = len(total)
    ct, cm = np.cumsum(total), np.cumsum(most)
    cuts, b0 = [0], 0
    while b0 < n:
        base_t = int(ct[b0 - 1]) if b0 else 0
        base_m = int(cm[b0 - 1]) if b0 else 0
        j = min(
            int(np.searchsorted(ct, base_t + size * budget, side="right")),
            int(np.searchsorted(cm, base_m + budget, side="right")),
        )
        b0 = max(b0 + 1, j)
        cuts.append(min(b0, n))
    return np.asarray(cuts, dtype=np.int64)


def round_statistics(comm, spill: Spill, counts: np.ndarray, features: tuple[str, ...], workers: int):
    """This rank's statistics per round, [(round, statistics in bin order)], and the most rows it held in a
    round (collective)."""
    from mpi4py import MPI

    size = comm.Get_size()
    if size > 1:
        total, most = np.empty_like(counts), np.empty_like(counts)
        comm.Allreduce(counts, total, op=MPI.SUM)
        comm.Allreduce(counts, most, op=MPI.MAX)
    else:
        total = most = counts
    cuts = plan_rounds(total, most, size, ROUND_ROWS)
    rounds = spill.split(cuts) if len(cuts) > 2 else [spill]
    out, held = [], 0
    try:
        for k, part in enumerate(rounds):
            b0, b1 = int(cuts[k]), int(cuts[k + 1])
            bins, cols = part.gather()
            part.clear()
            if size > 1:
                bins, cols, moved = _to_owners(comm, bins, cols, bin_owners(total[b0:b1], size), b0)
                held = max(held, moved)
            held = max(held, len(bins))
            if len(bins) and bool((bins[1:] < bins[:-1]).any()):
                order = np.argsort(bins, kind="stable")
                bins, cols = bins[order], {n: v[order] for n, v in cols.items()}
            stats = rows_statistics(bins, cols, workers) if len(bins) else empty_statistics(features)
            out.append((k, stats))
    finally:
        for part in rounds:
            part.close()
        spill.close()
    return out, held


def _to_owners(comm, bins: np.ndarray, cols: Columns, owners: np.ndarray, b0: int):
    """The round's rows to their bins' owners (Alltoallv; the rows a rank owns itself stay): what this rank owns,
    in rank order (file order), and the rows it held at once."""
    rank, size = comm.Get_rank(), comm.Get_size()
    own = owners[bins - b0] if len(bins) else np.zeros(0, np.int64)
    if len(own) and bool((own[1:] < own[:-1]).any()):
        order = np.argsort(own, kind="stable")
        bins, cols, own = bins[order], {n: v[order] for n, v in cols.items()}, own[order]
    cut = np.searchsorted(own, np.arange(size + 1), side="left")
    send = np.diff(cut).astype(np.int64)
    recv = np.array(comm.alltoall(send.tolist()), dtype=np.int64)
    send[rank] = recv[rank] = 0  # kept rows are not sent
    kept = slice(int(cut[rank]), int(cut[rank + 1]))
    low = int(recv[:rank].sum())
    out_bins = _join(_alltoallv(comm, bins, cut[:-1], send, recv), bins[kept], low)
    out = {n: _join(_alltoallv(comm, v, cut[:-1], send, recv), v[kept], low) for n, v in cols.items()}
    return out_bins, out, len(bins) + int(recv.sum())


def _join(got: np.ndarray, kept: np.ndarray, low: int) -> np.ndarray:
    """[received from lower ranks | kept | received from higher ranks]: rank order."""
    return np.concatenate([got[:low], kept, got[low:]])


def _alltoallv(comm, arr: np.ndarray, sdis: np.ndarray, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
    from mpi4py import MPI

    arr = np.ascontiguousarray(arr)
    typ = MPI._typedict[arr.dtype.char]
    rdis = np.concatenate(([0], np.cumsum(recv)[:-1]))
    out = np.empty(int(recv.sum()), dtype=arr.dtype)
    comm.Alltoallv([arr, (send.tolist(), [int(x) for x in sdis]), typ], [out, (recv.tolist(), rdis.tolist()), typ])
    return out
