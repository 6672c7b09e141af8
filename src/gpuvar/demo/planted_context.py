"""Planted truth for the context columns (gpuvar.ingest.context): a concurrent copy slows one kernel.

Mirrors the real H100 trace in shared/data/real/pytorch-kineto-trace/h100-fixed-shape-copy-contention/ (a
transformer step whose first kernel, curand's normal_ generator, is slowed when a 512 MiB device-to-device
copy on a side stream runs in random 30 % of the steps). There, launch configuration is constant per kernel,
so only the context can explain the variability: a test that the copy flag finds it and names no one else.

Each step launches, on device 0: `first` (stream 7), `gemm` (stream 7), `add` (stream 7) and `norm` on a
second stream (8) at the same time as `add` (they overlap: `ctx_kernels_concurrent` 1 for both), then a
4-byte memset on stream 7 after the step's last kernel. In the steps with `copy` = 1 a 512 MiB DtoD copy on
stream 17 starts before `first` and ends after it but before `gemm`, and `first` runs 40 % longer. Every
duration has 1 % (CV) Gaussian noise; steps are separated by a host gap.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NAMES = ("planted_first_rng", "planted_gemm", "planted_add", "planted_norm")
BASE_NS = np.array([22_000.0, 70_000.0, 30_000.0, 40_000.0])
STREAMS = np.array([7, 7, 7, 8])
GRID = np.array([132, 256, 512, 64])
BLOCK = np.array([256, 128, 256, 1024])
SLOWDOWN = 1.4  # of `first` while the copy runs
COPY_BYTES = 512 * 2**20
COPY_STREAM = 17
COPY_FRACTION = 0.3
CV = 0.01
LAUNCH_GAP_NS = 15_000  # host gap between kernels of a step (the copy ends within it)
STEP_GAP_NS = 200_000  # host synchronisation between steps


def planted(steps: int = 300, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(kernels, memcpy, truth): canonical-named tables and truth with one row per step (`step`, `copy`)."""
    rng = np.random.default_rng([seed, 0xC07])
    copy = rng.random(steps) < COPY_FRACTION
    k = len(NAMES)
    dur = BASE_NS[None, :] * rng.normal(1.0, CV, (steps, k))
    dur[:, 0] *= np.where(copy, SLOWDOWN, 1.0)
    dur = np.round(dur).astype(np.int64)
    # within a step: first, gap, gemm, gap, then add (stream 7) and norm (stream 8) launched together
    rel = np.zeros((steps, k), np.int64)
    rel[:, 1] = dur[:, 0] + LAUNCH_GAP_NS
    rel[:, 2] = rel[:, 1] + dur[:, 1] + LAUNCH_GAP_NS
    rel[:, 3] = rel[:, 2] + 1_000
    step_len = np.maximum(rel[:, 2] + dur[:, 2], rel[:, 3] + dur[:, 3])
    memset_rel = step_len + 2_000
    memset_dur = 1_500
    t0 = 1_000_000_000
    step_start = t0 + np.concatenate(([0], np.cumsum(memset_rel + memset_dur + STEP_GAP_NS)[:-1]))
    start = step_start[:, None] + rel
    kernels = pd.DataFrame(
        {
            "kernel_name": np.tile(np.array(NAMES, dtype=object), steps),
            "device_id": np.zeros(steps * k, np.int64),
            "stream_id": np.tile(STREAMS, steps),
            "launch_id": np.arange(steps * k, dtype=np.int64),
            "start": start.ravel(),
            "end": (start + dur).ravel(),
            "duration": dur.ravel(),
            "grid_x": np.tile(GRID, steps),
            "grid_y": np.ones(steps * k, np.int64),
            "grid_z": np.ones(steps * k, np.int64),
            "block_x": np.tile(BLOCK, steps),
            "block_y": np.ones(steps * k, np.int64),
            "block_z": np.ones(steps * k, np.int64),
            "step": np.repeat(np.arange(steps, dtype=np.int64), k),
        }
    )
    # the copy: starts 150 us before `first` (after the previous step's memset), ends 5 us after `first`
    # (inside the launch gap before `gemm`)
    cs = step_start[copy] - 150_000
    ce = step_start[copy] + dur[copy, 0] + 5_000
    ms = step_start + memset_rel
    memcpy = pd.DataFrame(
        {
            "start": np.concatenate([cs, ms]),
            "end": np.concatenate([ce, ms + memset_dur]),
            "device_id": np.zeros(copy.sum() + steps, np.int64),
            "stream_id": np.concatenate([np.full(copy.sum(), COPY_STREAM), np.full(steps, 7)]).astype(np.int64),
            "bytes": np.concatenate([np.full(copy.sum(), COPY_BYTES), np.full(steps, 4)]).astype(np.int64),
            "copy_kind_name": np.array(["DtoD"] * int(copy.sum()) + ["Memset"] * steps, dtype=object),
        }
    )
    memcpy = memcpy.sort_values("start", kind="stable", ignore_index=True)
    memcpy["duration"] = memcpy["end"] - memcpy["start"]
    truth = pd.DataFrame({"step": np.arange(steps, dtype=np.int64), "copy": copy.astype(np.int64)})
    return kernels, memcpy, truth
