"""The launch sweep's per-step memory (gpuvar.ingest.step_store): counts survive a spill, totals are exact."""

from __future__ import annotations

import sqlite3

import numpy as np

from gpuvar.ingest.step_store import DENSE_STEPS, StepCounters, StepTotals


def test_counters_of_a_step_that_comes_back_are_read_back():
    con = sqlite3.connect(":memory:")
    counters = StepCounters(con, "spill", keep=2)
    for step in (0, 1, 2, 0, 3, 1, 0):  # 0 and 1 leave memory and come back
        counts = counters.of(step)
        counts["op"] = counts.get("op", 0) + 1
    assert {s: counters.of(s)["op"] for s in (0, 1, 2, 3)} == {0: 3, 1: 2, 2: 1, 3: 1}
    assert len(counters.recent) <= 3


def test_counters_agree_with_a_dict_over_many_spills_and_returns():
    """Steps that leave memory many at a time (dense numbers and numbers too big for arrays), come back out of
    order, leave again and are reset: every count is what one dict of everything gives."""
    rng = np.random.default_rng(7)
    con = sqlite3.connect(":memory:")
    counters = StepCounters(con, "spill", keep=8)
    for reset in range(2):
        expected: dict = {}
        for step in rng.choice(np.r_[np.arange(40), DENSE_STEPS + np.arange(10), -3], 3000).tolist():
            key = ("op", int(rng.integers(3)))
            counts = counters.of(step)
            counts[key] = counts.get(key, 0) + 1
            expected.setdefault(step, {})
            expected[step][key] = expected[step].get(key, 0) + 1
            assert len(counters.recent) <= 8
        assert {s: dict(counters.of(s)) for s in expected} == expected
        counters.reset()
    assert counters.of(3) == {}


def test_totals_dense_and_sparse_agree():
    rng = np.random.default_rng(4)
    steps = rng.integers(0, 50, 1000)
    threads = rng.integers(1, 1 << 20, 1000).astype(float)
    dense, sparse = StepTotals(), StepTotals()
    for part in np.array_split(np.arange(1000), 7):
        dense.add(steps[part], threads[part])
        sparse.add(steps[part] + DENSE_STEPS, threads[part])  # numbers too big for arrays
    assert sparse.sparse is not None and dense.sparse is None
    d_steps, d_sums, d_counts = dense.totals()
    s_steps, s_sums, s_counts = sparse.totals()
    assert np.array_equal(d_steps + DENSE_STEPS, s_steps)
    assert np.array_equal(d_sums, s_sums) and np.array_equal(d_counts, s_counts)
    expected = np.bincount(steps, weights=threads)
    assert np.array_equal(d_sums, expected[d_steps])


def test_seen_steps_switch_to_sparse_keeps_what_was_seen():
    totals = StepTotals()
    totals.see(np.array([3, 5, 3]))
    totals.see(np.array([DENSE_STEPS + 1]))
    assert totals.seen_steps().tolist() == [3, 5, DENSE_STEPS + 1]
