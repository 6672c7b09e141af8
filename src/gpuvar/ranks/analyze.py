"""Per step and rank: time, busy, idle, wait in the collective, arrival, lateness; the straggler and its driver.

Definitions (docs/ranks.md): a rank's step spans its launches of that step (first start to last end); busy
is the union of its kernel and copy intervals in the step; idle = time - busy; wait is the time the rank
spends inside the step's collective; arrival is when it enters the collective, so the last rank to arrive
is the late one and its lateness is how long after the next-to-last rank it came. Collectives are matched
across ranks by order (every rank of a process group issues them in the same order)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar.ranks.gpus import sharing
from gpuvar.ranks.lateness import lateness, median_pace, sentence
from gpuvar.ranks.load import RankInput
from gpuvar.ranks.sites import across_ranks, site_moments, site_records, sites_sentence
from gpuvar.units import duration_text

WAIT_LINES_MAX = 8  # ranks whose waits are one finding each; beyond, the straggler's and the others' range


@dataclass
class RankAnalysis:
    steps: pd.DataFrame  # one row per (step, rank)
    summary: dict
    findings: list[str]
    sites: pd.DataFrame = field(default_factory=pd.DataFrame)  # call sites across ranks (gpuvar.ranks.sites)


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals: overlapping kernels and copies count once."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]  # an interval starting after everything before it: a new block
    # reach never decreases, so a block ends at its last interval's reach (a groupby max per block was most of
    # the rank analysis' time)
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]
    return int((reach[last] - s[new]).sum())


def launches_of(data: RankInput) -> pd.DataFrame:
    k = data.kernels.assign(kind="kernel")
    m = data.copies.assign(kind="copy")
    both = pd.concat([k, m], ignore_index=True)
    both = both[both["step"].notna()].copy()
    both["step"] = both["step"].astype(np.int64)
    return both


def step_rows(launches: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step) of the launches: start, end, time, busy, idle (ns); sorted by rank, then step."""
    rows = []
    for (rank, step), g in launches.groupby(["rank", "step"], sort=True):
        start, end = g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
        s0, s1 = int(start.min()), int(end.max())
        busy = union_ns(start, end)
        rows.append((int(step), int(rank), s0, s1, s1 - s0, busy, s1 - s0 - busy))
    return pd.DataFrame(rows, columns=["step", "rank", "start_ns", "end_ns", "time_ns", "busy_ns", "idle_ns"])


def collective_steps(collectives: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """The collectives that fall in a step, with it: the step of the rank's last launch starting before each."""
    col = collectives.copy()
    col["step"] = -1
    for rank, g in col.groupby("rank"):
        mine = launches[launches["rank"] == rank].sort_values("start", kind="stable")
        idx = np.searchsorted(mine["start"].to_numpy(), g["start"].to_numpy(), side="right") - 1
        col.loc[g.index, "step"] = np.where(idx >= 0, mine["step"].to_numpy()[np.maximum(idx, 0)], -1)
    return col[col["step"] >= 0]


def _first(col: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: its first collective's start (the arrival), that collective's seq, how many."""
    return (
        col.sort_values(["rank", "seq"])
        .groupby(["rank", "step"], as_index=False)
        .agg(arrival_ns=("start", "first"), seq=("seq", "first"), collectives=("seq", "size"))
    )


@dataclass
class LocalSteps:
    """What each rank's own launches give (gpuvar.ranks.job computes it rank by rank, so launches never travel):
    its step rows, the step of each of its collectives and its host gaps before arrival."""

    ranks: list[int]  # ranks with a launch in a step
    steps: pd.DataFrame  # step_rows
    col_steps: pd.DataFrame  # rank, seq, step of each collective in a step
    pre_idle: pd.DataFrame  # rank, step, pre_idle_ns


def local_steps(launches: pd.DataFrame, collectives: pd.DataFrame) -> LocalSteps:
    """The per-rank part of the analysis, from `launches_of` and the collectives' (rank, seq, start): nothing here
    depends on another rank's launches or on the collectives' ends."""
    steps = step_rows(launches)
    col = collective_steps(collectives, launches)
    with_arrival = steps.merge(_first(col), on=["rank", "step"], how="left")
    pre_idle = steps[["rank", "step"]].assign(pre_idle_ns=_pre_idle(with_arrival, launches))
    ranks = sorted(int(r) for r in launches["rank"].unique())
    return LocalSteps(ranks, steps, col[["rank", "seq", "step"]], pre_idle)


def _arrivals(col: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """Per collective (seq) present on every rank: the last rank and how late it came."""
    wide = col.pivot_table(index="seq", columns="rank", values="start", aggfunc="first").reindex(columns=ranks)
    wide = wide.dropna()
    a = wide.to_numpy(np.float64)
    order = np.argsort(-a, axis=1, kind="stable")  # ties: the lower rank counts as last
    last = np.array(ranks)[order[:, 0]]
    top = np.take_along_axis(a, order[:, :2], axis=1)
    return pd.DataFrame(
        {"seq": wide.index.to_numpy(), "last_rank": last, "late_by_ns": (top[:, 0] - top[:, 1]).astype(np.int64)}
    ), wide.sub(wide.min(axis=1), axis=0)


def _pre_idle(steps: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """Device-idle time between step start and arrival: the host gaps before the collective."""
    out = np.full(len(steps), np.nan)
    grouped = {key: g for key, g in launches.groupby(["rank", "step"])}
    for i, row in enumerate(steps.itertuples(index=False)):
        if np.isnan(row.arrival_ns):
            continue
        g = grouped[(row.rank, row.step)]
        s = g["start"].to_numpy(np.int64)
        e = np.minimum(g["end"].to_numpy(np.int64), int(row.arrival_ns))
        keep = s < row.arrival_ns
        out[i] = (row.arrival_ns - row.start_ns) - union_ns(s[keep], e[keep])
    return out


def analyze(data: RankInput, seed: int = 0) -> RankAnalysis:
    """The whole analysis in one process, every launch in memory (`gpuvar ranks` runs gpuvar.ranks.job instead:
    the same functions rank by rank, byte-identical outputs)."""
    local = local_steps(launches_of(data), data.collectives)

    def explain(steps: pd.DataFrame, straggler: int) -> dict:
        return lateness(steps, data, straggler, sharing(data.kernels, straggler), seed)

    return combine(local, data, explain, seed, site_moments(data.kernels))


def combine(local: LocalSteps, data: RankInput, explain, seed: int = 0, moments=None) -> RankAnalysis:
    """Every rank's LocalSteps with what concerns all ranks: the collectives (their waits), each rank's span, the
    dropped collectives and the job checks of `data` (its launches are not read here, gpuvar.ranks.job passes
    none): arrivals, lateness, waits, the straggler; `explain(steps, straggler)` gives the straggler's driver
    record (gpuvar.ranks.lateness), its median pace is computed from the step table. moments: every rank's
    per-call-site moments (gpuvar.ranks.sites.site_moments), for the call sites across ranks."""
    ranks = local.ranks
    if len(ranks) < 2:
        summary = {"ranks": ranks, "result": "one rank: nothing to compare"}
        return RankAnalysis(pd.DataFrame(), summary, [f"one rank ({ranks[0]}): nothing to compare"])
    col = data.collectives.merge(local.col_steps, on=["rank", "seq"])
    arrivals, skew = _arrivals(col, ranks)
    steps = local.steps.merge(_first(col), on=["rank", "step"], how="left").merge(
        _waits(col, local.steps), on=["rank", "step"], how="left"
    )
    for column in ("wait_ns", "wait_in_step_ns"):
        steps[column] = pd.to_numeric(steps[column]).fillna(0).astype(np.int64)
    steps["collectives"] = steps["collectives"].fillna(0).astype(np.int64)
    late = skew.stack().rename("late_ns").reset_index().rename(columns={"level_1": "rank"})
    late = late.merge(arrivals[["seq", "last_rank"]], on="seq")
    steps = steps.merge(late, on=["seq", "rank"], how="left")
    steps["last"] = (steps["last_rank"] == steps["rank"]).astype(np.int64)
    steps["pre_idle_ns"] = (
        steps[["rank", "step"]].merge(local.pre_idle, on=["rank", "step"], how="left")["pre_idle_ns"].to_numpy()
    )
    steps = steps.drop(columns=["last_rank"]).sort_values(["step", "rank"], kind="stable").reset_index(drop=True)

    n = len(arrivals)
    per_rank = {}
    for r in ranks:
        mine = steps[steps["rank"] == r]
        span = data.span[r][1] - data.span[r][0]  # holds every collective of the rank: wait <= span
        wait = int(mine["wait_ns"].sum())
        step_time = int(mine["time_ns"].sum())
        last = int((arrivals["last_rank"] == r).sum())
        per_rank[str(r)] = {
            "steps": int(len(mine)),
            "last_steps": last,
            "last_share": round(last / n, 6) if n else None,
            "late_by_ns_when_last": int(arrivals.loc[arrivals["last_rank"] == r, "late_by_ns"].sum()),
            "profiled_ns": int(span),
            "step_time_ns": int(mine["time_ns"].sum()),
            "busy_ns": int(mine["busy_ns"].sum()),
            "idle_ns": int(mine["idle_ns"].sum()),
            "wait_ns": wait,
            "wait_share": round(wait / span, 6) if span else None,
            "wait_share_of_steps": round(int(mine["wait_in_step_ns"].sum()) / step_time, 6) if step_time else None,
            "step_time_sd_ns": int(round(float(mine["time_ns"].std(ddof=0)))) if len(mine) else 0,
        }
    straggler = max(ranks, key=lambda r: (per_rank[str(r)]["last_steps"], -r))
    driver = explain(steps, straggler)
    driver["if_at_median_pace"] = median_pace(steps, straggler, seed)
    summary = {
        "ranks": ranks,
        "collective_source": data.collective_source,
        "collectives_compared": int(n),
        "straggler": straggler,
        "per_rank": per_rank,
        "driver": driver,
        "late_by_ns": {
            "median": int(np.median(arrivals["late_by_ns"])) if n else 0,
            "max": int(arrivals["late_by_ns"].max()) if n else 0,
        },
        "dropped_collectives": data.dropped,
        "warnings": list(data.warnings),
        "clocks_agree": data.clocks_agree,
    }
    sites = across_ranks(moments if moments is not None else site_moments(pd.DataFrame()))
    summary["call_sites_across_ranks"] = site_records(sites)
    findings = summary["warnings"] + _sentences(summary)
    if summary["collectives_compared"] and sites_sentence(summary["call_sites_across_ranks"]):
        findings.append(sites_sentence(summary["call_sites_across_ranks"]))
    return RankAnalysis(steps.drop(columns=["wait_in_step_ns"]), summary, findings, sites)


def _waits(col: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: wait_ns, the time inside the step's collectives (their union: collectives that overlap,
    or nest, count once), and wait_in_step_ns, the part of it within the step's own span (for the share of step
    time). Both are bounded by construction."""
    bounds = steps.set_index(["rank", "step"])[["start_ns", "end_ns"]]
    rows = []
    for (rank, step), g in col.groupby(["rank", "step"], sort=True):
        start, end = g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
        s0, s1 = bounds.loc[(rank, step)] if (rank, step) in bounds.index else (0, 0)
        inside = np.minimum(end, s1) > np.maximum(start, s0)
        clipped = union_ns(np.maximum(start, s0)[inside], np.minimum(end, s1)[inside])
        rows.append((int(rank), int(step), union_ns(start, end), clipped))
    return pd.DataFrame(rows, columns=["rank", "step", "wait_ns", "wait_in_step_ns"])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f} %"


def wait_lines(ranks: list, per: dict, straggler: int | None) -> list[str]:
    """Each rank's wait in collectives, one line per rank up to WAIT_LINES_MAX ranks. Beyond, the straggler's line
    and one line for the others' range (straggler None: where the arrival order is not known, one line for all): a
    findings list of 256 wait lines hides what matters (every rank's share stays in ranks.json's per_rank)."""

    def line(r: int, label: str = "") -> str:
        return (
            f"rank {r}{label} waits {_pct(per[str(r)]['wait_share'])} of its time in collectives "
            f"({per[str(r)]['wait_ns'] / 1e6:.0f} ms of {per[str(r)]['profiled_ns'] / 1e6:.0f} ms)"
        )

    if len(ranks) <= WAIT_LINES_MAX:
        return [line(r) for r in ranks]
    others = [per[str(r)]["wait_share"] for r in ranks if r != straggler]
    shares = [x for x in others if x is not None]
    out = [line(straggler, ", the straggler,")] if straggler is not None else []
    if shares:
        low, high, median = 100 * min(shares), 100 * max(shares), 100 * float(np.median(shares))
        unknown = f"; {len(others) - len(shares)} with no profiled span" if len(shares) < len(others) else ""
        who = f"the other {len(others)} ranks" if straggler is not None else f"the {len(others)} ranks"
        out.append(
            f"{who} wait {low:.0f}–{high:.0f} % of their time in collectives (median "
            f"{median:.0f} %{unknown}; every rank's wait: ranks.json per_rank)"
        )
    return out


def _sentences(summary: dict) -> list[str]:
    ranks, per, s = summary["ranks"], summary["per_rank"], summary["straggler"]
    n = summary["collectives_compared"]
    if n == 0:
        return ["no collective is seen on every rank: lateness cannot be compared"]
    me = per[str(s)]
    if not summary.get("clocks_agree", True):
        # the arrival order is not known (the warning says why): no rank is the straggler, so neither what makes
        # it late nor what the others would save if it kept pace is stated; each rank's own wait still holds
        return wait_lines(ranks, per, None)
    out = [f"rank {s} is last in {_pct(me['last_share'])} of steps ({me['last_steps']} of {n})"]
    out += wait_lines(ranks, per, s)
    line = sentence(s, summary["driver"])
    if line:
        out.append(line)
    paced = summary["driver"].get("if_at_median_pace")
    if paced:
        w = paced["others_wait_less_per_step_ns"]
        out.append(
            f"if rank {s} kept its median pace, the other ranks would wait {duration_text(w['value'])} less per step "
            f"(90 % interval {duration_text(w['interval'][0])}–{duration_text(w['interval'][1])}; "
            f"{duration_text(paced['others_wait_less_over_the_run_ns'])} over {paced['steps']} steps)"
        )
    return out
