"""Designs of many columns (a 0/1 indicator per rank of a big job) fitted one call site at a time with BLAS.

Why: the within-call-site test built its basis and normal equations elementwise, rows x columns**2 passes; with
the 255 rank indicators of a 256-rank job the findings took 41 s, 88 % of it there. gpuvar.causal.within_site
now fits a design of more than WIDE_COLUMNS columns group by group (WideBasis, _fit_predict_wide). The spans and
least squares are the same, so every number agrees with the column-by-column path to rounding, and the findings
page of the planted 256-rank job kept its bytes (docs/performance.md). Planted traps: zero columns in a group
(ranks absent from a call site) ahead of independent ones, exactly collinear columns, a group of fewer rows than
columns, a group without training rows."""

from __future__ import annotations

import numpy as np
import pytest

from gpuvar.causal import within_site
from gpuvar.causal.within_site import Basis, SlopeGroups, WideBasis, basis_of, fit_predict, within_test


def _design(seed: int = 3, n: int = 6000, ranks: int = 90):
    """Call sites of ~60 launches (fewer than the columns), rank indicators centred per call site (zero in a
    call site the rank never ran), a size feature and its exact double; y = 2 size + noise."""
    rng = np.random.default_rng(seed)
    sites = rng.integers(0, 100, n)
    sites[rng.random(n) < 0.01] = 100 + rng.integers(0, 5, 1)  # small call sites sharing one slope group
    sites = np.unique(sites, return_inverse=True)[1]
    rank = rng.integers(0, ranks, n)
    size = rng.normal(size=n)
    X = np.column_stack([(rank == r).astype(float) for r in range(1, ranks)] + [size, 2 * size])
    X = within_site.centred(X, sites, int(sites.max()) + 1)
    y = within_site.centred(2 * size + rng.normal(size=n), sites, int(sites.max()) + 1)
    groups = SlopeGroups(sites)
    return groups, sites[groups.order], within_site.standardise(X[groups.order]), y[groups.order], rng


def _projection_ss(groups: SlopeGroups, X: np.ndarray, y: np.ndarray) -> float:
    """The plain definition: per slope group, the sum of squares of y's least-squares projection on X's columns."""
    total = 0.0
    bounds = np.r_[groups.starts, len(y)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        beta = np.linalg.lstsq(X[a:b], y[a:b], rcond=1e-9)[0]
        total += float(((X[a:b] @ beta) ** 2).sum())
    return total


def test_a_wide_basis_spans_what_the_column_by_column_basis_spans():
    groups, _, X, y, rng = _design()
    assert X.shape[1] > within_site.WIDE_COLUMNS and (np.diff(np.r_[groups.starts, len(y)]) < X.shape[1]).any()
    wide = basis_of(groups, X)
    narrow = Basis(groups, len(y))
    for k in range(X.shape[1]):
        narrow.add(X[:, k])
    assert isinstance(wide, WideBasis)
    assert wide.explained(y) == pytest.approx(narrow.explained(y), rel=1e-10)
    assert wide.explained(y) == pytest.approx(_projection_ss(groups, X, y), rel=1e-8)
    Y = rng.normal(size=(len(y), 6))
    assert np.allclose(wide.explained_many(Y), narrow.explained_many(Y), rtol=1e-10)
    assert np.allclose(wide.residual(y), narrow.residual(y), atol=1e-9)
    extra = rng.normal(size=len(y))
    grown_wide, grown_narrow = wide.copy(), narrow.copy()
    assert grown_wide.add(extra) and grown_narrow.add(extra)
    assert grown_wide.explained(y) == pytest.approx(grown_narrow.explained(y), rel=1e-10)
    assert wide.explained(y) == pytest.approx(narrow.explained(y), rel=1e-10)  # (the copy left the basis as it was)
    assert not wide.copy().add(X[:, -1])  # a column already spanned adds nothing


def test_dependent_columns_ahead_of_independent_ones_do_not_hide_them():
    """A QR in column order gives each dependent column (here 30 multiples of the first) a direction of its own, so
    the independent columns after the group's 40th have no diagonal left and were dropped: the pivoted QR keeps
    them. Zero columns (ranks absent from the call site) are left out before the QR."""
    rng = np.random.default_rng(5)
    n = 40
    groups = SlopeGroups(np.zeros(n, np.int64))
    a = rng.normal(size=n)
    X = np.column_stack([a, *(a * k for k in range(2, 32)), np.zeros((n, 5)), rng.normal(size=(n, 15))])
    y = X[:, -1] + 0.1 * rng.normal(size=n)
    basis = basis_of(groups, X)
    assert sum(q.shape[1] for q in basis.blocks[0]) == 16  # a and the 15 independent columns
    assert basis.explained(y) == pytest.approx(_projection_ss(groups, X, y), rel=1e-10)


def test_wide_fits_predict_what_the_normal_equations_of_all_groups_at_once_predict(monkeypatch):
    groups, _, X, y, rng = _design(seed=11, n=12000)
    train = rng.random(len(y)) > 0.2
    train[groups.sorted_codes == 4] = False  # a group without training rows predicts 0
    wide = fit_predict(groups, X, y, train)
    monkeypatch.setattr(within_site, "WIDE_COLUMNS", 10**6)
    narrow = fit_predict(groups, X, y, train)
    # on the rows fitted, to rounding; a launch left out for validation whose rank has no fitted launch in its call
    # site gets that rank's coefficient from the ridge alone, an ill-conditioned direction that carries the
    # summation order's rounding to ~1e-5 of the prediction
    assert np.allclose(wide[train], narrow[train], rtol=1e-10, atol=1e-10)
    assert np.abs(wide - narrow).max() < 1e-4
    assert not wide[groups.sorted_codes == 4].any()


def test_the_within_call_site_test_of_a_wide_design_is_the_column_by_column_test(monkeypatch):
    """Share, in-sample share, permutation p-value and verdict: what the findings print."""
    groups, sites, X, y, _ = _design(seed=2, n=20000, ranks=40)  # ~200 launches per call site, 41 columns
    folds = np.arange(len(y)) % 5
    names = [f"f{k}" for k in range(X.shape[1])]

    def run():
        return within_test(groups, sites, X, np.zeros((len(y), 0)), y, names, folds, seed=0)

    wide = run()
    monkeypatch.setattr(within_site, "WIDE_COLUMNS", 10**6)
    narrow = run()
    assert wide.verdict == narrow.verdict and wide.p_value == narrow.p_value and wide.features == narrow.features
    assert wide.share == pytest.approx(narrow.share, abs=1e-9) and wide.share > 0.1
    assert wide.in_sample == pytest.approx(narrow.in_sample, abs=1e-9)
