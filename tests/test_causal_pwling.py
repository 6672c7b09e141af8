"""The fast pwling engine: same order and adjacency as lingam, and it recovers known linear SEMs."""

from __future__ import annotations

import numpy as np
import pytest

from gpuvar.causal import pwling
from gpuvar.causal.discover import sink_prior_knowledge


def sem(p: int, n: int, seed: int, noise: str = "uniform", parents: float = 1.5):
    """(X, B_true): linear non-Gaussian SEM on a random DAG, B[i, j] = effect of j on i."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(p)
    B = np.zeros((p, p))
    for a in range(1, p):
        pick = rng.random(a) < min(1.0, parents / a)
        B[perm[a], perm[:a][pick]] = rng.choice([-1.0, 1.0], pick.sum()) * rng.uniform(0.5, 1.0, pick.sum())
    E = rng.uniform(-1, 1, (n, p)) if noise == "uniform" else rng.laplace(0, 1, (n, p))
    X = np.linalg.solve(np.eye(p) - B, E.T).T
    return X, B


def signed_f1(B_est: np.ndarray, B_true: np.ndarray) -> float:
    """F1 over directed edges, an edge counting as found only with the right sign."""
    est = {(i, j, np.sign(B_est[i, j])) for i, j in zip(*np.nonzero(B_est))}
    true = {(i, j, np.sign(B_true[i, j])) for i, j in zip(*np.nonzero(B_true))}
    tp = len(est & true)
    return 2 * tp / (len(est) + len(true)) if (est or true) else 1.0


@pytest.mark.parametrize("p, noise, seed", [(10, "uniform", 1), (20, "laplace", 2), (40, "uniform", 3)])
def test_recovers_known_sem(p, noise, seed):
    X, B_true = sem(p, 2000, seed, noise)
    _, B = pwling.fit(X)
    assert signed_f1(B, B_true) >= 0.95


@pytest.fixture(scope="module")
def lingam_module():
    return pytest.importorskip("lingam")


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sink", [False, True])
def test_same_as_lingam(lingam_module, seed, sink):
    """24 seeded datasets: identical causal order and adjacency (<= 1e-8) to lingam.DirectLiNGAM."""
    rng = np.random.default_rng(100 + seed)
    p = int(rng.integers(5, 13))
    X, _ = sem(p, 400, 100 + seed, "laplace" if seed % 2 else "uniform", parents=2.0)
    pk = sink_prior_knowledge(p, p - 1) if sink else None
    ref = lingam_module.DirectLiNGAM(prior_knowledge=pk, measure="pwling").fit(X)
    order, B = pwling.fit(X, pk, threads=2 if seed % 3 == 0 else 1)
    assert order == list(ref.causal_order_)
    assert np.abs(B - ref.adjacency_matrix_).max() <= 1e-8
    if sink:
        assert order[-1] == p - 1 and not B[:, p - 1].any()


def test_same_as_lingam_general_prior_knowledge(lingam_module):
    """Paths, no-paths and an exogenous variable, as lingam's make_prior_knowledge builds them."""
    from lingam.utils import make_prior_knowledge

    X, _ = sem(8, 500, 7, "uniform", parents=2.0)
    pk = make_prior_knowledge(8, exogenous_variables=[3], sink_variables=[7], paths=[(0, 5)], no_paths=[(2, 4)])
    ref = lingam_module.DirectLiNGAM(prior_knowledge=pk).fit(X)
    order, B = pwling.fit(X, pk)
    assert order == list(ref.causal_order_)
    assert np.abs(B - ref.adjacency_matrix_).max() <= 1e-8


def test_threads_do_not_change_result():
    X, _ = sem(15, 600, 11)
    assert pwling.causal_order(X, threads=1) == pwling.causal_order(X, threads=3)


def test_input_not_modified():
    X, _ = sem(6, 200, 5)
    Xf = np.asfortranarray(X)
    before = Xf.copy()
    pwling.fit(Xf)
    assert np.array_equal(Xf, before)


def test_adaptive_lasso_pieces_are_bit_identical_to_sklearn():
    """The validation-free OLS and LassoLarsIC(bic) give sklearn's exact bytes (they are ~5x cheaper)."""
    from sklearn.linear_model import LassoLarsIC, LinearRegression

    from gpuvar.causal.pwling import _lasso_lars_bic, _ols

    for seed in range(5):
        rng = np.random.default_rng(seed)
        X = rng.laplace(size=(400, 6))
        y = X @ (rng.uniform(-1, 1, 6) * (rng.random(6) < 0.5)) + rng.exponential(size=400)
        assert np.array_equal(_ols(X, y), LinearRegression().fit(X, y).coef_)
        assert np.array_equal(_lasso_lars_bic(X, y), LassoLarsIC(criterion="bic").fit(X, y).coef_)


def test_direct_lapack_ols_and_scaler_are_bit_identical_to_scipy_and_sklearn():
    """The OLS that calls LAPACK's gelsd itself (its workspace cached per shape) and the scaler without sklearn's
    bookkeeping give the bytes of scipy.linalg.lstsq and StandardScaler, over the shapes a bootstrap feeds them
    (rows varying from fit to fit, one column, a near-constant and a large-offset column), and a non-finite
    value is still refused as scipy refuses it."""
    from scipy import linalg
    from sklearn.preprocessing import StandardScaler

    from gpuvar.causal.pwling import _ols, standard_scale

    for seed in range(8):
        rng = np.random.default_rng(seed)
        n, p = int(rng.integers(12, 3000)), int(rng.integers(1, 10))
        X = rng.laplace(size=(n, p)) * rng.uniform(0.1, 1e4, p) + rng.uniform(-1e6, 1e6, p)
        if p > 1:
            X[:, 0] = 7.25 + (rng.random(n) < 0.5) * 1e-13  # indistinguishable from a constant: scaled by 1
        y = rng.exponential(size=n)
        for intercept in (True, False):
            A, b = (X - X.mean(axis=0), y - y.mean()) if intercept else (X, y)
            assert np.array_equal(_ols(X, y, intercept), linalg.lstsq(A, b, cond=1e-6)[0])
        assert np.array_equal(standard_scale(X), StandardScaler().fit_transform(X))
    X[0, 0] = np.nan
    with pytest.raises(ValueError):
        _ols(X, y)
