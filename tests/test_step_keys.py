"""The steps pass 1 has seen and each (rank, step)'s first start, as sorted arrays (gpuvar.findings.step_keys):
the answers a set and a dict gave, over batches that repeat, interleave and revisit steps, across folds."""

from __future__ import annotations

import numpy as np

from gpuvar.findings import step_keys
from gpuvar.findings.step_keys import StepStarts, StepValues


def test_the_answers_of_a_set_and_a_dict_across_folds(monkeypatch):
    monkeypatch.setattr(step_keys, "FOLD", 3)
    rng = np.random.default_rng(4)
    starts, values = StepStarts(), StepValues()
    truth: dict = {}
    for batch in range(40):
        rank = [None, 0, 1][batch % 3]
        steps = np.sort(rng.integers(batch * 5, batch * 5 + 30, 50))  # overlaps the batches before
        begin = rng.integers(10**18, 10**18 + 10**6, 50)  # epoch nanoseconds: beyond float64's integers
        starts.add(rank, steps, begin)
        values.add(steps.astype(np.float64))
        for s, b in zip(steps.tolist(), begin.tolist(), strict=True):
            truth[(rank, s)] = min(truth.get((rank, s), b), b)
    assert len(starts) == len(truth)
    for key, first in truth.items():
        assert starts.get(key) == first
    assert starts.get((0, -1)) is None and starts.get((7, 5), "none") == "none"
    assert starts.get(None) is None  # a launch without a step (gpuvar.findings.report._step_of)
    seen = sorted({s for _, s in truth})
    assert values and len(values) == len(seen)
    assert np.array_equal(values.values(), np.array(seen, np.float64))
    assert not StepValues()
