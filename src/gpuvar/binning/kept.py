"""The rows a binning rank keeps from its scan for the bins pass (the sorted path), so that pass decodes nothing.

Why: the bins pass needs the group means, which need every rank's scan, so the bounded job read its share twice;
the second decode of the same three columns (kernel name, start, duration: ~0.15-0.2 s per 10 M rows here) was a
fifth of the 20 M-row job (issue 38, item 5). What the bins pass reads of a batch is small once decoded: the
durations, the group codes and the batch's bin runs (a few per thousand rows). The scan keeps them in the narrowest
integer types that hold them (durations as uint32 when they fit, codes as uint8 below 256 groups: ~5 bytes a
row) up to HOLD_BYTES per rank: memory stays bounded, and a share larger than that keeps its first row groups and
reads the rest again, as before.

The bin runs need the timeline's origin (the smallest axis value of the whole trace) before any rank has scanned:
it is the minimum of the Parquet statistics of the axis column (exact for integer columns; every canonical file has
them). The bins pass uses the kept rows only when the agreed timeline has that origin and takes the sorted path,
with no copy link to stream beside the kernels (it needs each kernel's start) and no feature but the duration;
otherwise it reads the share again. A kept row's target is computed from the same values by the same arithmetic
(gpuvar.binning.target.compute_target), so the outputs are the same bytes either way (tests/test_binning_bounded.py
compares them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpuvar.binning.plan import LINKED, Plan
from gpuvar.binning.read import Batch, Scan, batches
from gpuvar.binning.timeline import Timeline, bin_runs

HOLD_BYTES = 96 << 20  # kept bytes per rank at most: 20 M rows on 2 ranks keep ~50 MB each


@dataclass(frozen=True)
class KeptBatch:
    """What the bins pass reads of one batch of the scan."""

    dur: np.ndarray  # durations (0 where null), the narrowest integer type holding the batch's
    codes: np.ndarray  # group codes (the rank's index), the narrowest unsigned type holding them
    ok: np.ndarray | None  # the batch's ok (None: every row)
    ids: np.ndarray  # bin runs: bin ids[i] holds rows starts[i] .. starts[i+1] (or the end)
    starts: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.dur, self.codes, self.ok, self.ids, self.starts) if a is not None)

    def batch(self, group: int, features: tuple[str, ...]) -> Batch:
        """The Batch the bins pass would have decoded, less what it does not read: no table, axis or link keys, and
        `dur` as kept (the pass reads `duration`)."""
        duration = self.dur.astype(np.float64)  # exact: the same values as the decoded int64 as float64
        ok = np.ones(len(duration), bool) if self.ok is None else self.ok
        empty = np.zeros(0, np.int64)
        features = {f: duration for f in features}
        return Batch(group, None, empty, None, self.dur, duration, self.codes, ok, Counter(), None, None, features)


def timeline_origin(pf, plan: Plan) -> int | None:
    """The smallest axis value of the kernels file(s) per the Parquet statistics (no data read); None when the
    axis is not an integer column or a row group with values has no min/max."""
    names = pf.schema.names
    if plan.axis not in names or not pa.types.is_integer(plan.schema.field(plan.axis).type):
        return None  # (a timestamp column's statistics are datetimes; the job reads its values as int64)
    index = names.index(plan.axis)
    md = pf.metadata
    lo = None
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        col = rg.column(index)
        if col.path_in_schema != plan.axis or col.physical_type not in ("INT64", "INT32"):
            return None
        st = col.statistics
        if st is not None and st.has_null_count and st.null_count == rg.num_rows:
            continue  # no value in it
        if st is None or not st.has_min_max:
            return None
        lo = int(st.min) if lo is None else min(lo, int(st.min))
    return lo


def keeps(plan: Plan, needs_copies: bool) -> bool:
    """Whether the bins pass could use kept rows: no copy link to stream, no feature but an integer duration."""
    if needs_copies:
        return False
    read = [f for f in plan.features if f not in LINKED]
    return all(f == "duration" for f in read) and (not read or pa.types.is_integer(plan.schema.field("duration").type))


class Kept:
    """The rows kept from one rank's scan, by row group (a row group is kept whole or not at all)."""

    def __init__(self, plan: Plan, origin: int | None, limit: int | None = None):
        self.origin, self.width = origin, plan.width
        self.features = tuple(f for f in plan.features if f not in LINKED)
        self.limit = HOLD_BYTES if limit is None else limit
        self.groups: dict[int, list[KeptBatch]] = {}
        self.on = origin is not None
        self.nbytes = 0
        self.rows = 0  # kept rows now
        self.peak_rows = 0  # most rows kept at once
        self._group: int | None = None  # the row group being kept

    def add(self, b: Batch, ordered: bool, n_codes: int) -> None:
        """Keep batch `b` of the scan; `ordered`: the share is still in axis order, without a null axis value."""
        if not self.on:
            return
        if not ordered:  # the share is not on the sorted path: nothing kept is of use
            self.drop()
            return
        if b.group != self._group:
            self._group = b.group
            self.groups[b.group] = []
        ids, starts = bin_runs(b.axis, self.origin, self.width)
        dur = b.dur
        if len(dur) and int(dur.min()) >= 0 and int(dur.max()) <= np.iinfo(np.uint32).max:
            dur = dur.astype(np.uint32)
        else:
            dur = dur.copy()  # (not a view of the decoded batch's buffers: those are let go)
        kind = np.uint8 if n_codes <= 1 << 8 else np.uint16 if n_codes <= 1 << 16 else np.int32
        kept = KeptBatch(dur, b.codes.astype(kind), None if b.ok.all() else b.ok.copy(), ids, starts)
        if self.nbytes + kept.nbytes > self.limit:  # full: this row group is read again, and every later one
            for k in self.groups.pop(b.group):
                self._forget(k)
            self.on = False
            return
        self.groups[b.group].append(kept)
        self.nbytes += kept.nbytes
        self.rows += len(dur)
        self.peak_rows = max(self.peak_rows, self.rows)

    def drop(self) -> None:
        """Keep nothing (from now on)."""
        self.groups, self.nbytes, self.rows, self.on = {}, 0, 0, False

    def usable(self, timeline: Timeline) -> bool:
        """Whether the bins pass can take the kept rows: the sorted path, bins from the origin they were cut at."""
        return bool(self.groups) and timeline.fast and timeline.gmin == self.origin

    def _forget(self, k: KeptBatch) -> None:
        self.nbytes -= k.nbytes
        self.rows -= len(k.dur)

    def pass_batches(
        self, plan: Plan, pf, scan: Scan, index: dict[str, int], columns: list[str]
    ) -> Iterator[tuple[Batch, tuple[np.ndarray, np.ndarray] | None]]:
        """The share's batches for the bins pass, in file order, with their bin runs where kept (None: decoded from
        the file, the runs to be found); a kept row group is let go as it is read."""
        for g in scan.row_groups:
            kept = self.groups.pop(g, None)
            if kept is None:
                for b in batches(plan, pf, [g], index, columns, features=True):
                    yield b, None
                continue
            for k in kept:
                self._forget(k)
                yield k.batch(g, self.features), (k.ids, k.starts)
