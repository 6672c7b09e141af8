"""Did the most variable time windows move between runs?

Binning numbers bins from each run's first kernel (bin = (start - first start) // width), so bin i of both
runs is the same offset into the run: the windows are aligned by construction when both runs were binned
with the same width and target. We report the top-k bins of each run, those shared and those only in one,
the overlap fraction (shared / the smaller k), `moved` = overlap below one half, and the Spearman rank
correlation of the per-bin variance over the bins both runs have (does variability follow the same pattern
along the run?). Different widths, units or targets cannot be aligned: `comparable` is false with the reason.
"""

from __future__ import annotations

import numpy as np

from gpuvar.compare.inputs import Bins

MOVED_BELOW = 0.5


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def compare_windows(baseline: Bins, candidate: Bins) -> dict:
    """The window comparison of one target (see the module docstring); JSON-ready, NaN as None."""
    out = {
        "target": baseline.target,
        "bin_width": baseline.width,
        "bin_unit": baseline.unit,
        "bins_baseline": int(len(baseline.frame)),
        "bins_candidate": int(len(candidate.frame)),
    }
    reasons = []
    if baseline.target != candidate.target:
        reasons.append(f"targets differ ({baseline.target} vs {candidate.target})")
    if baseline.width != candidate.width or baseline.unit != candidate.unit:
        reasons.append(
            f"bin widths differ ({baseline.width:g} {baseline.unit} vs {candidate.width:g} {candidate.unit})"
        )
    if reasons:
        return out | {"comparable": False, "reason": "; ".join(reasons)}
    top_b, top_c = sorted(set(baseline.top_k_bins)), sorted(set(candidate.top_k_bins))
    shared = sorted(set(top_b) & set(top_c))
    smaller = min(len(top_b), len(top_c))
    overlap = len(shared) / smaller if smaller else None
    var_b = baseline.frame.set_index("bin")["var"]
    var_c = candidate.frame.set_index("bin")["var"]
    common = var_b.index.intersection(var_c.index)
    pair = (
        np.column_stack([var_b.loc[common].to_numpy(float), var_c.loc[common].to_numpy(float)])
        if len(common)
        else np.empty((0, 2))
    )
    pair = pair[np.isfinite(pair).all(axis=1)]
    rho = None
    if len(pair) >= 3 and np.ptp(pair[:, 0]) > 0 and np.ptp(pair[:, 1]) > 0:
        from scipy.stats import spearmanr

        rho = _finite(spearmanr(pair[:, 0], pair[:, 1]).statistic)
    width = baseline.width
    return out | {
        "comparable": True,
        "top_k_baseline": top_b,
        "top_k_candidate": top_c,
        "shared": shared,
        "only_baseline": sorted(set(top_b) - set(top_c)),
        "only_candidate": sorted(set(top_c) - set(top_b)),
        "offsets_baseline": [b * width for b in top_b],
        "offsets_candidate": [b * width for b in top_c],
        "overlap_fraction": overlap,
        "moved": None if overlap is None else bool(overlap < MOVED_BELOW),
        "bins_compared": int(len(pair)),
        "variance_rank_correlation": rho,
        "median_bin_variance_baseline": _finite(np.nanmedian(var_b.to_numpy(float))) if var_b.notna().any() else None,
        "median_bin_variance_candidate": _finite(np.nanmedian(var_c.to_numpy(float))) if var_c.notna().any() else None,
    }
