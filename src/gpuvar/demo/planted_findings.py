"""Planted-truth canonical kernel tables for the findings stage (gpuvar.findings): each carries a known answer.

`heteroscedastic`: one kernel at one call site per step; its grid_x (problem size) varies from step to step
  and its duration is proportional to grid_x, with timing noise that is *proportional to the size* (noise sd
  = NOISE_CV x the mean at that size). The answer is "explained by grid_x (+)"; a residual-independence test
  that assumes constant noise flags it, the location-scale check must not.
`call_site_mix`: one kernel name launched at three call sites of a step on three fixed shapes (three durations
  an order of magnitude apart), with 1 % noise. The answer is "call-site differences": ~100 % of the name's
  variance is between call sites, nothing is a cause, the kernel is stable within each call site.
Both are canonical tables (the columns `gpuvar ingest` writes), seeded, so the same seed gives the same rows.
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
            "call_site": ["aten::planted#0 b256x1x1 r32"] * steps,
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
            "call_site": [f"aten::add#{i} b256x1x1 r32" for i in index],
        },
        len(step),
    )
