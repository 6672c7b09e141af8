"""Derived and near-duplicate columns: one variable for one quantity.

Why: least squares (and so LiNGAM's adjacency step) on two columns that carry the same quantity splits one
effect into two huge opposite ones (a real trace gave grid_x -15 SD per SD against grid_size +14.9, corr
0.996), and a product column next to its factors makes the graph "discover" grid_size -> grid_y, which no
GPU does. Rules, in this order:
  1. derived: a product column (feature_roles.csv `components`) and its components are never both analysed.
     When every component that varies in the analysed rows is among the features, the product is dropped
     (the components are what the program sets); otherwise the product is kept, as the only carrier of the
     missing component's variation, and the components that are present are dropped.
  2. near-duplicates: features with |corr| >= threshold in the analysed rows are merged into one variable,
     represented by the member a performance engineer can act on: a launch parameter over a context column
     (ctx_*: what ran beside the kernel), over a derived column, over a copy attribute, over a counter; ties
     by column order. Greedy in that preference order, each representative absorbing the not-yet-merged
     columns within the threshold of itself (no chaining). A time-like column (role `leak`, analysed only when
     listed explicitly) merges only with other leaks: it never becomes the name of a driver nor hides inside
     one ('grid_x (≈ Elapsed Cycles)' would present the duration in another unit as part of a cause).
"""

from __future__ import annotations

import numpy as np

from gpuvar.causal.roles import ROLE_PREFERENCE, role_of


def drop_derived(columns: list[str], varies) -> dict[str, str]:
    """{column: reason} so that no product is analysed with one of its factors (rule 1 of the module).

    `varies(name)` tells whether a column exists in the analysed rows and is not constant there."""
    present = set(columns)
    dropped = {}
    for col in columns:
        parts = role_of(col).components
        if not parts or not present.intersection(parts):
            continue
        missing = [c for c in parts if c not in present and varies(c)]
        if not missing:
            dropped[col] = f"derived: product {'·'.join(parts)}; its components are analysed instead"
        else:
            for c in parts:
                if c in present and c not in dropped:
                    dropped[c] = (
                        f"a factor of {col}, which is analysed instead ({', '.join(missing)} "
                        "varies but is not among the features)"
                    )
    return dropped


def correlations(values: np.ndarray) -> np.ndarray:
    """Pearson correlation matrix of the columns (no column may be constant)."""
    z = (values - values.mean(axis=0)) / values.std(axis=0)
    return (z.T @ z) / len(z)


def merge_near_duplicates(values: np.ndarray, names: list[str], threshold: float):
    """Greedy merge of |corr| >= threshold. Returns (kept names, {representative: [(member, corr)]},
    {member: reason})."""
    if len(names) < 2:
        return list(names), {}, {}
    corr = correlations(values)
    order = sorted(range(len(names)), key=lambda k: (ROLE_PREFERENCE[role_of(names[k]).role], k))
    leak = [role_of(n).role == "leak" for n in names]
    assigned = np.zeros(len(names), bool)
    merged: dict[str, list[tuple[str, float]]] = {}
    dropped: dict[str, str] = {}
    for k in order:
        if assigned[k]:
            continue
        assigned[k] = True
        for j in order:
            if not assigned[j] and leak[j] == leak[k] and abs(corr[k, j]) >= threshold:
                assigned[j] = True
                merged.setdefault(names[k], []).append((names[j], float(corr[k, j])))
                dropped[names[j]] = f"near-duplicate of {names[k]} (corr {corr[k, j]:+.3f}): merged into it"
    kept = [n for n in names if n not in dropped]
    return kept, merged, dropped


def condition_number(values: np.ndarray) -> float:
    """Belsley's condition number of the standardised columns: sqrt(largest / smallest eigenvalue of their
    correlation matrix). Above ~30 the coefficients of a linear fit are unstable."""
    if values.shape[1] < 2:
        return 1.0
    eig = np.linalg.eigvalsh(correlations(values))
    smallest = max(float(eig[0]), 0.0)
    return float(np.sqrt(eig[-1] / smallest)) if smallest > 0 else float("inf")
