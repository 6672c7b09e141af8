"""The findings' dataset-level numbers, exact over every launch, from a kernels table read one batch at a time.

Why: the findings rank groups by time above their call sites' medians and state each group's launches, time, CV
and CV within call sites, its slowest launch and the steps with most excess, and list every kernel name's
numbers. Computed on the whole table in pandas these held every launch (2.6 GB for 1 M launches). Here they come
from per-unit sums merged batch by batch, in memory that grows with the call sites, kernel names and steps:

  pass 1 (gpuvar.findings.tally, gpuvar.findings.steps.StepSums)   codes per launch (gpuvar.findings.labels),
         moments per (group, call site, kernel name), the step level's per-step sums, the slowest launch per
         group; each labelled launch's codes, duration and step kept in a RowLabels store (spilled to a temporary
         file beyond its memory budget)
  medians (gpuvar.findings.medians)   exact, by histogram refinement over the store: per cell (a group's call
         site) and per call site
  pass 2 (over the store)   time above the medians per cell, per kernel name and per (group, step); per cell
         the launches with a step and, for the cells of sampled groups, the distinct steps

Sums of durations are exact in any order for the integer nanoseconds of the canonical schema, so a trace read in
batches gives the numbers of a whole-table computation; sums of squares agree to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar.findings.labels import KEY_COLUMNS, Labeller, RowLabels
from gpuvar.findings.medians import exact_medians
from gpuvar.findings.steps import READS as STEP_READS
from gpuvar.findings.steps import StepSums
from gpuvar.findings.tally import EVIDENCE_COLUMNS, Tally

PASS_ONE = ("duration", *KEY_COLUMNS, *EVIDENCE_COLUMNS, *STEP_READS, "step_threads", "ctx_memset_active")


class SparseSums:
    """Sums per int64 key, merged batch by batch (keys sorted)."""

    def __init__(self):
        self.keys = np.zeros(0, np.int64)
        self.sums = np.zeros(0)

    def add(self, keys: np.ndarray, weights: np.ndarray | None = None) -> None:
        if not len(keys):
            return
        w = np.ones(len(keys)) if weights is None else weights
        k, inv = np.unique(np.concatenate([self.keys, keys]), return_inverse=True)
        self.sums = np.bincount(inv, weights=np.concatenate([self.sums, w]), minlength=len(k))
        self.keys = k


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
    store: RowLabels  # every labelled launch's codes, duration and step, batch by batch (closed by close())
    cell_excess: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cell_excess_sq: np.ndarray = field(default_factory=lambda: np.zeros(0))
    name_excess: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cell_with_step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cell_steps: dict[int, int] = field(default_factory=dict)  # cells of sampled groups: distinct steps
    group_step: SparseSums = field(default_factory=SparseSums)  # excess per group * len(step_values) + step

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

    def group_steps(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """(the steps of group g's launches, sorted; time above median per step)."""
        width = len(self.step_values)
        mine = (self.group_step.keys // max(width, 1)) == g
        return self.step_values[self.group_step.keys[mine] % max(width, 1)], self.group_step.sums[mine]

    def cell_of(self, g: int, site: int) -> int:
        return self.labels.cells.index[(g, site)]

    def close(self) -> None:
        self.store.close()


def summarise(source, sampled_groups=None) -> Summary:
    """Pass 1, the exact medians and pass 2 over `source` (gpuvar.findings.source). `sampled_groups(launches per
    group) -> group codes` names the groups whose cells' distinct steps pass 2 counts (the sampled ones). The
    summary keeps its RowLabels store for the pass that gathers the fits' launches: close() it."""
    from gpuvar.findings.features import STEP_THREADS

    columns = list(source.columns)
    reads = [c for c in columns if c in set(PASS_ONE)]
    labeller, store = Labeller(), RowLabels()
    tally = Tally(columns, need_threads=STEP_THREADS not in columns)
    steps = StepSums(columns)
    integral = True
    try:
        for batch in source.batches(reads, categories=True):
            labels = labeller.label(batch)
            tally.add(batch, labels, len(labeller.triples), len(labeller.groups))
            codes = np.full(len(batch), -1, np.int64)
            codes[labels.pos] = labels.group
            steps.add(batch, codes)
            step = (
                pd.to_numeric(batch["step"], errors="coerce").to_numpy(np.float64)[labels.pos]
                if "step" in batch.columns
                else np.full(len(labels.pos), np.nan)
            )
            store.append(labels, step)
            integral &= bool(np.all(labels.d == np.round(labels.d)) and np.all(np.abs(labels.d) < 2.0**62))
        summary = _moments(source, columns, labeller, tally, steps, store, integral)
        _pass_two(summary, store, sampled_groups)
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
        step_values=np.array(sorted(tally.step_values), np.float64),
        store=store,
    )


def _pass_two(summary: Summary, store: RowLabels, sampled_groups) -> None:
    """Time above the medians per cell, kernel name and (group, step); launches with a step per cell; distinct
    steps per cell of the sampled groups."""
    n_cells, n_names = len(summary.cell_group), len(summary.labels.names)
    width = max(len(summary.step_values), 1)
    sampled = np.zeros(len(summary.groups), bool)
    if sampled_groups is not None:
        sampled[list(sampled_groups(summary.group_launches()))] = True
    summary.cell_excess, summary.cell_excess_sq = np.zeros(n_cells), np.zeros(n_cells)
    summary.name_excess = np.zeros(n_names)
    summary.cell_with_step = np.zeros(n_cells, np.int64)
    pairs = SparseSums()
    for rows in store:
        cell, d = rows["cell"].astype(np.int64), rows["d"]
        x = np.maximum(d - summary.cell_median[cell], 0.0)
        summary.cell_excess += np.bincount(cell, weights=x, minlength=n_cells)
        summary.cell_excess_sq += np.bincount(cell, weights=x * x, minlength=n_cells)
        xs = np.maximum(d - summary.site_median[rows["site"]], 0.0)
        summary.name_excess += np.bincount(rows["name"], weights=xs, minlength=n_names)
        known = ~np.isnan(rows["step"])
        if not known.any():
            continue
        c = cell[known]
        summary.cell_with_step += np.bincount(c, minlength=n_cells)
        at = np.searchsorted(summary.step_values, rows["step"][known])
        summary.group_step.add(summary.cell_group[c] * width + at, x[known])
        mine = sampled[summary.cell_group[c]]
        if mine.any():
            pairs.add(np.unique(c[mine] * width + at[mine]))
    if len(pairs.keys):
        cells, counts = np.unique(pairs.keys // width, return_counts=True)
        summary.cell_steps = dict(zip(cells.tolist(), counts.tolist(), strict=True))
