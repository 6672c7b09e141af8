"""Context columns (gpuvar.ingest.context) on N kernel launches and N/2 copies and memsets; prints one JSON object.

Why this size: the issue asks for 1 M kernels + 0.5 M copies in about a second, the size of a long Nsight
Systems capture. The timeline is synthetic and seeded: 8 devices x 4 streams of back-to-back kernels with
host gaps, copies of random kinds (a quarter memsets) on any stream, so every code path (overlaps across
streams, gaps, steps) does real work. Best and median wall time of --repeat calls (and best CPU time), on frames already in memory.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd


def timeline(rows: int, copies: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels, memcpy) canonical-named frames: kernels back to back per (device, stream), copies anywhere."""
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, 32, rows)  # device * 4 + stream
    dur = rng.integers(2_000, 80_000, rows)
    gap = rng.integers(500, 20_000, rows)
    order = np.argsort(lane, kind="stable")
    step = np.empty(rows, np.int64)
    start = np.empty(rows, np.int64)
    ends = np.cumsum((dur + gap)[order])
    first = np.r_[True, lane[order][1:] != lane[order][:-1]]
    base = np.maximum.accumulate(np.where(first, ends - (dur + gap)[order], 0))
    start[order] = ends - dur[order] - base
    step[order] = np.arange(rows) // 16
    kernels = pd.DataFrame(
        {
            "device_id": lane // 4,
            "stream_id": lane % 4 + 7,
            "start": start + 10**18,
            "end": start + dur + 10**18,
            "step": step,
        }
    )
    span = int(start.max())
    cs = rng.integers(0, span, copies) + 10**18
    memcpy = pd.DataFrame(
        {
            "device_id": rng.integers(0, 8, copies),
            "stream_id": rng.integers(7, 12, copies),
            "start": cs,
            "end": cs + rng.integers(1_000, 50_000, copies),
            "bytes": rng.integers(4, 2**29, copies),
            "copy_kind_name": rng.choice(np.array(["HtoD", "DtoH", "DtoD", "Memset"], dtype=object), copies),
        }
    )
    # canonical tables come from ingest in start order
    return kernels.sort_values("start", ignore_index=True), memcpy.sort_values("start", ignore_index=True)


def configure_context(p):
    p.add_argument("--rows", type=int, default=1_000_000, help="kernel launches (default: %(default)s)")
    p.add_argument("--copies", type=int, default=None, help="copies and memsets (default: rows / 2)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the generated launches and copies (default: %(default)s)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed calls; best and median wall time are reported (default: %(default)s)",
    )


def run_context(args) -> int:
    from gpuvar.ingest.context import context_columns

    copies = args.rows // 2 if args.copies is None else args.copies
    kernels, memcpy = timeline(args.rows, copies, args.seed)
    times, cpu = [], []
    for _ in range(max(args.repeat, 1)):
        t0, c0 = time.perf_counter(), time.process_time()
        out = context_columns(kernels, memcpy)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    result = {
        "bench": "context",
        "kernel_rows": args.rows,
        "memcpy_rows": copies,
        "seed": args.seed,
        "columns": sorted(out),
        "best_s": round(min(times), 3),
        "median_s": round(float(np.median(times)), 3),
        "best_cpu_s": round(min(cpu), 3),  # CPU seconds: less sensitive than wall to a shared, loaded machine
        "kernels_with_copy_active": int(np.nansum(out["ctx_copy_active"])),
        "mean_kernels_concurrent": round(float(np.nanmean(out["ctx_kernels_concurrent"])), 3),
    }
    print(json.dumps(result))
    return 0
