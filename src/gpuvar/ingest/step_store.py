"""What the launch sweep keeps per step, in memory that follows the steps in play, not the trace (issue 38).

Why: the sweep of gpuvar.ingest.nsys_host_facts numbers each op's instances per (step, thread, op) and the
launches without an op per (step, thread), and sums each step's threads. A trace of 20 M launches can hold
millions of steps (the iterations of a short loop), and a dict entry per (step, thread, op) then costs more than
the whole piece being written. The in-memory path groups by the step *number* over the whole trace (a number that
comes back later, as per-epoch step ranges do, continues its counts), so counts cannot simply be dropped:

  * StepTotals: per step, the threads summed, the launches with a value, and whether any launch has the step, in
    arrays indexed by the step (steps are counts from 0 here: iterations, cudaDeviceSynchronize segments, and the
    numbers in NVTX step ranges), or a dict where the numbers are too sparse for arrays;
  * StepCounters: the counters of the steps used last in memory; the others pickled into a table of the scratch
    database, many steps a row, and read back if their step comes back;
  * FirstStarts: each (device, step)'s first start, carried from piece to piece by gpuvar.ingest.nsys_pieces for
    the step offsets, in sorted arrays per device (16 bytes a step; a dict keyed by tuples took ~200 bytes a step,
    0.2 GB for a capture of a million steps).
"""

from __future__ import annotations

import pickle
import sqlite3
from collections import OrderedDict

import numpy as np

DENSE_STEPS = 1 << 25  # step numbers below this are kept in arrays (about 17 bytes a step)


class StepTotals:
    """Per step: threads summed, launches with a value, seen (module docstring)."""

    def __init__(self):
        self.sums = np.zeros(0, np.float64)
        self.counts = np.zeros(0, np.int64)
        self.seen = np.zeros(0, bool)
        self.sparse: dict | None = None  # step -> [sum, count]; seen steps are keys

    def _dense(self, steps: np.ndarray) -> bool:
        if self.sparse is None and (not len(steps) or (steps.min() >= 0 and steps.max() < DENSE_STEPS)):
            top = int(steps.max()) + 1 if len(steps) else 0
            if top > len(self.seen):
                size = max(top, 2 * len(self.seen))
                self.sums = np.pad(self.sums, (0, size - len(self.sums)))
                self.counts = np.pad(self.counts, (0, size - len(self.counts)))
                self.seen = np.pad(self.seen, (0, size - len(self.seen)))
            return True
        if self.sparse is None:  # numbers too sparse for arrays from now on
            self.sparse = {}
            for s in np.flatnonzero(self.seen).tolist():
                self.sparse[s] = [float(self.sums[s]), int(self.counts[s])]
            self.sums, self.counts, self.seen = np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool)
        return False

    def see(self, steps: np.ndarray) -> None:
        """Launches with these steps (MISSING left out by the caller)."""
        if self._dense(steps):
            self.seen[steps] = True
        else:
            for s in np.unique(steps).tolist():
                self.sparse.setdefault(s, [0.0, 0])

    def add(self, steps: np.ndarray, threads: np.ndarray) -> None:
        """Launches with these steps and thread counts (finite)."""
        if not len(steps):
            return
        if self._dense(steps):
            lo, hi = int(steps.min()), int(steps.max()) + 1
            self.sums[lo:hi] += np.bincount(steps - lo, weights=threads, minlength=hi - lo)
            self.counts[lo:hi] += np.bincount(steps - lo, minlength=hi - lo)
        else:
            distinct, inverse = np.unique(steps, return_inverse=True)
            sums = np.bincount(inverse, weights=threads)
            counts = np.bincount(inverse)
            for s, total, count in zip(distinct.tolist(), sums.tolist(), counts.tolist()):
                entry = self.sparse.setdefault(s, [0.0, 0])
                entry[0] += total
                entry[1] += count

    def seen_steps(self) -> np.ndarray:
        """The steps some launch has, sorted."""
        if self.sparse is not None:
            return np.array(sorted(self.sparse), np.int64)
        return np.flatnonzero(self.seen).astype(np.int64)

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, threads summed, launches with a value) of the steps with a value, sorted by step."""
        if self.sparse is not None:
            steps = np.array(sorted(s for s, (_, c) in self.sparse.items() if c > 0), np.int64)
            sums = np.array([self.sparse[s][0] for s in steps.tolist()], np.float64)
            counts = np.array([self.sparse[s][1] for s in steps.tolist()], np.int64)
            return steps, sums, counts
        steps = np.flatnonzero(self.counts > 0).astype(np.int64)
        return steps, self.sums[steps], self.counts[steps]


class StepCounters:
    """Counters keyed by (step, key): the recently used steps' in memory, the rest in the scratch table `name`.

    The steps leave memory half of them at a time, pickled together as one row of the table (a row per step cost
    more than the sweep's own numbering where steps are short: 200 k iterations at 2 M launches); which row holds
    a step's latest counts is kept per step (_StepIndex: 4 bytes a step), and the last row read back is kept, as
    the steps that come back (per-epoch step numbers) come back together."""

    def __init__(self, con: sqlite3.Connection, name: str, keep: int = 4096):
        self.con, self.name, self.keep = con, name, keep
        self.recent: OrderedDict = OrderedDict()  # step -> {key: count}
        self.where = _StepIndex()  # step -> the row of the table with its latest counts
        self.rows = 0  # rows written
        self.read: tuple = (None, {})  # (row, {step: counts}) read back last
        con.execute(f"CREATE TABLE {name} (batch INTEGER PRIMARY KEY, counts BLOB NOT NULL)")

    def of(self, step: int) -> dict:
        """The counters of `step` (a dict the caller updates)."""
        counts = self.recent.get(step)
        if counts is not None:
            self.recent.move_to_end(step)
            return counts
        row = self.where.get(step)
        if row >= 0:
            if self.read[0] != row:
                blob = self.con.execute(f"SELECT counts FROM {self.name} WHERE batch = ?", (row,)).fetchone()[0]
                self.read = (row, pickle.loads(blob))
            counts = self.read[1].pop(step)  # (in memory again: that copy is stale from now on)
            self.where.set(np.array([step], np.int64), -1)
        else:
            counts = {}
        self.recent[step] = counts
        if len(self.recent) > self.keep:
            self._spill()
        return counts

    def _spill(self) -> None:
        """The least recently used half of the steps into one row of the table."""
        recent, old = self.recent, {}
        while len(recent) > max(1, self.keep // 2):
            step, values = recent.popitem(last=False)
            old[step] = values
        self.con.execute(f"INSERT INTO {self.name} VALUES (?, ?)", (self.rows, pickle.dumps(old)))
        self.where.set(np.fromiter(old, np.int64, len(old)), self.rows)
        self.rows += 1

    def reset(self) -> None:
        """Forget every counter, in memory and in the table: for a caller whose keys never come back (the sweep's
        keys carry the thread, and the sweep leaves each thread for good)."""
        self.recent.clear()
        self.con.execute(f"DELETE FROM {self.name}")
        self.where, self.read = _StepIndex(), (None, {})


class _StepIndex:
    """An int per step (-1 for none): in an array for steps 0 <= step < DENSE_STEPS, else in a dict."""

    def __init__(self):
        self.dense = np.zeros(0, np.int32)  # value + 1 (0: none)
        self.sparse: dict = {}

    def get(self, step: int) -> int:
        if 0 <= step < len(self.dense):
            return int(self.dense[step]) - 1
        return self.sparse.get(step, -1)

    def set(self, steps: np.ndarray, value: int) -> None:
        inside = (steps >= 0) & (steps < DENSE_STEPS)
        dense = steps[inside]
        if len(dense):
            top = int(dense.max()) + 1
            if top > len(self.dense):
                self.dense = np.pad(self.dense, (0, max(top, 2 * len(self.dense)) - len(self.dense)))
            self.dense[dense] = value + 1
        for step in steps[~inside].tolist():
            self.sparse[step] = value


class FirstStarts:
    """Each (device, step)'s first start: set by the first rows of the key seen (the least start among them), kept
    after. Per device, the steps seen in sorted order and their first starts; a piece's new steps usually come after
    every step seen, and are then appended (the arrays grow by doubling), else merged in."""

    def __init__(self):
        self._by_device: dict[int, list] = {}  # device -> [steps, starts, used]

    def first(self, device: np.ndarray, step: np.ndarray, start: np.ndarray) -> np.ndarray:
        """For rows (device, step, start): their key's first start, the keys not seen before taking the least start
        of their rows here (as a groupby's min, then a dict's setdefault)."""
        out = np.empty(len(step), np.int64)
        for d in np.unique(device).tolist():
            rows = np.flatnonzero(device == d)
            keys, inverse = np.unique(step[rows], return_inverse=True)
            least = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
            np.minimum.at(least, inverse, start[rows])
            steps, starts, used = self._by_device.setdefault(d, [np.zeros(0, np.int64), np.zeros(0, np.int64), 0])
            at = np.searchsorted(steps[:used], keys)
            seen = at < used
            seen[seen] = steps[at[seen]] == keys[seen]
            values = least.copy()
            values[seen] = starts[at[seen]]
            if not seen.all():
                self._add(d, keys[~seen], least[~seen])
            out[rows] = values[inverse]
        return out

    def _add(self, device: int, steps_new: np.ndarray, starts_new: np.ndarray) -> None:
        steps, starts, used = self._by_device[device]
        if not used or steps_new[0] > steps[used - 1]:  # (keys come sorted from np.unique)
            if used + len(steps_new) > len(steps):
                size = max(2 * len(steps), used + len(steps_new), 1024)
                steps, starts = np.resize(steps, size), np.resize(starts, size)
            steps[used : used + len(steps_new)], starts[used : used + len(steps_new)] = steps_new, starts_new
            self._by_device[device] = [steps, starts, used + len(steps_new)]
            return
        at = np.searchsorted(steps[:used], steps_new)
        merged_steps = np.insert(steps[:used], at, steps_new)
        merged_starts = np.insert(starts[:used], at, starts_new)
        self._by_device[device] = [merged_steps, merged_starts, len(merged_steps)]
