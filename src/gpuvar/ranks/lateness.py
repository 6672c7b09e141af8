"""What makes the late rank late: its time to the collective split into parts, and which part moves with it.

Why a split and not a regression: the late rank's time to the collective (step start to arrival) IS the sum of
its parts: its GPU work (per launching op), time its GPU spent on other processes' kernels while it had nothing
running (a GPU shared with another rank or job), and host gaps (the device idle: the host was launching,
allocating, synchronising). Regressing the total on one of its own parts always "explains" something (a part
correlates with its sum), and the part that moves most wins whether it is a cause or not; on the real two-rank
recording the host gaps won that way, although one step's 17 ms host stall carried them. Instead, each part's
covariance with the total, over the total's variance, gives exact shares that add up to 1; the same with the
rank's signed lateness (its arrival minus the other ranks' median arrival) says which part moves with lateness.

Steps whose host gap is a stall (more than STALL_MADS robust deviations above the median gap and over STALL_NS)
are listed apart and left out of the shares: one allocation or one shape-dependent host path would otherwise
carry the whole variance. The first step (start-up) is left out.

Then the GPU part that carries most is checked against the rank's problem size: its time per step against the
threads its kernels launch and the FLOPs of their ops' inputs where recorded (gpuvar.causal.share_test.share_test,
cross-validated). "Follows problem size" is that test's verdict, never a regression on lateness.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import EXPLAINED, PARTLY, share_test

HOST_GAPS = "host gaps"
OTHER_PROCESSES = "other processes' kernels on its GPU"
COPIES = "copies"
STALL_MADS = 10.0
STALL_NS = 1_000_000
MIN_STEPS = 10


def _union(start: np.ndarray, end: np.ndarray) -> int:
    from gpuvar.ranks.analyze import union_ns

    return union_ns(start, end)


def step_parts(steps: pd.DataFrame, data, rank: int, shared_gpu: bool | None) -> pd.DataFrame:
    """One row per step of `rank` (with an arrival, start-up step left out): the time to the collective `A`,
    its parts (GPU time per launching op, copies, other processes' kernels, host gaps) and the signed lateness."""
    mine = steps[(steps["rank"] == rank) & steps["arrival_ns"].notna()].sort_values("step")
    mine = mine[mine["step"] > mine["step"].min()] if len(mine) > 1 else mine
    if mine.empty:
        return pd.DataFrame()
    arrivals = steps.pivot_table(index="step", columns="rank", values="arrival_ns", aggfunc="first")
    others = [c for c in arrivals.columns if c != rank]
    signed = arrivals[rank] - arrivals[others].median(axis=1) if others else arrivals[rank] * 0
    launches = pd.concat(
        [data.kernels.assign(_kind="kernel"), data.copies.assign(_kind="copy")], ignore_index=True, sort=False
    )
    from gpuvar.ranks.gpus import GPU

    own = launches[launches["rank"] == rank]
    other = launches.iloc[0:0]
    if shared_gpu and GPU in launches.columns:  # other ranks' launches on one of this rank's GPUs
        gpus = set(own[GPU].unique()) - {-1}
        other = launches[(launches["rank"] != rank) & launches[GPU].isin(gpus)]
    own_by_step = {s: g for s, g in own.groupby("step")}
    o_start, o_end = other["start"].to_numpy(np.int64), other["end"].to_numpy(np.int64)
    order = np.argsort(o_start, kind="stable")
    o_start, o_end = o_start[order], o_end[order]
    rows = []
    for row in mine.itertuples(index=False):
        a, b = int(row.start_ns), int(row.arrival_ns)
        g = own_by_step.get(row.step, own.iloc[0:0])
        s0 = np.clip(g["start"].to_numpy(np.int64), a, b)
        e0 = np.clip(g["end"].to_numpy(np.int64), a, b)
        labels = np.where(
            g["_kind"].to_numpy() == "copy", COPIES, g["launch_op"].astype("string").fillna("(no launch op)").to_numpy()
        )
        parts = pd.Series(e0 - s0, index=labels, dtype=np.float64).groupby(level=0).sum().to_dict()
        busy = _union(s0, e0)
        parts["(overlap of its own launches)"] = float(busy - sum(parts.values()))  # <= 0: counted once
        hi = np.searchsorted(o_start, b, side="left")
        cand = np.flatnonzero(o_end[:hi] > a)
        both = _union(np.r_[s0, np.clip(o_start[cand], a, b)], np.r_[e0, np.clip(o_end[cand], a, b)])
        parts[OTHER_PROCESSES] = float(both - busy)
        parts[HOST_GAPS] = float((b - a) - both)
        parts["A"] = float(b - a)
        parts["late"] = float(signed.get(row.step, np.nan))
        parts["step"] = int(row.step)
        rows.append(parts)
    return pd.DataFrame(rows).fillna(0.0).set_index("step") if rows else pd.DataFrame()


def _shares(parts: pd.DataFrame, target: np.ndarray) -> dict[str, float]:
    t = target - target.mean()
    denom = float(parts["A"].to_numpy() @ t - parts["A"].mean() * t.sum())
    if abs(denom) <= 0:
        return {}
    out = {}
    for column in parts.columns:
        if column in ("A", "late"):
            continue
        x = parts[column].to_numpy(np.float64)
        out[column] = float((x - x.mean()) @ t) / denom
    return out


def _size_check(data, rank: int, op: str, steps: list[int], seed: int) -> dict | None:
    """Does the op's GPU time per step follow the rank's problem size: the threads launched by all its kernels
    in the step (a capped GEMM grid does not carry the size, the elementwise kernels beside it do) and the FLOPs
    of its ops' inputs where recorded?"""
    mine = data.kernels[(data.kernels["rank"] == rank) & data.kernels["step"].isin(steps)]
    k = mine[mine["launch_op"].astype("string").fillna("(no launch op)") == op]
    if k.empty:
        return None
    time = (k["end"] - k["start"]).groupby(k["step"]).sum().astype(np.float64)
    features = {}
    if "grid_size" in mine.columns and mine["grid_size"].notna().all():
        threads = pd.to_numeric(mine["grid_size"], errors="coerce")
        if "workgroup_size" in mine.columns and mine["workgroup_size"].notna().all():
            threads = threads * pd.to_numeric(mine["workgroup_size"], errors="coerce")
        features["threads launched in the step"] = threads.groupby(mine["step"]).sum()
    if "op_flops" in k.columns and k["op_flops"].notna().any():
        features["input FLOPs"] = pd.to_numeric(k["op_flops"], errors="coerce").fillna(0).groupby(k["step"]).sum()
    features = {n: f.reindex(time.index).to_numpy(np.float64) for n, f in features.items()}
    features = {n: f for n, f in features.items() if np.isfinite(f).all() and np.ptp(f) > 0}
    if not features or len(time) < MIN_STEPS:
        return None
    X = np.column_stack([np.column_stack([f, f**2]) for f in features.values()])
    names = [x for n in features for x in (n, f"{n}²")]
    test = share_test(X, time.to_numpy(np.float64), names, seed=seed, residual_check=False)
    return {"op": op, "features": sorted(features), "share": round(test.share, 6), "verdict": test.verdict}


def lateness(steps: pd.DataFrame, data, rank: int, shared_gpu: bool | None, seed: int = 0) -> dict:
    """The record of what makes `rank` late (see the module docstring)."""
    parts = step_parts(steps, data, rank, shared_gpu)
    record = {
        "target": "time to the collective (step start to arrival), ns; the first step (start-up) left out",
        "same_gpu_as_other_ranks": shared_gpu,
        "steps": int(len(parts)),
        "parts": [],
        "host_stalls": [],
    }
    if len(parts) < MIN_STEPS:
        record["declined"] = f"too few steps ({len(parts)} < {MIN_STEPS})"
        return record
    gaps = parts[HOST_GAPS]
    median = float(gaps.median())
    mad = float((gaps - median).abs().median()) * 1.4826
    stall = (gaps > median + STALL_MADS * mad) & (gaps > STALL_NS)
    record["host_stalls"] = [{"step": int(s), "gap_ns": float(v)} for s, v in gaps[stall].items()]
    kept = parts[~stall]
    record["steps"] = int(len(kept))
    a = kept["A"].to_numpy(np.float64)
    record["target_sd_ns"] = float(a.std())
    by_time = _shares(kept, a)
    late = kept["late"].to_numpy(np.float64)
    by_late = _shares(kept, late) if np.isfinite(late).all() and np.ptp(late) > 0 else {}
    record["correlation_with_lateness"] = (
        round(float(np.corrcoef(a, late)[0, 1]), 6) if by_late and np.ptp(a) > 0 else None
    )
    for name in sorted(by_time, key=lambda n: (-by_time[n], n)):
        x = kept[name]
        if name.startswith("(overlap") and abs(by_time[name]) < 0.005:
            continue
        record["parts"].append(
            {
                "part": name,
                "kind": "host" if name == HOST_GAPS else ("other processes" if name == OTHER_PROCESSES else "gpu work"),
                "share_of_variance": round(by_time[name], 6),
                "share_of_lateness_covariance": round(by_late[name], 6) if name in by_late else None,
                "mean_ns_per_step": round(float(x.mean()), 3),
                "sd_ns": round(float(x.std()), 3),
            }
        )
    gpu = [p for p in record["parts"] if p["kind"] == "gpu work" and p["part"] != COPIES]
    if gpu and gpu[0]["share_of_variance"] > 0:
        record["size_check"] = _size_check(data, rank, gpu[0]["part"], list(kept.index), seed)
    return record


def median_pace(steps: pd.DataFrame, rank: int, seed: int = 0, draws: int = 1000) -> dict | None:
    """If `rank` kept its median time to the collective in every step, how much less would the other ranks wait?

    Per step (start-up left out): the others wait from their arrival until the last arrival; with the rank's
    arrival moved to its step start + its median time, the last arrival moves too. The saving per step is the
    others' summed wait before minus after (never negative); its mean over steps has a 90 % interval from a
    bootstrap over steps (seeded)."""
    arrivals = steps.pivot_table(index="step", columns="rank", values="arrival_ns", aggfunc="first").dropna()
    starts = steps.pivot_table(index="step", columns="rank", values="start_ns", aggfunc="first")
    if rank not in arrivals.columns or len(arrivals.columns) < 2 or len(arrivals) < MIN_STEPS:
        return None
    arrivals = arrivals.iloc[1:]  # the start-up step
    own = arrivals[rank].to_numpy(np.float64)
    start = starts[rank].reindex(arrivals.index).to_numpy(np.float64)
    others = arrivals.drop(columns=[rank]).to_numpy(np.float64)
    paced = start + np.median(own - start)
    last_other = others.max(axis=1)
    before = (np.maximum(own, last_other)[:, None] - others).sum(axis=1)
    after = (np.maximum(paced, last_other)[:, None] - others).sum(axis=1)
    saving = np.maximum(before - after, 0.0)
    rng = np.random.default_rng(seed)
    boot = saving[rng.integers(0, len(saving), size=(draws, len(saving)))].mean(axis=1)
    lo, hi = np.percentile(boot, [5, 95])
    return {
        "rank": int(rank),
        "steps": int(len(saving)),
        "others_wait_less_per_step_ns": {
            "value": round(float(saving.mean()), 3),
            "interval": [round(float(lo), 3), round(float(hi), 3)],
        },
        "others_wait_less_over_the_run_ns": round(float(saving.sum()), 3),
    }


def sentence(rank: int, record: dict) -> str | None:
    """ "rank 1's time to the collective varies through its GPU work: aten::mm 65 %, ...; ..."."""
    parts = [p for p in record.get("parts", []) if p["share_of_variance"] >= 0.05]
    if not parts:
        return None
    text = ", ".join(f"{p['part']} {100 * p['share_of_variance']:.0f} %" for p in parts[:4])
    out = f"rank {rank}'s time to the collective (sd {record['target_sd_ns'] / 1e6:.2f} ms) splits into {text} of its variance"
    check = record.get("size_check")
    if check and check["verdict"] in (EXPLAINED, PARTLY):
        out += (
            f"; {check['op']}'s time follows its problem size ({', '.join(check['features'])}: cross-validated "
            f"R² {check['share']:.2f})"
        )
    if record.get("host_stalls"):
        stalls = record["host_stalls"]
        out += f"; {len(stalls)} step(s) with a host stall left out (longest {max(s['gap_ns'] for s in stalls) / 1e6:.1f} ms)"
    return out
