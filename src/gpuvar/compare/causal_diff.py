"""Which causes of variability changed: the difference of two causal runs, group by group.

For every kernel group analysed in both runs (matched by group name; `__all__` is the whole dataset): edges
added (in the candidate only), removed (baseline only), sign flips (in both, opposite sign), and each
feature's share of the target's variance in both runs (contributions.csv `variance_share`) and its change.
Shares are None where a run's outputs predate `variance_share`; features analysed in one run only get None
for the other. Groups analysed in one run only are listed, not diffed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.compare.inputs import Causal, CausalGroup

DIFF_COLUMNS = [
    "group",
    "from",
    "to",
    "change",
    "stable",
    "into_target",
    "coefficient_baseline",
    "coefficient_candidate",
    "probability_baseline",
    "probability_candidate",
]


def _edges(g: CausalGroup) -> dict[tuple[str, str], float]:
    return {(str(r["from"]), str(r["to"])): float(r["coefficient"]) for r in g.edges.to_dict("records")}


def _none(x):
    return None if x is None or not np.isfinite(x) else float(x)


def _stable(change: str, pb: float | None, pc: float | None, threshold: float) -> bool | None:
    if pb is None or pc is None:
        return None
    if change == "added":
        return pc >= threshold > pb
    if change == "removed":
        return pb >= threshold > pc
    return pb >= threshold and pc >= threshold


def diff_group(b: CausalGroup, c: CausalGroup, target: str, min_probability: float = 0.5) -> tuple[dict, list[dict]]:
    """(JSON record, edge rows for causal_diff.csv) of one group analysed in both runs."""
    eb, ec = _edges(b), _edges(c)
    rows = []
    for edge in sorted(set(eb) | set(ec)):
        cb, cc = eb.get(edge), ec.get(edge)
        if cb is None:
            change = "added"
        elif cc is None:
            change = "removed"
        else:
            change = "flipped" if np.sign(cb) != np.sign(cc) else "kept"
        pb = None if b.probability is None else b.probability.get(edge, 0.0)
        pc = None if c.probability is None else c.probability.get(edge, 0.0)
        stable = None if change == "kept" else _stable(change, pb, pc, min_probability)
        rows.append(
            {
                "group": b.group,
                "from": edge[0],
                "to": edge[1],
                "change": change,
                "stable": stable,
                "into_target": edge[1] == target,
                "coefficient_baseline": cb,
                "coefficient_candidate": cc,
                "probability_baseline": pb,
                "probability_candidate": pc,
            }
        )
    keys = (
        "from",
        "to",
        "stable",
        "coefficient_baseline",
        "coefficient_candidate",
        "probability_baseline",
        "probability_candidate",
    )

    def pick(change):
        return [{k: r[k] for k in keys} for r in rows if r["change"] == change and r["stable"] is not False]

    features = sorted(set(b.signs) | set(c.signs))
    shares = []
    for f in features:
        sb = b.shares.get(f) if b.shares is not None and f in b.signs else None
        sc = c.shares.get(f) if c.shares is not None and f in c.signs else None
        delta = sc - sb if sb is not None and sc is not None else None
        shares.append(
            {
                "feature": f,
                "share_baseline": _none(sb),
                "share_candidate": _none(sc),
                "delta": _none(delta),
                "sign_baseline": b.signs.get(f),
                "sign_candidate": c.signs.get(f),
            }
        )
    shares.sort(key=lambda s: (-abs(s["delta"]) if s["delta"] is not None else 1.0, s["feature"]))
    largest = next((s for s in shares if s["delta"] is not None), None)
    record = {
        "group": b.group,
        "slug_baseline": b.slug,
        "slug_candidate": c.slug,
        "edges_baseline": len(eb),
        "edges_candidate": len(ec),
        "added": pick("added"),
        "removed": pick("removed"),
        "sign_flips": pick("flipped"),
        "kept": sum(r["change"] == "kept" for r in rows),
        "changes": sum(r["change"] != "kept" and r["stable"] is not False for r in rows),
        "unstable_changes": sum(r["stable"] is False for r in rows),
        "driver_changes": [
            {"feature": r["from"], "change": r["change"], "stable": r["stable"]}
            for r in rows
            if r["into_target"] and r["change"] != "kept" and r["stable"] is not False
        ],
        "bootstrap_available": b.probability is not None and c.probability is not None,
        "features_only_baseline": sorted(set(b.signs) - set(c.signs)),
        "features_only_candidate": sorted(set(c.signs) - set(b.signs)),
        "shares_available": b.shares is not None and c.shares is not None,
        "explained_share_baseline": _sum(b.shares),
        "explained_share_candidate": _sum(c.shares),
        "variance_shares": shares,
        "largest_share_change": largest,
    }
    return record, rows


def _sum(shares: dict | None):
    if shares is None:
        return None
    values = [v for v in shares.values() if v is not None]
    return float(sum(values)) if values else None


def diff_causal(baseline: Causal, candidate: Causal, min_probability: float = 0.5) -> tuple[dict, pd.DataFrame]:
    """(JSON record of the target: groups diffed, groups in one run only; causal_diff.csv rows)."""
    common = sorted(set(baseline.groups) & set(candidate.groups))
    records, rows = [], []
    for name in common:
        record, edge_rows = diff_group(baseline.groups[name], candidate.groups[name], baseline.target, min_probability)
        records.append(record)
        rows += edge_rows
    records.sort(key=lambda r: (-r["changes"], r["group"]))
    out = {
        "target": baseline.target,
        "min_probability": min_probability,
        "groups_compared": len(records),
        "groups": records,
        "only_baseline": sorted(set(baseline.groups) - set(candidate.groups)),
        "only_candidate": sorted(set(candidate.groups) - set(baseline.groups)),
        "skipped_baseline": sorted(baseline.skipped),
        "skipped_candidate": sorted(candidate.skipped),
    }
    return out, pd.DataFrame(rows, columns=DIFF_COLUMNS)
