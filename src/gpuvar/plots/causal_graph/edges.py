"""Which edges of a causal graph the figure draws: every edge gets a status, 'shown' or why it is hidden (low
bootstrap probability, low variance share, beyond the MAX_DRAWN_EDGES strongest), so nothing disappears without
a trace (the footnote counts them, the edge CSV lists them)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from gpuvar.plots.causal_graph.load import CausalGraph

MAX_DRAWN_EDGES = 40  # a raw ncu dataset can give 450 edges: drawn in full it took 26 min and a 440-MP PNG
BEYOND = "strength rank > "  # status of a shown-worthy edge left out of the figure by MAX_DRAWN_EDGES
EDGE_COLUMNS = [
    "from",
    "to",
    "coefficient",
    "sign",
    "variance_share",
    "probability",
    "in_random_bins",
    "into_target",
    "status",
]


def classify_edges(
    cg: CausalGraph, min_variance_share: float, min_probability: float, max_edges: int = MAX_DRAWN_EDGES
) -> pd.DataFrame:
    """One row per edge with status 'shown' or why it is hidden (probability first, then variance share, then
    beyond the `max_edges` strongest, BEYOND: a readable figure that draws in seconds; the table keeps every edge)."""
    rows = []
    for u, v, a in cg.graph.edges(data=True):
        coef, share, prob = a.get("coefficient", np.nan), a.get("variance_share", np.nan), a.get("probability", np.nan)
        if coef == 0 or np.isnan(coef):
            continue  # no edge: a zero adjacency entry that slipped into the file
        if not np.isnan(prob) and prob < min_probability:
            status = f"bootstrap probability < {min_probability:g}"
        elif not np.isnan(share) and abs(share) < min_variance_share:
            status = f"variance share < {100 * min_variance_share:g} %"
        else:
            status = "shown"
        rows.append(
            {
                "from": u,
                "to": v,
                "coefficient": coef,
                "sign": "+" if coef > 0 else "-",
                "variance_share": share,
                "probability": prob,
                "in_random_bins": a.get("in_random_bins"),
                "into_target": v == cg.target,
                "status": status,
            }
        )
    frame = pd.DataFrame(rows, columns=EDGE_COLUMNS)
    frame = frame.sort_values(["into_target", "from", "to"], ascending=[False, True, True], kind="stable")
    shown = frame[frame["status"] == "shown"]
    if len(shown) > max_edges:
        frame.loc[_weakest(shown, max_edges), "status"] = f"{BEYOND}{max_edges}"
    return frame


def _weakest(shown: pd.DataFrame, keep: int) -> pd.Index:
    """Rows of `shown` beyond the `keep` strongest: edges into the target by |variance share| first (what the
    figure is about), then the rest by |coefficient|; ties by name, so the choice is deterministic."""
    share = shown["variance_share"].abs().where(shown["into_target"])
    key = pd.DataFrame(
        {
            "no_share": share.isna(),
            "share": -share.fillna(0.0),
            "coef": -shown["coefficient"].abs(),
            "from": shown["from"],
            "to": shown["to"],
        },
        index=shown.index,
    )
    order = key.sort_values(list(key.columns), kind="stable").index
    return order[keep:]


def hidden_counts(edges: pd.DataFrame) -> Counter:
    """Hidden edges by reason (the footnote's numbers)."""
    return Counter(edges.loc[edges["status"] != "shown", "status"])
