"""Prior knowledge for DirectLiNGAM: what the program sets cannot be caused by what the hardware measures.

Tiers (gpuvar.causal.roles): launch configuration, context (ctx_*: what ran beside the kernel) and copy
attributes (0) -> hardware counters (1) -> target (2). lingam's prior-knowledge matrix: pk[i, j] = 0 means
"no directed path from x_j to x_i", -1 unknown. Modes:
  tiers  (default) no path from a higher tier to a lower one; indicators of one category never cause each
         other (they are exclusive codes of one variable); the target is a sink.
  sink   only the target is a sink (what the paper does).
  none   no prior knowledge (the target may cause features).
"""

from __future__ import annotations

import numpy as np

from gpuvar.causal.roles import TARGET_TIER, role_of


def prior_knowledge(
    names: list[str], target: int, mode: str = "tiers", siblings: list[list[str]] = ()
) -> np.ndarray | None:
    """The (p, p) prior-knowledge matrix for `mode` (config causal.prior_knowledge), or None for 'none'."""
    p = len(names)
    if mode == "none":
        return None
    pk = np.full((p, p), -1)
    pk[:, target] = 0  # the target causes nothing
    if mode == "tiers":
        tier = np.array([TARGET_TIER if k == target else role_of(n).tier for k, n in enumerate(names)])
        pk[tier[None, :] > tier[:, None]] = 0  # pk[i, j] = 0 when j sits in a higher tier than i
        index = {n: k for k, n in enumerate(names)}
        for group in siblings:
            ks = [index[n] for n in group if n in index]
            for a in ks:
                for b in ks:
                    pk[a, b] = 0
    np.fill_diagonal(pk, -1)
    return pk


def tiers(names: list[str], target: int) -> dict[str, int]:
    """Tier of each variable (for causal.json)."""
    return {n: (TARGET_TIER if k == target else role_of(n).tier) for k, n in enumerate(names)}
