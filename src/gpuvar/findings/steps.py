"""The step level: why does my step time vary? The first answer of every dataset with steps.

A step's GPU time is the sum of its launches' durations (per rank when several ranks ran). Its variance splits
two ways:
  by cause     the cross-validated share that the step's problem size explains (threads launched by all its
               kernels, the FLOPs and bytes of its ops' inputs where recorded, the number of launches; each with
               its square, since attention's work grows with the square of the sequence length), then what the
               step's context adds (launches overlapping a copy, time overlapped by other processes' kernels,
               the rank), and the unexplained rest: the same cross-validated share and permutation test as the
               launch-level verdicts (gpuvar.causal.share_test), rows being steps;
  by op        each group's (op's) covariance with the step time over the step time's variance: exact shares
               that add up to 1 (a group whose time moves against the total has a negative share), so "aten::mm
               31 %" means 31 % of the step time's variance is aten::mm's time moving with it.
Steps with fewer than half the median number of launches are partial (the profiler's window cut them) and left
out, counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import DECLINED, MIN_ROWS, share_test

PARTIAL_STEP = 0.5  # of the median launches per step
TOP_OPS = 5


def _step_key(kernels: pd.DataFrame) -> list[str]:
    ranked = "rank" in kernels.columns and kernels["rank"].nunique(dropna=True) > 1
    return ["rank", "step"] if ranked else ["step"]


def _size_table(rows: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Per step: threads launched, launches, and the ops' FLOPs / bytes where the trace records input shapes."""
    out = {"launches": rows.groupby(key, sort=True).size().astype(np.float64)}
    if "grid_size" in rows.columns:
        threads = pd.to_numeric(rows["grid_size"], errors="coerce")
        if "workgroup_size" in rows.columns:
            threads = threads * pd.to_numeric(rows["workgroup_size"], errors="coerce")
        if threads.notna().all():
            out["threads"] = threads.groupby([rows[k] for k in key], sort=True).sum()
    for column in ("op_flops", "op_bytes", "op_numel"):
        if column in rows.columns:
            values = pd.to_numeric(rows[column], errors="coerce")
            if values.notna().any():
                out[column] = values.fillna(0).groupby([rows[k] for k in key], sort=True).sum()
    return pd.DataFrame(out)


def _context_table(rows: pd.DataFrame, key: list[str], d: pd.Series) -> pd.DataFrame:
    out = {}
    by = [rows[k] for k in key]
    if "ctx_copy_active" in rows.columns:
        out["launches beside a copy"] = (
            pd.to_numeric(rows["ctx_copy_active"], errors="coerce").fillna(0).groupby(by, sort=True).sum()
        )
    if "ctx_other_process_overlap" in rows.columns:
        overlap = pd.to_numeric(rows["ctx_other_process_overlap"], errors="coerce").fillna(0) * d
        out["time overlapped by other processes"] = overlap.groupby(by, sort=True).sum()
    if "ctx_kernels_concurrent" in rows.columns:
        out["kernels beside it"] = (
            pd.to_numeric(rows["ctx_kernels_concurrent"], errors="coerce").fillna(0).groupby(by, sort=True).sum()
        )
    frame = pd.DataFrame(out)
    if "rank" in key:
        ranks = frame.index.get_level_values("rank")
        for level in sorted(set(ranks))[1:]:
            frame[f"rank={level}"] = (ranks == level).astype(np.float64)
    return frame


def _with_squares(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    cols, names = [], []
    for name in frame.columns:
        x = frame[name].to_numpy(np.float64)
        if not np.isfinite(x).all() or np.ptp(x) == 0:
            continue
        z = (x - x.mean()) / x.std()
        cols += [z, z**2]
        names += [name, f"{name}²"]
    return (np.column_stack(cols) if cols else np.zeros((len(frame), 0))), names


def step_level(kernels: pd.DataFrame, groups: pd.Series, seed: int = 0) -> dict | None:
    """The step-level record (see the module docstring); None when the trace has no steps."""
    if "step" not in kernels.columns:
        return None
    d_all = pd.to_numeric(kernels["duration"], errors="coerce")
    rows = kernels[pd.to_numeric(kernels["step"], errors="coerce").notna() & d_all.notna()]
    if rows.empty:
        return None
    key = _step_key(rows)
    d = pd.to_numeric(rows["duration"]).astype(np.float64)
    by = [rows[k] for k in key]
    time = d.groupby(by, sort=True).sum()
    launches = rows.groupby(key, sort=True).size()
    partial = launches < PARTIAL_STEP * launches.median()
    keep = ~partial.to_numpy()
    time = time[keep]
    n = len(time)
    record = {
        "steps": int(n) if "rank" not in key else int(time.index.get_level_values("step").nunique()),
        "ranks": int(time.index.get_level_values("rank").nunique()) if "rank" in key else None,
        "partial_steps_left_out": int(partial.sum()),
        "by": key,
        "gpu_time_ns": {
            "median": float(time.median()),
            "p95": float(time.quantile(0.95)),
            "min": float(time.min()),
            "max": float(time.max()),
            "cv": float(time.std(ddof=0) / time.mean()) if time.mean() > 0 else 0.0,
        },
    }
    if n < MIN_ROWS or np.ptp(time.to_numpy()) == 0:
        record["shares"] = None
        record["declined"] = f"too few steps ({n} < {MIN_ROWS})" if n < MIN_ROWS else "step time is constant"
        record["ops"] = []
        return record
    full_index = launches.index[keep]
    size = _size_table(rows, key).reindex(full_index)
    context = _context_table(rows, key, d).reindex(full_index)
    y = time.to_numpy(np.float64)
    Xs, size_names = _with_squares(size)
    Xc, ctx_names = _with_squares(context)
    size_test = share_test(Xs, y, size_names, seed=seed, residual_check=False)
    both = share_test(np.column_stack([Xs, Xc]), y, size_names + ctx_names, seed=seed, residual_check=False)
    s = size_test.share if size_test.verdict != DECLINED else 0.0
    b = both.share if both.verdict != DECLINED else 0.0
    record["shares"] = {"size": s, "context": max(0.0, b - s), "unexplained": max(0.0, 1.0 - max(s, b))}
    record["verdicts"] = {"size": size_test.record(), "size_and_context": both.record()}
    record["size_features"] = [c for c in size.columns if np.ptp(size[c].to_numpy(np.float64)) > 0]
    record["context_features"] = [c for c in context.columns if np.ptp(context[c].to_numpy(np.float64)) > 0]
    record["at_median_size"] = _at_median_size(size, y) if s >= 0.5 else None
    # by op: covariance shares
    g = groups.loc[rows.index].astype(str)
    per_op = d.groupby([*by, g], sort=True).sum().unstack(fill_value=0.0).reindex(full_index).fillna(0.0)
    centred = y - y.mean()
    var = float((centred**2).sum())
    shares = {op: float((per_op[op].to_numpy() - per_op[op].mean()) @ centred) / var for op in per_op.columns}
    ordered = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
    record["ops"] = [{"group": op, "share": round(v, 6)} for op, v in ordered]
    record["slowest_steps"] = [
        {"step": _plain(k), "gpu_time_ns": float(v)}
        for k, v in time.sort_values(ascending=False, kind="stable").head(5).items()
    ]
    return record


def _at_median_size(size: pd.DataFrame, y: np.ndarray) -> dict | None:
    """What the step time is at the median problem size: the mean of the steps nearest the median of the size
    feature that varies most (threads, else FLOPs, ...), with a 90 % interval for one step there. Size is the
    workload, not a saving: this is the step time a fixed size would give, to compare with the spread."""
    varying = [c for c in ("op_flops", "threads", "op_bytes", "op_numel", "launches") if c in size.columns]
    varying = [c for c in varying if np.ptp(size[c].to_numpy(np.float64)) > 0]
    if not varying:
        return None
    x = size[varying[0]].to_numpy(np.float64)
    v = float(np.median(x))
    k = max(5, int(np.ceil(0.05 * len(x))))
    near = np.argsort(np.abs(x - v), kind="stable")[:k]
    mean, sd = float(y[near].mean()), float(y[near].std(ddof=1)) if k > 1 else 0.0
    return {
        "feature": varying[0],
        "value": v,
        "steps_used": int(k),
        "step_time_ns": round(mean, 3),
        "interval_ns": [round(mean - 1.6449 * sd, 3), round(mean + 1.6449 * sd, 3)],
    }


def _plain(key):
    if isinstance(key, tuple):
        return [v.item() if hasattr(v, "item") else v for v in key]
    return key.item() if hasattr(key, "item") else key


def headline(record: dict | None, short=lambda s: s) -> str | None:
    """'step GPU time 6.4–28.7 ms (median 14 ms, CV 37 %); 100 % follows problem size; aten::mm 31 %, ...'."""
    from gpuvar.findings.report import duration_text, percent

    if record is None:
        return None
    t = record["gpu_time_ns"]
    over = f"{record['steps']} steps"
    if record.get("ranks"):
        over = f"{record['steps']} steps of {record['ranks']} ranks"
    text = (
        f"step GPU time {duration_text(t['min'])}–{duration_text(t['max'])} over {over} "
        f"(median {duration_text(t['median'])}, p95 {duration_text(t['p95'])}, CV {percent(t['cv'])})"
    )
    if record.get("shares") is None:
        return text + f"; not split ({record.get('declined')})"
    s = record["shares"]
    text += (
        f"; {percent(s['size'])} follows problem size, {percent(s['context'])} context, "
        f"{percent(s['unexplained'])} unexplained"
    )
    at = record.get("at_median_size")
    if at:
        text += (
            f"; at its median size ({at['feature']}) a step takes {duration_text(at['step_time_ns'])} "
            f"({duration_text(at['interval_ns'][0])}–{duration_text(at['interval_ns'][1])})"
        )
    ops = [o for o in record["ops"] if o["share"] >= 0.05][:TOP_OPS]
    if ops:
        text += "; carried by " + ", ".join(f"{o.get('name', short(o['group']))} {percent(o['share'])}" for o in ops)
    return text
