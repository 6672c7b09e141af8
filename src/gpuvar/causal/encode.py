"""Categorical columns as indicators, and kernel identity removed from the whole-trace group.

Why indicators: a copy kind or a cache configuration is an enumeration; its numeric code has no order, so
a linear model on the code gives an effect that depends on how the vendor numbered the levels (swapping
two codes can flip its sign). Each level but a reference becomes a 0/1 column. The reference is the most
frequent level and levels are ordered by frequency, ties by first appearance in the rows: nothing depends on
the codes, so relabelling the levels changes names, never numbers.

Why centring: the whole-trace group mixes kernels whose features and target sit at different levels. An
effect that acts inside every kernel is drowned by the differences between kernels. Subtracting each
kernel's mean from every column (the "within" transformation of fixed-effects models) keeps only the
variation inside kernels, so what holds in every kernel group holds in the whole-trace graph too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.causal.roles import is_categorical

MAX_LEVELS = 8  # indicator columns per category; rarer levels are pooled into "other"
MISSING = "missing"
COPY_KIND_NAMES = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "UVM HtoD",
    12: "UVM DtoH",
    13: "UVM DtoD",
}


def level_label(column: str, value: float) -> str:
    """Readable level name: CUDA copy kinds by name (canonical copy_kind is the CUDA code for every vendor)."""
    if value != value:  # NaN
        return MISSING
    code = int(value) if float(value).is_integer() else value
    if column in ("copy_kind", "linked_copy_kind") and code in COPY_KIND_NAMES:
        return COPY_KIND_NAMES[code]
    return str(code)


def encode_categoricals(table: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, list[str], dict]:
    """Replace each categorical column of `columns` by indicator columns `col=level` (in place of the column).

    Returns the new table, the new feature list and, per categorical column, its reference level, levels in
    order, indicator names and pooled levels. A category with one level becomes no column (reported).
    """
    out_cols: list[str] = []
    info: dict[str, dict] = {}
    new = {}
    for col in columns:
        if not is_categorical(col):
            out_cols.append(col)
            new[col] = table[col]
            continue
        values = table[col].to_numpy(dtype=np.float64)
        labels = np.array([level_label(col, v) for v in values], dtype=object) if len(values) else np.array([], object)
        order, first, counts = np.unique(labels, return_index=True, return_counts=True)
        ranked = sorted(range(len(order)), key=lambda i: (-counts[i], first[i]))
        levels = [str(order[i]) for i in ranked]
        record = {
            "reference": levels[0] if levels else None,
            "levels": levels,
            "counts": [int(counts[i]) for i in ranked],
            "indicators": [],
            "pooled": [],
        }
        info[col] = record
        if len(levels) < 2:
            continue
        kept = levels[1:MAX_LEVELS]
        pooled = levels[MAX_LEVELS:]
        for level in kept:
            name = f"{col}={level}"
            new[name] = (labels == level).astype(np.float64)
            out_cols.append(name)
            record["indicators"].append(name)
        if pooled:
            name = f"{col}=other"
            new[name] = np.isin(labels, pooled).astype(np.float64)
            out_cols.append(name)
            record["indicators"].append(name)
            record["pooled"] = pooled
    rest = [c for c in table.columns if c not in columns]
    frame = pd.DataFrame({**{c: new[c] for c in out_cols}, **{c: table[c] for c in rest}}, index=table.index)
    return frame, out_cols, info


def sibling_groups(info: dict) -> list[list[str]]:
    """Indicator columns that code one category (they are exclusive, never causes of each other)."""
    return [rec["indicators"] for rec in info.values() if len(rec["indicators"]) > 1]


def centre_within(table: pd.DataFrame, keys: pd.Series, columns: list[str]) -> pd.DataFrame:
    """Subtract each group's mean from `columns` (the fixed-effects "within" transformation)."""
    out = table.copy()
    means = table[columns].groupby(keys.to_numpy(), sort=False).transform("mean")
    out[columns] = table[columns].to_numpy() - means.to_numpy()
    return out
