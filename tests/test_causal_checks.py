"""Assumption checks: each one fails on data built to break its assumption, and passes on clean data."""

from __future__ import annotations

import numpy as np
import pytest

from gpuvar.causal import checks
from gpuvar.causal.bootstrap import fit_adjacency
from gpuvar.causal.effects import contributions, total_effects
from gpuvar.causal.prior import prior_knowledge


def zscore(X):
    return (X - X.mean(axis=0)) / X.std(axis=0)


def fit_and_check(X, names, prior="tiers"):
    target = len(names) - 1
    pk = prior_knowledge(names, target, prior)
    _, B = fit_adjacency(X, pk, "fast")
    te = total_effects(B, target)
    return B, checks.assumption_checks(X, B, names, target, te, None, fit_adjacency(X, None, "fast"), 0)


def test_hsic_matches_lingam():
    hsic = pytest.importorskip("lingam.hsic")
    rng = np.random.default_rng(0)
    a = rng.uniform(size=150)
    E = np.column_stack([a, a**2 + 0.1 * rng.uniform(size=150), rng.laplace(size=150)])
    P = checks.hsic_p_values(E)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        _, expected = hsic.hsic_test_gamma(E[:, [i]], E[:, [j]])
        assert P[i, j] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert P[0, 1] < 1e-6 and P[0, 2] > 0.01  # dependent pair found, independent pair not


def test_clean_linear_non_gaussian_model_passes():
    rng = np.random.default_rng(1)
    n = 2000
    gx = rng.uniform(size=n)
    cnt = 0.8 * gx + rng.exponential(0.3, n)
    t = 0.5 * gx + 0.7 * cnt + rng.laplace(scale=0.3, size=n)
    X = zscore(np.column_stack([gx, cnt, t]))
    B, verdict = fit_and_check(X, ["grid_x", "dram_bytes", "kernel_variability"])
    assert verdict["passed"], verdict["warnings"]
    contrib, explained = contributions(X, B, ["grid_x", "dram_bytes", "kernel_variability"], 2, {})
    assert abs(contrib["variance_share"].sum() - explained) < 1e-12
    assert abs(verdict["checks"]["r2_parents"]["value"] - explained) < 0.05


def test_target_that_causes_a_feature_is_reported():
    rng = np.random.default_rng(2)
    n = 2000
    gx = rng.uniform(size=n)
    t = gx + rng.exponential(0.5, n)
    child = 1.5 * t + rng.uniform(-0.3, 0.3, n)  # a counter measured after the fact: the target causes it
    X = zscore(np.column_stack([gx, child, t]))
    _, verdict = fit_and_check(X, ["grid_x", "sm_cycles", "kernel_variability"])
    sink = verdict["checks"]["sink"]
    assert not sink["passed"] and sink["edges_from_target"] == ["sm_cycles"]
    assert not verdict["passed"]


def test_gaussian_disturbances_and_big_effects_are_reported():
    rng = np.random.default_rng(3)
    n = 1500
    a = rng.normal(size=n)
    b = a + rng.normal(size=n)
    t = a + b + rng.normal(size=n)
    X = zscore(np.column_stack([a, b, t]))
    _, verdict = fit_and_check(X, ["grid_x", "tcc_hit", "kernel_variability"])
    assert not verdict["checks"]["non_gaussianity"]["passed"]
    big = checks.assumption_checks(X, np.zeros((3, 3)), ["a", "b", "t"], 2, np.array([-15.0, 14.9, 0.0]), 120.0, None)
    assert not big["checks"]["total_effects"]["passed"] and set(big["checks"]["total_effects"]["beyond_limit"]) == {
        "a",
        "b",
    }
    assert not big["checks"]["conditioning"]["passed"]
    assert any("SD per SD" in w for w in big["warnings"]) and any("condition number" in w for w in big["warnings"])


def test_tiers_forbid_counters_causing_launch_configuration():
    pk = prior_knowledge(
        ["grid_x", "tcc_hit", "linked_copy_kind=DtoD", "linked_copy_kind=DtoH", "t"],
        4,
        siblings=[["linked_copy_kind=DtoD", "linked_copy_kind=DtoH"]],
    )
    assert pk[0, 1] == 0 and pk[1, 0] == -1  # tcc_hit cannot cause grid_x; grid_x may cause tcc_hit
    assert (pk[:4, 4] == 0).all()  # the target causes nothing
    assert pk[2, 3] == 0 and pk[3, 2] == 0  # two codes of one category never cause each other
    assert prior_knowledge(["a", "t"], 1, "none") is None
