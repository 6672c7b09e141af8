"""Linear models of a group's durations within its call sites, with a slope per call site.

Why a slope per call site: one op's call sites are different computations (the QKV and the LM-head GEMMs of a
model, the attention and the MLP matmuls): when the sequence length grows, each gets slower at its own rate. A
model with one slope for all of them, fitted on durations centred per call site, underfits exactly the case a
user cares most about (on a GPT-2 training trace it left 70 % of the GEMMs' within-call-site variance to
"unexplained", while the sequence length explains 99.5 % of it per call site). So every call site with at least
MIN_SITE_FIT launches has its own coefficients; the smaller call sites share one set (on their centred data,
each keeping its own intercept), since a handful of launches cannot carry a slope of their own.

within_test asks how much features explain there (cross-validated share, permutation p-value within call sites,
verdict: gpuvar.causal.share_test), for the findings of every launch and for each causal graph's verdict alike.

Everything here works on data already centred per call site (centred), rows sorted by slope group; per-group sums are
`np.add.reduceat` over contiguous segments, so a fit, a projection or a permutation costs a few passes over
the rows whatever the number of call sites. Those passes cost rows x columns**2 elementwise, though: a job of 256
ranks has a 0/1 indicator per rank among the context features, and its findings spent 88 % of 41 s there. A
design of more than WIDE_COLUMNS columns is therefore fitted and projected one slope group at a time with
matrix products (WideBasis, _fit_predict_wide): the same least squares and the same spans, to rounding.
"""

from __future__ import annotations

import numpy as np

from gpuvar.blas_kernels import one_blas_thread
from gpuvar.causal.share_test import (
    DECLINED,
    MIN_ROWS,
    NOT_EXPLAINED,
    PERMUTATIONS,
    RESIDUAL_ALPHA,
    ShareTest,
    residual_dependence_of,
    verdict_of,
)

MIN_SITE_FIT = 10  # launches: a call site with fewer shares its slope with the other small call sites
RIDGE = 1e-9  # relative ridge on the per-group normal equations: collinear features get a minimum-norm fit
_TOL = 1e-9
DRIVER_MIN_SHARE = 0.05  # a feature (or counter) adding less of the within-call-site variance is not a driver
MAX_COUNTERS = 3  # counters chosen by select_counters at most
FIT_BLOCK_BYTES = 32 << 20  # the per-group normal equations fit_predict holds at once
WIDE_COLUMNS = 32  # designs of more columns are fitted and projected group by group with BLAS (WideBasis)


class SlopeGroups:
    """Rows sorted by slope group: `order` sorts the caller's rows, `starts` are the groups' first rows."""

    def __init__(self, site_codes: np.ndarray):
        codes = np.asarray(site_codes, dtype=np.int64)
        counts = np.bincount(codes) if len(codes) else np.zeros(0, np.int64)
        small = counts < MIN_SITE_FIT
        group_of_site = np.where(small, -1, np.arange(len(counts)))
        group = group_of_site[codes] if len(codes) else codes
        _, self.codes = np.unique(group, return_inverse=True)
        self.order = np.argsort(self.codes, kind="stable")
        sorted_codes = self.codes[self.order]
        self.n_groups = int(sorted_codes.max()) + 1 if len(codes) else 0
        self.starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if len(codes) else codes
        self.sorted_codes = sorted_codes

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-group sums of sorted rows (1-D or 2-D, summed along the rows)."""
        if not len(values):
            return np.zeros((self.n_groups,) + values.shape[1:])
        return np.add.reduceat(values, self.starts, axis=0)

    def spread(self, per_group: np.ndarray) -> np.ndarray:
        return per_group[self.sorted_codes]


class Basis:
    """Orthonormal columns within each slope group (each column has unit norm in every group where it is not
    zero): projections onto a growing set of features with a slope per group."""

    def __init__(self, groups: SlopeGroups, n: int):
        self.groups = groups
        self.columns: list[np.ndarray] = []
        self.n = n

    def copy(self) -> Basis:
        out = Basis(self.groups, self.n)
        out.columns = list(self.columns)
        return out

    def residual(self, x: np.ndarray) -> np.ndarray:
        g = self.groups
        for q in self.columns:
            x = x - q * g.spread(g.sums(q * x))
        return x

    def add(self, x: np.ndarray) -> bool:
        """Add the part of x (sorted rows) not spanned yet; False when nothing is left in any group."""
        g = self.groups
        before = np.sqrt(g.sums(x * x))
        r = self.residual(x)
        r = self.residual(r)  # twice: Gram-Schmidt keeps orthogonality in floating point
        norm = np.sqrt(g.sums(r * r))
        ok = norm > _TOL * np.maximum(before, 1e-300)
        if not ok.any():
            return False
        self.columns.append(np.where(g.spread(ok), r / g.spread(np.where(ok, norm, 1.0)), 0.0))
        return True

    def explained(self, y: np.ndarray) -> float:
        """Sum of squares of y (sorted rows, 1-D) in the span of the columns."""
        g = self.groups
        return float(sum((g.sums(q * y) ** 2).sum() for q in self.columns))

    def explained_many(self, Y: np.ndarray) -> np.ndarray:
        """The same for each column of Y (sorted rows, 2-D)."""
        g = self.groups
        out = np.zeros(Y.shape[1])
        for q in self.columns:
            out += (g.sums(q[:, None] * Y) ** 2).sum(axis=0)
        return out


class WideBasis:
    """Basis for many columns: per slope group, blocks of orthonormal columns (rows of the group x columns) that
    project with matrix products. The same span as Basis's column by column: a column is kept in a group where
    what the columns before it leave of it is above _TOL of its norm (Householder's |R_jj|, after projecting the
    basis out twice, as Basis's Gram-Schmidt does), else left out there."""

    def __init__(self, groups: SlopeGroups, n: int):
        self.groups, self.n = groups, n
        bounds = np.r_[groups.starts, n].astype(np.int64)
        self.rows = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self.blocks: list[list[np.ndarray]] = [[] for _ in self.rows]

    def copy(self) -> WideBasis:
        out = WideBasis.__new__(WideBasis)
        out.groups, out.n, out.rows = self.groups, self.n, self.rows
        out.blocks = [list(b) for b in self.blocks]
        return out

    def _project_out(self, g: int, X: np.ndarray) -> np.ndarray:
        for Q in self.blocks[g]:
            X = X - Q @ (Q.T @ X)
        return X

    def add_columns(self, X: np.ndarray) -> bool:
        """Add the part of X's columns (sorted rows, 2-D) not spanned yet; False when nothing is left anywhere.

        Which columns add to a group's span: a QR with column pivoting of what the basis leaves of them (each step
        takes the column with most left, so the dependent ones come last: a QR in column order would give a zero
        or dependent column a direction of its own and drop independent columns after it); a column adds where
        what is left of it is above _TOL of its norm. The kept columns, in their pivot order, are then made
        orthonormal by a plain QR."""
        from scipy.linalg import qr

        added = False
        with one_blas_thread():
            for g, rows in enumerate(self.rows):
                added |= self._add_in_group(g, X[rows], qr)
        return added

    def _add_in_group(self, g: int, Xg: np.ndarray, qr) -> bool:
        """add_columns in slope group g (Xg: its rows)."""
        before = np.sqrt((Xg * Xg).sum(axis=0))
        live = np.flatnonzero(before > 0)  # (a column of zeros in the group adds nothing there)
        if not len(live):
            return False
        R = self._project_out(g, self._project_out(g, Xg[:, live]))
        triangle, pivots = qr(R, mode="r", pivoting=True, check_finite=False)
        left = np.abs(np.diagonal(triangle))
        kept = pivots[: len(left)][left > _TOL * before[live][pivots[: len(left)]]]
        if not len(kept):
            return False
        self.blocks[g].append(np.linalg.qr(R[:, kept])[0])
        return True

    def add(self, x: np.ndarray) -> bool:
        return self.add_columns(x[:, None])

    def residual(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype=np.float64)
        for g, rows in enumerate(self.rows):
            out[rows] = self._project_out(g, out[rows])
        return out

    def explained(self, y: np.ndarray) -> float:
        return float(self.explained_many(y[:, None])[0])

    def explained_many(self, Y: np.ndarray) -> np.ndarray:
        out = np.zeros(Y.shape[1])
        for g, rows in enumerate(self.rows):
            for Q in self.blocks[g]:
                out += ((Q.T @ Y[rows]) ** 2).sum(axis=0)
        return out


def basis_of(groups: SlopeGroups, X: np.ndarray) -> Basis | WideBasis:
    """The basis spanned by the columns of X (sorted rows); a WideBasis beyond WIDE_COLUMNS columns."""
    if X.shape[1] > WIDE_COLUMNS:
        wide = WideBasis(groups, X.shape[0])
        wide.add_columns(X)
        return wide
    b = Basis(groups, X.shape[0])
    for k in range(X.shape[1]):
        b.add(X[:, k])
    return b


def fit_predict(groups: SlopeGroups, X: np.ndarray, y: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Predictions for every row from per-group least squares on the `train` rows (sorted rows; no intercept:
    the data are centred per call site). A group without training rows predicts 0 (its call-site mean).

    The normal equations are built and solved FIT_BLOCK_BYTES of them at a time (blocks of consecutive groups,
    each a contiguous run of rows). Why: they hold groups x k x k numbers, and a job of many ranks has a 0/1
    indicator per rank among the context features: 256 ranks and 1000 call sites made 0.55 GB of them, twice,
    the findings' peak. Each group's sums and solve are its own, so the blocks give the numbers of one pass."""
    n, k = X.shape
    if k == 0 or n == 0:
        return np.zeros(n)
    w = train.astype(np.float64)
    if k > WIDE_COLUMNS:
        return _fit_predict_wide(groups, X, y, w)
    starts = groups.starts
    bounds = np.r_[starts, n]
    per_block = max(1, FIT_BLOCK_BYTES // (8 * k * k))
    pred = np.empty(n)
    for g0 in range(0, groups.n_groups, per_block):
        g1 = min(g0 + per_block, groups.n_groups)
        rows = slice(bounds[g0], bounds[g1])
        segments = starts[g0:g1] - bounds[g0]
        Xb, wb = X[rows], w[rows]
        G = np.empty((g1 - g0, k, k))
        for i in range(k):  # row i of each group's X'WX: one pass over the block (the same sums as pair by pair)
            G[:, i, i:] = np.add.reduceat((wb * Xb[:, i])[:, None] * Xb[:, i:], segments, axis=0)
            G[:, i + 1 :, i] = G[:, i, i + 1 :]
        b = np.add.reduceat((wb * y[rows])[:, None] * Xb, segments, axis=0)
        scale = np.maximum(np.trace(G, axis1=1, axis2=2) / k, 1e-300)
        G[:, np.arange(k), np.arange(k)] += RIDGE * scale[:, None]
        beta = np.linalg.solve(G, b[:, :, None])[:, :, 0]
        pred[rows] = (Xb * beta[groups.sorted_codes[rows] - g0]).sum(axis=1)
    return pred


def _fit_predict_wide(groups: SlopeGroups, X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """fit_predict one slope group at a time: each group's X'WX and X'Wy as matrix products (the same normal
    equations and ridge, summed in BLAS's order)."""
    n, k = X.shape
    pred = np.empty(n)
    bounds = np.r_[groups.starts, n]
    diagonal = np.arange(k)
    with one_blas_thread():
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            Xg, wg = X[a:b], w[a:b]
            weighted = Xg * wg[:, None]
            G = weighted.T @ Xg
            G[diagonal, diagonal] += RIDGE * max(float(np.trace(G)) / k, 1e-300)
            pred[a:b] = Xg @ np.linalg.solve(G, weighted.T @ y[a:b])
    return pred


def cv_r2(groups: SlopeGroups, X: np.ndarray, y: np.ndarray, folds: np.ndarray, extra=None) -> float:
    """1 - out-of-fold squared error / sum of squares of y, clipped to [0, 1] (sorted rows). extra(train): more
    columns chosen on a fold's training rows only (counters: the choice is part of what is validated)."""
    total = float((y**2).sum())
    if total <= 0:
        return 0.0
    error = 0.0
    for f in np.unique(folds):
        test = folds == f
        more = extra(~test) if extra is not None else None
        design = np.column_stack([X, more]) if more is not None and more.shape[1] else X
        pred = fit_predict(groups, design, y, ~test)
        error += float(((y[test] - pred[test]) ** 2).sum())
    return float(min(1.0, max(0.0, 1.0 - error / total)))


_UNIT_BITS = 53  # Generator.random draws k / 2**53 with an integer k < 2**53: k is that draw, exactly
_KEY_SITES = 1 << (64 - _UNIT_BITS)  # call sites one uint64 key holds above the draw


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable"), exactly, at the speed of numpy's default sort (a SIMD quicksort on x86:
    0.18 ms against 0.79 ms for 20,000 uint64 keys). The two orders differ only among equal keys, so the fast
    order is checked for a tie (one pass over the sorted keys) and the stable sort runs only when there is one:
    a copy's keys hold a 53-bit draw each, so a tie is a chance of about n**2 / 2**54 (1e-8 at 20,000 rows)."""
    order = np.argsort(keys)
    ranked = keys[order]
    if len(keys) > 1 and (ranked[1:] == ranked[:-1]).any():
        return np.argsort(keys, kind="stable")
    return order


def within_permutations(groups: SlopeGroups, site_codes_sorted: np.ndarray, y: np.ndarray, count: int, rng):
    """`count` copies of y (sorted rows) each permuted within its call site (columns of a 2-D array).

    Each copy's order is the rows sorted by (call site, a uniform draw), ties by row, as
    `np.lexsort((rng.random(n), sites))` gives it. Why not lexsort: it was most of the findings' time (two merge
    sorts of every row per copy, 200 copies per test). The rows are put in call-site order once; each copy then
    sorts one uint64 key per row, the site's rank in the high bits and the draw's integer k (draw = k / 2**53,
    exact) in the low 53: the same order, ties included, 3x faster. More call sites than the high bits hold: lexsort.
    The keys are sorted by stable_argsort: numpy's SIMD sort, the stable one only where two keys are equal."""
    n = len(y)
    base = np.argsort(site_codes_sorted, kind="stable")
    in_site_order = site_codes_sorted[base]
    site_rank = np.r_[0, np.cumsum(in_site_order[1:] != in_site_order[:-1])] if n else np.zeros(0, np.int64)
    keyed = n == 0 or site_rank[-1] < _KEY_SITES
    high = site_rank.astype(np.uint64) << np.uint64(_UNIT_BITS)
    out = np.empty((n, count))
    for c in range(count):
        draws = rng.random(n)
        if keyed:
            shuffled = base[stable_argsort(high | (draws[base] * 2.0**_UNIT_BITS).astype(np.uint64))]
        else:
            shuffled = np.lexsort((draws, site_codes_sorted))
        column = np.empty(n)
        column[base] = y[shuffled]
        out[:, c] = column
    return out


def centred(values: np.ndarray, codes: np.ndarray, n_sites: int) -> np.ndarray:
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


def standardise(X: np.ndarray) -> np.ndarray:
    if X.shape[1] == 0:
        return X
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1)


def select_counters(groups: SlopeGroups, F: np.ndarray, C: np.ndarray, y: np.ndarray, rows=None) -> list[int]:
    """Up to MAX_COUNTERS columns of C that, one after another, explain most of y left after F (greedy, in
    sample, on `rows` only when given), each adding at least DRIVER_MIN_SHARE of y's sum of squares."""
    if C.shape[1] == 0:
        return []
    w = np.ones(len(y)) if rows is None else rows.astype(np.float64)
    y = y * w
    total = float((y**2).sum())
    if total <= 0:
        return []
    basis = basis_of(groups, F * w[:, None])
    chosen: list[int] = []
    for _ in range(MAX_COUNTERS):
        before = basis.explained(y)
        gains = []
        for k in range(C.shape[1]):
            if k in chosen:
                gains.append(0.0)
                continue
            b = basis.copy()
            gains.append((b.explained(y) - before) / total if b.add(C[:, k] * w) else 0.0)
        best = int(np.argmax(gains))
        if gains[best] < DRIVER_MIN_SHARE:
            break
        chosen.append(best)
        basis.add(C[:, best] * w)
    return chosen


def _cv_with_counters(groups: SlopeGroups, F, C, y, folds) -> float:
    """Cross-validated R^2 on F plus the counters of C chosen on each fold's training rows."""
    if not C.shape[1]:
        return cv_r2(groups, F, y, folds)
    return cv_r2(groups, F, y, folds, lambda train: C[:, select_counters(groups, F, C, y, train)])


def _permutation_p(groups: SlopeGroups, sites: np.ndarray, F, C, y, observed: float, seed: int) -> float:
    """How often y permuted within its call sites is explained as well (the counter choice repeated for each)."""
    rng = np.random.default_rng(seed)
    total = float((y**2).sum())
    hits, done, block = 0, 0, 25
    basis = basis_of(groups, F) if not C.shape[1] else None
    while done < PERMUTATIONS:
        m = min(block, PERMUTATIONS - done)
        Y = within_permutations(groups, sites, y, m, rng)
        if basis is not None:
            stats = basis.explained_many(Y) / total
        else:
            stats = []
            for c in range(m):
                picked = select_counters(groups, F, C, Y[:, c])
                stats.append(basis_of(groups, np.column_stack([F, C[:, picked]])).explained(Y[:, c]) / total)
            stats = np.asarray(stats)
        hits += int((stats >= observed - 1e-12).sum())
        done += m
    return (1 + hits) / (1 + PERMUTATIONS)


def _varying(X: np.ndarray) -> np.ndarray:
    return np.array([k for k in range(X.shape[1]) if np.isfinite(X[:, k]).all() and np.ptp(X[:, k]) > 0], dtype=int)


def within_test(
    groups: SlopeGroups,
    sites: np.ndarray,
    F: np.ndarray,
    C: np.ndarray,
    y: np.ndarray,
    names: list[str],
    folds: np.ndarray,
    seed: int,
    residual_check: bool = True,
    site_means: np.ndarray | None = None,
) -> ShareTest:
    """How much of the centred durations y (sorted rows) the features F (and counters chosen from C) explain with
    a slope per call site: cross-validated share, permutation p-value within call sites, verdict."""
    n = len(y)
    if n < MIN_ROWS:
        return ShareTest(DECLINED, rows=n, reason=f"too few launches ({n} < {MIN_ROWS})")
    if float((y**2).sum()) <= 0:
        return ShareTest(DECLINED, rows=n, reason="nothing to explain: no variance within call sites")
    f_keep, c_keep = _varying(F), _varying(C)
    F, C = standardise(F[:, f_keep]), standardise(C[:, c_keep])
    names = [names[k] for k in f_keep] + [names[F.shape[1] + k] for k in c_keep] if len(names) else []
    if F.shape[1] + C.shape[1] == 0:
        return ShareTest(NOT_EXPLAINED, rows=n, reason="no recorded feature varies within call sites")
    share = _cv_with_counters(groups, F, C, y, folds)
    picked = select_counters(groups, F, C, y)
    X = np.column_stack([F, C[:, picked]]) if picked else F
    total = float((y**2).sum())
    observed = basis_of(groups, X).explained(y) / total
    p = _permutation_p(groups, sites, F, C, y, observed, seed)
    verdict = verdict_of(share, p)
    used = names[: F.shape[1]] + [names[F.shape[1] + k] for k in picked]
    result = ShareTest(verdict, share, observed, p, n, used)
    if residual_check and verdict != NOT_EXPLAINED:
        fitted = fit_predict(groups, X, y, np.ones(n, dtype=bool))
        absolute = (fitted if site_means is None else site_means + fitted)[:, None]
        result.residual_p = residual_dependence_of(absolute, fitted, y - fitted, seed)
        result.residuals_depend = result.residual_p < RESIDUAL_ALPHA
    return result
