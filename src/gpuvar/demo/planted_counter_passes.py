"""Planted truth: a rocprof v1 kernel trace and two counter passes of one program (`rocprof --stats` then
`rocprof -i pass1.txt`, `rocprof -i pass2.txt`), where only a counter carries the cause of the duration.

The program: a fill, then `iterations` x (a 3-D stencil `laplacian_kernel` on a fixed 256^3 grid, then a
`check_kernel`), as the real hpct-laplacian recording (../shared/data/real/rocprof-v1-csv). The grid never changes,
so the launch configuration explains nothing. Per stencil dispatch i a hidden miss share m_i ~ U(0, 1) (the data
layout of that iteration, the same in every run of the program) sets the bytes fetched from DRAM:
  FETCH_SIZE (KB)   = 65536 x (0.2 + 0.8 m_i), x (1 + 1 % run noise) in the pass that records it;
  duration (ns)     = 400 us + FETCH_SIZE x 1024 / 1.6 bytes per ns, x (1 + 1 % right-skewed noise);
  TCP_TCC_READ_REQ_sum = FETCH_SIZE x 1024 / 64 (64-byte requests), with its own 1 % run noise;
  SQ_WAVES          = grid / 64: constant per kernel (work that does not vary).
Files, each written as rocprof v1 writes it (column names by layout, `"..."` quoting in results.csv only):
  results.csv   the kernel trace: `Index,KernelName,...,obj,DispatchNs,BeginNs,EndNs,CompleteNs,DurationNs`;
  pass1.csv     `Index,KernelName,...,obj,FETCH_SIZE,WRITE_SIZE`: no timestamps;
  pass2.csv     `...,obj,TCP_TCC_READ_REQ_sum,SQ_WAVES`: no timestamps.
Each file is another run of the program, so its pid differs (the join must go by Index). The truth: FETCH_SIZE
(and its near-duplicate TCP_TCC_READ_REQ_sum) explain the stencil's duration, with a + sign; seeded."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

GRID = 256**3
BLOCK = 256
BASE_NS = 400_000.0
BYTES_PER_NS = 1.6
RUN_NOISE = 0.01
STENCIL, CHECK, FILL = "laplacian_kernel", "check_kernel", "__amd_rocclr_fillBufferAligned.kd"
IDENTITY = ["Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds", "scr",
            "arch_vgpr", "accum_vgpr", "sgpr", "wave_size", "sig", "obj"]  # fmt: skip
TIMES = ["DispatchNs", "BeginNs", "EndNs", "CompleteNs", "DurationNs"]
PASSES = {"pass1.csv": ("FETCH_SIZE", "WRITE_SIZE"), "pass2.csv": ("TCP_TCC_READ_REQ_sum", "SQ_WAVES")}
CAUSE = "FETCH_SIZE"


def _program(iterations: int) -> list[str]:
    return [FILL] + [name for _ in range(iterations) for name in (STENCIL, CHECK)]


def _identity(index: int, name: str, pid: int) -> list:
    vgpr = {STENCIL: 24, CHECK: 16, FILL: 16}[name]
    return [index, name, 8, 0, index, pid, pid, GRID, BLOCK, 0, 0, vgpr, 0, 32, 64, "0x0", f"0x7f4c3a9{index % 7}580"]


def write_counter_passes(folder: str | Path, iterations: int = 300, seed: int = 0) -> dict:
    """results.csv, pass1.csv and pass2.csv in `folder`; returns their paths and the truth per dispatch."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC0DE]))
    names = _program(iterations)
    n = len(names)
    stencil = np.array([name == STENCIL for name in names])
    miss = rng.uniform(0.0, 1.0, n)
    fetch_kb = np.where(stencil, 65536.0 * (0.2 + 0.8 * miss), np.where(np.array(names) == CHECK, 1024.0, 16.0))
    duration = np.rint((BASE_NS + fetch_kb * 1024 / BYTES_PER_NS) * (1 + rng.exponential(RUN_NOISE, n)))
    duration = np.where(stencil, duration, np.rint(20_000 + rng.exponential(200.0, n))).astype(np.int64)
    begin = 2_001_401_019_948_822 + np.cumsum(duration + 5_000) - duration
    rows = []
    for i, name in enumerate(names):
        b, d = int(begin[i]), int(duration[i])
        rows.append([*_identity(i, name, 1_580_852), b - 28_000, b, b + d, b + d + 40_000, d])
    _write(folder / "results.csv", IDENTITY + TIMES, rows, quote_all=True)
    for k, (file, counters) in enumerate(PASSES.items(), 1):
        run = np.random.default_rng(np.random.SeedSequence([seed, 0xC0DE, k]))
        values = {
            "FETCH_SIZE": fetch_kb * (1 + run.normal(0, RUN_NOISE, n)),
            "WRITE_SIZE": np.full(n, 65536.0) * (1 + run.normal(0, RUN_NOISE, n)),
            "TCP_TCC_READ_REQ_sum": fetch_kb * 1024 / 64 * (1 + run.normal(0, RUN_NOISE, n)),
            "SQ_WAVES": np.full(n, GRID / 64),
        }
        pass_rows = [
            [*_identity(i, name, 1_580_852 + 101 * k), *(f"{values[c][i]:.10f}" for c in counters)]
            for i, name in enumerate(names)
        ]
        _write(folder / file, IDENTITY + list(counters), pass_rows, quote_all=False)
    return {
        "trace": str(folder / "results.csv"),
        "passes": [str(folder / f) for f in PASSES],
        "launches": n,
        "counters": [c for counters in PASSES.values() for c in counters],
        "fetch_kb": fetch_kb,
        "duration": duration,
        "cause": CAUSE,
        "kernel": STENCIL,
    }


def _write(path: Path, header: list[str], rows: list[list], quote_all: bool) -> None:
    """A CSV as rocprof writes it: results.csv quotes every header name and text field, a counter pass only the
    kernel name."""
    with open(path, "w", newline="") as fh:
        if quote_all:
            fh.write(",".join(f'"{h}"' for h in header) + "\n")
            csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n").writerows(rows)
            return
        fh.write(",".join(header) + "\n")
        for row in rows:
            fh.write(",".join(f'"{v}"' if j == 1 else str(v) for j, v in enumerate(row)) + "\n")
