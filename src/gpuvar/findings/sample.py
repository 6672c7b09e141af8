"""The launches a group's model fits see: every launch up to FIT_CAP, above it a seeded sample stratified by call
site; gathered from the kernels table group by group, a bounded number of launches at a time.

Why: the per-call-site fits (gpuvar.findings.decompose: the cross-validated shares, the permutation test, the
drivers) and the predictions need each launch's feature columns, so they hold their launches. A group of 20 M
launches does not need 20 M launches to say which feature explains its spread within call sites: FIT_CAP
launches, drawn from each call site in proportion to its launches (at least two from each, where the cap
allows, so no call site drops out of the within-call-site fit), estimate the same shares. Everything the page
counts (launches, time, medians, time above them, CV, the slowest launch) stays exact (gpuvar.findings.summary);
only the fitted shares, drivers and predictions of a sampled group come from its sample, and findings.json says
which groups were sampled and from how many launches. A group at or below the cap is fitted on every launch, as
before.

The sample is drawn per call site with numpy's Generator(seed, SAMPLE_STREAM): the same table and seed give the
same sample. Groups are gathered in rounds of at most ROUND_ROWS launches (whole groups, in the order the
decomposition goes through them): one pass over the table collects every round, rounds after the first spilled
to temporary Arrow IPC files, so one round is in memory at a time; rows become pandas objects once per round.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuvar.findings.labels import ROW

FIT_CAP = 20_000  # launches per group the model fits see (a stratified sample above it)
ROUND_ROWS = 125_000  # launches gathered before the groups that hold them are fitted (20 M launches: 0.25 GB a round)
MIN_PER_SITE = 2  # launches each call site keeps in a sample, where the cap allows
SAMPLE_STREAM = 38  # the sample's own random stream beside the fits' (issue 38)


def allocation(n: np.ndarray, cap: int) -> np.ndarray:
    """Launches kept per call site of a group with n[c] launches at call site c: all of them up to the cap, else
    MIN_PER_SITE each (where the cap allows) and the rest in proportion to the launches (largest remainders,
    ties to the first call site)."""
    n = np.asarray(n, np.int64)
    total = int(n.sum())
    if total <= cap:
        return n.copy()
    floor = np.minimum(n, MIN_PER_SITE)
    if floor.sum() > cap:
        floor = np.minimum(n, 1) if np.minimum(n, 1).sum() <= cap else np.zeros_like(n)
    rest = cap - int(floor.sum())
    left = n - floor
    share = rest * left / max(int(left.sum()), 1)
    k = floor + np.floor(share).astype(np.int64)
    short = cap - int(k.sum())
    if short > 0:
        order = np.lexsort((np.arange(len(n)), -(share - np.floor(share))))
        order = order[k[order] < n[order]]
        k[order[:short]] += 1
    return k


@dataclass
class Plan:
    """Which groups are sampled, which launches of their call sites are kept, and the rounds of groups."""

    cap: int
    sampled: np.ndarray  # per group: sampled
    keep: np.ndarray  # per cell: launches kept
    chosen: np.ndarray  # sorted keys offset[cell] + ordinal within the cell of every kept launch of sampled cells
    offset: np.ndarray  # per cell: first key
    rounds: list[list[int]]  # group codes, in order (the groups' names sorted)

    @property
    def groups_sampled(self) -> int:
        return int(self.sampled.sum())


def sampled_groups(cap: int):
    """The groups pass 2 of the summary counts distinct steps for: those above the cap."""
    return lambda launches: np.flatnonzero(launches > cap)


def plan(summary, cap: int = FIT_CAP, seed: int = 0, round_rows: int | None = None) -> Plan:
    """The sample of every group above `cap` and the rounds (module docstring)."""
    round_rows = ROUND_ROWS if round_rows is None else round_rows
    launches = summary.group_launches()
    sampled = launches > cap
    keep = summary.cell_n.astype(np.int64).copy()
    offset = np.r_[0, np.cumsum(summary.cell_n.astype(np.int64))[:-1]] if len(keep) else np.zeros(0, np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, SAMPLE_STREAM])))
    order = sorted(range(len(summary.groups)), key=lambda g: summary.groups[g])
    chosen = []
    for g in order:
        if not sampled[g]:
            continue
        cells = summary.cells_of(g)
        cells = cells[np.argsort([summary.sites[summary.cell_site[c]] for c in cells], kind="stable")]
        keep[cells] = allocation(summary.cell_n[cells], cap)
        for c in cells:
            ordinals = np.sort(rng.choice(int(summary.cell_n[c]), int(keep[c]), replace=False))
            chosen.append(offset[c] + ordinals.astype(np.int64))
    rounds, current, rows = [], [], 0
    held = np.bincount(summary.cell_group, weights=keep, minlength=len(summary.groups)).astype(np.int64)
    for g in order:
        if current and rows + held[g] > round_rows:
            rounds.append(current)
            current, rows = [], 0
        current.append(g)
        rows += int(held[g])
    if current:
        rounds.append(current)
    chosen_keys = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
    return Plan(cap, sampled, keep, chosen_keys, offset, rounds)


def group_parts(source, summary, the_plan: Plan) -> Iterator[tuple[int, pd.DataFrame]]:
    """(group code, its launches the fits see: every column, file order) for every group, round by round."""
    round_of = np.full(len(summary.groups), -1, np.int64)
    for r, groups in enumerate(the_plan.rounds):
        round_of[groups] = r
    spill = _Spill(len(the_plan.rounds))
    try:
        seen = np.zeros(len(summary.cell_group), np.int64)
        store = _Rows(summary.store)

        def pick(d: np.ndarray):
            """The batch's launches of the fits: rows with a duration, of a group fitted whole or sampled."""
            pos = np.flatnonzero(~np.isnan(d))
            cell = store.take(len(pos))["cell"].astype(np.int64)
            group = summary.cell_group[cell]
            kept = ~the_plan.sampled[group]
            counts = np.bincount(cell, minlength=len(seen))
            if not kept.all():
                kept[chosen_rows(cell, counts, seen, the_plan.offset, the_plan.chosen)] = True
            seen[:] += counts
            return pos[kept], group[kept]

        for piece, rows, group in source.picked(list(source.columns), pick):
            rounds = round_of[group]
            for r in np.unique(rounds):
                mine = np.flatnonzero(rounds == r)
                spill.add(
                    int(r),
                    piece.take(mine) if hasattr(piece, "num_rows") else piece.iloc[mine],
                    rows[mine],
                    group[mine],
                )
        for r, groups in enumerate(the_plan.rounds):
            pieces, rows, codes = spill.take(r)
            frame = source.frame_of(pieces, rows) if pieces else summary.empty
            for g in groups:
                yield g, _with_step_threads(frame[codes == g], summary)
    finally:
        spill.close()


def chosen_rows(
    cell: np.ndarray, counts: np.ndarray, seen: np.ndarray, offset: np.ndarray, chosen: np.ndarray
) -> np.ndarray:
    """The rows of a batch (cell codes in file order; `counts`: each cell's launches in it, `seen`: in the batches
    before) whose key offset[cell] + ordinal within the cell is in `chosen` (sorted), ascending.

    Why not one searchsorted of every row's key: the keys of a batch jump between call sites, so each lookup
    landed somewhere else in `chosen` (7 ms a batch of 65,536 rows against 120,000 chosen keys, 2 s of a 20 M-launch
    findings). A cell's keys in one batch are one run, first = offset + seen: two lookups per cell find the chosen
    keys in its run, and their places in the run are its rows in file order (a stable sort of the cell codes)."""
    n_cells = len(seen)
    first = offset + seen
    lo, hi = np.searchsorted(chosen, first), np.searchsorted(chosen, first + counts)
    hits = hi - lo
    if not hits.any():
        return np.zeros(0, np.int64)
    of_cell = np.repeat(np.arange(n_cells), hits)
    at = np.arange(int(hits.sum())) + np.repeat(lo - (np.cumsum(hits) - hits), hits)  # chosen[lo[c]:hi[c]], each c
    place = chosen[at] - first[of_cell]  # within the cell's run in this batch
    by_cell = np.argsort(cell.astype(np.uint16) if n_cells <= 1 << 16 else cell, kind="stable")  # (radix sort)
    run_start = np.cumsum(counts) - counts
    return np.sort(by_cell[run_start[of_cell] + place])


class _Rows:
    """The RowLabels store read in file order, any number of rows at a time (the passes' batches need not
    match: a Parquet reader may cut batches at row groups in one pass and not in another)."""

    def __init__(self, store):
        self.chunks = iter(store)
        self.left = None

    def take(self, k: int) -> np.ndarray:
        parts, need = [], k
        while need > 0:
            if self.left is None or not len(self.left):
                self.left = next(self.chunks)
                continue
            parts.append(self.left[:need])
            self.left = self.left[need:]
            need -= len(parts[-1])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=ROW)


class _Spill:
    """Round 0 in memory; the others in temporary Arrow IPC files, one per round (pieces in memory as they are
    when the source is a DataFrame: it is in memory already)."""

    ROW, GROUP = "__gpuvar_row", "__gpuvar_group"

    def __init__(self, rounds: int):
        self.pieces: list[list] = [[] for _ in range(rounds)]
        self.files: dict[int, tuple] = {}

    def add(self, r: int, piece, rows: np.ndarray, codes: np.ndarray) -> None:
        import pyarrow as pa

        if r == 0 or isinstance(piece, pd.DataFrame):
            self.pieces[r].append((piece, rows, codes))
            return
        batch = pa.RecordBatch.from_arrays(
            [*piece.columns, pa.array(rows), pa.array(codes)], names=[*piece.schema.names, self.ROW, self.GROUP]
        )
        if r not in self.files:
            handle, name = tempfile.mkstemp(prefix="gpuvar-findings-", suffix=".arrows")
            os.close(handle)
            sink = open(name, "w+b")  # noqa: SIM115 - closed by take() or close()
            os.unlink(name)  # gone with the process, whatever happens
            self.files[r] = (sink, pa.ipc.new_stream(sink, batch.schema))
        self.files[r][1].write_batch(batch)

    def take(self, r: int) -> tuple[list, np.ndarray, np.ndarray]:
        import pyarrow as pa

        if r in self.files:
            sink, writer = self.files.pop(r)
            writer.close()
            sink.flush()
            sink.seek(0)
            table = pa.ipc.open_stream(sink).read_all()
            sink.close()
            rows, codes = (table.column(k).to_numpy() for k in (self.ROW, self.GROUP))
            pieces = [table.drop_columns([self.ROW, self.GROUP])]
        else:
            kept = self.pieces[r]
            pieces = [p for p, _, _ in kept]
            rows = np.concatenate([x for _, x, _ in kept]) if kept else np.zeros(0, np.int64)
            codes = np.concatenate([c for _, _, c in kept]) if kept else np.zeros(0, np.int64)
        self.pieces[r] = []
        return pieces, rows, codes

    def close(self) -> None:
        for sink, _ in self.files.values():
            sink.close()
        self.files = {}


def _with_step_threads(part: pd.DataFrame, summary) -> pd.DataFrame:
    """The part with the `step_threads` column as the whole-table code gives it (gpuvar.findings.features
    .step_threads: float64; computed per (step, rank) from pass 1's sums where the table has no such column)."""
    from gpuvar.findings.features import STEP_THREADS
    from gpuvar.findings.tally import thread_key

    tally = summary.tally
    if STEP_THREADS in part.columns:
        if not tally.step_threads_known:
            return part
        return part.assign(**{STEP_THREADS: pd.to_numeric(part[STEP_THREADS], errors="coerce").astype(np.float64)})
    sums = tally.thread_sums
    if not sums or not any(count > 0 for _, count in sums.values()) or "step" not in part.columns:
        return part
    step = pd.to_numeric(part["step"], errors="coerce")
    keys = zip(step, part["rank"]) if "rank" in part.columns else ((s,) for s in step)
    values = []
    for known, key in zip(step.notna(), keys, strict=True):
        total, count = sums.get(thread_key(tuple(key)), (0.0, 0)) if known else (0.0, 0)
        values.append(total if count > 0 else np.nan)
    return part.assign(**{STEP_THREADS: np.array(values, np.float64)})
