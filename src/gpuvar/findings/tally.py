"""The first pass: what the findings need to know about every launch, kept as sums per cell, group and step.

Exact over every launch, whatever the trace's size, in memory that grows with the number of call sites, kernel
names and steps, not launches:
  per (cell, kernel name)   launches, total, sum of squared deviations (merged batch by batch: Chan et al.'s
                            pairwise update), shortest and longest launch: the group's mean, CV, CV within call
                            sites and between-call-site share, the kernel table's per-name numbers, and the
                            range the exact medians (gpuvar.findings.medians) start from
  per group                 launches by an op, launches with a step, the longest launch (the first of equals, in
                            file order) with the columns its evidence shows, whether each context column a
                            prediction names (gpuvar.findings.predict.CONTEXT_COLUMNS) was ever non-zero
  per (rank, step)          the first kernel's start (where a launch sits in its step; gpuvar.findings.step_keys);
                            the trace's first start
  per rank                  launches (the context's baseline rank is the commonest)
  per (step, rank)          threads launched, where the table has no step_threads column (older ingests)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.findings.labels import BatchLabels
from gpuvar.findings.step_keys import StepStarts, StepValues, rank_key

EVIDENCE_COLUMNS = ("kernel_name", "step", "launch_id", "rank", "start")


class Moments:
    """Launches, sum and sum of squared deviations per unit, merged batch by batch; min and max."""

    def __init__(self):
        self.n = np.zeros(0, np.int64)
        self.s = np.zeros(0)
        self.m2 = np.zeros(0)
        self.lo = np.zeros(0)
        self.hi = np.zeros(0)

    def _grow(self, size: int) -> None:
        extra = size - len(self.n)
        if extra > 0:
            self.n = np.r_[self.n, np.zeros(extra, np.int64)]
            self.s, self.m2 = np.r_[self.s, np.zeros(extra)], np.r_[self.m2, np.zeros(extra)]
            self.lo, self.hi = np.r_[self.lo, np.full(extra, np.inf)], np.r_[self.hi, np.full(extra, -np.inf)]

    def add(self, unit: np.ndarray, d: np.ndarray, size: int) -> None:
        self._grow(size)
        n_b = np.bincount(unit, minlength=size)
        s_b = np.bincount(unit, weights=d, minlength=size)
        mean_b = s_b / np.maximum(n_b, 1)
        m2_b = np.bincount(unit, weights=(d - mean_b[unit]) ** 2, minlength=size)
        n_a, mean_a = self.n, self.s / np.maximum(self.n, 1)
        total = n_a + n_b
        delta = mean_b - mean_a
        self.m2 = self.m2 + m2_b + delta**2 * (n_a * n_b / np.maximum(total, 1))
        self.n, self.s = total, self.s + s_b
        np.minimum.at(self.lo, unit, d)
        np.maximum.at(self.hi, unit, d)

    def merged(self, into: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(launches, sum, sum of squared deviations) of the units mapped by `into` (unit -> merged unit)."""
        n = np.bincount(into, weights=self.n, minlength=size)
        s = np.bincount(into, weights=self.s, minlength=size)
        mean = s / np.maximum(n, 1)
        own = self.s / np.maximum(self.n, 1)
        m2 = np.bincount(into, weights=self.m2 + self.n * (own - mean[into]) ** 2, minlength=size)
        return n.astype(np.int64), s, m2

    def range(self, into: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.full(size, np.inf), np.full(size, -np.inf)
        np.minimum.at(lo, into, self.lo)
        np.maximum.at(hi, into, self.hi)
        return lo, hi


class Tally:
    """Everything the first pass keeps (module docstring)."""

    def __init__(self, columns: list[str], need_threads: bool):
        self.columns = set(columns)
        self.triples = Moments()
        self.group_op = np.zeros(0, np.int64)
        self.launches_with_step = np.zeros(0, np.int64)  # per group: its launches that have a step
        self.slowest: dict[int, tuple[float, dict]] = {}
        self.trace_start: float | None = None
        self.step_starts = StepStarts()
        self.ranks: dict = {}
        self.step_values = StepValues()
        self.any_start = False
        self.thread_sums: dict | None = {} if need_threads else None
        self.step_threads_known = 0
        self.loud: dict[str, np.ndarray] = {}  # context column -> per group: non-zero for some launch
        self.total = 0.0  # kernel time: the durations' sum over every row (pandas' sum per batch)

    def add(self, batch: pd.DataFrame, labels: BatchLabels, n_triples: int, n_groups: int) -> None:
        self.total += float(pd.to_numeric(batch["duration"], errors="coerce").sum())
        self.triples.add(labels.triple, labels.d, n_triples)
        grow = n_groups - len(self.group_op)
        if grow > 0:
            self.group_op = np.r_[self.group_op, np.zeros(grow, np.int64)]
            self.launches_with_step = np.r_[self.launches_with_step, np.zeros(grow, np.int64)]
        self.group_op += np.bincount(labels.group[labels.is_op], minlength=n_groups)
        rows = batch if len(labels.pos) == len(batch) else batch.iloc[labels.pos]  # (every row: no copy)
        if "step" in self.columns:
            step = pd.to_numeric(rows["step"], errors="coerce")
            known = step.notna().to_numpy()
            self.launches_with_step += np.bincount(labels.group[known], minlength=n_groups)
            self.step_values.add(step[known].to_numpy(np.float64))
        self._slowest(rows, labels)
        self._loud(rows, labels, n_groups)
        self._origins(rows)
        if "rank" in self.columns:
            for level, count in rows["rank"].value_counts().items():
                self.ranks[level] = self.ranks.get(level, 0) + int(count)
        self._threads(batch)

    def _slowest(self, rows: pd.DataFrame, labels: BatchLabels) -> None:
        """Each group's longest launch: the first of equals in file order (np.argmax over the group's launches)."""
        if not len(labels.d):
            return
        for k in pd.Series(labels.d).groupby(labels.group, sort=False).idxmax().to_numpy():
            g, value = int(labels.group[k]), float(labels.d[k])
            if g in self.slowest and self.slowest[g][0] >= value:
                continue
            row = rows.iloc[k]
            fields = {c: row[c] for c in EVIDENCE_COLUMNS if c in rows.columns}
            fields["site"] = int(labels.site[k])
            self.slowest[g] = (value, fields)

    def _loud(self, rows: pd.DataFrame, labels: BatchLabels, n_groups: int) -> None:
        from gpuvar.findings.predict import CONTEXT_COLUMNS

        for column in CONTEXT_COLUMNS:
            if column not in self.columns:
                continue
            seen = self.loud.setdefault(column, np.zeros(0, bool))
            if len(seen) < n_groups:
                seen = self.loud[column] = np.r_[seen, np.zeros(n_groups - len(seen), bool)]
            nonzero = (pd.to_numeric(rows[column], errors="coerce").fillna(0) != 0).to_numpy()
            seen[np.unique(labels.group[nonzero])] = True

    def _origins(self, rows: pd.DataFrame) -> None:
        """The trace's first start and each (rank, step)'s (gpuvar.findings.report's origins, merged by min)."""
        if "start" not in self.columns:
            return
        start = pd.to_numeric(rows["start"], errors="coerce")
        if start.notna().any():
            self.any_start = True
            low = start.min()  # not through float: ns timestamps since the epoch exceed 2^53
            self.trace_start = low if self.trace_start is None else min(self.trace_start, low)
        if "step" not in self.columns or not rows["step"].notna().any():
            return
        step = pd.to_numeric(rows["step"], errors="coerce")
        known = (step.notna() & start.notna()).to_numpy()
        if not known.any():
            return
        if "rank" in rows.columns:  # each distinct rank once (a merged job's batch holds hundreds of them)
            codes, distinct = pd.factorize(rows["rank"][known])
            ranks = [rank_key(r) for r in distinct] + [None]  # (code -1, a launch without a rank: the last key)
            codes = np.where(codes < 0, len(ranks) - 1, codes)
        else:
            ranks, codes = [None], np.zeros(int(known.sum()), np.int64)
        self.step_starts.add_many(ranks, codes, _whole(step[known]), _whole(start[known]))

    def _threads(self, batch: pd.DataFrame) -> None:
        """Threads per (step, rank) over every row (gpuvar.ingest.step_size.step_threads), when not stored."""
        from gpuvar.findings.features import STEP_THREADS

        if STEP_THREADS in batch.columns:
            self.step_threads_known += int(pd.to_numeric(batch[STEP_THREADS], errors="coerce").notna().sum())
        if self.thread_sums is None or "step" not in batch.columns or "grid_size" not in batch.columns:
            return
        step = pd.to_numeric(batch["step"], errors="coerce")
        threads = pd.to_numeric(batch["grid_size"], errors="coerce").astype(np.float64)
        if "workgroup_size" in batch.columns:
            threads = threads * pd.to_numeric(batch["workgroup_size"], errors="coerce")
        keys = [step.rename("_step")] + ([batch["rank"].rename("_rank")] if "rank" in batch.columns else [])
        grouped = threads.where(step.notna()).groupby(keys, dropna=False)
        for key, (total, count) in pd.DataFrame({"s": grouped.sum(), "c": grouped.count()}).iterrows():
            key = thread_key(key)
            old = self.thread_sums.get(key, (0.0, 0))
            self.thread_sums[key] = (old[0] + float(total), old[1] + int(count))


def _whole(values: pd.Series) -> np.ndarray:
    """Steps or starts as int64 (a float truncated, as int() does; integers as they are: ns since the epoch
    exceed 2^53)."""
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.to_numpy(np.int64)
    return values.to_numpy(np.float64).astype(np.int64)


def thread_key(key) -> tuple:
    """A (step, rank) key with None for a missing value (NaN is not equal to itself as a dict key)."""
    key = key if isinstance(key, tuple) else (key,)
    return tuple(None if pd.isna(v) else v for v in key)
