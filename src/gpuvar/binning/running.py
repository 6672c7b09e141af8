"""The sorted path of phase 4: a sorted share's bins, batch by batch (the canonical layout: every share ordered by
the axis, the shares in rank order).

A batch's rows are runs of bins (gpuvar.binning.timeline.bin_runs). Every bin but the batch's last is finished
once the batch is read, so its statistics are computed then; the last one stays open (its rows kept) until a later
batch starts another bin. The share's first bin may continue the previous rank's last: it belongs to the lowest
rank holding rows of it, so its rows are kept apart and sent there at the end (alltoall), where they join that
rank's open last bin after its own rows, in rank order, which is file order. A rank so holds a batch, its open
bin and the bin it gives away, never its share (a bin that spans many batches is held whole: its quantiles need
every value).
"""

from __future__ import annotations

import numpy as np

from gpuvar.binning import read
from gpuvar.binning.per_bin import TARGET, concat_statistics, runs_statistics
from gpuvar.binning.timeline import Timeline

Columns = dict[str, np.ndarray]
STATS_BATCHES = 4  # finished bins are kept until they hold this many batches of rows, then their statistics are
# computed at once: a call costs a few numpy calls per distinct bin size, so fewer, larger calls cost less


def _join(pieces: list[Columns]) -> Columns:
    if len(pieces) == 1:
        return pieces[0]
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


def _rows(cols: Columns | None) -> int:
    return len(cols[TARGET]) if cols else 0


class RunningBins:
    """Per-bin statistics of a sorted share, computed as its bins are finished."""

    def __init__(self, features: tuple[str, ...], workers: int, given: int | None):
        self.features, self.workers = features, workers
        self.given = given  # the share's first bin when a lower rank owns it
        self.give: Columns | None = None  # its rows, once read
        self.open_id: int | None = None  # the bin still being read, and its rows so far
        self.open: list[Columns] = []
        self.open_rows = 0
        self.parts: list[dict] = []  # statistics of the finished bins, in bin order
        self.done: list[tuple[np.ndarray, np.ndarray, Columns]] = []  # finished bins waiting: (ids, starts, rows)
        self.done_rows = 0
        self.held_rows = 0  # most rows held at once: a batch, the open bin, the finished bins waiting and the bin
        # given away
        self._started = False

    def add(self, ids: np.ndarray, starts: np.ndarray, cols: Columns) -> None:
        """One batch: its runs (bin ids[i] holds rows starts[i] .. starts[i+1]) and its columns (TARGET and the
        features, NaN where a row has no target)."""
        n = _rows(cols)
        if not n:
            return
        self.held_rows = max(self.held_rows, n + self.open_rows + self.done_rows + _rows(self.give))
        if not self._started:
            self._started = True
            if self.given is not None:
                self.open_id = int(ids[0])  # never finished here: the first run opens like a continued bin
        k = 0
        if self.open_id is not None and ids[0] == self.open_id:
            end = int(starts[1]) if len(ids) > 1 else n
            self._extend({c: v[:end] for c, v in cols.items()})
            k = 1
        if k == len(ids):
            return
        closing = self._close()
        if closing is not None:  # (its own piece: the flush joins the pieces, so the batch is copied once)
            cid, ccols = closing
            self._finished(np.array([cid], np.int64), np.zeros(1, np.int64), ccols)
        last = len(ids) - 1
        a, z = int(starts[k]), int(starts[last])
        if last > k:
            self._finished(ids[k:last], starts[k:last] - a, {c: v[a:z] for c, v in cols.items()})
        self.open_id = int(ids[last])
        self._extend({c: v[int(starts[last]) :] for c, v in cols.items()})

    def _finished(self, ids: np.ndarray, starts: np.ndarray, cols: Columns) -> None:
        """Whole bins (in bin order, after those before): their statistics once enough rows wait."""
        self.done.append((ids, starts, cols))
        self.done_rows += _rows(cols)
        if self.done_rows >= STATS_BATCHES * read.BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.done:
            return
        if len(self.done) == 1:
            ids, starts, cols = self.done[0]
        else:
            offsets = np.cumsum([0, *[_rows(c) for _, _, c in self.done[:-1]]])
            ids = np.concatenate([i for i, _, _ in self.done]).astype(np.int64)
            starts = np.concatenate([s + o for (_, s, _), o in zip(self.done, offsets)]).astype(np.int64)
            cols = _join([c for _, _, c in self.done])
        self.parts.append(runs_statistics(ids, starts, cols, self.workers))
        self.done, self.done_rows = [], 0

    def _extend(self, cols: Columns) -> None:
        self.open.append({c: v.copy() for c, v in cols.items()})  # a copy: the batch's arrays are not kept
        self.open_rows += _rows(cols)

    def _close(self) -> tuple[int, Columns] | None:
        """The open bin, finished: (id, rows), or None when there is none or it is the bin given away."""
        if self.open_id is None:
            return None
        bin_id, cols = self.open_id, _join(self.open)
        self.open_id, self.open, self.open_rows = None, [], 0
        if bin_id == self.given and self.give is None:
            self.give = cols
            return None
        return bin_id, cols

    def finish(self, comm, timeline: Timeline) -> dict[str, np.ndarray]:
        """Send the given bin to its owner, add what others sent to the open bin, and finish it: this rank's
        statistics in bin order (collective)."""
        rank, size = comm.Get_rank(), comm.Get_size()
        if self.open_id is not None and self.open_id == self.given and self.give is None:
            self._close()  # the whole share was its first bin
        send = [None] * size
        if self.give is not None:
            send[timeline.owner_of_first(rank)] = self.give
        got = [part for part in comm.alltoall(send) if part is not None]  # arrives in rank order
        self.give = None
        if got:
            self.open.extend(got)
            self.open_rows += sum(_rows(p) for p in got)
        self.held_rows = max(self.held_rows, self.open_rows + self.done_rows)
        closing = self._close()
        if closing is not None:
            cid, cols = closing
            self._finished(np.array([cid], np.int64), np.zeros(1, np.int64), cols)
        self._flush()
        return concat_statistics(self.parts, self.features)
