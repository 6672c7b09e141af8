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
               31 %" means 31 % of the step time's variance is aten::mm's time moving with it. The centred step
               times add up to zero, so a group's covariance is the sum over its launches of duration x (its
               step's time - the mean): one pass over the launches once the step times are known, instead of a
               table of time per (step, group), which holds a number per launch when steps are short.
Steps with fewer than half the median number of launches are partial (the profiler's window cut them) and left
out, counted. Above STEP_FIT_CAP steps the two share tests fit a seeded sample of them (the record and the headline
say so); the step times and the shares by op are over every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from gpuvar.causal.share_test import DECLINED, MIN_ROWS, share_test
from gpuvar.findings.step_table import StepBlocks

MISSING_RANK = "no rank"  # the runs' key for launches without a rank
PARTIAL_STEP = 0.5  # of the median launches per step
TOP_OPS = 5
STEP_FIT_CAP = 100_000  # steps the share tests fit (a seeded sample above it: _fit_rows)
STEP_SAMPLE_STREAM = 39  # the step sample's own random stream


SIZE_SUMS = ("op_flops", "op_bytes", "op_numel")
CONTEXT_SUMS = {  # column of the step table <- the launches' column it sums (the overlap weighted by duration)
    "launches beside a copy": "ctx_copy_active",
    "time overlapped by other processes": "ctx_other_process_overlap",
    "kernels beside it": "ctx_kernels_concurrent",
}
READS = ("step", "rank", "duration", "grid_size", "workgroup_size", *SIZE_SUMS, *CONTEXT_SUMS.values())


class StepSums:
    """Per (rank, step) sums of the launches of one batch after another: what the step level needs, never the
    launches (the shares by op take a second pass over them, `record`'s `launches`). Each batch's groupby sums go
    into blocks of arrays indexed by the step number (gpuvar.findings.step_table), or, where the steps are not whole
    numbers or too sparse for blocks, into runs of tables; over several batches the partial sums are added (exact
    for the integer durations, threads and counts of the canonical schema)."""

    def __init__(self, columns: list[str]):
        self.columns = set(columns)
        self.ranked_by = [k for k in ("rank", "step") if k in self.columns]
        self.ranks: set = set()
        self.threads_known = True
        self.sizes_known: set[str] = set()
        self.blocks: StepBlocks | None = None  # the sums, while the steps are whole numbers that fill blocks
        self.parts: list[pd.DataFrame] = []  # else runs of sums, each after the one before, then the recent batches'
        self.sealed = 0  # runs at the front of parts
        self.last_step: dict = {}  # rank -> the last step of the runs

    def add(self, batch: pd.DataFrame) -> None:
        """Add one batch."""
        if "step" not in self.columns:
            return
        d_all = pd.to_numeric(batch["duration"], errors="coerce")
        keep = (pd.to_numeric(batch["step"], errors="coerce").notna() & d_all.notna()).to_numpy()
        if not keep.any():
            return
        rows = batch[keep]
        if "rank" in self.columns:
            self.ranks.update(rows["rank"].dropna().unique().tolist())
        d = pd.to_numeric(rows["duration"]).astype(np.float64)
        # every sum in one groupby (one factorization of the keys, not one per column: 8 at 256 ranks took 11 ms
        # a batch); each column's sum is the one its own groupby gives
        values = {"time": d}
        if "grid_size" in self.columns:
            threads = pd.to_numeric(rows["grid_size"], errors="coerce")
            if "workgroup_size" in self.columns:
                threads = threads * pd.to_numeric(rows["workgroup_size"], errors="coerce")
            self.threads_known &= bool(threads.notna().all())
            values["threads"] = threads
        for column in SIZE_SUMS:
            if column in self.columns:
                sizes = pd.to_numeric(rows[column], errors="coerce")
                if sizes.notna().any():
                    self.sizes_known.add(column)
                values[column] = sizes.fillna(0)
        for name, column in CONTEXT_SUMS.items():
            if column in self.columns:
                context = pd.to_numeric(rows[column], errors="coerce").fillna(0)
                values[name] = context * d if name == "time overlapped by other processes" else context
        grouped = pd.DataFrame(values).groupby([rows[k] for k in self.ranked_by], sort=True, dropna=False)
        sums = grouped.sum()
        sums.insert(1, "launches", grouped.size())
        if not self.parts:
            self.blocks = self.blocks or StepBlocks(list(sums.columns), ranked="rank" in self.ranked_by)
            if self.blocks.add(sums):
                return
            # steps that are not whole numbers, or sparse: what the blocks hold becomes the first run of tables
            if self.blocks.keys:
                first = self.blocks.frame()
                self.parts, self.sealed = [first], 1
                self.last_step = (_step_spans(first, {}) or (0, {}))[1]
            self.blocks = None
        self.parts.append(sums)
        if len(self.parts) - self.sealed > 8:  # the batches since the last run folded into one run
            run = _fold(self.parts[self.sealed :])
            spans = _step_spans(run, self.last_step)
            if spans is None or spans[0] > len(run) // 4:  # many steps came back: all in one
                self.parts, self.sealed = [_fold([*self.parts[: self.sealed], run])], 1
            else:  # each rank's steps in file order but at the runs' edges: kept beside the others, added up once
                self.parts[self.sealed :] = [run]
                self.sealed += 1
            for r, high in (spans[1] if spans else {}).items():
                self.last_step[r] = max(self.last_step.get(r, -np.inf), high)

    def table(self, key: list[str], release: bool = False) -> pd.DataFrame:
        """The step table by `key` over every batch so far (release: the sums' last use, given back)."""
        if self.blocks is not None:
            if "rank" not in self.ranked_by or "rank" in key:
                return self.blocks.frame(missing_rank=False, release=release)
            if self.blocks.rank_count() == 1:
                return self.blocks.frame(drop_rank=True, release=release)
            return _fold([self.blocks.frame(release=release)], key)
        table = _fold(self.parts)
        if "rank" in self.ranked_by:
            if "rank" in key:  # a launch without a rank is in no (rank, step) (groupby's dropna)
                table = table[table.index.get_level_values("rank").notna()]
            else:
                table = _fold([table], key)
        return table

    def record(self, launches: Callable[[], Iterable[tuple]], names, seed: int = 0) -> dict | None:
        """The step-level record (see the module docstring); None when the trace has no steps. `launches()`:
        (group code, duration, step, rank) arrays of every launch with a duration, batch by batch (the rank all
        NaN without ranks), the pass the shares by op take; `names`: the group of each code. The sums are
        dropped once the table is built: record is their last use."""
        if not self.parts and self.blocks is None:
            return None
        key = ["rank", "step"] if len(self.ranks) > 1 else ["step"]
        table = self.table(key, release=True)
        self.blocks, self.parts = None, []  # the record is the sums' last use: given back before its fits
        return _record(table, key, self, seed, lambda index, centred: _op_time(index, centred, launches), names)


def _step_spans(run: pd.DataFrame, last_step: dict) -> tuple[int, dict] | None:
    """(how many of a run's keys are at or before their rank's last step in the runs so far, {rank: its last step
    in the run}); None where a step is missing. Rank 0 without ranks, MISSING_RANK for a launch without one.

    Why runs: a trace of a million short steps folded its whole step table again every few batches, a copy of a
    million rows and the groupby's own beside it (0.2 GB at the findings' peak); each rank's steps arrive nearly in
    order (a step spans two runs at their edge), so the runs need adding up only once, when the step level is
    computed, and hold about as many rows as the steps."""
    index = run.index
    steps = pd.Series(index.get_level_values("step"))
    ranks = pd.Series(index.get_level_values("rank")) if "rank" in index.names else pd.Series(np.zeros(len(index)))
    if steps.isna().any():
        return None
    ranks = ranks.astype(object).where(ranks.notna(), MISSING_RANK)
    before = ranks.map(lambda r: last_step.get(r, -np.inf)).to_numpy(np.float64)
    highs = steps.groupby(ranks, sort=False).max()
    return int((steps.to_numpy(np.float64) <= before).sum()), dict(highs.items())


def _fold(parts: list, levels: list[str] | None = None):
    """The partial sums added up per key (one part and no new key: that part as it is)."""
    if len(parts) == 1 and levels is None:
        return parts[0]
    both = pd.concat(parts) if len(parts) > 1 else parts[0]
    levels = levels or list(both.index.names)
    return both.groupby(level=levels, sort=True, dropna=False).sum()


def _context_table(table: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame({name: table[name] for name in CONTEXT_SUMS if name in table.columns})
    if "rank" in key:  # one indicator per rank but the first, added at once (one by one, pandas warns at 100+)
        ranks = frame.index.get_level_values("rank")
        levels = {f"rank={level}": (ranks == level).astype(np.float64) for level in sorted(set(ranks))[1:]}
        if levels:
            frame = pd.concat([frame, pd.DataFrame(levels, index=frame.index)], axis=1)
    return frame


def _with_squares(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each varying column standardized, and its square where it has more than two values: the square of a
    two-valued column (a rank's indicator) is a line through its two points, nothing the column does not already
    give, and at 256 ranks those 255 squares doubled the step model's design matrix (25,600 x 520)."""
    cols, names = [], []
    for name in frame.columns:
        x = frame[name].to_numpy(np.float64)
        if not np.isfinite(x).all() or np.ptp(x) == 0:
            continue
        z = (x - x.mean()) / x.std()
        two = len(np.unique(x)) == 2
        cols += [z] if two else [z, z**2]
        names += [name] if two else [name, f"{name}²"]
    return (np.column_stack(cols) if cols else np.zeros((len(frame), 0))), names


def step_level(kernels: pd.DataFrame, groups: pd.Series, seed: int = 0) -> dict | None:
    """The step-level record of a table in memory (see the module docstring); None when it has no steps."""
    sums = StepSums([str(c) for c in kernels.columns])
    sums.add(kernels)
    codes, names = pd.factorize(groups.astype(str).to_numpy(dtype=object))
    has = np.flatnonzero(~np.isnan(floats_at(kernels, "duration", np.arange(len(kernels)))))
    rows = tuple(floats_at(kernels, k, has) for k in ("duration", "step", "rank"))
    return sums.record(lambda: [(codes[has], *rows)], list(names), seed)


def floats_at(frame: pd.DataFrame, column: str, pos: np.ndarray) -> np.ndarray:
    """The column at `pos` as float64 (NaN where missing or not a number; all NaN without the column): the
    launches' duration, step and rank as the shares by op read them."""
    if column not in frame.columns:
        return np.full(len(pos), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)[pos]


def _op_time(index: pd.Index, centred: np.ndarray, launches) -> tuple[np.ndarray, np.ndarray]:
    """(per group code: sum of duration x its step's centred time, whether any launch was in a step of `index`):
    `centred` is 0 for the steps left out, so their launches count as seen and add nothing."""
    total, seen = np.zeros(0), np.zeros(0, bool)
    for group, d, step, rank in launches():
        at = (
            index.get_indexer(step)
            if index.nlevels == 1
            else index.get_indexer(pd.MultiIndex.from_arrays([rank, step]))
        )
        ok = at >= 0
        if not ok.any():
            continue
        g = np.asarray(group)[ok].astype(np.int64)
        size = max(len(total), int(g.max()) + 1)
        total = np.r_[total, np.zeros(size - len(total))]
        seen = np.r_[seen, np.zeros(size - len(seen), bool)]
        total += np.bincount(g, weights=d[ok] * centred[at[ok]], minlength=size)
        seen[g] = True
    return total, seen


def _record(table: pd.DataFrame, key: list[str], sums: StepSums, seed: int, op_time, names) -> dict | None:
    time, launches = table["time"], table["launches"]
    if time.empty:
        return None
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
    size = {"launches": launches.astype(np.float64)}
    if "threads" in table.columns and sums.threads_known:
        size["threads"] = table["threads"]
    size |= {c: table[c] for c in SIZE_SUMS if c in sums.sizes_known}
    size = pd.DataFrame(size).reindex(full_index)
    context = _context_table(table, key).reindex(full_index)
    y = time.to_numpy(np.float64)
    fit = _fit_rows(n, seed)
    if fit is not None:
        record["steps_fitted"] = len(fit)
    Xs, size_names = _with_squares(size if fit is None else size.iloc[fit])
    Xc, ctx_names = _with_squares(context if fit is None else context.iloc[fit])
    y_fit = y if fit is None else y[fit]
    size_test = share_test(Xs, y_fit, size_names, seed=seed, residual_check=False)
    both = share_test(np.column_stack([Xs, Xc]), y_fit, size_names + ctx_names, seed=seed, residual_check=False)
    del Xs, Xc
    s = size_test.share if size_test.verdict != DECLINED else 0.0
    b = both.share if both.verdict != DECLINED else 0.0
    record["shares"] = {"size": s, "context": max(0.0, b - s), "unexplained": max(0.0, 1.0 - max(s, b))}
    record["verdicts"] = {"size": size_test.record(), "size_and_context": both.record()}
    record["size_features"] = [c for c in size.columns if np.ptp(size[c].to_numpy(np.float64)) > 0]
    record["context_features"] = [c for c in context.columns if np.ptp(context[c].to_numpy(np.float64)) > 0]
    record["at_median_size"] = _at_median_size(size, y) if s >= 0.5 else None
    # by op: covariance shares (module docstring)
    centred = np.zeros(len(table))
    centred[keep] = y - y.mean()
    var = float((centred**2).sum())
    total, seen = op_time(table.index, centred)
    shares = {str(names[g]): float(total[g]) / var for g in np.flatnonzero(seen)}
    ordered = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
    record["ops"] = [{"group": op, "share": round(v, 6)} for op, v in ordered]
    record["slowest_steps"] = [
        {"step": _plain(k), "gpu_time_ns": float(v)}
        for k, v in time.sort_values(ascending=False, kind="stable").head(5).items()
    ]
    return record


def _fit_rows(n: int, seed: int) -> np.ndarray | None:
    """The steps the share tests fit where there are more than STEP_FIT_CAP (a seeded sample, in step order),
    None to fit all. Why a cap: the groups' fits see at most FIT_CAP launches each for the same reason; at 2 M steps
    the two tests' cross-validation and 200 permutations took 26 s and 0.5 GB, while a share estimated on 100,000
    steps has a standard error under 0.01. The step times, the shares by op and the median size stay exact."""
    if n <= STEP_FIT_CAP:
        return None
    return np.sort(np.random.default_rng([seed, STEP_SAMPLE_STREAM]).choice(n, STEP_FIT_CAP, replace=False))


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
    from gpuvar.findings.report import percent
    from gpuvar.units import duration_text

    if record is None:
        return None
    t = record["gpu_time_ns"]
    over = f"{record['steps']} steps"
    if record.get("ranks"):
        over = f"{record['steps']} steps of {record['ranks']} ranks"
    left = record.get("partial_steps_left_out") or 0
    partial = ""
    if left:  # (the dataset's line counts every step: say where the others went)
        unit = "step" if not record.get("ranks") else "rank step"
        partial = f"; {left} partial {unit}{'s' if left > 1 else ''} left out: under half the median step's launches"
    text = (
        f"step GPU time {duration_text(t['min'])}–{duration_text(t['max'])} over {over} "
        f"(median {duration_text(t['median'])}, p95 {duration_text(t['p95'])}, CV {percent(t['cv'])}{partial})"
    )
    if record.get("shares") is None:
        return text + f"; not split ({record.get('declined')})"
    s = record["shares"]
    text += (
        f"; {percent(s['size'])} follows problem size, {percent(s['context'])} context, "
        f"{percent(s['unexplained'])} unexplained"
    )
    if record.get("steps_fitted"):
        text += f" (fitted on a sample of {record['steps_fitted']} steps)"
    at = record.get("at_median_size")
    if at:
        text += (
            f"; at its median size ({at['feature']}) a step takes {duration_text(at['step_time_ns'])} "
            f"({duration_text(at['interval_ns'][0])}–{duration_text(at['interval_ns'][1])})"
        )

    def shares(chosen: list[dict]) -> str:
        return ", ".join(f"{o.get('name', short(o['group']))} {percent(o['share'])}" for o in chosen)

    ops = [o for o in record["ops"] if o["share"] >= 0.05][:TOP_OPS]
    if ops:
        text += "; carried by " + shares(ops)
    # covariance shares add up to 100 %: an op whose time falls as the step's rises (a collective on the late rank
    # waits less) takes a negative share, and the others then pass 100 % ('aten::mm 105 %'): said, not left a puzzle
    against = [o for o in record["ops"] if o["share"] <= -0.05][-TOP_OPS:][::-1]
    if ops and against:
        whose = "its time falls" if len(against) == 1 else "their time falls"
        text += f", offset by {shares(against)} ({whose} as the step's rises)"
    return text
