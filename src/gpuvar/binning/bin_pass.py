"""Phase 4 of the binning job: the second pass over the share, batch by batch: each batch's copy link and target
(gpuvar.binning.link, gpuvar.binning.target), its rows' bins on the agreed timeline, and the statistics of every
bin: on the sorted path as the bins are finished (gpuvar.binning.running), otherwise by rounds of bins over the
rows kept in a spill (gpuvar.binning.spill). Collective.

Each kernel is linked to a copy here only when a statistic needs it (needs_copies). A rank streaming its copies
beside its kernels (gpuvar.binning.link.CopyStream) that finds them out of start order reads its share again with
the copies held instead: the pass itself has no collective, so only that rank repeats it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuvar import targets as T
from gpuvar.binning.kept import Kept
from gpuvar.binning.link import Links, Unordered
from gpuvar.binning.per_bin import TARGET
from gpuvar.binning.plan import LINKED, Plan
from gpuvar.binning.read import Scan, batches, link_columns, open_kernels
from gpuvar.binning.running import RunningBins
from gpuvar.binning.spill import Spill, round_statistics
from gpuvar.binning.target import Means, compute_target
from gpuvar.binning.timeline import Timeline, bin_runs


@dataclass(frozen=True)
class BinPass:
    """What phase 4 gives: this rank's per-bin statistics and row accounting."""

    parts: list[tuple[int, dict]]  # (round, statistics in bin order); rank 0 orders them by round, then rank
    reasons: dict[str, int]  # rows without a target for want of a linked copy, by reason
    binned: int  # rows with a target
    held_rows: int  # most rows (or copies) held at once


def stat_features(plan: Plan) -> tuple[str, ...]:
    """The features in the order their statistics come (those read, then the linked ones: TargetValues)."""
    return tuple([f for f in plan.features if f not in LINKED] + [f for f in plan.features if f in LINKED])


def needs_copies(plan: Plan) -> bool:
    """Whether a statistic needs each kernel's linked copy (its target, or a linked-copy feature); otherwise
    only the top-k rows are linked (gpuvar.binning.rows)."""
    return plan.link and (T.target(plan.opts.target).links_copies or any(f in LINKED for f in plan.features))


def share_statistics(
    plan: Plan, comm, scan: Scan, timeline: Timeline, means: Means, links: Links | None, kept: Kept | None = None
) -> BinPass:
    """Phase 4 on this rank's share (collective); `kept`: the rows the scan kept (gpuvar.binning.kept), read instead
    of decoding their row groups again where the pass can use them."""
    stream = links.stream() if links is not None and needs_copies(plan) else None
    if kept is not None and (stream is not None or not kept.usable(timeline)):
        kept.drop()
        kept = None
    try:
        sink, reasons, binned, counts, held = _read(plan, comm, scan, timeline, means, stream, kept)
    except Unordered:  # (only with a copy stream: then nothing was kept)
        stream = links.stream(held=True)
        sink, reasons, binned, counts, held = _read(plan, comm, scan, timeline, means, stream)
    workers = plan.opts.workers_per_rank
    if timeline.fast:
        parts = [(0, sink.finish(comm, timeline))]
        held = max(held, sink.held_rows)
    else:
        parts, round_held = round_statistics(comm, sink, counts, stat_features(plan), workers)
        held = max(held, round_held)
    if stream is not None:
        held = max(held, stream.held_rows)
    return BinPass(parts, dict(reasons), binned, held)


def _read(plan: Plan, comm, scan: Scan, timeline: Timeline, means: Means, stream, kept: Kept | None = None):
    """The pass proper (no collective): (sink, reasons, rows binned, rows per bin (general path), rows held)."""
    pf = open_kernels(plan)
    index = dict(scan.index)  # (the scan met every key: nothing is added)
    lut = means.lut(index)
    columns = list(dict.fromkeys([*plan.columns, *link_columns(plan)]))
    gmin, width = timeline.gmin, plan.width
    names = [TARGET, *stat_features(plan)]
    if timeline.fast:
        sink = RunningBins(stat_features(plan), plan.opts.workers_per_rank, timeline.given_bin(comm.Get_rank()))
        counts = None
    else:
        sink = Spill(names)
        counts = np.zeros(timeline.n_bins, np.int64)
    reasons: Counter = Counter()
    binned = held = 0
    try:
        if kept is not None:  # (the sorted path: see share_statistics)
            source = kept.pass_batches(plan, pf, scan, index, list(plan.columns))
        else:
            read_columns = columns if stream is not None else plan.columns
            source = ((b, None) for b in batches(plan, pf, scan.row_groups, index, read_columns, features=True))
        for b, runs in source:
            linked = stream.link(b.kstart, b.kkey) if stream is not None else {}
            tv = compute_target(plan, b, lut, linked)
            reasons.update(tv.reasons)
            ok = tv.ok
            n_ok = int(ok.sum())
            binned += n_ok
            cols = {TARGET: tv.values, **tv.features}
            if timeline.fast:
                if n_ok < len(ok):  # a row without a target is left out of every statistic
                    cols = {k: v if k == TARGET else np.where(ok, v, np.nan) for k, v in cols.items()}
                ids, starts = runs if runs is not None else bin_runs(b.axis, gmin, width)
                sink.add(ids, starts, cols)
                if kept is not None:  # the kept rows not read yet are held too
                    held = max(held, kept.rows + sink.held_rows)
            else:
                held = max(held, len(ok) + sink.held_rows)
                idx = None if n_ok == len(ok) else np.flatnonzero(ok)
                axis = b.axis if idx is None else b.axis[idx]
                bins = (axis - gmin) // width
                sink.add(bins, {k: (v if idx is None else v[idx]) for k, v in cols.items()})
                if len(bins):
                    lo = int(bins.min())
                    counts[lo : int(bins.max()) + 1] += np.bincount(bins - lo)
    except BaseException:
        if not timeline.fast:
            sink.close()
        raise
    return sink, reasons, binned, counts, held
