"""One verdict per causal graph that means what it says (gpuvar.causal.share_test for the statistics).

A graph's claim is "these features explain X % of the target". Launch configuration, problem size, copy
attributes and context are set by the program (tier 0): their direction is known, so the verdict measures how
much they explain, out of sample (cross-validated share, folds = whole bins) with a permutation test. When a
graph has only counters (tier 1, measured during the kernel), the share is over them and the direction comes
from DirectLiNGAM. The orientation checks (sink, residual independence, non-Gaussianity) test what
DirectLiNGAM decides, so they count only when the graph has counters whose order it chose; the checks of
collinearity, conditioning and rows count always. `trusted` = the verdict is `explained` or `partly explained`
and every check that counts passed: never for a graph that explains nothing.
"""

from __future__ import annotations

import numpy as np

from gpuvar.causal.roles import role_of
from gpuvar.causal.share_test import EXPLAINED, FOLDS, PARTLY, fold_of, share_test
from gpuvar.causal.within_site import SlopeGroups, centred, within_test

ORIENTATION_CHECKS = ("sink", "independence", "non_gaussianity")


def _within_call_sites(X: np.ndarray, y: np.ndarray, names: list[str], sites, bins, seed: int):
    """The findings' verdict (gpuvar.causal.within_site.within_test) on the graph's rows: durations and features
    centred per call site, a slope per call site, folds by bin; so a graph's title and the findings page measure
    the same thing, over their own rows (the graph: the most variable windows; the page: every launch)."""
    import pandas as pd

    codes, keys = pd.factorize(pd.Series(sites, dtype=object), sort=True)
    yc = centred(y, codes, len(keys))
    Xc = centred(X, codes, len(keys))
    groups = SlopeGroups(codes)
    order = groups.order
    folds = fold_of(len(y), bins, FOLDS, seed)[order]
    empty = np.zeros((len(y), 0))
    return within_test(groups, codes[order], Xc[order], empty, yc[order], names, folds, seed, True, (y - yc)[order])


def graph_verdict(
    X: np.ndarray, names: list[str], target: int, bins, seed: int, checks: dict, sites=None
) -> tuple[dict, bool]:
    """(verdict record, trusted) of one fitted graph; X z-scored, column `target` the target; sites: the call
    site of each row, when known (the share is then measured within call sites, as the findings measure it)."""
    features = [k for k in range(len(names)) if k != target]
    known = [k for k in features if role_of(names[k]).tier == 0]
    mediators = [k for k in features if k not in known]
    basis = known or features
    within = sites is not None and len(set(sites)) < len(sites)
    if within:
        test = _within_call_sites(X[:, basis], X[:, target], [names[k] for k in basis], sites, bins, seed)
    else:
        test = share_test(X[:, basis], X[:, target], [names[k] for k in basis], groups=bins, seed=seed)
    counted = {name: c for name, c in checks.items() if mediators or name not in ORIENTATION_CHECKS}
    failed = sorted(name for name, c in counted.items() if not c.get("passed", True))
    record = test.record() | {
        "basis": "launch configuration, problem size, copy and context features (direction known)"
        if known
        else "counters measured during the kernel (direction from DirectLiNGAM)",
        "scope": "within call sites, a slope per call site" if within else "all rows of the group",
        "checks_that_count": sorted(counted),
        "failed_checks": failed,
    }
    return record, test.verdict in (EXPLAINED, PARTLY) and not failed


def verdict_title(group: str, target: str, verdict: dict | None, drivers: list[str]) -> str:
    """'<group>: what explains <target>: explained 99 % by grid_x' (or not explained, or declined)."""
    if not verdict:
        return f"{group}: {target}"
    label = verdict.get("verdict")
    within = " within call sites" if str(verdict.get("scope", "")).startswith("within") else ""
    if label in (EXPLAINED, PARTLY):
        by = f" by {', '.join(drivers[:2])}" if drivers else ""
        return f"{group}: what explains {target}: {label} {100 * verdict.get('share', 0):.0f} %{within}{by}"
    if label == "declined":
        return f"{group}: {target}: declined ({verdict.get('reason')})"
    return f"{group}: {target} not explained by recorded features"
