"""The steps pass 1 has seen and the first kernel start of each (rank, step), kept as sorted numpy arrays.

Why not a set and a dict: a trace of a million short steps made a million Python floats and a million
(rank, step) tuples, 64 MB and the allocator's fragments around them, for two answers: how many steps there are,
and where one step began. Each batch's values are reduced and kept as a run; the runs are folded into one every
FOLD batches, so the arrays hold the distinct keys plus at most FOLD batches' worth.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FOLD = 32  # batches between folds


class StepValues:
    """Every distinct step value seen (float64, sorted)."""

    def __init__(self):
        self.runs: list[np.ndarray] = []

    def add(self, values: np.ndarray) -> None:
        self.runs.append(np.unique(np.asarray(values, np.float64)))
        if len(self.runs) > FOLD:
            self.runs = [self.values()]

    def values(self) -> np.ndarray:
        return np.unique(np.concatenate(self.runs)) if self.runs else np.zeros(0)

    def __len__(self) -> int:
        self.runs = [self.values()]
        return len(self.runs[0])

    def __bool__(self) -> bool:
        return any(len(run) for run in self.runs)


class StepStarts:
    """The least start per (rank, step) (rank None where the launch has none): `get((rank, step))` as a dict's."""

    def __init__(self):
        self.ranks: dict = {}  # rank -> [(steps, starts) runs]

    def add_many(self, ranks: list, codes: np.ndarray, steps: np.ndarray, starts: np.ndarray) -> None:
        """add() of several ranks' launches at once: codes[i] is launch i's index in `ranks` (its key). One sort
        for all of them: at 256 ranks a batch, a groupby and an add per rank took 28 ms a batch."""
        codes, steps, starts = (np.asarray(a, np.int64) for a in (codes, steps, starts))
        order = np.lexsort((starts, steps, codes))
        codes, steps, starts = codes[order], steps[order], starts[order]
        first = np.ones(len(codes), bool)
        first[1:] = (codes[1:] != codes[:-1]) | (steps[1:] != steps[:-1])  # the least start of each (rank, step)
        codes, steps, starts = codes[first], steps[first], starts[first]
        cuts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1], True])
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            rank = ranks[int(codes[a])]
            runs = self.ranks.setdefault(rank, [])
            runs.append((steps[a:b], starts[a:b]))  # (sorted distinct steps, each one's least start: as _least)
            if len(runs) > FOLD:
                self._folded(rank)

    def get(self, key, default=None):
        if key is None:  # a launch without a step
            return default
        rank, step = key
        if not self.ranks.get(rank):
            return default
        steps, starts = self._folded(rank)
        at = int(np.searchsorted(steps, step))
        return int(starts[at]) if at < len(steps) and steps[at] == step else default

    def __len__(self) -> int:
        return sum(len(self._folded(rank)[0]) for rank in self.ranks)

    def _folded(self, rank) -> tuple[np.ndarray, np.ndarray]:
        """The rank's runs folded into one (kept so), its (steps, starts)."""
        runs = self.ranks[rank]
        if len(runs) > 1:
            runs[:] = [_least(*(np.concatenate(parts) for parts in zip(*runs, strict=True)))]
        return runs[0]


def _least(steps: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct steps, the least start of each)."""
    order = np.lexsort((starts, steps))
    steps, starts = steps[order], starts[order]
    first = np.r_[True, steps[1:] != steps[:-1]] if len(steps) else np.zeros(0, bool)
    return steps[first], starts[first]


def rank_key(value):
    """A rank as a key: None for a missing one (NaN is not equal to itself)."""
    return None if pd.isna(value) else value
