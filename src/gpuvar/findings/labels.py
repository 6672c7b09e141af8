"""The group, call site and kernel name of every launch, as small integer codes.

Why: `groups_of` and `call_sites` (gpuvar.findings.decompose) read a launch's kernel name, call site, launch
configuration and launching op and return strings. Applied to 20 M launches they build 20 M Python strings
(a second per million launches, and most of the findings' memory). A batch has only a few distinct combinations
of those four columns, so each combination is labelled once (by those same functions, on one row of it) and the
launches get integer codes: the group, the call site, the cell (the group's call site: what a median, a slope or
a sample is per) and the kernel name, numbered in order of first appearance in the file.

RowLabels keeps the codes, duration, step and rank of every launch with a duration (36 bytes a launch) for the passes
that need them again (the exact medians, the time above them per call site and per step): in memory up to
MEMORY_ROWS launches, beyond that in a temporary file read back one batch at a time, so memory stays bounded.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np
import pandas as pd

KEY_COLUMNS = ("kernel_name", "call_site", "launch_config", "launch_op")
MEMORY_ROWS = 1 << 21  # 72 MiB
ROW = np.dtype([("cell", "<i4"), ("site", "<i4"), ("name", "<i4"), ("d", "<f8"), ("step", "<f8"), ("rank", "<f8")])


class Codebook:
    """Distinct values -> 0, 1, 2, ... in order of first appearance."""

    def __init__(self):
        self.index: dict = {}
        self.values: list = []

    def ids(self, values) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int64)
        for k, v in enumerate(values):
            code = self.index.get(v)
            if code is None:
                code = self.index[v] = len(self.values)
                self.values.append(v)
            out[k] = code
        return out

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class BatchLabels:
    """The launches of one batch that have a duration: positions in the batch, durations and codes."""

    pos: np.ndarray
    d: np.ndarray
    group: np.ndarray
    site: np.ndarray
    cell: np.ndarray
    name: np.ndarray
    triple: np.ndarray
    is_op: np.ndarray


class Labeller:
    """Codes of groups, call sites (the global call-site strings), cells (group, call site) and kernel names."""

    def __init__(self):
        self.groups, self.sites, self.cells, self.names = Codebook(), Codebook(), Codebook(), Codebook()
        self.triples = Codebook()  # (cell, kernel name): the finest unit, whose moments add up to every other
        self.raw_names: set = set()  # kernel names that were not null (record["kernel_names"] counts these)
        self.cell_group: list[int] = []
        self.cell_site: list[int] = []

    def label(self, batch: pd.DataFrame) -> BatchLabels:
        from gpuvar.findings.decompose import call_sites, groups_of

        d = pd.to_numeric(batch["duration"], errors="coerce").to_numpy(dtype=np.float64)
        pos = np.flatnonzero(~np.isnan(d))
        keys = [c for c in KEY_COLUMNS if c in batch.columns]
        combo = _combinations(batch, keys, None if len(pos) == len(batch) else pos)
        first = np.flatnonzero(combo > np.maximum.accumulate(np.r_[-1, combo[:-1]])) if len(combo) else combo
        rows = batch[keys].iloc[pos[first]]
        group_ids = self.groups.ids(list(groups_of(rows)))
        site_ids = self.sites.ids(list(call_sites(rows)))
        names = rows["kernel_name"]
        self.raw_names.update(names[names.notna()].tolist())
        name_ids = self.names.ids(list(names.astype("string").fillna("?").astype(object)))
        before = len(self.cells)
        cell_ids = self.cells.ids(list(zip(group_ids.tolist(), site_ids.tolist(), strict=True)))
        for g, s in self.cells.values[before:]:
            self.cell_group.append(g)
            self.cell_site.append(s)
        triple_ids = self.triples.ids(list(zip(cell_ids.tolist(), name_ids.tolist(), strict=True)))
        is_op = rows["launch_op"].notna().to_numpy() if "launch_op" in rows.columns else np.zeros(len(rows), bool)
        return BatchLabels(
            pos=pos,
            d=d[pos],
            group=group_ids[combo],
            site=site_ids[combo],
            cell=cell_ids[combo],
            name=name_ids[combo],
            triple=triple_ids[combo],
            is_op=is_op[combo],
        )


def _combinations(batch: pd.DataFrame, keys: list[str], pos: np.ndarray | None) -> np.ndarray:
    """Per row (at `pos`, or every row) the code of its combination of the `keys` columns' values (null a value
    of its own), numbered in order of first appearance.

    The columns' codes are combined as digits of one integer, compressed to first-appearance codes only when the
    next digit could overflow, then numbered once. Why: a factorize per column and per combination so far cost
    ~5 ms a batch (1.6 s of 20 M launches); a categorical column (pass 1 reads text as categories) has its codes
    already. Any one-to-one key of the combinations numbers them the same way."""
    combo, size = np.zeros(len(batch) if pos is None else len(pos), np.int64), 1
    for column in keys:
        values = batch[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            codes, count = values.cat.codes.to_numpy().astype(np.int64), len(values.cat.categories)
        else:
            codes, uniques = pd.factorize(values, use_na_sentinel=True)
            count = len(uniques)
        if pos is not None:
            codes = codes[pos]
        if size * (count + 1) >= 1 << 62:
            combo = pd.factorize(combo)[0].astype(np.int64)
            size = int(combo.max()) + 1 if len(combo) else 1
        combo = combo * (count + 1) + (codes + 1)
        size *= count + 1
    return pd.factorize(combo)[0].astype(np.int64)


class RowLabels:
    """Every labelled launch's (cell, site, kernel name, duration, step or NaN, rank or NaN), batch by batch, in file
    order."""

    def __init__(self):
        self.sizes: list[int] = []
        self.memory: list[np.ndarray] | None = []
        self.file = None

    def append(self, labels: BatchLabels, step: np.ndarray, rank: np.ndarray) -> None:
        rows = np.empty(len(labels.d), dtype=ROW)
        rows["cell"], rows["site"], rows["name"], rows["d"] = labels.cell, labels.site, labels.name, labels.d
        rows["step"], rows["rank"] = step, rank
        self.sizes.append(len(rows))
        if self.memory is not None and sum(self.sizes) > MEMORY_ROWS:
            handle, name = tempfile.mkstemp(prefix="gpuvar-findings-", suffix=".rows")
            os.close(handle)
            self.file = open(name, "w+b")  # noqa: SIM115 - kept open across passes, closed by close()
            os.unlink(name)  # gone with the process, whatever happens
            for part in self.memory:
                part.tofile(self.file)
            self.memory = None
        if self.memory is not None:
            self.memory.append(rows)
        else:
            rows.tofile(self.file)

    def __iter__(self):
        if self.memory is not None:
            yield from self.memory
            return
        self.file.flush()
        self.file.seek(0)
        for size in self.sizes:
            yield np.fromfile(self.file, dtype=ROW, count=size)

    @property
    def rows(self) -> int:
        return sum(self.sizes)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
