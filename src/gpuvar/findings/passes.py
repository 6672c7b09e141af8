"""The findings' passes over one kernels table, in order: the exact summary (gpuvar.findings.summary), the fits'
sample plan (gpuvar.findings.sample), then each group's launches, one round of groups at a time.

Why one object: the decomposition, the report and the figures all walk the same groups; the summary's RowLabels
store (possibly a temporary file) lives until the last pass has read it, and close() removes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from gpuvar import progress
from gpuvar.findings import sample as S
from gpuvar.findings.decompose import Exact, fit_inputs
from gpuvar.findings.source import source_of
from gpuvar.findings.summary import summarise
from gpuvar.heap import give_back


class Passes:
    """The summary and sample plan of one table (a DataFrame, a source or kernels.parquet read in batches)."""

    def __init__(self, kernels, seed: int = 0, cap: int | None = None, round_rows: int | None = None):
        self.source = source_of(kernels)
        self.cap = S.FIT_CAP if cap is None else int(cap)
        self.seed = seed
        self.summary = summarise(self.source, S.sampled_groups(self.cap), seed)
        give_back()  # pass 1's batches, freed, would otherwise sit under the fits' rounds
        try:
            self.plan = S.plan(self.summary, self.cap, seed, round_rows)
            self.inputs = fit_inputs(self.summary.empty, dict(self.summary.tally.ranks))
            self._exact = None
        except BaseException:
            self.close()
            raise
        self.held_rows_max = 0

    def __enter__(self) -> Passes:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.summary.close()

    def groups(self) -> Iterator[tuple[int, str, pd.DataFrame, Exact | None]]:
        """(code, group, the launches its fits see, its exact numbers when sampled) of every group, by name."""
        meter = progress.start("findings: each group's decomposition and verdict", len(self.summary.groups), "groups")
        for g, part in S.group_parts(self.source, self.summary, self.plan):
            progress.at(meter, meter.done + 1)
            self.held_rows_max = max(self.held_rows_max, len(part))
            yield g, str(self.summary.groups[g]), part, self.exact(g, len(part))

    def exact(self, g: int, fitted: int) -> Exact | None:
        """A sampled group's numbers over every launch (None for a group fitted on every launch)."""
        if not self.plan.sampled[g]:
            return None
        if self._exact is None:
            s = self.summary
            n, total, m2, within = s.group_moments()
            cells = np.bincount(s.cell_group, minlength=len(s.groups))
            low = np.full(len(s.groups), np.iinfo(np.int64).max)
            np.minimum.at(low, s.cell_group, s.cell_n.astype(np.int64))
            self._exact = (n, total, m2, within, cells, low, s.group_kernels())
        n, total, m2, within, cells, low, kernels = (a[g] for a in self._exact)
        mean = total / n if n else 0.0
        return Exact(
            kernels=kernels,
            launches=int(n),
            total_ns=float(total),
            mean_ns=float(mean),
            cv=float(np.sqrt(m2 / n) / mean) if n and mean > 0 else 0.0,
            cv_within=float(np.sqrt(within / n) / mean) if n and mean > 0 else 0.0,
            call_sites=int(cells),
            min_site_launches=int(low),
            between=float((m2 - within) / m2) if m2 > 0 else 0.0,
            within_fraction=float(within / m2) if m2 > 0 else 0.0,
            varies=bool(m2 > 0),
            sample={"launches": int(fitted), "of": int(n), "cap": self.cap, "stratified_by": "call site"},
        )

    def record(self) -> dict:
        """What findings.json says about the fits' sample."""
        sampled = [str(self.summary.groups[g]) for g in np.flatnonzero(self.plan.sampled)]
        return {
            "cap_launches_per_group": self.cap,
            "groups_sampled": len(sampled),
            "sampled_groups": sorted(sampled),
            "seed": self.seed,
        }
