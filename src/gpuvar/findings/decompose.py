"""Where a kernel's duration variance comes from: call sites, problem size, context, or nothing recorded.

One kernel name often runs at several places of a step on different shapes (a cuBLAS GEMM for the QKV and
the MLP projections): the spread of its durations is then mostly *call-site differences*, which are not
run-to-run variability. Per kernel name, over every launch of the dataset (not only the most variable bins):

  between call sites   sum_c n_c (mean_c - mean)^2 / total: what the call site alone explains
  size                 of the variance left within call sites, the cross-validated share that problem size /
                       launch configuration (grid, block, registers, shared memory: role `launch`/`derived`
                       in data/feature_roles.csv) explains, times the within fraction
  context              what context features (ctx_* columns of role `context`: copies and memsets in flight,
                       concurrent kernels, the stream's gap; rank) add on top of size, out of sample, times the
                       within fraction (the position in the step is the call site itself; the time since the
                       step's start is a proxy of earlier kernels' sizes, role `leak`, not used)
  unexplained          the rest
The four shares add up to 1. The within-call-site part is fitted on durations and features centred in each
call site (each call site its own intercept), folds by step where steps are known (gpuvar.findings.verdict).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar.findings.verdict import DECLINED, MIN_ROWS, ShareTest, share_test

SITE_SEPARATOR = " @ "
CONTEXT_PREFIX = "ctx_"
DRIVER_MIN_SHARE = 0.05  # a feature alone explaining less of the within-call-site variance is not a driver
DUPLICATE_CORR = 0.95  # drivers this correlated are one driver, named after the first (a launch parameter)
STABLE_CV = 0.03  # within-call-site CV below this: the kernel is stable run to run


def call_sites(kernels: pd.DataFrame) -> pd.Series:
    """The call site of each launch: the `call_site` column, else the launch configuration, else '?'."""
    for column in ("call_site", "launch_config"):
        if column in kernels.columns:
            return kernels[column].astype("string").fillna("?").astype(object)
    return pd.Series(["?"] * len(kernels), index=kernels.index, dtype=object)


def size_columns(kernels: pd.DataFrame) -> list[str]:
    """Numeric, non-categorical columns whose role is launch configuration or a product of it."""
    from gpuvar.causal.roles import role_of

    out = []
    for name in kernels.columns:
        name = str(name)
        if name.startswith(CONTEXT_PREFIX) or not pd.api.types.is_numeric_dtype(kernels[name]):
            continue
        role = role_of(name)
        if role.role in ("launch", "derived") and not role.categorical:
            out.append(name)
    return out


def context_frame(kernels: pd.DataFrame) -> pd.DataFrame:
    """ctx_* columns, plus 0/1 indicators of rank (most frequent rank the baseline) when several ranks ran."""
    from gpuvar.causal.roles import role_of

    cols = {
        c: pd.to_numeric(kernels[c], errors="coerce")
        for c in kernels.columns
        if str(c).startswith(CONTEXT_PREFIX) and role_of(str(c)).role == "context"
    }
    if "rank" in kernels.columns:
        ranks = kernels["rank"]
        counts = ranks.value_counts()
        if len(counts) > 1:
            baseline = sorted(counts.index[counts == counts.max()])[0]
            for level in sorted(counts.index):
                if level != baseline:
                    cols[f"rank={level:g}" if isinstance(level, float) else f"rank={level}"] = (
                        (ranks == level).astype(np.float64).to_numpy()
                    )
    return pd.DataFrame(cols, index=kernels.index)


def _centred(values: np.ndarray, codes: np.ndarray, n_sites: int) -> np.ndarray:
    """Each column minus its call site's mean."""
    counts = np.bincount(codes, minlength=n_sites).astype(np.float64)
    if values.ndim == 1:
        means = np.bincount(codes, weights=values, minlength=n_sites) / counts
        return values - means[codes]
    out = np.empty_like(values)
    for k in range(values.shape[1]):
        means = np.bincount(codes, weights=values[:, k], minlength=n_sites) / counts
        out[:, k] = values[:, k] - means[codes]
    return out


@dataclass
class Driver:
    feature: str
    kind: str  # size | context
    sign: int
    share: float  # of the within-call-site variance, this feature alone (in-sample R^2 on centred data)
    merged: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.feature} (≈ {', '.join(self.merged)})" if self.merged else self.feature

    def record(self) -> dict:
        return {
            "feature": self.feature,
            "label": self.label,
            "kind": self.kind,
            "sign": self.sign,
            "share_of_within": round(self.share, 6),
        }


@dataclass
class Decomposition:
    """One kernel name: its numbers, shares that add up to 1, the verdict on the within-call-site part."""

    kernel: str
    launches: int
    total_ns: float
    mean_ns: float
    cv: float
    cv_within: float
    call_sites: int
    between: float
    size: float
    context: float
    unexplained: float
    verdict: ShareTest
    drivers: list[Driver]
    size_test: ShareTest | None = None

    def record(self) -> dict:
        return {
            "kernel": self.kernel,
            "launches": self.launches,
            "total_ns": round(self.total_ns, 3),
            "mean_ns": round(self.mean_ns, 3),
            "cv": round(self.cv, 6),
            "cv_within_call_site": round(self.cv_within, 6),
            "call_sites": self.call_sites,
            "shares": {
                "between_call_sites": round(self.between, 6),
                "size_launch_config": round(self.size, 6),
                "context": round(self.context, 6),
                "unexplained": round(self.unexplained, 6),
            },
            "verdict": self.verdict.record(),
            "drivers": [d.record() for d in self.drivers],
        }


def _preference(name: str, kind: str) -> int:
    from gpuvar.causal.roles import role_of

    if kind != "size":
        return 2
    return 0 if role_of(name).role == "launch" else 1


def _drivers(X: np.ndarray, names: list[str], kinds: dict[str, str], r: np.ndarray) -> list[Driver]:
    """Features that alone explain >= DRIVER_MIN_SHARE of the centred residual, near-duplicates merged."""
    total = float((r**2).sum())
    if total <= 0:
        return []
    candidates = []
    for k, name in enumerate(names):
        x = X[:, k]
        if not np.isfinite(x).all() or np.ptp(x) == 0:
            continue
        sx = float((x**2).sum())
        if sx <= 0:
            continue
        cov = float((x * r).sum())
        share = cov * cov / (sx * total)
        if share >= DRIVER_MIN_SHARE:
            candidates.append((k, name, share, int(np.sign(cov))))
    # a merge is named after what one can change: a launch parameter before a product of them, before context
    candidates.sort(key=lambda c: (_preference(c[1], kinds[c[1]]), -c[2], c[1]))
    drivers: list[Driver] = []
    kept: list[int] = []
    for k, name, share, sign in candidates:
        duplicate = None
        for j, driver in zip(kept, drivers):
            a, b = X[:, j], X[:, k]
            denom = np.sqrt((a**2).sum() * (b**2).sum())
            if denom > 0 and abs(float((a * b).sum()) / denom) >= DUPLICATE_CORR:
                duplicate = driver
                break
        if duplicate is not None:
            duplicate.merged.append(name)
            continue
        drivers.append(Driver(name, kinds[name], sign, share))
        kept.append(k)
    drivers.sort(key=lambda d: (-d.share, d.feature))
    return drivers


def decompose_kernel(
    name: str,
    durations: np.ndarray,
    sites: np.ndarray,
    size: pd.DataFrame,
    context: pd.DataFrame,
    steps: np.ndarray | None,
    seed: int = 0,
) -> Decomposition:
    """The decomposition of one kernel name's launches (arrays aligned row by row)."""
    d = np.asarray(durations, dtype=np.float64)
    n = len(d)
    mean = float(d.mean()) if n else 0.0
    site_codes, site_keys = pd.factorize(pd.Series(sites, dtype=object), sort=True)
    n_sites = len(site_keys)
    resid = _centred(d, site_codes, n_sites)
    total = float(((d - mean) ** 2).sum())
    within = float((resid**2).sum())
    between = (total - within) / total if total > 0 else 0.0
    cv = float(d.std() / mean) if n and mean > 0 else 0.0
    cv_within = float(np.sqrt(within / n) / mean) if n and mean > 0 else 0.0
    size_names = list(size.columns)
    ctx_names = list(context.columns)
    Xs = _centred(size.to_numpy(dtype=np.float64), site_codes, n_sites) if size_names else np.zeros((n, 0))
    Xc = _centred(context.to_numpy(dtype=np.float64), site_codes, n_sites) if ctx_names else np.zeros((n, 0))
    within_fraction = within / total if total > 0 else 0.0
    if within <= 0 or n < MIN_ROWS:
        reason = f"too few launches ({n} < {MIN_ROWS})" if n < MIN_ROWS else "no variance within call sites"
        full = ShareTest(DECLINED, rows=n, reason=reason)
        size_test = None
        size_share = context_share = 0.0
    else:
        size_test = share_test(Xs, resid, size_names, steps, seed, residual_check=False) if size_names else None
        full = share_test(np.column_stack([Xs, Xc]), resid, size_names + ctx_names, steps, seed)
        size_share = size_test.share if size_test is not None and size_test.verdict != DECLINED else 0.0
        full_share = full.share if full.verdict != DECLINED else 0.0
        size_share = min(size_share, full_share) if full.verdict != DECLINED else size_share
        context_share = max(0.0, full_share - size_share)
    kinds = {c: "size" for c in size_names} | {c: "context" for c in ctx_names}
    drivers = _drivers(np.column_stack([Xs, Xc]), size_names + ctx_names, kinds, resid) if within > 0 else []
    size_part = size_share * within_fraction
    context_part = context_share * within_fraction
    unexplained = max(0.0, 1.0 - between - size_part - context_part) if total > 0 else 0.0
    return Decomposition(
        kernel=name,
        launches=n,
        total_ns=float(d.sum()),
        mean_ns=mean,
        cv=cv,
        cv_within=cv_within,
        call_sites=n_sites,
        between=between,
        size=size_part,
        context=context_part,
        unexplained=unexplained,
        verdict=full,
        drivers=drivers,
        size_test=size_test,
    )


def decompose(kernels: pd.DataFrame, seed: int = 0) -> list[Decomposition]:
    """Every kernel name's decomposition (rows with a duration), in name order."""
    if "duration" not in kernels.columns or "kernel_name" not in kernels.columns:
        return []
    rows = kernels[pd.to_numeric(kernels["duration"], errors="coerce").notna()]
    sites = call_sites(rows)
    size_cols = size_columns(rows)
    context = context_frame(rows)
    steps = rows["step"] if "step" in rows.columns else None
    out = []
    names = rows["kernel_name"].astype("string").fillna("?")
    for name, index in sorted(names.groupby(names, sort=False).indices.items()):
        part = rows.iloc[index]
        size = part[size_cols].apply(pd.to_numeric, errors="coerce").astype(np.float64)
        size = size.loc[:, size.notna().all().to_numpy()]
        ctx = context.iloc[index]
        ctx = ctx.loc[:, ctx.notna().all().to_numpy()]
        step_values = None
        if steps is not None:
            s = pd.to_numeric(steps.iloc[index], errors="coerce")
            step_values = s.to_numpy(dtype=np.float64) if s.notna().all() else None
        out.append(
            decompose_kernel(
                str(name),
                pd.to_numeric(part["duration"]).to_numpy(dtype=np.float64),
                sites.iloc[index].to_numpy(),
                size,
                ctx,
                step_values,
                seed,
            )
        )
    return out


def pooled_shares(decompositions: list[Decomposition], kernels: pd.DataFrame) -> dict[str, float]:
    """Dataset-level shares: each name's shares weighted by its total duration variance (sum of squares)."""
    weights = {}
    d = pd.to_numeric(kernels["duration"], errors="coerce")
    names = kernels["kernel_name"].astype("string").fillna("?")
    sums = ((d - d.groupby(names).transform("mean")) ** 2).groupby(names).sum()
    for dec in decompositions:
        weights[dec.kernel] = float(sums.get(dec.kernel, 0.0))
    total = sum(weights.values())
    keys = ("between", "size", "context", "unexplained")
    if total <= 0:
        return dict.fromkeys(keys, 0.0)
    return {k: sum(getattr(dec, k) * weights[dec.kernel] for dec in decompositions) / total for k in keys}
