"""Phases 2 and 3 of the binning job: the per-group mean durations, then the target of every row.

means  - allgather of {group key: (sum, count)} (Python ints, merged in sorted key order): exact, so the means
         are identical for any rank count.
target - the Target's compute (gpuvar.targets: kernel_variability = duration - its group's mean, memory_stall =
         |duration - linked copy's duration| with the copies linked by gpuvar.binning.link), on slices of the
         share's numpy columns, each a few vectorised numpy calls. The target is written over the duration array
         when nothing reads the duration later (no `duration` feature shares it): 8 bytes/row less at the peak,
         and no fresh array to fault in (on the shared VM the first touch of fresh memory was, at random, 10x
         slower).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpuvar import targets as T
from gpuvar.binning.link import link_copies
from gpuvar.binning.plan import LINKED, Plan
from gpuvar.binning.read import Share, drop

_STEP = 1 << 16  # rows per vectorised step of the target: its means buffer (512 KiB) stays in cache


class Means(NamedTuple):
    lut: np.ndarray  # mean duration per rank-local group code (NaN: none)
    n_groups: int  # groups over the whole trace


@dataclass(frozen=True)
class TargetValues:
    """Every row's target and what the later phases take with it."""

    values: np.ndarray  # float64 target per row, NaN where there is none
    ok: np.ndarray  # the row has a target (the share's ok, less the kernels without a linked copy)
    reasons: dict[str, int]  # rows without a target, by reason
    linked: dict[str, np.ndarray]  # linked-copy columns (with a memcpy file), NaN where no copy is linked
    features: dict[str, np.ndarray]  # feature columns: those read, then the linked ones, in the --features order


def group_means(comm, share: Share) -> Means:
    """Means over every rank's exact group totals (collective)."""
    merged_s: dict[str, int] = {}
    merged_c: dict[str, int] = {}
    for part in comm.allgather(share.totals):
        for key, (s, c) in part.items():
            merged_s[key] = merged_s.get(key, 0) + s
            merged_c[key] = merged_c.get(key, 0) + c
    means = T.group_means(merged_s, merged_c)
    lut = np.full(max(len(share.index), 1), np.nan)
    for key, code in share.index.items():
        lut[code] = means.get(key, np.nan)
    return Means(lut, len(means))


def compute_target(plan: Plan, comm, share: Share, means: Means) -> TargetValues:
    """The target per row, by its Target's compute (collective when linking copies)."""
    linked = link_copies(plan, comm, share.kstart, share.kkey) if plan.link else {}
    dur = share.duration
    in_place = not any(column is dur for column in share.features.values())
    values = dur if in_place else np.empty(len(dur), np.float64)
    target = T.TARGETS[plan.opts.target]  # (the plan checked the name)
    step = min(len(dur), _STEP) or 1
    mean = np.empty(step, np.float64)  # one cache-sized buffer for the gathered means, reused
    for a in range(0, len(dur), step):
        sl = slice(a, a + step)
        rows = T.Rows(dur[sl], share.codes[sl], means.lut, {f: v[sl] for f, v in linked.items()}, mean)
        target.compute(rows, values[sl])
    ok, reasons = share.ok, share.reasons
    if target.links_copies:
        ok, counter = ok.copy(), Counter(reasons)
        drop(counter, ok, np.isnan(linked["linked_copy_duration"]), T.NO_LINK_REASON[plan.opts.link])
        reasons = dict(counter)
    if not ok.all():
        values[~ok] = np.nan
    features = {**share.features, **{f: linked[f] for f in plan.features if f in LINKED}}
    return TargetValues(values, ok, reasons, linked, features)
