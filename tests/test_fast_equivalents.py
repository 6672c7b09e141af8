"""The findings' faster computations give exactly what their plain definitions give.

Why: the permutation p-values, the prediction models and the medians are printed on the findings page and
checked by `gpuvar verify`; a faster form that drifted by one ulp would change the bytes a user compares across
runs. Each test states the plain definition and compares on seeded data with the traps (ties, -0.0, call sites
beyond what a packed key holds, values spread over many quantile bins)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuvar.causal import within_site
from gpuvar.causal.within_site import RIDGE, SlopeGroups, fit_predict, stable_argsort, within_permutations
from gpuvar.findings.predict import MAX_BINS, _bins, _bins_by_site, _site_rows
from gpuvar.findings.sample import chosen_rows


def _lexsort_permutations(sites, y, count, rng):
    n = len(y)
    base = np.argsort(sites, kind="stable")
    out = np.empty((n, count))
    for c in range(count):
        shuffled = np.lexsort((rng.random(n), sites))
        column = np.empty(n)
        column[base] = y[shuffled]
        out[:, c] = column
    return out


@pytest.mark.parametrize("n_sites", [1, 3, 700, 2047, 2048, 2049, 6000])
def test_permutations_within_call_sites_are_lexsorts_of_the_draws(n_sites):
    rng = np.random.default_rng(n_sites)
    for trial in range(6):
        n = int(rng.integers(0, 8000))
        sites = rng.integers(-3, n_sites, n) if trial % 2 else np.sort(rng.integers(0, n_sites, n))
        y = rng.random(n)
        expected = _lexsort_permutations(sites, y, 5, np.random.default_rng(trial))
        got = within_permutations(None, sites, y, 5, np.random.default_rng(trial))
        assert np.array_equal(expected, got)


@pytest.mark.parametrize("distinct", [1, 2, 50, 2**40, 2**63])
def test_the_fast_sort_is_the_stable_sort_ties_included(distinct):
    """The keys' fast order is the stable order: among equal keys, by row (many ties, a few, almost none)."""
    rng = np.random.default_rng(distinct % 1000)
    for n in (0, 1, 2, 17, 5000):
        keys = rng.integers(0, distinct, n, dtype=np.uint64)
        assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_a_permutation_keeps_each_call_sites_values():
    rng = np.random.default_rng(0)
    sites = rng.integers(0, 40, 3000)
    y = rng.random(3000)
    permuted = within_permutations(None, sites, y, 3, np.random.default_rng(1))
    for c in range(3):
        assert not np.array_equal(permuted[:, c], y)
        for s in np.unique(sites):
            assert np.array_equal(np.sort(permuted[sites == s, c]), np.sort(y[sites == s]))


def _pandas_bins(x, d):
    frame = pd.DataFrame({"x": x, "d": d})
    if frame["x"].nunique() > MAX_BINS:
        edges = np.unique(np.quantile(x, np.linspace(0, 1, MAX_BINS + 1)))
        frame["bin"] = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
        frame["x"] = frame.groupby("bin")["x"].transform("median")
    g = frame.groupby("x", sort=True)["d"]
    mean, count = g.mean(), g.size()
    m2 = g.apply(lambda v: float(((v - v.mean()) ** 2).sum()))
    return [{"x": float(v), "n": int(count[v]), "mean": float(mean[v]), "m2": float(m2[v])} for v in mean.index]


def test_prediction_bins_are_the_pandas_groupby_definition_to_the_bit():
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(2, 2500))
        distinct = int(rng.choice([1, 2, 30, MAX_BINS, MAX_BINS + 1, 400]))
        x = rng.integers(0, distinct, n).astype(float) * float(rng.choice([1.0, 0.1, 1e9, -1.0]))
        if trial % 5 == 0:
            x[rng.random(n) < 0.2] = -0.0
        d = rng.lognormal(10, rng.uniform(0.01, 3), n) * float(rng.choice([1.0, 1e-3, 1e7]))
        if trial % 3 == 0:
            d = np.round(d)
        assert repr(_bins(x, d)) == repr(_pandas_bins(x, d))


def test_site_rows_are_each_sites_rows_in_row_order_sites_sorted():
    rng = np.random.default_rng(3)
    sites = np.array([f"op{i}|site{j}" for i, j in rng.integers(0, 30, (5000, 2))], dtype=object)
    rows = _site_rows(sites)
    assert list(rows) == sorted(set(sites))
    for site, members in rows.items():
        assert np.array_equal(members, np.flatnonzero(sites == site))
    assert _site_rows(np.array([], dtype=object)) == {}


def test_union_of_intervals_counts_each_covered_nanosecond_once():
    from gpuvar.ranks.analyze import union_ns

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        start = rng.integers(0, 500, n)
        end = start + rng.integers(0, int(rng.choice([3, 40, 400])), n)
        covered = np.zeros(1000, bool)
        for s, e in zip(start, end):
            covered[s:e] = True
        assert union_ns(start, end) == int(covered.sum())


def test_bins_of_all_call_sites_at_once_are_each_sites_bins_to_the_bit():
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(2, 6000))
        site_of_row = rng.integers(0, int(rng.choice([1, 5, 80, 700])), n)
        distinct = rng.choice([1, 3, MAX_BINS, MAX_BINS + 1, 300], size=site_of_row.max() + 1)
        x = (rng.random(n) * distinct[site_of_row]).astype(np.int64).astype(float) * float(rng.choice([1.0, 0.5, 1e6]))
        x[rng.random(n) < 0.1] = -0.0  # 0.0 and -0.0 in one bin: its value is the site's first one, as pandas keeps
        d = rng.lognormal(8, rng.uniform(0.05, 2), n)
        if trial % 4 == 0:
            d = np.round(d)
        fitted = {f"site{s}": np.flatnonzero(site_of_row == s) for s in np.unique(site_of_row)}
        fitted = {k: v for k, v in fitted.items() if len(v) >= 2}
        together = _bins_by_site(x, d, fitted)
        assert set(together) == set(fitted)
        for site, rows in fitted.items():
            assert repr(together[site]) == repr(_bins(x[rows], d[rows])), site


def _plain_fit_predict(groups, X, y, train):
    """Every group's normal equations at once, pair of columns by pair of columns."""
    k = X.shape[1]
    w = train.astype(np.float64)
    G = np.empty((groups.n_groups, k, k))
    for i in range(k):
        for j in range(i, k):
            G[:, i, j] = G[:, j, i] = groups.sums(w * X[:, i] * X[:, j])
    b = groups.sums((w * y)[:, None] * X)
    scale = np.maximum(np.trace(G, axis1=1, axis2=2) / k, 1e-300)
    G = G + (RIDGE * scale)[:, None, None] * np.eye(k)[None]
    beta = np.linalg.solve(G, b[:, :, None])[:, :, 0]
    return (X * groups.spread(beta)).sum(axis=1)


@pytest.mark.parametrize("block_bytes", [1, 8 * 7 * 7 * 5, 32 << 20])
def test_per_group_fits_in_blocks_are_the_fits_of_all_groups_at_once(monkeypatch, block_bytes):
    """A job of many ranks has a 0/1 indicator per rank among the features: the fits are built a block of call
    sites at a time (one group per block, five, all), and must predict what one pass over every group does."""
    monkeypatch.setattr(within_site, "FIT_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(7)
    n = 4000
    sites = rng.integers(0, 120, n)
    sites[sites == 3] = 4  # a site of no launches; sites 110+ are small and share one group
    sites[rng.random(n) < 0.05] = 110 + rng.integers(0, 10, 1)
    groups = SlopeGroups(sites)
    rank = rng.integers(0, 5, n)
    X = np.column_stack(
        [rng.normal(size=n), rng.normal(size=n)] + [(rank == r).astype(float) for r in range(1, 5)] + [np.zeros(n)]
    )
    X[:, 1] = 2 * X[:, 0]  # collinear
    X = X[groups.order]
    y = rng.normal(size=n)
    train = rng.random(n) > 0.2
    train[groups.sorted_codes == 5] = False  # a group without training rows predicts 0
    got = fit_predict(groups, X, y, train)
    assert np.array_equal(got, _plain_fit_predict(groups, X, y, train))
    assert not got[groups.sorted_codes == 5].any()


@pytest.mark.parametrize("n_cells", [1, 7, 300, 70_000])
def test_the_sampled_rows_of_a_batch_are_those_whose_key_is_chosen(n_cells):
    """chosen_rows: the rows whose key offset[cell] + (launches of the cell before it) is among the chosen keys,
    as one lookup per row finds them; batch after batch, with cells absent from a batch, chosen keys at the edges
    of a cell's run and more cells than a uint16 code holds."""
    rng = np.random.default_rng(n_cells)
    batches = [rng.integers(0, n_cells, int(rng.integers(0, 3000))) for _ in range(6)]
    launches = np.bincount(np.concatenate(batches), minlength=n_cells)
    offset = np.cumsum(launches) - launches
    chosen = np.sort(rng.choice(int(launches.sum()), int(launches.sum()) // 3, replace=False))
    chosen = np.union1d(chosen, offset[launches > 0])  # every cell's first launch
    seen = np.zeros(n_cells, np.int64)
    for cell in batches:
        ordinal = seen[cell] + pd.Series(cell).groupby(cell).cumcount().to_numpy()
        expected = np.flatnonzero(np.isin(offset[cell] + ordinal, chosen))
        counts = np.bincount(cell, minlength=n_cells)
        assert np.array_equal(chosen_rows(cell, counts, seen, offset, chosen), expected)
        seen += counts
