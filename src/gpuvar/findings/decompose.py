"""Where a group's duration variance comes from: call sites, problem size, context, counters, or nothing recorded.

A group is what a finding is about: the launching op (aten::mm, an NVTX range) where the trace records one, else
the kernel name. One op runs at several call sites of a step on different shapes (the QKV and the MLP GEMMs of a
layer): the spread of its durations is then mostly *call-site differences*, which are not run-to-run variability.
Per group, over every launch of the dataset (not only the most variable bins):

  between call sites   sum_c n_c (mean_c - mean)^2 / total: what the call site alone explains
  size                 of the variance left within call sites, the cross-validated share that size features explain
                       (gpuvar.findings.features: launch configuration, input shapes, the kernel variant the
                       library picked, the step's work), times the within fraction
  context              what context features add on top of size, out of sample, times the within fraction
  counters             what work / traffic counters add on top of size and context (at most MAX_COUNTERS of them,
                       chosen inside each cross-validation fold and again for each permutation, so the choice
                       among hundreds of counters cannot inflate the share), times the within fraction
  unexplained          the rest
The five shares add up to 1. The within-call-site part is fitted on durations and features centred in each call
site (each call site its own intercept), folds by step where steps are known (gpuvar.causal.share_test).

Drivers are chosen forward: the feature (or block: the kernel variants together) that explains most of what is
left, while it adds at least DRIVER_MIN_SHARE of the within-call-site variance, at most MAX_DRIVERS; size and
context first, counters only for what they leave (a work counter mediates size: bytes follow the size, the size
is what the program sets). So a feature
that only repeats a stronger one (a GEMM's grid_y, which cuBLAS lowers as the size grows, next to the size
itself) is not named with its own sign; near-duplicates of a driver (|corr| >= DUPLICATE_CORR) are named beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import DECLINED, FOLDS, MIN_ROWS, ShareTest, fold_of
from gpuvar.causal.within_site import (
    DRIVER_MIN_SHARE,
    Basis,
    SlopeGroups,
    centred,
    standardise,
    within_test,
)
from gpuvar.findings.features import COUNTER, SIZE, STEP_THREADS, VARIANT_LABEL, Features

SITE_SEPARATOR = " @ "
MAX_DRIVERS = 4
MAX_MERGED_NAMED = 2  # near-duplicates named in a driver's label (all of them in findings.json)
DUPLICATE_CORR = 0.95  # drivers this correlated are one driver, named after the first (a launch parameter)
NEAR_TIE = 0.02  # candidates within this share of the best: the one a user can change is named
STABLE_CV = 0.03  # within-call-site CV below this: stable run to run (with MIN_ROWS launches or more)
SHARE_KEYS = ("between", "size", "context", "counters", "unexplained")


def call_sites(kernels: pd.DataFrame) -> pd.Series:
    """The call site of each launch: the `call_site` column, else the launch configuration, else '?'."""
    for column in ("call_site", "launch_config"):
        if column in kernels.columns:
            return kernels[column].astype("string").fillna("?").astype(object)
    return pd.Series(["?"] * len(kernels), index=kernels.index, dtype=object)


POSITION_SITE = r"^(?:iter|step)#\d+$"  # call sites that are a position in the step or iteration (no host ops)


def groups_of(kernels: pd.DataFrame) -> pd.Series:
    """The group of each launch: its launching op where recorded; else, where its call site is a position in the
    step or iteration (traces without host ops), that call site, so the kernel variants a library picks at one
    place stay together; else its kernel name."""
    names = kernels["kernel_name"].astype("string").fillna("?")
    groups = names
    if "call_site" in kernels.columns:
        sites = kernels["call_site"].astype("string")
        groups = sites.where(sites.str.match(POSITION_SITE).fillna(False), groups)
    if "launch_op" in kernels.columns:
        ops = kernels["launch_op"].astype("string")
        groups = ops.where(ops.notna(), groups)
    return groups.astype(object)


@dataclass
class Driver:
    feature: str
    kind: str  # size | context | counter
    sign: int
    share: float  # of the within-call-site variance: what it adds to the drivers before it (the first: alone)
    merged: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if not self.merged:
            return self.feature
        more = f" and {len(self.merged) - MAX_MERGED_NAMED} more" if len(self.merged) > MAX_MERGED_NAMED else ""
        return f"{self.feature} (≈ {', '.join(self.merged[:MAX_MERGED_NAMED])}{more})"

    def record(self) -> dict:
        return {
            "feature": self.feature,
            "label": self.label,
            "kind": self.kind,
            "sign": self.sign,
            "share_of_within": round(self.share, 6),
            "near_duplicates": list(self.merged),
        }


@dataclass
class Decomposition:
    """One group: its numbers, shares that add up to 1, the verdict on the within-call-site part."""

    group: str
    kernels: dict[str, int]  # kernel name -> launches
    launches: int
    total_ns: float
    mean_ns: float
    cv: float
    cv_within: float
    call_sites: int
    min_site_launches: int
    between: float
    size: float
    context: float
    counters: float
    unexplained: float
    verdict: ShareTest
    drivers: list[Driver]
    sample: dict | None = None  # the fits' sample when the group has more launches than the cap
    rank_left_out: str | None = None  # why rank is not among the context features (rank_left_out)

    def shares(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in SHARE_KEYS}

    def record(self) -> dict:
        return (
            {
                "group": self.group,
                "kernels": [{"kernel": k, "launches": n} for k, n in self.kernels.items()],
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
                    "counters": round(self.counters, 6),
                    "unexplained": round(self.unexplained, 6),
                },
                "verdict": self.verdict.record(),
                "drivers": [d.record() for d in self.drivers],
            }
            | ({"sample": dict(self.sample)} if self.sample else {})
            | ({"rank_left_out": self.rank_left_out} if self.rank_left_out else {})
        )


@dataclass
class Exact:
    """A group's numbers over every launch (what a sampled group's Decomposition states beside its fits)."""

    kernels: dict[str, int]
    launches: int
    total_ns: float
    mean_ns: float
    cv: float
    cv_within: float
    call_sites: int
    min_site_launches: int
    between: float
    within_fraction: float
    varies: bool  # the durations are not all equal
    sample: dict | None = None  # {"launches": fitted, "of": launches, "cap": the cap}


_PREFERENCE = {SIZE: 0, "context": 1, COUNTER: 2}


def _preference(name: str, kind: str) -> tuple[int, int]:
    """What a user can change or read first: a launch parameter, the op's FLOPs, its other input sizes, a product
    of launch parameters, the kernel variant, the step's work; then context; then counters."""
    from gpuvar.causal.roles import role_of

    if kind != SIZE:  # a share of the launch overlapped before a count of what overlapped (less biased by length)
        return (_PREFERENCE[kind], 0 if name.endswith("_overlap") else 1)
    if name == VARIANT_LABEL:
        return (0, 4)
    if name == STEP_THREADS:
        return (0, 5)
    if name == "op_flops":
        return (0, 1)
    if name.startswith("op_"):
        return (0, 2)
    return (0, 0 if role_of(name).role == "launch" else 3)


def _gain(basis: Basis, X: np.ndarray, cols: list[int], r: np.ndarray, total: float) -> float:
    """Share of `total` that the block X[:, cols] adds to the basis in explaining r."""
    b = basis.copy()
    added = False
    for k in cols:
        added |= b.add(X[:, k])
    if not added:
        return 0.0
    return (b.explained(r) - basis.explained(r)) / total


def _drivers(groups: SlopeGroups, X: np.ndarray, kinds: dict[str, str], blocks: dict[str, list[int]], r: np.ndarray):
    """Forward selection of driver blocks on the centred durations r, slopes per call site (module docstring)."""
    total = float((r**2).sum())
    if total <= 0 or X.shape[1] == 0:
        return []
    basis = Basis(groups, len(r))
    taken: set[str] = set()
    drivers: list[Driver] = []
    for _ in range(MAX_DRIVERS):
        best, scored = 0.0, []
        for tier in ((SIZE, "context"), (COUNTER,)):  # counters only for what size and context leave
            scored = [
                (_gain(basis, X, cols, r, total), name, cols)
                for name, cols in blocks.items()
                if name not in taken and kinds[name] in tier
            ]
            scored = [s for s in scored if s[0] > 0]
            best = max((g for g, _, _ in scored), default=0.0)
            if best >= DRIVER_MIN_SHARE:
                break
        if best < DRIVER_MIN_SHARE:
            break
        near = [s for s in scored if s[0] >= best - NEAR_TIE]
        gain, name, cols = min(near, key=lambda s: (_preference(s[1], kinds[s[1]]), -s[0], s[1]))
        sign = 1  # the kernel variants have no direction
        if name != VARIANT_LABEL:  # a block's sign is its first column's (the overlap share before the count)
            x = basis.residual(X[:, cols[0]])
            sign = int(np.sign(float(x @ r))) or 1
        merged = []
        if len(cols) == 1:
            a = X[:, cols[0]]
            for other, ocols in blocks.items():
                if other == name or other in taken or len(ocols) != 1:
                    continue
                b = X[:, ocols[0]]
                denom = np.sqrt((a**2).sum() * (b**2).sum())
                if denom > 0 and abs(float((a * b).sum()) / denom) >= DUPLICATE_CORR:
                    merged.append(other)
        merged.sort(key=lambda m: (_preference(m, kinds[m]), m))
        drivers.append(Driver(name, kinds[name], sign, gain, merged))
        for taken_name in [name, *merged]:  # a near-duplicate of a driver is not a driver of its own
            taken.add(taken_name)
            for k in blocks[taken_name]:
                basis.add(X[:, k])
    return drivers


def decompose_group(
    group: str,
    durations: np.ndarray,
    sites: np.ndarray,
    kernel_names: np.ndarray,
    features: Features,
    steps: np.ndarray | None,
    seed: int = 0,
    exact: Exact | None = None,
) -> Decomposition:
    """The decomposition of one group's launches (arrays aligned row by row). `exact`: the group's numbers over
    every launch when the arrays are its sample (gpuvar.findings.sample): the fits are the sample's, the launches,
    time, CV and call-site shares the whole group's."""
    d = np.asarray(durations, dtype=np.float64)
    n = len(d)
    mean = float(d.mean()) if n else 0.0
    site_codes, site_keys = pd.factorize(pd.Series(sites, dtype=object), sort=True)
    n_sites = len(site_keys)
    per_site = np.bincount(site_codes, minlength=n_sites) if n else np.zeros(0, np.int64)
    resid = centred(d, site_codes, n_sites)
    total = float(((d - mean) ** 2).sum())
    within = float((resid**2).sum())
    between = (total - within) / total if total > 0 else 0.0
    cv = float(d.std() / mean) if n and mean > 0 else 0.0
    cv_within = float(np.sqrt(within / n) / mean) if n and mean > 0 else 0.0
    names = list(features.table.columns)
    col = {c: k for k, c in enumerate(names)}
    within_fraction = within / total if total > 0 else 0.0
    size_share = context_share = counter_share = 0.0
    drivers: list[Driver] = []
    if n < MIN_ROWS:
        full = ShareTest(DECLINED, rows=n, reason=f"too few launches ({n} < {MIN_ROWS})")
    elif within <= 0:
        reason = (
            "nothing to compare: one launch per call site" if per_site.max() <= 1 else "no variance within call sites"
        )
        full = ShareTest(DECLINED, rows=n, reason=reason)
    else:
        groups = SlopeGroups(site_codes)
        order = groups.order
        y = resid[order]
        X = (
            centred(features.table.to_numpy(dtype=np.float64), site_codes, n_sites)[order]
            if names
            else np.zeros((n, 0))
        )
        sorted_sites = site_codes[order]
        folds = fold_of(n, steps, FOLDS, seed)[order]
        site_means = (d - resid)[order]
        size_idx = [col[c] for c in features.columns(SIZE)]
        fixed_idx = [col[c] for c in features.columns(SIZE, "context")]
        counter_idx = [col[c] for c in features.columns(COUNTER)]
        none = np.zeros((n, 0))

        def test(f_idx, c_idx, check):
            return within_test(
                groups,
                sorted_sites,
                X[:, f_idx],
                X[:, c_idx] if c_idx else none,
                y,
                [names[k] for k in f_idx + c_idx],
                folds,
                seed,
                check,
                site_means,
            )

        size_test = test(size_idx, [], False)
        fixed_test = test(fixed_idx, [], not counter_idx)
        full = test(fixed_idx, counter_idx, True) if counter_idx else fixed_test
        shares = [t.share if t.verdict != DECLINED else 0.0 for t in (size_test, fixed_test, full)]
        size_share = min(shares[0], shares[2])
        context_share = max(0.0, min(shares[1], shares[2]) - size_share)
        counter_share = max(0.0, shares[2] - size_share - context_share)
        block_idx = {b: [col[c] for c in cols] for b, cols in features.blocks.items()}
        kinds = {b: features.kinds[cols[0]] for b, cols in features.blocks.items()}
        Xs = standardise(X)
        drivers = _drivers(groups, Xs, kinds, block_idx, y)
    if exact is None:
        variants = pd.Series(kernel_names, dtype=object).value_counts(sort=False)
        ordered = dict(sorted(((str(k), int(v)) for k, v in variants.items()), key=lambda kv: (-kv[1], kv[0])))
        exact = Exact(
            kernels=ordered,
            launches=n,
            total_ns=float(d.sum()),
            mean_ns=mean,
            cv=cv,
            cv_within=cv_within,
            call_sites=n_sites,
            min_site_launches=int(per_site.min()) if n else 0,
            between=between,
            within_fraction=within_fraction,
            varies=total > 0,
        )
    size_part = size_share * exact.within_fraction
    context_part = context_share * exact.within_fraction
    counter_part = counter_share * exact.within_fraction
    unexplained = max(0.0, 1.0 - exact.between - size_part - context_part - counter_part) if exact.varies else 0.0
    return Decomposition(
        group=group,
        kernels=exact.kernels,
        launches=exact.launches,
        total_ns=exact.total_ns,
        mean_ns=exact.mean_ns,
        cv=exact.cv,
        cv_within=exact.cv_within,
        call_sites=exact.call_sites,
        min_site_launches=exact.min_site_launches,
        between=exact.between,
        size=size_part,
        context=context_part,
        counters=counter_part,
        unexplained=unexplained,
        verdict=full,
        drivers=drivers,
        sample=exact.sample,
    )


def pooled_shares(decompositions: list[Decomposition]) -> dict[str, float]:
    """Dataset-level shares: each group's shares weighted by its total duration variance (sum of squares)."""
    weights = {dec.group: dec.launches * (dec.cv * dec.mean_ns) ** 2 for dec in decompositions}
    total = sum(weights.values())
    if total <= 0:
        return dict.fromkeys(SHARE_KEYS, 0.0)
    return {k: sum(getattr(dec, k) * weights[dec.group] for dec in decompositions) / total for k in SHARE_KEYS}


@dataclass
class FitInputs:
    """What a group's feature table takes from the whole table: its size and counter columns (by dtype and role)
    and the launches per rank (the rank indicators' baseline)."""

    size_cols: list[str]
    counters: list[str]
    rank_counts: dict | None


def fit_inputs(empty: pd.DataFrame, rank_counts: dict | None) -> FitInputs:
    """FitInputs of a table with the columns and dtypes of `empty` (no rows needed)."""
    from gpuvar.findings.features import counter_columns, size_columns

    size_cols = size_columns(empty.drop(columns=[STEP_THREADS], errors="ignore"))
    return FitInputs(size_cols, counter_columns(empty), rank_counts if "rank" in empty.columns else None)


RANK_LAUNCHES_PER_LEVEL = 2  # fitted launches per call site and rank (median) a per-call-site rank effect needs


def rank_left_out(sites: np.ndarray, rank_counts: dict | None) -> str | None:
    """Why the rank indicators stay out of a group's context features; None when they go in.

    Why a rule: the context test fits each feature with a slope per call site, so R ranks are R - 1 coefficients in
    every call site. A call site fitted on fewer launches than about two per rank cannot estimate them: a 256-rank
    job's 20 k-launch sample of an op at 333 call sites has ~60 launches per call site for 255 indicators, which
    made the test's share ~0 (whatever the ranks did), cost 0.55 GB (gpuvar.causal.within_site) and 32 of the
    findings' 84 s, growing with the square of the ranks. Such a job's ranks are compared by the rank analysis
    (`gpuvar ranks`)."""
    if not rank_counts or len(rank_counts) < 2 or not len(sites):
        return None
    per_site = float(np.median(pd.Series(sites).value_counts().to_numpy()))
    if per_site >= RANK_LAUNCHES_PER_LEVEL * len(rank_counts):
        return None
    return (
        f"{len(rank_counts)} ranks, a median of {per_site:g} fitted launches per call site, "
        f"fewer than {RANK_LAUNCHES_PER_LEVEL} per rank"
    )


def rank_note(decompositions: list) -> list[str]:
    """The dataset's note on the groups whose context features leave rank out (none when no group does)."""
    left = [d for d in decompositions if d.rank_left_out]
    if not left:
        return []
    first = "in the first: " if len(left) > 1 else ""
    return [
        f"rank is not among the context features of {len(left)} of {len(decompositions)} group(s) "
        f"({first}{left[0].rank_left_out}: too few to estimate a rank effect within each call site); the rank "
        "analysis compares the ranks (gpuvar ranks, explain's ranks page)"
    ]


def decompose_part(group: str, part: pd.DataFrame, inputs: FitInputs, seed: int = 0, exact: Exact | None = None):
    """The decomposition of one group from the launches its fits see (`part`: every launch, or its sample with
    `exact` the group's numbers over every launch)."""
    from gpuvar.findings.features import context_frame, group_features

    sites = call_sites(part).to_numpy()
    step_values = None
    if "step" in part.columns:
        steps = pd.to_numeric(part["step"], errors="coerce")
        if steps.notna().all():
            step_values = steps.to_numpy(dtype=np.float64)
    left_out = rank_left_out(sites, inputs.rank_counts)
    context = context_frame(part, inputs.rank_counts, ranks=left_out is None)
    dec = decompose_group(
        group,
        pd.to_numeric(part["duration"]).to_numpy(dtype=np.float64),
        sites,
        part["kernel_name"].astype("string").fillna("?").to_numpy(dtype=object),
        group_features(part, inputs.size_cols, context, inputs.counters, sites),
        step_values,
        seed,
        exact,
    )
    dec.rank_left_out = left_out
    return dec


def decompose(kernels, seed: int = 0) -> list[Decomposition]:
    """Every group's decomposition (rows with a duration), in group order. `kernels`: a DataFrame or a source
    (gpuvar.findings.source); read batch by batch, each group's fits on at most the cap's launches."""
    from gpuvar.findings.passes import Passes

    if isinstance(kernels, pd.DataFrame) and ("duration" not in kernels.columns or "kernel_name" not in kernels):
        return []
    with Passes(kernels, seed) as passes:
        return [decompose_part(name, part, passes.inputs, seed, exact) for _, name, part, exact in passes.groups()]
