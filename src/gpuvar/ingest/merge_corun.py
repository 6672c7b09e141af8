"""The co-running columns of merged ranks, computed over a sliding window of the merged rows (issue 38 item 1).

Why: the whole-table merge computed ctx_other_process_kernels and ctx_other_process_overlap (gpuvar.ingest.corun)
over every launch of every rank at once: ~130 bytes a launch on top of the keys, 3.3 GB at 25.6 M launches. The
k-way merge (gpuvar.ingest.merge_rows) hands over the merged rows' keys in runs, in start order, and tells how far
it has come (every row not yet handed over starts at or after its threshold). A launch's columns depend only on the
kernels that overlap it, all of which start before it ends; so a launch is settled once the threshold has passed
its end, and computed over the rows held then: the settled ones, those after them, and the earlier ones whose end
reaches the first settled start (a running maximum of ends says which). Rows whose end the first unsettled start
has passed are let go. The values are those of the whole-table computation (integer nanoseconds; tests compare the
files' bytes). What is held grows with how long a kernel runs, not with the trace: a kernel running through the
whole trace would keep every later row in the window.

The physical GPUs are decided once for the whole job from every (file, device id) pair (gpu_identity.MergedGpus),
so the notes are the whole-table merge's, counts summed over the runs. The settled columns go to two scratch files
of float64 and are read back a row group at a time as the rows are written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuvar.ingest.context import group_codes
from gpuvar.ingest.corun import COLUMNS, corun_arrays, set_columns
from gpuvar.ingest.gpu_identity import MergedGpus

FIELDS = {"s": np.int64, "e": np.int64, "timed": bool, "dev": np.int64, "pid": np.float64, "rank": np.int64}


def merged_corun_note(overlapping: int, launches: int, unknown: int) -> str:
    """The merge's note on the co-running columns (both merges say it in these words)."""
    return (
        f"co-running: {overlapping} of {launches} launches overlap kernels of another process "
        f"on their GPU (ctx_other_process_kernels > 0); {unknown} have no known physical GPU or "
        "timeline (NaN)"
    )


class Window:
    """Fed the merged rows' keys in runs (add), it writes their co-running columns in merged order to scratch
    files; set_columns(table) sets them on the next rows written; notes() says what the whole-table merge says."""

    def __init__(self, gpus: MergedGpus, ranks: list[int], scratch: Path):
        self.gpus = gpus
        self.rank_order = np.argsort(np.asarray(ranks, np.int64), kind="stable")
        self.sorted_ranks = np.asarray(ranks, np.int64)[self.rank_order]
        self.held = {name: np.zeros(0, dtype) for name, dtype in FIELDS.items()}
        self.settled = 0  # rows of `held` settled (their columns written)
        self.paths = [scratch / f"corun-{i}.bin" for i in range(len(COLUMNS))]
        self.out = [open(path, "wb") for path in self.paths]
        self.back = None
        self.launches = self.overlapping = self.unknown = 0
        self.held_max = 0  # the most rows' keys held at once (what the longest kernels keep)
        self.lost = np.zeros(len(ranks), np.int64)

    def add(self, rows: dict[str, np.ndarray] | None, threshold: tuple[int, int] | None) -> None:
        """A run of merged rows (None: no more) and the (start, launch id) every later row is at or above."""
        if rows is not None and len(rows["s"]):
            self.held = {name: np.concatenate((self.held[name], rows[name])) for name in FIELDS}
        pending = slice(self.settled, len(self.held["s"]))
        self.held_max = max(self.held_max, len(self.held["s"]))
        if threshold is None:
            ready = pending.stop - pending.start
        else:  # a prefix of the pending rows: untimed, or ended before the threshold's start
            late = self.held["timed"][pending] & (self.held["e"][pending] >= threshold[0])
            ready = int(np.argmax(late)) if late.any() else pending.stop - pending.start
        if ready:
            self._settle(ready)
        if threshold is None:
            for handle in self.out:
                handle.close()
            return
        first = self.held["s"][self.settled] if self.settled < len(self.held["s"]) else threshold[0]
        keep = min(self._reaching(first), self.settled)
        self.held = {name: v[keep:] for name, v in self.held.items()}
        self.settled -= keep

    def _reaching(self, start: int) -> int:
        """The first held row from which on some row's end reaches `start` (the rows before it end earlier)."""
        ends = np.where(self.held["timed"], self.held["e"], np.iinfo(np.int64).min)
        return int(np.searchsorted(np.maximum.accumulate(ends), start, "left")) if len(ends) else 0

    def _settle(self, ready: int) -> None:
        lo = min(self._reaching(self.held["s"][self.settled]), self.settled)
        context = {name: v[lo:] for name, v in self.held.items()}
        rank = context["rank"]
        part = self.rank_order[np.searchsorted(self.sorted_ranks, rank)]
        gpu, lost = self.gpus.codes(part, context["dev"], context["pid"])
        values = corun_arrays(context["s"], context["e"], context["timed"], gpu, group_codes(rank, context["pid"]))
        mine = slice(self.settled - lo, self.settled - lo + ready)
        count = values[COLUMNS[0]][mine]
        known = ~np.isnan(count)
        self.launches += ready
        self.overlapping += int((count[known] > 0).sum())
        self.unknown += int((~known).sum())
        self.lost += np.bincount(part[mine][lost[mine]], minlength=len(self.lost))
        for handle, name in zip(self.out, COLUMNS):
            handle.write(np.ascontiguousarray(values[name][mine], np.float64).tobytes())
        self.settled += ready

    def set_columns(self, table: pa.Table) -> pa.Table:
        """`table` (the next rows written) with the co-running columns set."""
        if self.back is None:
            self.back = [open(path, "rb") for path in self.paths]
        arrays = {
            name: pa.array(np.fromfile(handle, np.float64, count=table.num_rows), type=pa.float64(), from_pandas=True)
            for name, handle in zip(COLUMNS, self.back)
        }
        return set_columns(table, arrays)

    def close(self) -> None:
        for handle in self.out + (self.back or []):
            handle.close()
        for path in self.paths:
            path.unlink(missing_ok=True)

    def notes(self) -> list[str]:
        return (
            self.gpus.notes
            + self.gpus.lost_notes(self.lost)
            + [merged_corun_note(self.overlapping, self.launches, self.unknown)]
        )
