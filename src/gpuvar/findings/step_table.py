"""Per (rank, step) sums held in blocks of arrays indexed by the step number, not in runs of groupby tables.

Why: steps are numbered (ProfilerStep#N, the iterations of the launch pattern: 0, 1, 2, ...), so the sums of
rank r's step s can sit at position s of rank r's arrays. Adding a batch's sums is an indexed add and the step
table is built once from the arrays. The runs of groupby tables this replaces were concatenated and grouped again
when the table was asked for: at 2 M steps (a 20 M-launch capture) that fold took 0.9 GB above the sums.

Exactness: the canonical durations, threads and counts are integers, whose sums are exact in float64 below 2**53;
a value that is not a whole number (time overlapped by other processes) is added with Kahan's compensation, as
pandas' groupby sum adds. Steps that are not whole numbers, or so sparse that the blocks would be mostly empty, are
refused (`add` returns False) and the caller keeps its tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BLOCK = 4096  # steps per block
SPARSE = 16  # refused when the blocks hold more than this many slots per step seen (beyond the first 64 blocks)
WHOLE = 2.0**53  # float64's whole numbers are exact below this


class StepBlocks:
    """The sums of `columns` per (rank, step) of the groupby tables added, batch after batch."""

    def __init__(self, columns: list[str], ranked: bool):
        self.columns = list(columns)
        self.ranked = ranked  # the tables' index is (rank, step), else step
        self.sums: dict[tuple[int, int], np.ndarray] = {}  # (rank code, block) -> (columns, BLOCK)
        self.compensation: dict[tuple[int, int], np.ndarray] = {}  # Kahan's, for blocks given a fraction
        self.seen: dict[tuple[int, int], np.ndarray] = {}
        self.rank_values: list = []  # rank code -> the rank (NaN: launches without one)
        self.rank_codes: dict = {}
        self.integer = [True] * len(columns)  # every table gave the column as integers: written back so
        self.level_dtypes: dict[str, np.dtype] = {}
        self.keys = 0

    def add(self, table: pd.DataFrame) -> bool:
        """Add one groupby table (each key once); False, adding nothing, where its steps or their spread do not
        fit blocks (then `frame()` is what was added before)."""
        index = table.index
        steps = np.asarray(index.get_level_values("step"), dtype=np.float64)
        if not (np.isfinite(steps).all() and (steps == np.round(steps)).all() and (np.abs(steps) < WHOLE).all()):
            return False
        steps = steps.astype(np.int64)
        try:
            ranks = (
                np.asarray(index.get_level_values("rank"), dtype=np.float64) if self.ranked else np.zeros(len(steps))
            )
        except (TypeError, ValueError):  # ranks that are not numbers
            return False
        ranks = self._rank_codes(ranks)
        blocks = steps // BLOCK
        new = {(r, b) for r, b in zip(ranks.tolist(), blocks.tolist(), strict=True)} - self.sums.keys()
        if (len(self.sums) + len(new)) > 64 and (len(self.sums) + len(new)) * BLOCK > SPARSE * (self.keys + len(steps)):
            return False
        for name in index.names:
            level = np.asarray(index.get_level_values(name)).dtype
            self.level_dtypes[name] = np.result_type(self.level_dtypes.get(name, level), level)
        for c, column in enumerate(self.columns):
            self.integer[c] &= pd.api.types.is_integer_dtype(table[column].dtype)
        values = table[self.columns].to_numpy(np.float64).T
        order = np.lexsort((blocks, ranks))
        cuts = np.flatnonzero(np.diff(ranks[order]) | np.diff(blocks[order])) + 1
        for part in np.split(order, cuts):
            key = (int(ranks[part[0]]), int(blocks[part[0]]))
            self._add_block(key, steps[part] - key[1] * BLOCK, values[:, part])
        return True

    def _rank_codes(self, ranks: np.ndarray) -> np.ndarray:
        values, codes = np.unique(ranks, return_inverse=True, equal_nan=True)
        known = []
        for v in values.tolist():
            key = "nan" if np.isnan(v) else v
            if key not in self.rank_codes:
                self.rank_codes[key] = len(self.rank_values)
                self.rank_values.append(v)
            known.append(self.rank_codes[key])
        return np.asarray(known, dtype=np.int64)[codes.reshape(-1)]

    def _add_block(self, key: tuple[int, int], at: np.ndarray, values: np.ndarray) -> None:
        if key not in self.sums:
            self.sums[key] = np.zeros((len(self.columns), BLOCK))
            self.seen[key] = np.zeros(BLOCK, bool)
        sums, seen = self.sums[key], self.seen[key]
        self.keys += int((~seen[at]).sum())
        seen[at] = True
        fraction = key in self.compensation or not (values == np.round(values)).all()
        if not fraction:
            sums[:, at] += values
            return
        comp = self.compensation.setdefault(key, np.zeros_like(sums))
        y = values - comp[:, at]
        t = sums[:, at] + y
        comp[:, at] = (t - sums[:, at]) - y
        sums[:, at] = t

    def frame(self, drop_rank: bool = False, missing_rank: bool = True, release: bool = False) -> pd.DataFrame:
        """The table of sums, sorted by (rank, step) (ranks ascending, launches without one last), as the groupby of
        every launch at once gives it. drop_rank: indexed by step alone (one rank); missing_rank: with the launches
        without a rank; release: the blocks given back as the table is made (its last use)."""
        order = sorted(range(len(self.rank_values)), key=lambda c: (np.isnan(self.rank_values[c]), self.rank_values[c]))
        keys = [
            (key, np.flatnonzero(self.seen[key]))
            for code in order
            if missing_rank or not np.isnan(self.rank_values[code])
            for key in sorted(k for k in self.sums if k[0] == code)
        ]
        steps = [at + key[1] * BLOCK for key, at in keys]
        ranks = [np.full(len(at), self.rank_values[key[0]]) for key, at in keys]
        data = {}  # column by column, each its own block (copy=False): the table is never held twice
        for c, column in enumerate(self.columns):
            values = _concat([self.sums[key][c, at] for key, at in keys])
            data[column] = values.astype(np.int64) if self.integer[c] else values
        step = pd.Index(_concat(steps).astype(self.level_dtypes.get("step", np.int64), copy=False), name="step")
        rank = pd.Index(_concat(ranks).astype(self.level_dtypes.get("rank", np.float64), copy=False), name="rank")
        if release:
            self.sums, self.compensation, self.seen = {}, {}, {}
        index = step if not self.ranked or drop_rank else pd.MultiIndex.from_arrays([rank, step])
        return pd.DataFrame(data, index=index, copy=False)

    def rank_count(self) -> int:
        """The ranks seen, launches without one counted as one more."""
        return len(self.rank_values)


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0)
