"""What the steps say about each sampled group: how many distinct steps its launches ran in, the steps with most
time above its call sites' medians, the bootstrap interval of that time over steps; and per call site of a sampled
group, its distinct steps.

Why here and not from a (group, step) table: when steps are short every group runs in every step, and a table of
time per (group, step) holds a number per launch: 20 M launches in 1 M steps of 20 made 20 M keys and sums, merged
again with every batch (gpuvar.findings.summary's pass 2 grew past a gigabyte and took minutes). Each group needs
three small answers from it, so they are computed in passes over the RowLabels store, a few groups at a time, in
dense per-step arrays of at most BUDGET bytes that are dropped once the group's answers are taken. The arrays
index the sorted step values, so a group's steps come out in ascending order, as the table's keys did, and each
sum adds its launches in file order, as the table's did: the same numbers.

Only sampled groups (above the fits' cap) need these; a group fitted on every launch takes them from its launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BUDGET = 64 << 20  # bytes of per-step arrays held at a time
MOST_EXCESS = 5  # steps listed as those with most time above median
_ONES = np.array([bin(k).count("1") for k in range(256)], np.uint8)  # set bits per byte (numpy 1.26 has no popcount)


@dataclass(frozen=True)
class GroupSteps:
    """A sampled group's steps (module docstring)."""

    steps: int = 0  # distinct steps of its launches that have a step
    most_excess: list[int] = field(default_factory=list)  # most time above median first, ties to the earlier step
    interval: list[float] | None = None  # [5 %, 95 %] of the bootstrap over steps, with at least 5 steps


def group_step_facts(summary, store, sampled: np.ndarray, seed: int) -> tuple[dict[int, GroupSteps], dict[int, int]]:
    """({sampled group: GroupSteps}, {cell of a sampled group: its distinct steps}) from the store's launches with a
    step; `summary` gives the cells' groups and medians and the sorted step values."""
    width = len(summary.step_values)
    groups = np.flatnonzero(sampled)
    if width == 0 or not len(groups):
        return {}, {}
    cells_of = {int(g): summary.cells_of(g) for g in groups}
    facts, cell_steps = {}, {}
    for chunk in _chunks(groups, cells_of, width):
        cells = np.concatenate([cells_of[g] for g in chunk])
        sums, seen, bits = _accumulate(summary, store, chunk, cells, width)
        for row, g in enumerate(chunk):
            facts[g] = _facts(summary.step_values, sums[row], seen[row], seed)
        counts = _ONES[bits].sum(axis=1, dtype=np.int64)
        cell_steps.update({int(c): int(k) for c, k in zip(cells, counts, strict=True) if k > 0})
    return facts, dict(sorted(cell_steps.items()))


def _chunks(groups: np.ndarray, cells_of: dict, width: int) -> list[list[int]]:
    """The sampled groups in runs whose arrays fit BUDGET (a group alone when it does not)."""
    row_bytes = (width + 7) // 8
    out, current, held = [], [], 0
    for g in groups.tolist():
        cost = width * 9 + len(cells_of[g]) * row_bytes  # float64 sums and a seen flag per step, a bit per cell
        if current and held + cost > BUDGET:
            out.append(current)
            current, held = [], 0
        current.append(g)
        held += cost
    if current:
        out.append(current)
    return out


def _accumulate(summary, store, chunk: list[int], cells: np.ndarray, width: int):
    """(time above median per (group, step), whether the group ran in the step, a bit per (cell, step))."""
    local = np.full(len(summary.groups), -1, np.int64)
    local[chunk] = np.arange(len(chunk))
    cell_row = np.full(len(summary.cell_group), -1, np.int64)
    cell_row[cells] = np.arange(len(cells))
    row_bytes = (width + 7) // 8
    sums = np.zeros(len(chunk) * width)
    seen = np.zeros(len(chunk) * width, bool)
    bits = np.zeros(len(cells) * row_bytes, np.uint8)
    for rows in store:
        cell = rows["cell"].astype(np.int64)
        row = local[summary.cell_group[cell]]
        mine = (row >= 0) & ~np.isnan(rows["step"])
        if not mine.any():
            continue
        cell, d = cell[mine], rows["d"][mine]
        at = np.searchsorted(summary.step_values, rows["step"][mine])
        flat = row[mine] * width + at
        np.add.at(sums, flat, np.maximum(d - summary.cell_median[cell], 0.0))
        seen[flat] = True
        np.bitwise_or.at(bits, cell_row[cell] * row_bytes + (at >> 3), np.left_shift(1, at & 7).astype(np.uint8))
    return sums.reshape(len(chunk), width), seen.reshape(len(chunk), width), bits.reshape(len(cells), row_bytes)


def _facts(step_values: np.ndarray, sums: np.ndarray, seen: np.ndarray, seed: int) -> GroupSteps:
    from gpuvar.findings.report import bootstrap_sums

    occupied = np.flatnonzero(seen)
    per_step = sums[occupied]
    top = np.argsort(-per_step, kind="stable")[:MOST_EXCESS]
    interval = None
    if len(occupied) >= 5:
        low, high = np.percentile(bootstrap_sums(per_step, np.random.default_rng(seed)), [5, 95])
        interval = [float(low), float(high)]
    return GroupSteps(len(occupied), [int(s) for s in step_values[occupied][top]], interval)
