"""Exact medians of every cell and call site over every launch, without holding the launches.

Why: the time above median (what ranks the findings) is sum(max(duration - its call site's median, 0)); an
approximate median would move every finding's number. Holding each call site's durations to sort them is what
made the findings' memory grow with the trace. Instead, the k-th smallest value of a unit (a cell or a call site)
is found by histogram refinement over the stored durations (gpuvar.findings.labels.RowLabels), all units at once:
each pass counts the unit's values in `bins` equal bins across each target's current range (once per distinct
range: a unit's two targets mostly share theirs) and keeps the bin that holds the target's rank; a range that holds
at most COLLECT values is gathered and sorted on the next pass. A unit of n launches has targets (n-1)//2 and n//2,
and its median is their mean, as pandas computes it.
Values are compared as int64 keys that keep their order: integer durations (what the canonical schema stores) as
themselves, other floats by their IEEE bits, so a range always splits until it holds one value. Integer
durations up to 10^9 ns take two or three passes; memory is bins x targets counts, never launches.
"""

from __future__ import annotations

import numpy as np

COLLECT = 4096  # values of one target's range gathered and sorted instead of split again
TOTAL_BINS = 1 << 22  # counts per pass over all targets (32 MiB)
MAX_BINS = 1 << 16
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)


def to_key(d: np.ndarray, integral: bool) -> np.ndarray:
    if integral:
        return d.astype(np.int64)
    bits = d.view(np.int64)
    return np.where(bits < 0, bits ^ _FLIP, bits)


def from_key(k: np.ndarray, integral: bool) -> np.ndarray:
    k = np.asarray(k, dtype=np.int64)
    if integral:
        return k.astype(np.float64)
    return np.where(k < 0, k ^ _FLIP, k).view(np.float64)


class _Targets:
    """One row per (unit, rank) sought: its current range [lo, hi] of keys, how many of the unit's values lie below
    it and in it, and whether it is split, gathered or done."""

    def __init__(self, part, unit, rank, lo, hi, count):
        self.part, self.unit, self.rank = part, unit, rank
        self.lo, self.hi = lo, hi
        self.below = np.zeros(len(unit), np.int64)
        self.inside = count.astype(np.int64)
        self.value = np.where(lo == hi, lo, 0)
        self.done = lo == hi


def exact_medians(store, partitions: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], integral: bool):
    """{name: medians per unit} for each partition (name, launches per unit, min and max per unit as floats);
    `name` is the RowLabels field that gives a launch's unit ("cell" or "site"). NaN for a unit without launches."""
    parts, units, ranks, los, his, counts = [], [], [], [], [], []
    for p, (_, n, lo, hi) in enumerate(partitions):
        has = np.flatnonzero(n > 0)
        for rank in ((n[has] - 1) // 2, n[has] // 2):
            parts.append(np.full(len(has), p))
            units.append(has)
            ranks.append(rank)
            los.append(to_key(lo[has], integral))
            his.append(to_key(hi[has], integral))
            counts.append(n[has])
    cat = np.concatenate
    t = _Targets(cat(parts), cat(units), cat(ranks), cat(los), cat(his), cat(counts)) if parts else None
    while t is not None and not t.done.all():
        _one_pass(store, partitions, t, integral)
    out = {}
    for p, (name, n, _, _) in enumerate(partitions):
        med = np.full(len(n), np.nan)
        if t is not None:
            mine = t.part == p
            values = from_key(t.value[mine], integral)
            half = len(values) // 2
            med[t.unit[mine][:half]] = (values[:half] + values[half:]) / 2
        out[name] = med
    return out


def _one_pass(store, partitions, t: _Targets, integral: bool) -> None:
    """One pass over the store: each active target's range split in bins (or gathered), counted per distinct range.

    A unit's two targets (ranks (n-1)//2 and n//2) mostly share their range, so the values are counted once per
    distinct (partition, unit, range), not once per target: half the work of a pass where they share it. Each
    target then reads its own rank off its range's counts."""
    active = np.flatnonzero(~t.done)
    ranges = _Ranges(t, active)
    split = np.flatnonzero(~ranges.gather)
    bins = int(max(2, min(MAX_BINS, TOTAL_BINS // max(1, len(split)))))
    span = (ranges.hi[split] - ranges.lo[split]).view(np.uint64) + np.uint64(1)  # (keys' differences < 2**64)
    width = np.ones(len(ranges.lo), np.uint64)
    width[split] = span // np.uint64(bins) + (span % np.uint64(bins) != 0)
    split_row = np.full(len(ranges.lo), -1, np.int64)
    split_row[split] = np.arange(len(split))
    counts = np.zeros(len(split) * bins, np.int64)
    gathered: list[list[np.ndarray]] = [[] for _ in range(len(ranges.lo))]
    lookups = [(partitions[p][0], slot) for p, slot in ranges.lookups(partitions)]
    binned = _Counts(counts)
    for rows in store:
        keys = None
        for name, slot in lookups:
            r = slot[rows[name]]
            use = r >= 0
            if not use.any():
                continue
            if keys is None:
                keys = to_key(rows["d"], integral)
            k, r = keys[use], r[use]
            inside = (k >= ranges.lo[r]) & (k <= ranges.hi[r])
            k, r = k[inside], r[inside]
            g = ranges.gather[r]
            if g.any():  # each range's keys in row order
                order = np.argsort(r[g], kind="stable")
                gathered_keys, gathered_ranges = k[g][order], r[g][order]
                starts = np.flatnonzero(np.r_[True, gathered_ranges[1:] != gathered_ranges[:-1]])
                for start, end in zip(starts, np.r_[starts[1:], len(order)]):
                    gathered[gathered_ranges[start]].append(gathered_keys[start:end])
            if not g.all():
                ks, rs = k[~g], r[~g]
                b = (ks - ranges.lo[rs]).view(np.uint64) // width[rs]
                binned.add(split_row[rs] * bins + b.astype(np.int64))
    binned.flush()
    values = {
        int(r): np.sort(np.concatenate(gathered[r])) if gathered[r] else np.zeros(0, np.int64)
        for r in np.flatnonzero(ranges.gather)
    }
    for k, r in zip(active.tolist(), ranges.of.tolist(), strict=True):
        if ranges.gather[r]:
            t.value[k] = values[r][t.rank[k] - t.below[k]]
            t.done[k] = True
            continue
        i = split_row[r]
        c = counts[i * bins : (i + 1) * bins]
        cum = np.cumsum(c)
        j = int(np.searchsorted(cum, t.rank[k] - t.below[k], side="right"))
        t.below[k] += int(cum[j - 1]) if j else 0
        t.inside[k] = int(c[j])
        lo = int(t.lo[k]) + j * int(width[r])
        t.lo[k], t.hi[k] = lo, min(int(t.hi[k]), lo + int(width[r]) - 1)
        if t.lo[k] == t.hi[k]:
            t.value[k], t.done[k] = t.lo[k], True


class _Ranges:
    """The distinct (partition, unit, range) of the active targets, sorted; `of`: each active target's range.
    Targets that share a range share its count of values inside, so whether it is gathered or split."""

    def __init__(self, t: _Targets, active: np.ndarray):
        key = np.stack([t.part[active], t.unit[active], t.lo[active], t.hi[active]], axis=1)
        distinct, first, self.of = np.unique(key, axis=0, return_index=True, return_inverse=True)
        self.of = self.of.reshape(-1)
        self.part, self.unit, self.lo, self.hi = (distinct[:, c] for c in range(4))
        self.gather = t.inside[active[first]] <= COLLECT

    def lookups(self, partitions):
        """(partition, unit -> range or -1) per partition and layer: a unit's first range in layer 0, its second
        (its two targets apart) in layer 1, so that no slot holds two ranges."""
        again = np.r_[False, (self.part[1:] == self.part[:-1]) & (self.unit[1:] == self.unit[:-1])]
        for p, (_, n, _, _) in enumerate(partitions):
            for layer in (False, True):
                mine = np.flatnonzero((self.part == p) & (again == layer))
                if len(mine):
                    slot = np.full(len(n), -1, np.int64)
                    slot[self.unit[mine]] = mine
                    yield p, slot


class _Counts:
    """Counts per slot, added a few batches at a time: one bincount of a batch's slots made and added an array as
    long as all the slots (up to TOTAL_BINS, 32 MiB) for every batch and unit kind (6 s of a 25.6 M-launch job's
    findings); the slots wait until they are half as many as the counts, then one bincount adds them. Integer counts:
    the same whatever the grouping."""

    def __init__(self, counts: np.ndarray):
        self.counts, self.pending, self.held = counts, [], 0

    def add(self, slots: np.ndarray) -> None:
        self.pending.append(slots)
        self.held += len(slots)
        if self.held >= max(len(self.counts) // 2, 1 << 16):
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.counts += np.bincount(np.concatenate(self.pending), minlength=len(self.counts))
            self.pending, self.held = [], 0
