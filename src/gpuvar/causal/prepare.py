"""Turn top-k trace rows into clean analysis tables: one per group (kernel name) and one for all rows.

Why each step: DirectLiNGAM needs finite values, at least as many rows as variables, and no exactly
dependent columns (a residual of zero makes the entropy measure NaN and the order arbitrary). Every
column or row removed is recorded with its reason, and a group that cannot be analysed becomes a skip
record with a reason — never a crash and never a silently empty graph.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar import targets
from gpuvar.causal.collinear import condition_number, drop_derived, merge_near_duplicates
from gpuvar.causal.encode import centre_within, encode_categoricals
from gpuvar.causal.options import CausalOptions
from gpuvar.causal.roles import role_of
from gpuvar.errors import RowsError
from gpuvar.layout import ALL_GROUP

# Identifiers and timestamps: numeric, but not causes of variability.
EXCLUDED_COLUMNS = (
    "start",
    "end",
    "duration",
    "launch_id",
    "correlation_id",
    "process_id",
    "device_id",
    "stream_id",
    "bin",
    "bin_id",
    "step",  # a label: what a step changes is its size (step_threads) or context, which are features
    "op_occurrence",  # part of the call site's identity, not a quantity
)
# Other targets computed from durations: as features they would leak the target. Besides gpuvar's own (every name
# in gpuvar.targets.TARGETS, looked up when the features are chosen), the paper datasets' target columns.
PAPER_TARGET_COLUMNS = ("gpu_time_variation", "perf_variability")
EXCLUDED_SUFFIXES = ("_start", "_end", "_id", "_duration")
# Vendor columns kept in the canonical tables that are identifiers, timestamps or the raw duration:
# nsys contextId/gridId/globalPid, rocprof DispatchNs/CompleteNs/queue-index/tid, Omniperf Dispatch_ID/PID,
# ncu gpu__time_duration.sum (the source of the target: as a feature it would explain the target by itself).
VENDOR_NOT_FEATURE = re.compile(
    r"^(?:.*(?:Id|ID|Pid|Index|index|Ns|_Timestamp)|tid|pid|sig|obj|context|stream|device|gpu__time_duration(?:\..*)?)$"
)
# Nsight Compute's bookkeeping of its own replay and sampling (memory saved before each replay pass, pass counts,
# sampler buffers): set by the profiler and by what the process had allocated so far, not by the kernel. On the real
# random-sizes H100 export profiler__replayer_bytes_mem_accessible.avg (growing with the process's allocations over
# the run) took a 0.29 share of the curand graph.
PROFILER_NOT_FEATURE = re.compile(
    r"^(?:profiler__|smsp__pcsamp_(?:aggregated_passes|buffer_size_bytes|dropped_bytes|interval))"
)
PROFILER_REASON = "profiler bookkeeping (replay passes, memory saved for replay, sampler buffers): set by the profiler"
# Columns computed from the kernel's own elapsed time (role `leak` in data/feature_roles.csv, with the reason):
# elapsed/busy cycle counts are the duration in another unit, rates per elapsed time (`*.pct_of_peak_sustained_
# elapsed`, per second, throughput %, AMD busy %) the target in another form; on a real Nsight Compute CSV such
# rates were the top "causes" (share up to 0.59). With the target a sink they would "explain" it by themselves
# and hide the real causes. Listing them in `features` explicitly still analyses them.


def leak_reason(name: str) -> str | None:
    """Why a column may not be a cause of its own kernel's duration (None: it may)."""
    role = role_of(name)
    return role.why if role.role == "leak" else None


COLLINEAR_TOL = 1e-12  # |corr| within this of 1 counts as perfectly collinear


@dataclass
class Prepared:
    """One group's analysis table (z-scored, target last) or a skip record (data is None)."""

    group: str
    target: str
    data: pd.DataFrame | None = None
    features: list[str] = field(default_factory=list)
    rows_in: int = 0
    rows_used: int = 0
    rows_dropped: dict[str, int] = field(default_factory=dict)  # by reason: rows_in = rows_used + sum
    non_finite_by_column: dict[str, int] = field(default_factory=dict)  # which columns made rows unusable
    dropped_columns: dict[str, str] = field(default_factory=dict)
    skip_reason: str | None = None
    scale: dict[str, dict[str, float]] = field(default_factory=dict)
    categories: dict[str, dict] = field(default_factory=dict)  # categorical column -> levels, indicators
    merged: dict[str, list] = field(default_factory=dict)  # representative -> [(member, corr)]
    centred_within: int | None = None  # number of kernel groups the whole-trace rows were centred in
    condition_number: float | None = None
    bins: np.ndarray | None = None  # bin id of each analysed row (the bootstrap's resampling unit)
    sites: np.ndarray | None = None  # call site of each analysed row (the verdict is measured within them)

    def label(self, name: str) -> str:
        """Display name: a merged representative lists its members, e.g. 'grid_x (≈ grid_size)'."""
        members = self.merged.get(name)
        return f"{name} (≈ {', '.join(m for m, _ in members)})" if members else name

    def record(self) -> dict:
        """JSON-ready description (everything but the data)."""
        return {
            "group": self.group,
            "target": self.target,
            "status": "skipped" if self.skip_reason else "ok",
            "skip_reason": self.skip_reason,
            "rows_in": self.rows_in,
            "rows_used": self.rows_used,
            "rows_dropped": dict(self.rows_dropped),
            "non_finite_by_column": dict(self.non_finite_by_column),
            "features": list(self.features),
            "dropped_columns": dict(self.dropped_columns),
            "scale": self.scale,
            "categorical": self.categories,
            "merged_near_duplicates": {k: [{"column": m, "corr": c} for m, c in v] for k, v in self.merged.items()},
            "centred_within_groups": self.centred_within,
            "condition_number": _finite_or_none(self.condition_number),
        }


def _finite_or_none(value):
    return None if value is None or not np.isfinite(value) else round(float(value), 6)


def group_slug(name: str) -> str:
    """Filesystem-safe, deterministic folder name: sanitised prefix + 8 hex of sha1(full name)."""
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    prefix = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")[:40] or "group"
    return f"{prefix}-{digest}"


def _is_target(name: str) -> bool:
    """A target column (gpuvar's or a paper dataset's): never a feature of another target."""
    return name in targets.TARGETS or name in PAPER_TARGET_COLUMNS


def select_features(df: pd.DataFrame, target: str, group_by: str | None, features) -> tuple[list[str], dict]:
    """Candidate feature columns in a deterministic order, and the requested columns rejected with why.

    features: 'auto' (every numeric column except identifiers, times, the raw duration, elapsed-cycle
    counters, targets and the group column, in frame order; vendor columns excluded this way are reported), a comma-separated string, or a list (kept in the given order).
    """
    rejected: dict[str, str] = {}
    if features is None or (isinstance(features, str) and features.strip() == "auto"):
        chosen = []
        per_target = dict(targets.target(target).excluded_features)  # listing them explicitly keeps them
        for col in df.columns:
            name = str(col)
            if name in (target, group_by):
                continue
            if name in per_target:
                rejected[name] = per_target[name]
                continue
            if name in EXCLUDED_COLUMNS or _is_target(name) or name.endswith(EXCLUDED_SUFFIXES):
                continue
            if not (pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col])):
                continue
            if VENDOR_NOT_FEATURE.match(name):
                rejected[name] = "identifier, timestamp or raw duration (not a cause)"
            elif PROFILER_NOT_FEATURE.match(name) and not leak_reason(name):
                rejected[name] = PROFILER_REASON
            elif leak_reason(name):
                rejected[name] = leak_reason(name)
            else:
                chosen.append(name)
        return chosen, rejected
    names = [f.strip() for f in features.split(",")] if isinstance(features, str) else [str(f) for f in features]
    names = list(dict.fromkeys(n for n in names if n))
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise RowsError(f"feature column(s) not in the rows: {', '.join(missing)}")
    chosen = []
    for name in names:
        if name == target:
            rejected[name] = "is the target"
        elif not (pd.api.types.is_numeric_dtype(df[name]) or pd.api.types.is_bool_dtype(df[name])):
            rejected[name] = f"not numeric (dtype {df[name].dtype})"
        else:
            chosen.append(name)
    return chosen, rejected


def _dependent_columns(values: np.ndarray, names: list[str], target: str) -> dict[str, str]:
    """Features that are exact linear functions of the target or of earlier kept features (first kept).

    Sequential Gram-Schmidt on z-scored columns, target first: a column whose residual variance is
    ~0 (1 - R^2 <= 2e-12, i.e. |corr| within 1e-12 of 1 for a pair) adds nothing but singularity.
    """
    n = values.shape[0]
    z = (values - values.mean(axis=0)) / values.std(axis=0)
    basis: list[np.ndarray] = []
    kept: list[int] = []
    dropped: dict[str, str] = {}
    for k in range(z.shape[1]):
        v = z[:, k].copy()
        for _ in range(2):  # re-orthogonalise once for stability
            for q in basis:
                v -= (q @ v) * q
        if kept and (v @ v) / n <= 2 * COLLINEAR_TOL:
            corr = np.array([(z[:, j] @ z[:, k]) / n for j in kept])
            hit = int(np.argmax(np.abs(corr)))
            if abs(abs(corr[hit]) - 1) <= COLLINEAR_TOL:
                other = names[kept[hit]]
                what = "the target" if other == target else other
                kind = (
                    "duplicate of"
                    if corr[hit] > 0 and np.allclose(values[:, k], values[:, kept[hit]])
                    else "collinear with"
                )
                dropped[names[k]] = f"{kind} {what} (corr {corr[hit]:+.12g})"
            else:
                dropped[names[k]] = "exact linear combination of earlier columns"
            continue
        basis.append(v / np.sqrt(v @ v))
        kept.append(k)
    return dropped


def prepare_group(
    frame: pd.DataFrame,
    group: str,
    target: str,
    features: list[str],
    min_rows: int,
    collinear_threshold: float = 0.95,
    within: pd.Series | None = None,
) -> Prepared:
    """Clean one group's rows into an analysis table, or a skip record with its reason.

    Steps (each removal recorded): all-missing columns; categorical columns to indicators; rows with a
    non-finite value; too few rows or a constant target (skip); `within` given (the whole-trace group):
    every column centred on its kernel's mean; constant columns; derived products; near-duplicates merged
    (|corr| >= collinear_threshold); exact linear dependence; z-scores and the condition number.
    """
    prep = Prepared(group=group, target=target, rows_in=len(frame))
    cols = list(features)
    table = frame[cols + [target]].astype(np.float64)
    for col in cols:
        if table[col].isna().all():
            prep.dropped_columns[col] = "all values missing"
    cols = [c for c in cols if c not in prep.dropped_columns]
    table, cols, prep.categories = encode_categoricals(table[cols + [target]], cols)
    for name, rec in prep.categories.items():
        if not rec["indicators"]:
            prep.dropped_columns[name] = f"categorical with one level ({rec['reference']})"
    arr = table.to_numpy()
    finite = np.isfinite(arr)
    bad_rows = ~finite.all(axis=1)
    if bad_rows.any():
        prep.rows_dropped["non_finite"] = int(bad_rows.sum())
        for c, name in enumerate(cols + [target]):
            count = int((~finite[:, c]).sum())
            if count:
                prep.non_finite_by_column[name] = count  # a row can be missing in several columns
    keep = ~bad_rows
    table = table[keep]
    bins = frame["bin"].to_numpy()[keep] if "bin" in frame.columns else np.arange(int(keep.sum()))
    sites = (
        frame["call_site"].astype("string").fillna("?").to_numpy(dtype=object)[keep]
        if "call_site" in frame.columns
        else None
    )
    prep.rows_used = len(table)
    if len(table) < max(min_rows, 2):
        prep.skip_reason = f"{len(table)} usable rows < min_rows {max(min_rows, 2)}"
        return prep
    if table[target].nunique() < 2:
        prep.skip_reason = "target is constant"
        return prep
    constant_why = "constant"
    if within is not None:
        keys = within[keep].reset_index(drop=True)
        table = centre_within(table.reset_index(drop=True), keys, cols + [target])
        prep.centred_within = int(keys.nunique())
        constant_why = "constant within every kernel group (kernel identity explains it)"
        if table[target].abs().max() == 0:
            prep.skip_reason = "target is constant within every kernel group"
            return prep
    for col in cols:
        if table[col].nunique() < 2 or (within is not None and table[col].abs().max() < 1e-12):
            prep.dropped_columns[col] = constant_why
    cols = [c for c in cols if c not in prep.dropped_columns]

    def varies(name: str) -> bool:
        """Varies in the rows as analysed (within kernels for the whole-trace group); reads only that column."""
        if name in prep.dropped_columns:
            return False
        if name in table.columns:
            return table[name].nunique() > 1
        if name not in frame.columns or not pd.api.types.is_numeric_dtype(frame[name]):
            return False
        values = pd.DataFrame({name: frame[name].astype(np.float64).to_numpy()[keep]})
        if within is not None:
            values = centre_within(values, keys, [name])
        return values[name].nunique() > 1 and bool(np.nanmax(np.abs(values[name])) > 1e-12 or within is None)

    derived = drop_derived(cols, varies)
    prep.dropped_columns.update(derived)
    cols = [c for c in cols if c not in derived]
    if cols:
        cols, prep.merged, near = merge_near_duplicates(table[cols].to_numpy(), cols, collinear_threshold)
        prep.dropped_columns.update(near)
    if cols and len(cols) + 1 >= len(table):  # before the rank check, which would blame the columns
        prep.features = cols
        prep.skip_reason = f"{len(cols) + 1} variables >= {len(table)} rows (more features than rows)"
        return prep
    if cols:
        dependent = _dependent_columns(table[[target] + cols].to_numpy(), [target] + cols, target)
        prep.dropped_columns.update(dependent)
        cols = [c for c in cols if c not in dependent]
    prep.features = cols
    if not cols:
        prep.skip_reason = (
            "no usable feature left (" + (", ".join(sorted(set(prep.dropped_columns.values()))) or "none given") + ")"
        )
        return prep
    table = table[cols + [target]]
    mean, std = table.mean(), table.std(ddof=0)
    prep.scale = {c: {"mean": float(mean[c]), "std": float(std[c])} for c in table.columns}
    prep.data = ((table - mean) / std).reset_index(drop=True)
    prep.bins = np.asarray(bins)
    prep.sites = sites
    prep.condition_number = condition_number(prep.data[cols].to_numpy())
    return prep


def prepare_all(df: pd.DataFrame, opts: CausalOptions) -> tuple[list[Prepared], dict]:
    """Prepared tables for every group (sorted by name) then `__all__` (centred within groups when grouped);
    plus rejected requested features."""
    target, group_by, min_rows, collinear_threshold = (
        opts.target,
        opts.group_by,
        opts.min_rows,
        opts.collinear_threshold,
    )
    if target not in df.columns:
        raise RowsError(f"target column {target!r} not in the rows (columns: {', '.join(map(str, df.columns))})")
    if not (pd.api.types.is_numeric_dtype(df[target]) or pd.api.types.is_bool_dtype(df[target])):
        raise RowsError(f"target column {target!r} is not numeric (dtype {df[target].dtype})")
    if group_by and group_by not in df.columns:
        raise RowsError(f"group column {group_by!r} not in the rows")
    chosen, rejected = select_features(df, target, group_by, opts.features)
    out = []
    if group_by:
        keys = df[group_by].astype("string").fillna("<missing>")
        for name in sorted(keys.unique()):
            rows = df[(keys == name).to_numpy()]
            out.append(prepare_group(rows, str(name), target, chosen, min_rows, collinear_threshold))
        within = keys.reset_index(drop=True)
    else:
        within = None
    out.append(
        prepare_group(df.reset_index(drop=True), ALL_GROUP, target, chosen, min_rows, collinear_threshold, within)
    )
    for prep in out:
        prep.dropped_columns = {**rejected, **prep.dropped_columns}
    return out, rejected
