"""Phases 2 and 3 of the binning job: the per-group mean durations, then the target of every row of a batch.

means  - allgather of {group key: (sum, count)} (Python ints, merged in sorted key order): exact, so the means
         are identical for any rank count.
target - the Target's compute (gpuvar.targets: kernel_variability = duration - its group's mean, memory_stall =
         |duration - linked copy's duration| with the copies linked by gpuvar.binning.link), on one decoded batch
         (gpuvar.binning.read.Batch) in cache-sized slices, each a few vectorised numpy calls. Row by row the same
         arithmetic whatever the batch, so every pass and every rank count computes the same values.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuvar import targets as T
from gpuvar.binning.plan import LINKED, Plan
from gpuvar.binning.read import Batch, Scan, drop

_STEP = 1 << 16  # rows per vectorised step of the target: its means buffer (512 KiB) stays in cache


@dataclass(frozen=True)
class Means:
    """The mean duration of every group of the whole trace."""

    by_key: dict[str, float]  # group key -> mean
    n_groups: int  # groups over the whole trace

    def lut(self, index: dict[str, int]) -> np.ndarray:
        """Mean per code of a rank-local index (group key -> code); NaN where the group has no mean."""
        lut = np.full(max(len(index), 1), np.nan)
        for key, code in index.items():
            lut[code] = self.by_key.get(key, np.nan)
        return lut


@dataclass(frozen=True)
class TargetValues:
    """A batch's target and what the later phases take with it."""

    values: np.ndarray  # float64 target per row, NaN where there is none
    ok: np.ndarray  # the row has a target (the batch's ok, less the kernels without a linked copy)
    reasons: Counter  # rows newly without a target here (no linked copy), by reason
    linked: dict[str, np.ndarray]  # linked-copy columns (with a memcpy file), NaN where no copy is linked
    features: dict[str, np.ndarray]  # feature columns: those read, then the linked ones, in the --features order


def group_means(comm, scan: Scan) -> Means:
    """Means over every rank's exact group totals (collective)."""
    merged_s: dict[str, int] = {}
    merged_c: dict[str, int] = {}
    for part in comm.allgather(scan.totals):
        for key, (s, c) in part.items():
            merged_s[key] = merged_s.get(key, 0) + s
            merged_c[key] = merged_c.get(key, 0) + c
    means = T.group_means(merged_s, merged_c)
    return Means(means, len(means))


def compute_target(plan: Plan, batch: Batch, lut: np.ndarray, linked: dict[str, np.ndarray]) -> TargetValues:
    """The target of every row of `batch` by its Target's compute; `lut`: mean per group code (Means.lut of
    the index the batch was decoded with), `linked`: the batch's linked-copy columns ({} without a memcpy file)."""
    dur = batch.duration
    values = np.empty(len(dur), np.float64)
    target = T.TARGETS[plan.opts.target]  # (the plan checked the name)
    step = min(len(dur), _STEP) or 1
    mean = np.empty(step, np.float64)  # one cache-sized buffer for the gathered means, reused
    for a in range(0, len(dur), step):
        sl = slice(a, a + step)
        rows = T.Rows(dur[sl], batch.codes[sl], lut, {f: v[sl] for f, v in linked.items()}, mean)
        target.compute(rows, values[sl])
    ok, reasons = batch.ok, Counter()
    if target.links_copies:
        ok = ok.copy()
        drop(reasons, ok, np.isnan(linked["linked_copy_duration"]), T.NO_LINK_REASON[plan.opts.link])
    if not ok.all():
        values[~ok] = np.nan
    features = {**batch.features, **{f: linked[f] for f in plan.features if f in LINKED}}
    return TargetValues(values, ok, reasons, linked, features)
