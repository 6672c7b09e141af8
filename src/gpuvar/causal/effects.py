"""Total effects and each feature's share of the target's variance, from a fitted LiNGAM model.

On z-scored data x = B x + e, so x = A e with A = (I - B)^-1. The total effect of feature j on the target t
is A[t, j]: the change of the target, in its standard deviations, per standard deviation of j, along every
directed path (direct and indirect).

Variance shares: LiNGAM's disturbances e_k are independent, so the model splits the target's variance
exactly, Var(x_t) = sum_k A[t, k]^2 Var(e_k). A feature's share is A[t, j]^2 Var(e_j) / Var(x_t): the part
of the target's variance that enters through that feature's own disturbance (what varies in j that nothing
upstream of it explains). Upstream causes get credit for what they push through j. The shares of the
features add up to the explained share; the target's own disturbance is the unexplained rest. Var(e_k) are
the sample variances of the fitted residuals, and Var(x_t) the model's sum (it equals the sample variance
when the residuals are uncorrelated, as the model assumes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.causal.checks import residuals


def mixing(B: np.ndarray) -> np.ndarray:
    """A = (I - B)^-1."""
    p = B.shape[0]
    return np.linalg.solve(np.eye(p) - B, np.eye(p))


def total_effects(B: np.ndarray, target: int) -> np.ndarray:
    """Total effect of every variable on `target`: row `target` of (I - B)^-1 (0 for the target itself)."""
    te = mixing(B)[target].copy()
    te[target] = 0.0
    te[np.abs(te) < 1e-15] = 0.0
    return te


def variance_shares(X: np.ndarray, B: np.ndarray, target: int) -> tuple[np.ndarray, float]:
    """(share of the target's variance per variable, unexplained share); shares[target] = 0."""
    A = mixing(B)
    parts = A[target] ** 2 * residuals(X, B).var(axis=0)
    total = float(parts.sum())
    if total <= 0:
        return np.zeros(len(parts)), 1.0
    shares = parts / total
    unexplained = float(shares[target])
    shares[target] = 0.0
    shares[np.abs(shares) < 1e-15] = 0.0
    return shares, unexplained


def contributions(
    X: np.ndarray, B: np.ndarray, names: list[str], target: int, labels: dict[str, str]
) -> tuple[pd.DataFrame, float]:
    """contributions.csv (features by variance share, descending, then column order) and the explained share."""
    te = total_effects(B, target)
    shares, unexplained = variance_shares(X, B, target)
    rows = [
        {
            "feature": names[k],
            "label": labels.get(names[k], names[k]),
            "total_effect": float(te[k]),
            "variance_share": float(shares[k]),
            "sign": int(np.sign(te[k])),
        }
        for k in range(len(names))
        if k != target
    ]
    df = pd.DataFrame(rows, columns=["feature", "label", "total_effect", "variance_share", "sign"])
    df["_pos"] = range(len(df))
    df = df.sort_values(["variance_share", "_pos"], ascending=[False, True], kind="mergesort").drop(columns="_pos")
    return df.reset_index(drop=True), 1.0 - unexplained
