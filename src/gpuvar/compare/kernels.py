"""Per-kernel comparison: is a kernel (or copy kind) slower in the candidate beyond run-to-run noise, and by how
much time?

Per key (kernel name by default; copies and memsets by kind) in both runs: launches, total time, median, IQR and
coefficient of variation (CV = std / mean, ddof=1). Between runs:
  * ratio of medians (candidate / baseline) with a percentile **cluster bootstrap** interval. Launches of one run
    are not independent: a slow step (contention, a longer sequence) slows every launch in it. So each run's
    resampling units -- its steps, or contiguous time blocks where the trace marks no steps (see inputs.py) --
    are drawn with replacement, and a resample holds every launch of the drawn units. Generators are seeded from
    (seed, key): an interval does not depend on which other kernels exist.
  * p-value: read off the same resampled ratios as the interval (see _bootstrap_test), so that p < alpha exactly
    when the interval (at confidence 1 - alpha) excludes 1; Benjamini-Hochberg across the kernels tested (>=
    `min_launches` launches and >= MIN_UNITS units in both runs) gives q-values that control the false-discovery
    rate at `alpha`. A row whose interval excludes 1 but whose q-value does not pass says so in its hint (it was
    one of many kernels tested).
  * a **minimum effect**: `slower` needs q < alpha, an interval above 1 *and* a ratio of at least 1 + min_effect
    (`faster`: at most 1 / (1 + min_effect)). A significant change smaller than that is `negligible`: on real
    GPUs, two runs of one binary differ by a fraction of a percent, which is not worth anyone's afternoon.
  * time: delta_total_ns = total candidate - total baseline, split exactly into delta_rate_ns (per-launch
    change, (mean_c - mean_b) x launches_c) and delta_count_ns (launch-count change, mean_b x (launches_c -
    launches_b)); summed over the table it is the difference of the two runs' totals. Rows are sorted by
    |delta_total_ns|, so the sign of the sort key is the sign of the time the run lost or gained.
  * verdict: slower / faster / negligible / unchanged; kernels in one run only are added / removed; too few
    launches or units to test: untested.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from gpuvar.kernel_names import labels

_BLOCK = 1 << 22  # resampled values held at once


def _seed(seed: int, key: str) -> np.random.Generator:
    """A generator per kernel from (seed, key): intervals do not depend on the other kernels present."""
    digest = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed, digest]))


def cluster_medians(values: np.ndarray, units: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """`n_boot` replicates of the (lower) median of `values` when whole units (steps, time blocks) are resampled
    with replacement: each replicate weights every value by how often its unit was drawn.

    Values are first reduced to distinct (unit, value) pairs with counts, so repeated durations (Kineto's µs
    clock) cost one column; the weighted lower median is the first sorted value whose cumulative weight reaches
    half the total. Memory is bounded by working through the replicates in blocks."""
    values = np.asarray(values, dtype=np.float64)
    pairs, counts = np.unique(
        np.column_stack([np.asarray(units, dtype=np.float64), values]), axis=0, return_counts=True
    )
    order = np.argsort(pairs[:, 1], kind="stable")
    x, unit_of, counts = pairs[order, 1], pairs[order, 0], counts[order].astype(np.float64)
    codes, cluster = np.unique(unit_of, return_inverse=True)
    g, n = len(codes), len(x)
    out = np.empty(n_boot)
    step = max(1, _BLOCK // max(n, g))
    for a in range(0, n_boot, step):
        b = min(n_boot, a + step)
        m = b - a
        draws = rng.integers(0, g, size=(m, g)) + (np.arange(m) * g)[:, None]
        times_drawn = np.bincount(draws.ravel(), minlength=m * g).reshape(m, g)
        weight = np.cumsum(times_drawn[:, cluster] * counts, axis=1)
        out[a:b] = x[(weight < weight[:, -1:] / 2).sum(axis=1)]
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH-adjusted p-values (q-values) of a 1-D array; NaN entries (untested) stay NaN and do not count."""
    p = np.asarray(p, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0:
        return q
    order = ok[np.argsort(p[ok], kind="mergesort")]
    ranked = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    return q


def describe(durations: np.ndarray) -> dict:
    """Launches, total, median, IQR, mean, std and CV of one kernel's durations in one run."""
    d = np.asarray(durations, dtype=np.float64)
    q25, med, q75 = np.percentile(d, [25, 50, 75])
    mean = float(d.mean())
    std = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
    return {
        "launches": int(len(d)),
        "total_ns": float(d.sum()),
        "median_ns": float(med),
        "iqr_ns": float(q75 - q25),
        "mean_ns": mean,
        "std_ns": std,
        "cv": std / mean if mean > 0 and np.isfinite(std) else float("nan"),
    }


SIDE_COLUMNS = ("launches", "units", "total_ns", "median_ns", "iqr_ns", "mean_ns", "std_ns", "cv", "op")
MIN_UNITS = 10  # steps or time blocks a kernel must appear in, per run, for an interval that means something


def _most_common(ops: np.ndarray | None) -> str | None:
    if ops is None:
        return None
    ops = pd.Series(ops).dropna()
    return str(ops.value_counts(sort=False).sort_index().idxmax()) if len(ops) else None


def _bootstrap_test(b: dict, c: dict, ratio: float, n_boot: int, rng, confidence: float) -> tuple[float, float, float]:
    """(ci_low, ci_high, p_value) of `ratio` = median_c / median_b by the cluster bootstrap of both runs.

    The p-value is read off the same resampled ratios as the interval, so that at confidence = 1 - alpha a
    p below alpha means the interval excludes 1, and the other way round (a row reading x0.37 [0.01, 0.63] is
    never 'unchanged' for want of significance):
      * the side p: a normal tail whose scale is the distance from the ratio to the bound facing 1 (in log
        ratio), so it crosses 1 - confidence exactly where that bound crosses 1. It stays continuous where no
        resample crosses 1 (Benjamini-Hochberg over hundreds of kernels is not floored at 1 / bootstrap), and,
        unlike a Wald p from the standard deviation of all resamples, it is not inflated by the far side of a
        skewed or two-mode distribution (medians that jump between modes);
      * the percentile p: twice the share of resampled ratios on the far side of 1 (at least 1 / (resamples +
        1)), which keeps a ratio whose bound facing 1 sits on the ratio itself (discrete clocks) from p = 0.
    p is the larger of the two."""
    from scipy.stats import norm

    ratios = cluster_medians(c["duration"], c["unit"], n_boot, rng) / cluster_medians(
        b["duration"], b["unit"], n_boot, rng
    )
    lo, hi = np.percentile(ratios, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
    log_ratio = np.log(ratio)
    facing = lo if ratio >= 1 else hi  # the bound between the ratio and 1
    width = abs(log_ratio - np.log(facing)) / norm.ppf((1 + confidence) / 2)
    if width > 0:
        side = float(2 * norm.sf(abs(log_ratio) / width))
    else:  # the bound facing 1 is the ratio itself: the percentile p decides
        side = 0.0 if log_ratio != 0 else 1.0
    beyond = min(float(np.mean(ratios <= 1)), float(np.mean(ratios >= 1)))
    percentile = min(1.0, max(2 * beyond, 1 / (len(ratios) + 1)))
    return float(lo), float(hi), max(side, percentile)


def _groups(frame: pd.DataFrame) -> dict[str, dict]:
    """Per key: durations, units, launching ops and kind, as arrays."""
    cols = [c for c in ("duration", "unit", "op", "kind", "work", "config") if c in frame.columns]
    out = {}
    for key, g in frame.groupby("key", sort=True):
        out[key] = {c: g[c].to_numpy() for c in cols}
    return out


def compare_kernels(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    bootstrap: int = 2000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    min_launches: int = 5,
    min_effect: float = 0.02,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per key of either run (TABLE_COLUMNS), ordered by |delta_total_ns| then key.

    Frames hold `key` and `duration` per launch, and optionally `unit` (resampling unit; without it every
    launch is its own unit), `op` (launching op) and `kind` (kernel / copy / memset)."""
    groups_b, groups_c = _groups(_with_units(baseline)), _groups(_with_units(candidate))
    rows = []
    for key in sorted(set(groups_b) | set(groups_c)):
        b, c = groups_b.get(key), groups_c.get(key)
        row = {"key": key, "kind": str((b or c).get("kind", np.array(["kernel"]))[0])}
        for suffix, g in (("b", b), ("c", c)):
            if g is None:
                stats = dict.fromkeys(SIDE_COLUMNS, float("nan")) | {"launches": 0, "units": 0, "total_ns": 0.0}
                stats["op"] = None
            else:
                stats = describe(g["duration"]) | {
                    "units": int(len(np.unique(g["unit"]))),
                    "op": _most_common(g.get("op")),
                }
            row.update({f"{k}_{suffix}": v for k, v in stats.items()})
        row.update(ratio=np.nan, ci_low=np.nan, ci_high=np.nan, p_value=np.nan, delta_cv=np.nan)
        row.update(work_ratio=np.nan, config_distance=np.nan, hint="")
        row["delta_total_ns"] = row["total_ns_c"] - row["total_ns_b"]
        if b is None or c is None:
            row["status"] = "added" if b is None else "removed"
            row["delta_rate_ns"], row["delta_count_ns"] = 0.0, row["delta_total_ns"]
            rows.append(row)
            continue
        row["status"] = "both"
        row["ratio"] = row["median_ns_c"] / row["median_ns_b"]
        row["delta_cv"] = row["cv_c"] - row["cv_b"]
        row["delta_rate_ns"] = (row["mean_ns_c"] - row["mean_ns_b"]) * row["launches_c"]
        row["delta_count_ns"] = row["mean_ns_b"] * (row["launches_c"] - row["launches_b"])
        row.update(inputs_changed(b, c, row["kind"]))
        enough = min(row["launches_b"], row["launches_c"]) >= min_launches
        if enough and min(row["units_b"], row["units_c"]) >= MIN_UNITS:
            row["ci_low"], row["ci_high"], row["p_value"] = _bootstrap_test(
                b, c, row["ratio"], bootstrap, _seed(seed, key), confidence
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:  # both runs without a usable kernel: an empty table with every column
        return pd.DataFrame(columns=TABLE_COLUMNS)
    table["q_value"] = benjamini_hochberg(table["p_value"].to_numpy())
    table["verdict"] = [_verdict(r, alpha, min_effect) for r in table.to_dict("records")]
    tested = int(np.isfinite(table["p_value"].to_numpy(dtype=np.float64)).sum())
    table["hint"] = [_with_why(r, alpha, tested) for r in table.to_dict("records")]
    table["label"] = labels(
        table["key"].tolist(), [rb if rc is None else rc for rb, rc in zip(table["op_b"], table["op_c"])]
    )
    table["_order"] = -table["delta_total_ns"].abs()
    table = table.sort_values(["_order", "key"], kind="mergesort").drop(columns="_order").reset_index(drop=True)
    return table[TABLE_COLUMNS]


WORK_CHANGE = 0.05  # work per launch (grid blocks, bytes) differing by more than this is named in the hint
MIX_CHANGE = 0.2  # total-variation distance of launch configurations above which the inputs differ


def inputs_changed(b: dict, c: dict, kind: str) -> dict:
    """Did the kernel get other work in the candidate? work_ratio: mean grid blocks (copies: bytes) per launch,
    candidate / baseline; config_distance: total-variation distance between the runs' launch-configuration
    mixes (0 same, 1 disjoint); hint: a sentence when either says the inputs changed -- then a slower or
    faster median is (at least partly) other work, not the same work running at another speed."""
    out = {"work_ratio": np.nan, "config_distance": np.nan, "hint": ""}
    work = [g.get("work") for g in (b, c)]
    if all(w is not None and np.isfinite(w.astype(np.float64)).any() for w in work):
        mb, mc = (float(np.nanmean(w.astype(np.float64))) for w in work)
        out["work_ratio"] = mc / mb if mb > 0 else np.nan
    configs = [g.get("config") for g in (b, c)]
    if all(x is not None and pd.notna(x).any() for x in configs):
        pb, pc = (pd.Series(x).value_counts(normalize=True) for x in configs)
        out["config_distance"] = float(0.5 * pb.sub(pc, fill_value=0).abs().sum())
    unit = "bytes" if kind != "kernel" else "grid blocks"
    if np.isfinite(out["work_ratio"]) and abs(out["work_ratio"] - 1) > WORK_CHANGE:
        out["hint"] = f"{unit} per launch ×{out['work_ratio']:.3g}: other work per launch"
    elif np.isfinite(out["config_distance"]) and out["config_distance"] > MIX_CHANGE:
        share = f"{100 * out['config_distance']:.0f} %"
        out["hint"] = f"launch configurations differ ({share} of launches): other inputs"
    return out


def _with_units(frame: pd.DataFrame) -> pd.DataFrame:
    if "unit" in frame.columns:
        return frame
    return frame.assign(unit=np.arange(len(frame), dtype=np.int64))


FIRST_COLUMNS = [
    "key",
    "label",
    "kind",
    "status",
    "verdict",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
    "q_value",
    "delta_total_ns",
    "delta_rate_ns",
    "delta_count_ns",
    "delta_cv",
    "work_ratio",
    "config_distance",
    "hint",
]
TABLE_COLUMNS = FIRST_COLUMNS + [f"{k}_{s}" for s in ("b", "c") for k in SIDE_COLUMNS]
VERDICTS = ("slower", "faster", "negligible", "unchanged", "untested", "added", "removed")


def _with_why(row: dict, alpha: float, tested: int) -> str:
    """The row's hint, plus why an `unchanged` row's interval excludes 1: its q-value did not pass once every
    tested kernel counts (Benjamini-Hochberg), so the change is not shown at the false-discovery rate."""
    hint = row["hint"] or ""
    excludes = row["ci_low"] > 1 or row["ci_high"] < 1
    if row["verdict"] == "unchanged" and excludes:
        why = (
            f"interval excludes 1 but q = {row['q_value']:.2g} ≥ {alpha:g} with {tested} kernels tested: "
            "not shown to differ"
        )
        hint = f"{hint}; {why}" if hint else why
    return hint


def _verdict(row: dict, alpha: float, min_effect: float) -> str:
    if row["status"] != "both":
        return row["status"]
    if not np.isfinite(row["p_value"]):
        return "untested"
    if not row["q_value"] < alpha:
        return "unchanged"
    if row["ci_low"] > 1 and row["ratio"] >= 1 + min_effect:
        return "slower"
    if row["ci_high"] < 1 and row["ratio"] <= 1 / (1 + min_effect):
        return "faster"
    return "negligible" if row["ci_low"] > 1 or row["ci_high"] < 1 else "unchanged"
