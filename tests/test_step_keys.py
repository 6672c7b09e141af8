"""The steps pass 1 has seen and each (rank, step)'s first start, as sorted arrays (gpuvar.findings.step_keys):
the answers a set and a dict gave, over batches that repeat, interleave and revisit steps, across folds."""

from __future__ import annotations

import numpy as np
import pytest

from gpuvar.findings import step_keys
from gpuvar.findings.step_keys import StepStarts, StepValues


def test_the_answers_of_a_set_and_a_dict_across_folds(monkeypatch):
    monkeypatch.setattr(step_keys, "FOLD", 3)
    rng = np.random.default_rng(4)
    starts, values = StepStarts(), StepValues()
    truth: dict = {}
    for batch in range(40):
        ranks = [[None, 0, 1], [1], [0, None]][batch % 3]  # a batch of one rank, or of several interleaved
        codes = rng.integers(0, len(ranks), 50)
        steps = np.sort(rng.integers(batch * 5, batch * 5 + 30, 50))  # overlaps the batches before
        begin = rng.integers(10**18, 10**18 + 10**6, 50)  # epoch nanoseconds: beyond float64's integers
        starts.add_many(ranks, codes, steps, begin)
        values.add(steps.astype(np.float64))
        for c, s, b in zip(codes.tolist(), steps.tolist(), begin.tolist(), strict=True):
            truth[(ranks[c], s)] = min(truth.get((ranks[c], s), b), b)
    assert len(starts) == len(truth)
    for key, first in truth.items():
        assert starts.get(key) == first
    assert starts.get((0, -1)) is None and starts.get((7, 5), "none") == "none"
    assert starts.get(None) is None  # a launch without a step (gpuvar.findings.report.step_of)
    seen = sorted({s for _, s in truth})
    assert values and len(values) == len(seen)
    assert np.array_equal(values.values(), np.array(seen, np.float64))
    assert not StepValues()


def test_step_sums_in_runs_add_up_to_the_whole_tables():
    """StepSums keeps runs of batches whose steps come in order and folds all of them when a batch goes back: any
    batching gives the table of the whole trace read at once (integer sums: exact)."""
    import pandas as pd

    from gpuvar.findings.steps import StepSums

    rng = np.random.default_rng(2)
    n = 6_000
    frame = pd.DataFrame(
        {
            "rank": np.repeat([0, 1, 0], n // 3),  # rank 0, rank 1, then rank 0 again: out of order
            "step": np.r_[
                np.sort(rng.integers(0, 500, n // 3)),
                np.sort(rng.integers(0, 500, n // 3)),
                np.sort(rng.integers(0, 500, n // 3)),
            ],
            "duration": rng.integers(1_000, 9_000, n),
            "grid_size": rng.integers(1, 64, n),
        }
    )
    whole = StepSums(list(frame.columns))
    whole.add(frame)
    cuts = np.sort(rng.choice(np.arange(1, n), 60, replace=False))
    for order in (range(61), rng.permutation(61)):
        batched = StepSums(list(frame.columns))
        pieces = [frame.iloc[a:b] for a, b in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True)]
        for k in order:
            batched.add(pieces[k])
        for key in (["rank", "step"], ["step"]):
            pd.testing.assert_frame_equal(batched.table(key), whole.table(key))


@pytest.mark.parametrize("steps_kind", ["whole", "halves", "sparse", "one rank"])
def test_step_table_from_blocks_is_the_table_of_every_launch_at_once(monkeypatch, steps_kind):
    """The sums held in blocks indexed by the step number (gpuvar.findings.step_table) give the groupby table of
    the whole trace, in any batch order: per (rank, step) with launches without a rank left out, per step with
    them added in. Steps that are not whole numbers, or too sparse for blocks, go back to the runs of tables with
    the same answer."""
    import pandas as pd

    from gpuvar.findings import steps as steps_module
    from gpuvar.findings.steps import StepSums

    rng = np.random.default_rng(5)
    n = 9_000
    step = np.sort(rng.integers(0, 700, n))
    step = {"whole": step, "halves": step / 2, "sparse": step * 10**6, "one rank": step}[steps_kind]
    rank = np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, 3, n).astype(np.float64))
    frame = pd.DataFrame(
        {
            "rank": np.zeros(n) if steps_kind == "one rank" else rank,
            "step": step,
            "duration": rng.integers(1_000, 9_000, n),
            "grid_size": rng.integers(1, 64, n),
            "ctx_copy_active": rng.integers(0, 2, n).astype(np.float64),
            "ctx_other_process_overlap": rng.random(n),  # fractions: added with compensation
        }
    )
    batched = StepSums(list(frame.columns))
    cuts = np.r_[0, np.sort(rng.choice(np.arange(1, n), 40, replace=False)), n]
    for k in rng.permutation(len(cuts) - 1):
        batched.add(frame.iloc[cuts[k] : cuts[k + 1]])
    assert (batched.blocks is not None) == (steps_kind in ("whole", "one rank"))
    monkeypatch.setattr(steps_module.StepBlocks, "add", lambda self, table: False)  # the runs of tables alone
    whole = StepSums(list(frame.columns))
    whole.add(frame)
    assert whole.blocks is None
    for key in (["rank", "step"], ["step"]):
        got, expected = batched.table(key), whole.table(key)
        pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-12)
        assert got["launches"].sum() == (frame["rank"].notna().sum() if "rank" in key else n)
