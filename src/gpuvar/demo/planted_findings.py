"""Planted-truth canonical kernel tables for the findings stage (gpuvar.findings): each carries a known answer.

`heteroscedastic`: one kernel at one call site per step; its grid_x (problem size) varies from step to step
  and its duration is proportional to grid_x, with timing noise that is *proportional to the size* (noise sd
  = NOISE_CV x the mean at that size). The answer is "explained by grid_x (+)"; a residual-independence test
  that assumes constant noise flags it, the location-scale check must not.
`call_site_mix`: one kernel name launched at three call sites of a step on three fixed shapes (three durations
  an order of magnitude apart), with 1 % noise. The answer is "call-site differences": ~100 % of the name's
  variance is between call sites, nothing is a cause, the kernel is stable within each call site.
`label_drift`: a transformer-like step whose sequence length L is drawn per step. One op (aten::mm) runs two
  GEMMs per step (a projection with N = D and an MLP with N = 4 D, M = B L); the library picks the kernel variant
  by the GEMM's size, so one kernel name serves the MLP GEMM for short L and the projection for long L (label
  drift), and the grid is capped (persistent tiles): its raster switches from 66 x 2 to 132 x 1 as the size grows,
  so grid_y goes DOWN while the work goes up. Duration = FLOPs / the variant's rate, with exponential noise. An
  elementwise op (aten::mul, grid proportional to B L D) runs in the same step. The answer: the GEMMs vary with
  the size, with a + sign, and no grid dimension is a cause with a - sign; the step time follows L.
`slow_rank`: one op at SLOW_RANK_SITES call sites, launched by every rank of a job in every step, each call
  site at its own fixed duration; rank SLOW_RANK runs every launch 1.5x longer, 2 % noise. With few ranks the
  answer is "explained by context: rank=SLOW_RANK (+)"; with more ranks than the fitted launches per call site
  can estimate (a 20 k-launch sample of a 256-rank job's op at 333 call sites has ~60 per call site), rank is
  left out of the context features and the findings say so instead of a share computed on noise.
All are canonical tables (the columns `gpuvar ingest` writes), seeded, so the same seed gives the same rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NOISE_CV = 0.08
STEP_NS = 1_000_000


def _frame(rows: dict, n: int) -> pd.DataFrame:
    start = np.asarray(rows.pop("start"), dtype=np.int64)
    duration = np.asarray(rows.pop("duration"), dtype=np.int64)
    base = {
        "device_id": np.zeros(n, np.int64),
        "stream_id": np.full(n, 7, np.int64),
        "start": start,
        "end": start + duration,
        "duration": duration,
        "grid_y": np.ones(n, np.int64),
        "grid_z": np.ones(n, np.int64),
        "block_x": np.full(n, 256, np.int64),
        "block_y": np.ones(n, np.int64),
        "block_z": np.ones(n, np.int64),
        "registers_per_thread": np.full(n, 32, np.int64),
    }
    frame = pd.DataFrame(base | rows)
    frame["launch_id"] = np.arange(n, dtype=np.int64)
    return frame


def heteroscedastic(steps: int = 300, seed: int = 0) -> pd.DataFrame:
    """A kernel whose duration is proportional to grid_x with noise proportional to the size."""
    rng = np.random.default_rng(seed)
    grid = rng.integers(8, 129, size=steps) * 16
    mean = 200.0 * grid  # ns
    duration = np.round(mean * (1 + NOISE_CV * rng.standard_normal(steps))).clip(min=1)
    return _frame(
        {
            "kernel_name": ["planted_scaled_kernel"] * steps,
            "start": np.arange(steps) * STEP_NS,
            "duration": duration,
            "grid_x": grid,
            "step": np.arange(steps, dtype=np.int64),
            "call_index": np.zeros(steps, np.int64),
            "launch_op": ["aten::planted"] * steps,
            "call_site": ["aten::planted#0.0"] * steps,
        },
        steps,
    )


CALL_SITE_NS = (5_000.0, 40_000.0, 300_000.0)
CALL_SITE_GRID = (32, 256, 2048)


def call_site_mix(steps: int = 200, seed: int = 0) -> pd.DataFrame:
    """One kernel name at three call sites per step (fixed shapes), 1 % noise: call-site differences only."""
    rng = np.random.default_rng(seed)
    k = len(CALL_SITE_NS)
    step = np.repeat(np.arange(steps), k)
    index = np.tile(np.arange(k), steps)
    mean = np.array(CALL_SITE_NS)[index]
    duration = np.round(mean * (1 + 0.01 * rng.standard_normal(len(mean))))
    start = step * STEP_NS + index * 350_000
    return _frame(
        {
            "kernel_name": ["planted_elementwise_kernel"] * len(step),
            "start": start,
            "duration": duration,
            "grid_x": np.array(CALL_SITE_GRID)[index],
            "step": step.astype(np.int64),
            "call_index": index.astype(np.int64),
            "launch_op": ["aten::add"] * len(step),
            "call_site": [f"aten::add#{i}.0" for i in index],
        },
        len(step),
    )


LABEL_DRIFT_B, LABEL_DRIFT_D = 8, 1024
GEMM_RATE = {"gemm_128x128": 6.0e5, "gemm_64x256": 4.5e5}  # FLOP per ns of each variant


def label_drift(steps: int = 300, seed: int = 0, shapes: bool = False) -> pd.DataFrame:
    """The label-drift trap (module docstring); with shapes=True the ops carry op_flops / op_m / op_n / op_k as
    `gpuvar ingest` derives them from recorded input shapes. The sequence length of each step is `seq_len`."""
    rng = np.random.default_rng(seed)
    length = 64 * rng.integers(2, 33, size=steps)
    B, D = LABEL_DRIFT_B, LABEL_DRIFT_D
    rows = []
    for step, L in enumerate(length):
        t = step * 20 * STEP_NS
        for index, n in enumerate((D, 4 * D)):  # the projection, then the MLP GEMM
            m, k = B * int(L), D
            flops = 2.0 * m * n * k
            variant = "gemm_128x128" if m * n < 2**23 else "gemm_64x256"
            grid = (66, 2) if m * n < 2**24 else (132, 1)
            d = flops / GEMM_RATE[variant] * (1 + 0.03 * rng.exponential())
            rows.append(
                (variant, "aten::mm", f"aten::mm#{index}.0", index, step, t, d, grid, 384, 168, flops, m, n, k, L)
            )
            t += int(d) + 5_000
        numel = B * int(L) * D
        d = numel / 2_000.0 * (1 + 0.02 * rng.exponential())
        grid = (numel // 512, 1)
        rows.append(
            (
                "vectorized_elementwise_kernel<MulFunctor>",
                "aten::mul",
                "aten::mul#0.0",
                0,
                step,
                t,
                d,
                grid,
                128,
                32,
                np.nan,
                np.nan,
                np.nan,
                np.nan,
                L,
            )
        )
    columns = [
        "kernel_name",
        "launch_op",
        "call_site",
        "op_occurrence",
        "step",
        "start",
        "duration",
        "grid",
        "block_x",
        "registers_per_thread",
        "op_flops",
        "op_m",
        "op_n",
        "op_k",
        "seq_len",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    grid = np.array(frame.pop("grid").tolist(), dtype=np.int64)
    out = _frame(
        {
            "kernel_name": frame["kernel_name"].tolist(),
            "start": frame["start"].to_numpy(np.int64),
            "duration": np.round(frame["duration"].to_numpy()),
            "grid_x": grid[:, 0],
            "step": frame["step"].to_numpy(np.int64),
            "call_index": np.zeros(len(frame), np.int64),
            "op_occurrence": frame["op_occurrence"].to_numpy(np.int64),
            "launch_op": frame["launch_op"].tolist(),
            "call_site": frame["call_site"].tolist(),
            "seq_len": frame["seq_len"].to_numpy(np.int64),
        },
        len(frame),
    )
    out["grid_y"] = grid[:, 1]
    out["block_x"] = frame["block_x"].to_numpy(np.int64)
    out["registers_per_thread"] = frame["registers_per_thread"].to_numpy(np.int64)
    out["grid_size"] = out["grid_x"] * out["grid_y"] * out["grid_z"]
    out["workgroup_size"] = out["block_x"] * out["block_y"] * out["block_z"]
    if shapes:
        for column in ("op_flops", "op_m", "op_n", "op_k"):
            out[column] = frame[column].to_numpy(np.float64)
    return out


PAGE_OPS = 13  # more findings than the page shows (gpuvar.findings.report.MAX_FINDINGS)
LONGEST_NS = 2_000_000


def page_traps(steps: int = 300, seed: int = 0) -> pd.DataFrame:
    """The page's traps in one step loop. PAGE_OPS ops `aten::op{i}` like `heteroscedastic` (duration follows a
    per-step grid_x), each costlier than the last, so there are more findings than the page shows; `aten::tiny`:
    ~100 ns launches with 30 % noise, far below the time floor and explained by nothing; `aten::once`: one
    launch (nothing to compare); `aten::steady`: 1 % noise over every step (stable); `aten::few_steady`: 1 %
    noise over 5 launches (too few to call stable). One launch of the costliest op takes LONGEST_NS, ~25x its
    call site's median: the longest launch of the trace, which its evidence must name."""
    rng = np.random.default_rng(seed)
    grid = rng.integers(8, 129, size=steps) * 16
    parts = []

    def op(name: str, duration, offset_ns: int, grid_x, launches: int | None = None) -> None:
        n = len(duration)
        step = np.arange(n, dtype=np.int64)
        parts.append(
            {
                "kernel_name": [f"{name.split('::')[1]}_kernel"] * n,
                "start": step * STEP_NS * 4 + offset_ns,
                "duration": np.round(np.asarray(duration, dtype=float)).clip(min=1),
                "grid_x": np.asarray(grid_x, dtype=np.int64),
                "step": step,
                "call_index": np.zeros(n, np.int64),
                "launch_op": [name] * n,
                "call_site": [f"{name}#0.0"] * n,
            }
        )

    for i in range(PAGE_OPS):
        mean = (10.0 + 5 * i) * grid
        op(f"aten::op{i}", mean * (1 + NOISE_CV * rng.standard_normal(steps)), 40_000 * i, grid)
    op("aten::tiny", 100 * (1 + 0.3 * rng.standard_normal(steps)).clip(0.2), 3_000_000, np.full(steps, 4))
    op("aten::once", [50_000.0], 3_100_000, [64])
    op("aten::steady", 20_000 * (1 + 0.01 * rng.standard_normal(steps)), 3_200_000, np.full(steps, 64))
    op("aten::few_steady", 20_000 * (1 + 0.01 * rng.standard_normal(5)), 3_300_000, np.full(5, 64))
    columns = {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in parts[0]}
    frame = _frame(columns, len(columns["start"]))
    last = frame.index[frame["launch_op"] == f"aten::op{PAGE_OPS - 1}"][7]
    frame.loc[last, "duration"] = LONGEST_NS  # the longest launch of the trace, ~25x its call site's median
    frame["end"] = frame["start"] + frame["duration"]
    return (
        frame.sort_values("start", kind="stable")
        .reset_index(drop=True)
        .assign(launch_id=lambda f: np.arange(len(f), dtype=np.int64))
    )


SLOW_RANK = 1
SLOW_RANK_SITES = 12


def slow_rank(ranks: int = 4, steps: int = 40, seed: int = 0) -> pd.DataFrame:
    """`slow_rank` (module docstring): ranks x steps x SLOW_RANK_SITES launches of one op, with a `rank` column."""
    rng = np.random.default_rng(seed)
    site = np.tile(np.arange(SLOW_RANK_SITES), ranks * steps)
    step = np.repeat(np.arange(steps), ranks * SLOW_RANK_SITES)
    rank = np.tile(np.repeat(np.arange(ranks), SLOW_RANK_SITES), steps)
    base = 10_000.0 * (1 + site)
    duration = np.round(base * np.where(rank == SLOW_RANK, 1.5, 1.0) * (1 + 0.02 * rng.standard_normal(len(site))))
    n = len(site)
    frame = _frame(
        {
            "kernel_name": ["planted_rank_kernel"] * n,
            "start": step * STEP_NS * 10 + rank * 1000 + site * 50_000,
            "duration": duration.clip(min=1),
            "grid_x": np.full(n, 64, np.int64),
            "step": step.astype(np.int64),
            "call_index": np.zeros(n, np.int64),
            "op_occurrence": site.astype(np.int64),
            "launch_op": ["aten::planted"] * n,
            "call_site": [f"aten::planted#{k}.0" for k in site],
        },
        n,
    )
    frame["rank"] = rank.astype(np.int64)
    return frame.sort_values(["start", "launch_id"], kind="stable").reset_index(drop=True)
