"""The findings' dataset-level numbers, exact over every launch, from a kernels table read one batch at a time.

Why: the findings rank groups by time above their call sites' medians and state each group's launches, time, CV
and CV within call sites, its slowest launch and the steps with most excess, and list every kernel name's
numbers. Computed on the whole table in pandas these held every launch (2.6 GB for 1 M launches). Here they come
from per-unit sums merged batch by batch, in memory that grows with the call sites, kernel names and steps:

  pass 1 (gpuvar.findings.tally, gpuvar.findings.steps.StepSums)   codes per launch (gpuvar.findings.labels),
         moments per (group, call site, kernel name), the step level's per-step sums, the slowest launch per
         group; each labelled launch's codes, duration, step and rank kept in a RowLabels store (spilled to a temporary
         file beyond its memory budget)
  medians (gpuvar.findings.medians)   exact, by histogram refinement over the store: per cell (a group's call
         site) and per call site
  pass 2 (over the store)   time above the medians per cell and per kernel name; per cell the launches with a
         step
  steps of the sampled groups (gpuvar.findings.group_steps)   per group its distinct steps, the steps with most
         time above median and the interval over steps; per cell its distinct steps

Sums of durations are exact in any order for the integer nanoseconds of the canonical schema, so a trace read in
batches gives the numbers of a whole-table computation; sums of squares agree to rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar import progress
from gpuvar.findings.group_steps import GroupSteps, group_step_facts
from gpuvar.findings.labels import KEY_COLUMNS, Labeller, RowLabels
from gpuvar.findings.medians import exact_medians
from gpuvar.findings.steps import READS as STEP_READS
from gpuvar.findings.steps import StepSums, floats_at
from gpuvar.findings.tally import EVIDENCE_COLUMNS, Tally
from gpuvar.heap import give_back

GIVE_BACK_EVERY = 64  # batches of pass 1 (4 M launches)
PASS_ONE = ("duration", *KEY_COLUMNS, *EVIDENCE_COLUMNS, *STEP_READS, "step_threads", "ctx_memset_active")


@dataclass
class Summary:
    """What pass 1, the medians and pass 2 leave (module docstring); arrays are indexed by code."""

    columns: list[str]
    empty: pd.DataFrame  # no rows, the table's columns and dtypes
    labels: Labeller
    tally: Tally
    steps: StepSums
    launches: int
    integral: bool
    cell_group: np.ndarray
    cell_site: np.ndarray
    cell_n: np.ndarray
    cell_sum: np.ndarray
    cell_m2: np.ndarray
    cell_median: np.ndarray
    site_median: np.ndarray
    step_values: np.ndarray  # every step value seen, sorted
    store: RowLabels  # every labelled launch's codes, duration, step, rank, batch by batch (closed by close())
    cell_excess: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cell_excess_sq: np.ndarray = field(default_factory=lambda: np.zeros(0))
    name_excess: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cell_with_step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cell_steps: dict[int, int] = field(default_factory=dict)  # cells of sampled groups: distinct steps
    sampled_steps: dict[int, GroupSteps] = field(default_factory=dict)  # sampled groups: what their steps say

    @property
    def groups(self) -> list[str]:
        return self.labels.groups.values

    @property
    def sites(self) -> list[str]:
        return self.labels.sites.values

    def cells_of(self, g: int) -> np.ndarray:
        return np.flatnonzero(self.cell_group == g)

    def group_launches(self) -> np.ndarray:
        return np.bincount(self.cell_group, weights=self.cell_n, minlength=len(self.groups)).astype(np.int64)

    def group_moments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(launches, sum, sum of squared deviations, sum of squared deviations within call sites) per group."""
        triple_cell = np.array([c for c, _ in self.labels.triples.values], np.int64)
        n, s, m2 = self.tally.triples.merged(self.cell_group[triple_cell], len(self.groups))
        within = np.bincount(self.cell_group, weights=self.cell_m2, minlength=len(self.groups))
        return n, s, m2, within

    def group_kernels(self) -> list[dict[str, int]]:
        """Per group: kernel name -> launches, commonest first (ties by name), as Decomposition.kernels."""
        out: list[dict[str, int]] = [{} for _ in self.groups]
        names = self.labels.names.values
        for t, (c, name) in enumerate(self.labels.triples.values):
            counts = out[self.cell_group[c]]
            counts[str(names[name])] = counts.get(str(names[name]), 0) + int(self.tally.triples.n[t])
        return [dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for c in out]

    def sampled_group_steps(self, g: int) -> GroupSteps:
        """What the steps say about sampled group g (no steps: zero of them)."""
        return self.sampled_steps.get(g, GroupSteps())

    def step_launches(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """(group code, duration, step, rank) of every launch with a duration, batch by batch in file order (the
        step level's second pass, gpuvar.findings.steps)."""
        for rows in self.store:
            yield self.cell_group[rows["cell"].astype(np.int64)], rows["d"], rows["step"], rows["rank"]

    def cell_of(self, g: int, site: int) -> int:
        return self.labels.cells.index[(g, site)]

    def close(self) -> None:
        self.store.close()


def summarise(source, sampled_groups=None, seed: int = 0) -> Summary:
    """Pass 1, the exact medians, pass 2 and the sampled groups' steps over `source` (gpuvar.findings.source).
    `sampled_groups(launches per group) -> group codes` names the groups above the fits' cap, whose steps are
    summarised (their bootstrap seeded with `seed`). The summary keeps its RowLabels store for the passes that
    gather the fits' launches and the step level's: close() it."""
    from gpuvar.findings.features import STEP_THREADS

    columns = list(source.columns)
    reads = [c for c in columns if c in set(PASS_ONE)]
    labeller, store = Labeller(), RowLabels()
    tally = Tally(columns, need_threads=STEP_THREADS not in columns)
    steps = StepSums(columns)
    integral = True
    meter = progress.start("findings: every launch's call site, moments and step (pass 1)", source.rows, "launches")
    try:
        for k, batch in enumerate(source.batches(reads, categories=True)):
            progress.at(meter, meter.done + len(batch))
            if k % GIVE_BACK_EVERY == GIVE_BACK_EVERY - 1:
                give_back()  # the batches' frames and the folds' copies, freed: fragments under the next fold
            labels = labeller.label(batch)
            tally.add(batch, labels, len(labeller.triples), len(labeller.groups))
            steps.add(batch)
            store.append(labels, floats_at(batch, "step", labels.pos), floats_at(batch, "rank", labels.pos))
            integral &= bool(np.all(labels.d == np.round(labels.d)) and np.all(np.abs(labels.d) < 2.0**62))
        progress.start("findings: the exact medians and the time above them")
        summary = _moments(source, columns, labeller, tally, steps, store, integral)
        _pass_two(summary, store)
        sampled = np.zeros(len(summary.groups), bool)
        if sampled_groups is not None:
            sampled[list(sampled_groups(summary.group_launches()))] = True
        summary.sampled_steps, summary.cell_steps = group_step_facts(summary, store, sampled, seed)
    except BaseException:
        store.close()
        raise
    return summary


def _moments(source, columns, labeller, tally, steps, store, integral) -> Summary:
    n_cells, n_sites = len(labeller.cells), len(labeller.sites)
    tally.triples._grow(len(labeller.triples))
    cell_group = np.array(labeller.cell_group, np.int64)
    cell_site = np.array(labeller.cell_site, np.int64)
    triple_cell = np.array([c for c, _ in labeller.triples.values], np.int64)
    n, s, m2 = tally.triples.merged(triple_cell, n_cells)
    lo, hi = tally.triples.range(triple_cell, n_cells)
    site_n = np.bincount(cell_site, weights=n, minlength=n_sites).astype(np.int64)
    site_lo, site_hi = np.full(n_sites, np.inf), np.full(n_sites, -np.inf)
    np.minimum.at(site_lo, cell_site, lo)
    np.maximum.at(site_hi, cell_site, hi)
    medians = exact_medians(store, [("cell", n, lo, hi), ("site", site_n, site_lo, site_hi)], integral)
    return Summary(
        columns=columns,
        empty=source.empty(),
        labels=labeller,
        tally=tally,
        steps=steps,
        launches=store.rows,
        integral=integral,
        cell_group=cell_group,
        cell_site=cell_site,
        cell_n=n,
        cell_sum=s,
        cell_m2=m2,
        cell_median=medians["cell"],
        site_median=medians["site"],
        step_values=tally.step_values.values(),
        store=store,
    )


def _pass_two(summary: Summary, store: RowLabels) -> None:
    """Time above the medians per cell and kernel name; launches with a step per cell."""
    n_cells, n_names = len(summary.cell_group), len(summary.labels.names)
    summary.cell_excess, summary.cell_excess_sq = np.zeros(n_cells), np.zeros(n_cells)
    summary.name_excess = np.zeros(n_names)
    summary.cell_with_step = np.zeros(n_cells, np.int64)
    for rows in store:
        cell, d = rows["cell"].astype(np.int64), rows["d"]
        x = np.maximum(d - summary.cell_median[cell], 0.0)
        summary.cell_excess += np.bincount(cell, weights=x, minlength=n_cells)
        summary.cell_excess_sq += np.bincount(cell, weights=x * x, minlength=n_cells)
        xs = np.maximum(d - summary.site_median[rows["site"]], 0.0)
        summary.name_excess += np.bincount(rows["name"], weights=xs, minlength=n_names)
        summary.cell_with_step += np.bincount(cell[~np.isnan(rows["step"])], minlength=n_cells)
