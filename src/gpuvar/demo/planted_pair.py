"""A planted comparison pair with a known answer: two runs of the demo trace (same contention windows, new random
draws), the candidate slowing one kernel by 10 % and removing one of its causal drivers (grid_y).

What a correct comparison reports: that kernel `slower`, ratio ~1.10 with an interval excluding 1; in its
causal graph the edge grid_y -> target removed and grid_y's variance share fallen; no other kernel flagged
beyond the false-discovery rate. The two runs are written as Nsight Systems SQLite (the demo's nsys writer),
or built as canonical frames directly for fast tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.demo import synth

KERNEL = 0  # gemm_tile_kernel
SLOWDOWN = 1.10
DRIVER = "grid_y"
CHANGE = synth.Change(kernel=KERNEL, slowdown=SLOWDOWN, drop_grid_y=True)
DRAWS = (1, 2)  # baseline, candidate: both differ from the ordinary demo trace (draw 0)


def planted() -> dict:
    """The planted answer, as written to pair.json and checked by the tests."""
    names, _ = synth.kernel_names()
    return {
        "kernel": names[KERNEL],
        "slowdown": SLOWDOWN,
        "driver_removed": DRIVER,
        "other_kernels": "same distribution in both runs (no change)",
    }


def frames(rows: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(baseline, candidate) kernels with kernel_name, duration and the nsys-visible launch features."""
    names, _ = synth.kernel_names()
    out = []
    for draw, change in zip(DRAWS, (None, CHANGE)):
        chunks = list(synth.generate(rows, seed, draw=draw, change=change))
        k = {c: np.concatenate([ch.kernels[c] for ch in chunks]) for c in chunks[0].kernels}
        out.append(
            pd.DataFrame(
                {
                    "kernel_name": np.array(names, dtype=object)[k["kernel_index"]],
                    "start": k["start"],
                    "duration": k["duration"],
                    "grid_x": k["grid_x"],
                    "grid_y": k["grid_y"],
                    "dynamic_shared_memory": k["dynamic_shared_memory"],
                }
            )
        )
    return out[0], out[1]


def write_pair(outdir: str | Path, rows: int, seed: int) -> dict:
    """pair_baseline.sqlite and pair_candidate.sqlite (nsys exports) in OUTDIR; returns what was written."""
    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.layout import DEMO_PAIR

    outdir = Path(outdir)
    written = {}
    sides = (("baseline", DRAWS[0], None), ("candidate", DRAWS[1], CHANGE))
    for (side, draw, change), name in zip(sides, DEMO_PAIR, strict=True):
        written[f"pair_{side}"] = write_nsys_demo(outdir / name, rows, seed, draw=draw, change=change)
    return {"files": written, "planted": planted()}


STEP_KERNELS = {"gemm": 80_000.0, "softmax": 12_000.0, "add": 3_000.0}  # median ns per launch


def step_noise_pair(seed: int, steps: int = 60, launches: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs of one program whose launches are *not* independent: in each step every kernel shares the
    step's slowdown (a side copy in 30 % of steps costs +25 %, and a per-step load factor of ~5 %), on top of
    1 % launch noise. Nothing changed between the runs: a comparison must flag nothing. Columns: key,
    duration, unit (= step)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 23]))
    runs = []
    for _ in range(2):
        step_factor = np.where(rng.random(steps) < 0.3, 1.25, 1.0) * rng.lognormal(0.0, 0.05, steps)
        parts = []
        for name, median in STEP_KERNELS.items():
            unit = np.repeat(np.arange(steps), launches)
            noise = rng.lognormal(0.0, 0.01, steps * launches)
            parts.append(pd.DataFrame({"key": name, "duration": median * step_factor[unit] * noise, "unit": unit}))
        runs.append(pd.concat(parts, ignore_index=True))
    return runs[0], runs[1]
