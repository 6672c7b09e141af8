"""Phases 2 and 3 of the binning job: the per-group mean durations, then the target of every row.

means  - allgather of {group key: (sum, count)} (Python ints, merged in sorted key order): exact, so the means
         are identical for any rank count.
target - kernel_variability = duration - its group's mean; memory_stall = |duration - linked copy's duration|
         (gpuvar.binning.link). The target is a new array: the duration read stays as read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpuvar import targets as T
from gpuvar.binning.link import link_copies
from gpuvar.binning.plan import LINKED, Plan
from gpuvar.binning.read import CHUNK, Share, drop


class Means(NamedTuple):
    lut: np.ndarray  # mean duration per rank-local group code (NaN: none)
    n_groups: int  # groups over the whole trace


@dataclass(frozen=True)
class Target:
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


def compute_target(plan: Plan, comm, share: Share, means: Means) -> Target:
    """The target per row (collective when linking copies)."""
    linked = link_copies(plan, comm, share.kstart, share.kkey) if plan.link else {}
    dur = share.duration
    values = np.empty(len(dur), np.float64)
    links_copies = T.target(plan.opts.target).links_copies
    for a in range(0, len(dur), CHUNK):  # chunk by chunk: no full-size temporary
        sl = slice(a, a + CHUNK)
        if not links_copies:  # the group means gathered into the output: no temporary
            np.take(means.lut, share.codes[sl], out=values[sl], mode="clip")  # (codes index lut: clip never acts)
            np.subtract(dur[sl], values[sl], out=values[sl])
        else:
            values[sl] = np.abs(dur[sl] - linked["linked_copy_duration"][sl])
    ok, reasons = share.ok, share.reasons
    if links_copies:
        ok, counter = ok.copy(), Counter(reasons)
        drop(counter, ok, np.isnan(linked["linked_copy_duration"]), T.NO_LINK_REASON[plan.opts.link])
        reasons = dict(counter)
    if not ok.all():
        values[~ok] = np.nan
    features = {**share.features, **{f: linked[f] for f in plan.features if f in LINKED}}
    return Target(values, ok, reasons, linked, features)
