"""Call sites across ranks (gpuvar.ranks.sites): planted jobs where the variance lies between ranks, within them, or
both; the decomposition is exact, and the moments a process sends per rank give what all ranks at once give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuvar.ranks.sites import (
    MIN_LAUNCHES_PER_RANK,
    across_ranks,
    page_lines,
    robust_z,
    site_moments,
    site_records,
    sites_sentence,
)


def _launches(durations: dict[tuple[int, str], np.ndarray]) -> pd.DataFrame:
    """Kernel rows (rank, call_site, start, end) with the given durations, interleaved in time as a job's are."""
    frames = []
    for (rank, site), d in durations.items():
        start = np.arange(len(d), dtype=np.int64) * 10_000_000
        frames.append(pd.DataFrame({"rank": rank, "call_site": site, "start": start, "end": start + d}))
    return pd.concat(frames, ignore_index=True).sample(frac=1.0, random_state=0).reset_index(drop=True)


def test_a_slow_rank_is_named_and_carries_the_variance_between_ranks():
    rng = np.random.default_rng(0)
    durations = {(r, "aten::mm#0.0"): rng.normal(100_000, 500, 200).astype(np.int64) for r in range(6)}
    durations[(4, "aten::mm#0.0")] += 30_000  # rank 4: a throttled GPU
    durations.update({(r, "aten::add#0.0"): rng.normal(10_000, 3_000, 200).astype(np.int64) for r in range(6)})
    table = across_ranks(site_moments(_launches(durations)))
    mm = table.set_index("call_site").loc["aten::mm#0.0"]
    assert mm["slowest_rank"] == 4 and mm["between_share"] > 0.95
    assert mm["slowest_over_median"] == pytest.approx(1.3, rel=0.01)
    add = table.set_index("call_site").loc["aten::add#0.0"]  # the same distribution on every rank
    assert add["between_share"] < 0.05
    assert list(table["call_site"]) == ["aten::mm#0.0", "aten::add#0.0"]  # most variance first


def test_the_split_is_exact_and_the_sd_is_the_call_sites_own():
    rng = np.random.default_rng(1)
    durations = {(r, "k#0"): rng.integers(1_000, 90_000, 50 + 7 * r) for r in range(5)}
    row = across_ranks(site_moments(_launches(durations))).iloc[0]
    everything = np.concatenate(list(durations.values())).astype(np.float64)
    assert row["launches"] == len(everything) and row["ranks"] == 5
    assert row["mean_ns"] == pytest.approx(everything.mean(), rel=1e-12)
    assert row["sd_ns"] == pytest.approx(everything.std(), rel=1e-12)
    means = np.array([d.mean() for d in durations.values()])
    counts = np.array([len(d) for d in durations.values()])
    between = (counts * (means - everything.mean()) ** 2).sum() / ((everything - everything.mean()) ** 2).sum()
    assert row["between_share"] == pytest.approx(between, rel=1e-10)


def test_ranks_with_too_few_launches_and_single_rank_call_sites_are_left_out():
    durations = {
        (0, "a"): np.full(20, 100),
        (1, "a"): np.full(20, 300),
        (2, "a"): np.full(MIN_LAUNCHES_PER_RANK - 1, 9),
    }
    durations[(0, "only-rank-0")] = np.arange(20)
    launches = _launches(durations)
    first = launches.index[(launches["rank"] == 0) & (launches["call_site"] == "a")][0]
    launches.loc[first, "call_site"] = None  # a launch without a call site is not counted
    table = across_ranks(site_moments(launches))
    assert list(table["call_site"]) == ["a"]
    row = table.iloc[0]
    assert row["ranks"] == 2 and row["ranks_left_out"] == 1 and row["slowest_rank"] == 1
    assert row["between_share"] == 1.0  # each rank constant: all the variance is between them
    assert row["launches"] == 39


def test_moments_sent_rank_by_rank_give_the_same_bytes_as_all_ranks_at_once():
    """What gpuvar.ranks.job relies on: a process computes each of its ranks' moments alone."""
    rng = np.random.default_rng(2)
    durations = {(r, f"op#{s}"): rng.integers(1, 10**7, 300) for r in range(4) for s in range(3)}
    launches = _launches(durations)
    whole = across_ranks(site_moments(launches))
    parts = pd.concat([site_moments(launches[launches["rank"] == r]) for r in (2, 0, 3, 1)], ignore_index=True)
    assert across_ranks(parts).to_csv() == whole.to_csv()


def test_the_page_shows_the_records_and_no_table_without_any():
    rng = np.random.default_rng(3)
    durations = {(r, "x|y"): rng.integers(1_000, 2_000, 30) + 500 * r for r in range(3)}
    records = site_records(across_ranks(site_moments(_launches(durations))))
    lines = page_lines(records)
    assert lines[1] == "## Call sites across ranks" and "| 2 (" in lines[-1]
    assert "x\\|y" in lines[-1] or "`x|y`" in lines[-1]  # a table cell, whatever the name holds
    assert page_lines([]) == [] and across_ranks(site_moments(pd.DataFrame())).empty


def _record(site: str, rank: int, ratio: float, share: float) -> dict:
    return {"call_site": site, "slowest_rank": rank, "slowest_over_median": ratio, "between_share": share}


def test_the_finding_names_the_rank_slowest_at_most_call_sites_and_leaves_collectives_aside():
    records = [_record("nccl:all_reduce#0.0", 1, 1.3, 0.9)]  # a collective: slowest on the ranks that wait
    records += [_record(f"aten::mm#{i}.0", 7, 2.0 + i / 100, 0.3) for i in range(4)] + [
        _record("aten::add#0.0", 2, 1.0, 0.0)
    ]
    line = sites_sentence(records)
    assert line.startswith("rank 7 is the slowest rank at 4 of the 5 call sites") and "2.01x" in line
    within = [_record("a", 0, 1.5, 0.1), _record("b", 1, 1.02, 0.6)]  # neither both large and between ranks
    assert sites_sentence(within).endswith("at most 60 % of their variance lies between ranks (call_sites.csv)")
    mixed = [_record("a", 0, 1.5, 0.4), _record("b", 1, 1.3, 0.5), _record("c", 2, 1.0, 0.0), _record("d", 3, 1.0, 0.0)]
    assert sites_sentence(mixed).startswith("call sites slower on one rank: a on rank 0 (1.50x, 40 %")
    assert sites_sentence(records[:1]) is None and sites_sentence([]) is None


def _many_ranks(ranks: int, slow: int | None, factor: float, seed: int) -> pd.DataFrame:
    """A GEMM whose size varies per step on every rank (a wide spread within ranks), `slow` running it `factor`
    slower: the planted job of gpuvar bench scale in miniature."""
    rng = np.random.default_rng(seed)
    durations = {}
    for r in range(ranks):
        d = rng.integers(1, 9, 100) * 20_000 + rng.normal(0, 2_000, 100)
        durations[(r, "aten::mm#0.0")] = (d * (factor if r == slow else 1.0)).astype(np.int64)
        durations[(r, "aten::add#0.0")] = (rng.integers(1, 9, 100) * 5_000).astype(np.int64)
    return _launches(durations)


def test_one_slow_rank_among_many_is_named_though_it_carries_little_of_the_variance():
    """At 64 ranks one rank 1.5x slower holds ~3 % of the variance (the sizes vary within every rank), under the
    share's 20 %: its mean stands out among the ranks' means, and the finding names it."""
    records = site_records(across_ranks(site_moments(_many_ranks(64, slow=37, factor=1.5, seed=4))))
    mm = next(r for r in records if r["call_site"] == "aten::mm#0.0")
    assert mm["slowest_rank"] == 37 and mm["between_share"] < 0.2 and mm["slowest_robust_z"] > 5
    line = sites_sentence(records)
    assert line.startswith("rank 37 is the slowest rank at 1 of the 2 call sites") and "modified z-score" in line
    assert "| 37 (1.46x, z 9.4) |" in "".join(page_lines(records))


def test_many_ranks_alike_give_no_slow_rank():
    """The null case: 64 ranks drawing their sizes from the same distribution. Some rank is always the slowest, and
    by chance its mean can be 10 % above the median rank's (100 steps a rank), but it is no outlier among the ranks'
    means: no call site is said to be slower on one rank."""
    for seed in range(5):
        records = site_records(across_ranks(site_moments(_many_ranks(64, slow=None, factor=1.0, seed=seed))))
        assert all(r["slowest_robust_z"] < 3.5 and r["between_share"] < 0.05 for r in records)
        assert sites_sentence(records).startswith("the call sites with most launch-time variance")


def test_the_modified_z_score():
    means = np.array([10.0, 11.0, 12.0, 13.0, 40.0])
    assert robust_z(means, 4) == pytest.approx(0.6745 * (40 - 12) / 1.0)
    assert np.isnan(robust_z(means[:2], 1))  # two ranks: neither is the odd one out
    flat = np.array([5.0, 5.0, 5.0, 5.0, 9.0])  # the MAD is 0: the mean absolute deviation stands in
    assert robust_z(flat, 4) == pytest.approx(4 / (1.253314 * 0.8))
    assert robust_z(np.full(4, 7.0), 0) == 0.0
