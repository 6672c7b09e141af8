"""Call sites across ranks: how much of each call site's launch-time variance lies between the ranks that run it.

Why: the straggler analysis (gpuvar.ranks.lateness) explains one rank's lateness. A performance engineer with a
multi-rank job also asks the converse per call site: does this GEMM vary because one rank runs it slower (a slow or
throttled GPU, a rank with more work) or within every rank (sizes, contention)? The two call for different fixes.

Per call site, the sum of squared deviations of its launches' durations splits exactly into a part between ranks
(each rank's launch count times its mean's squared distance from the call site's mean) and a part within ranks
(the one-way ANOVA decomposition). `between_share` is the first over the total: 1 when every rank runs the call
site at its own constant speed, 0 when all ranks have the same mean. No p-value is given: a rank's launches follow
each other in time and are not independent draws, so an F-test would overstate the evidence; the share and the
slowest rank's mean against the median rank's say how large the difference is.

The share shrinks with the number of ranks: one slow rank among 256 holds 1/256 of the launches, so even at 1.9x the
median rank it carries ~2 % of the variance when sizes vary within every rank. Whether the slowest rank stands out
is asked of the ranks' means instead: `slowest_robust_z` is its modified z-score among them (Iglewicz and Hoaglin:
0.6745 (mean - median) / MAD, with 1.2533 times the mean absolute deviation in the MAD's place when the MAD is 0;
3.5 and above is their outlier rule). It needs three ranks or more (NaN with two: neither is the odd one out).

What travels in the MPI job (gpuvar.ranks.job): each unit's per-(rank, call site) moments (launches, summed
duration, the sum of squares about the rank's own mean), a few rows per call site and rank, never launches. The
moments of a rank come from its rows in file order by the same arithmetic whichever process reads them, and the
combination runs on sorted rows, so call_sites.csv is the same bytes for any number of processes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.text_safety import md_code

MOMENT_COLUMNS = ["rank", "call_site", "launches", "sum_ns", "m2"]
TOP_SITES = 10  # call sites shown on ranks.md and in ranks.json (call_sites.csv has every one)
MIN_LAUNCHES_PER_RANK = 5  # a rank with fewer launches of a call site says little about its speed there
# a call site worth a sentence: this much of its variance between ranks, its slowest rank this much above the median
SENTENCE_BETWEEN_SHARE = 0.2
SENTENCE_SLOWER = 1.1
SENTENCE_OUTLIER_Z = 3.5  # ... or its mean this far out among the ranks' means (slowest_robust_z)


def site_moments(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, call site), in that order: launches, summed duration (exact integer ns) and m2, the sum of
    squared deviations from the rank's own mean, added in the rows' order. Launches without a call site, a rank
    or both times are left out."""
    needed = {"rank", "call_site", "start", "end"}
    if kernels.empty or not needed <= set(kernels.columns):
        return _empty()
    rank = pd.to_numeric(kernels["rank"], errors="coerce").to_numpy(np.float64)
    start = pd.to_numeric(kernels["start"], errors="coerce").to_numpy(np.float64)
    end = pd.to_numeric(kernels["end"], errors="coerce").to_numpy(np.float64)
    site = kernels["call_site"]
    ok = np.isfinite(rank) & np.isfinite(start) & np.isfinite(end) & site.notna().to_numpy()
    if not ok.any():
        return _empty()
    rows = np.flatnonzero(ok)
    codes, names = pd.factorize(site.iloc[rows].astype(str), sort=True)
    ranks = rank[rows].astype(np.int64)
    duration = pd.to_numeric(kernels["end"].iloc[rows]).to_numpy(np.int64) - pd.to_numeric(
        kernels["start"].iloc[rows]
    ).to_numpy(np.int64)
    order = np.lexsort((codes, ranks))  # by rank, then call site; rows keep their file order inside each pair
    ranks, codes, duration = ranks[order], codes[order], duration[order]
    first = np.flatnonzero(np.r_[True, (ranks[1:] != ranks[:-1]) | (codes[1:] != codes[:-1])])
    launches = np.diff(np.r_[first, len(order)])
    sums = np.add.reduceat(duration, first)
    means = sums / launches
    deviation = duration - np.repeat(means, launches)
    m2 = np.add.reduceat(deviation * deviation, first)
    return pd.DataFrame(
        {
            "rank": ranks[first],
            "call_site": np.asarray(names, dtype=object)[codes[first]],
            "launches": launches.astype(np.int64),
            "sum_ns": sums.astype(np.int64),
            "m2": m2.astype(np.float64),
        }
    )


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "call_site" else np.int64) for c in MOMENT_COLUMNS}).astype(
        {"m2": np.float64}
    )


def across_ranks(moments: pd.DataFrame) -> pd.DataFrame:
    """One row per call site run by two ranks or more, most variance first (the total sum of squares, ns²):
    launches, ranks, mean and sd of a launch (ns), between_share, the slowest rank (highest mean; ties: the lower
    rank), its mean, the median of the ranks' means and the slowest over that median. Ranks with fewer than
    MIN_LAUNCHES_PER_RANK launches of a call site are left out of its row (`ranks_left_out` counts them)."""
    columns = [
        "call_site",
        "launches",
        "ranks",
        "mean_ns",
        "sd_ns",
        "between_share",
        "slowest_rank",
        "slowest_rank_mean_ns",
        "median_rank_mean_ns",
        "slowest_over_median",
        "slowest_robust_z",
        "ranks_left_out",
    ]
    if moments.empty:
        return pd.DataFrame({c: [] for c in columns})
    m = moments.sort_values(["call_site", "rank"], kind="stable").reset_index(drop=True)
    rows = []
    for site, group in m.groupby("call_site", sort=True):
        enough = group[group["launches"] >= MIN_LAUNCHES_PER_RANK]
        if len(enough) < 2:
            continue
        n = enough["launches"].to_numpy(np.int64)
        total_ns = int(enough["sum_ns"].sum())
        count = int(n.sum())
        grand = total_ns / count
        rank_means = enough["sum_ns"].to_numpy(np.float64) / n
        within = float(enough["m2"].sum())
        between = float((n * (rank_means - grand) ** 2).sum())
        total = within + between
        slow = int(np.argmax(rank_means))  # (the first maximum: ranks are sorted)
        median = float(np.median(rank_means))
        rows.append(
            {
                "call_site": site,
                "launches": count,
                "ranks": len(enough),
                "mean_ns": grand,
                "sd_ns": float(np.sqrt(total / count)),
                "between_share": between / total if total > 0 else 0.0,
                "slowest_rank": int(enough["rank"].iloc[slow]),
                "slowest_rank_mean_ns": float(rank_means[slow]),
                "median_rank_mean_ns": median,
                "slowest_over_median": float(rank_means[slow] / median) if median > 0 else float("nan"),
                "slowest_robust_z": robust_z(rank_means, slow),
                "ranks_left_out": int(len(group) - len(enough)),
                "_total": total,
            }
        )
    if not rows:
        return pd.DataFrame({c: [] for c in columns})
    table = pd.DataFrame(rows).sort_values(["_total", "call_site"], ascending=[False, True], kind="stable")
    return table.drop(columns=["_total"]).reset_index(drop=True)[columns]


def robust_z(means: np.ndarray, at: int) -> float:
    """The modified z-score of means[at] among `means` (Iglewicz and Hoaglin); NaN below three values."""
    if len(means) < 3:
        return float("nan")
    median = float(np.median(means))
    deviation = np.abs(means - median)
    mad = float(np.median(deviation))
    if mad > 0:
        return 0.6745 * (float(means[at]) - median) / mad
    mean_ad = float(deviation.mean())  # most ranks at the median: the mean absolute deviation stands in
    return (float(means[at]) - median) / (1.253314 * mean_ad) if mean_ad > 0 else 0.0


def site_records(table: pd.DataFrame, top: int = TOP_SITES) -> list[dict]:
    """The first `top` rows of across_ranks as JSON records (ranks.json), numbers rounded as the page shows them."""
    out = []
    for row in table.head(top).itertuples(index=False):
        out.append(
            {
                "call_site": row.call_site,
                "launches": int(row.launches),
                "ranks": int(row.ranks),
                "mean_ns": round(float(row.mean_ns), 1),
                "sd_ns": round(float(row.sd_ns), 1),
                "between_share": round(float(row.between_share), 6),
                "slowest_rank": int(row.slowest_rank),
                "slowest_over_median": round(float(row.slowest_over_median), 6),
                "slowest_robust_z": None if np.isnan(row.slowest_robust_z) else round(float(row.slowest_robust_z), 3),
            }
        )
    return out


def stands_out(record: dict) -> bool:
    """A call site slower on its slowest rank: SENTENCE_SLOWER above the median rank's mean, and either
    SENTENCE_BETWEEN_SHARE of its variance between ranks or an outlier among the ranks' means (SENTENCE_OUTLIER_Z:
    what one slow rank among many shows)."""
    z = record.get("slowest_robust_z")
    return record["slowest_over_median"] >= SENTENCE_SLOWER and (
        record["between_share"] >= SENTENCE_BETWEEN_SHARE or (z is not None and z >= SENTENCE_OUTLIER_Z)
    )


def _z_text(values: list) -> str:
    """', modified z-score Z among the ranks' means' for the median of the values given, '' without any."""
    values = [v for v in values if v is not None]
    return f", modified z-score {float(np.median(values)):.1f} among the ranks' means" if values else ""


def sites_sentence(records: list[dict]) -> str | None:
    """The finding of the call sites across ranks, from the shown records less the collectives' own call sites
    (their launches include the wait): one rank slowest at most of them, else the call sites that run slower on
    one rank (stands_out), else that they vary within ranks. None without a call site run by two ranks."""
    from gpuvar.ingest.host_collectives import COLLECTIVE_TIERS

    prefixes = tuple(p for tier in COLLECTIVE_TIERS for p in tier)
    sites = [r for r in records if not r["call_site"].startswith(prefixes)]
    if not sites:
        return None
    slower = [r for r in sites if stands_out(r)]
    if not slower:
        most = max(r["between_share"] for r in sites)
        return (
            "the call sites with most launch-time variance (collectives aside) vary within ranks: at most "
            f"{100 * most:.0f} % of their variance lies between ranks (call_sites.csv)"
        )
    ranks = [r["slowest_rank"] for r in slower]
    rank = max(sorted(set(ranks)), key=ranks.count)  # (ties: the lower rank)
    mine = [r for r in slower if r["slowest_rank"] == rank]
    if 2 * len(mine) >= len(sites):
        ratio = float(np.median([r["slowest_over_median"] for r in mine]))
        share = float(np.median([r["between_share"] for r in mine]))
        return (
            f"rank {rank} is the slowest rank at {len(mine)} of the {len(sites)} call sites with most launch-time "
            f"variance (collectives aside): a median {ratio:.2f}x the median rank's mean, {100 * share:.0f} % of "
            f"their variance between ranks{_z_text([r.get('slowest_robust_z') for r in mine])} (call_sites.csv)"
        )
    shown = ", ".join(
        f"{r['call_site']} on rank {r['slowest_rank']} ({r['slowest_over_median']:.2f}x, "
        f"{100 * r['between_share']:.0f} % of its variance between ranks"
        f"{_z_text([r.get('slowest_robust_z')])})"
        for r in slower[:3]
    )
    return f"call sites slower on one rank: {shown} (call_sites.csv)"


def page_lines(records: list[dict]) -> list[str]:
    """The ranks.md section: the call sites with most launch-time variance, and how much of it is between ranks."""
    if not records:
        return []
    lines = [
        "",
        "## Call sites across ranks",
        "",
        "The call sites whose launch times vary most, and the share of that variance between ranks (which rank",
        "ran the launch) rather than within them (docs/ranks.md; every call site: call_sites.csv). The slowest",
        "rank's modified z-score among the ranks' means says whether it stands out (3.5 and above) even where one",
        "rank among many carries little of the variance. A collective's launches include its wait: there the",
        "straggler is the fastest rank, not the slowest.",
        "",
        "| call site | launches | ranks | mean | sd | between ranks | slowest rank (x median rank's mean, z) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        z = r.get("slowest_robust_z")
        lines.append(
            f"| {md_code(r['call_site'])} | {r['launches']} | {r['ranks']} | {r['mean_ns'] / 1e3:.1f} µs "
            f"| {r['sd_ns'] / 1e3:.1f} µs | {100 * r['between_share']:.1f} % "
            f"| {r['slowest_rank']} ({r['slowest_over_median']:.2f}x{'' if z is None else f', z {z:.1f}'}) |"
        )
    return lines
