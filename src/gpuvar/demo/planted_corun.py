"""Planted truth for the co-running columns (gpuvar.ingest.corun, gpuvar.ingest.gpu_identity): two processes on
one GPU, one slowed only while the other one's kernels run.

Mirrors the real two-rank gloo recording (shared/data/real/pytorch-kineto-trace/h100-2rank-gloo: two ranks of a
torch.distributed job time-slicing one H100, an 8 us relu stretched to 1.8 ms while the other rank's GEMM ran).
Two PyTorch profiler (Kineto) rank files, as the profiler lays them out (deviceProperties, distributedInfo,
ProfilerStep#N annotations, the cpu_op and cudaLaunchKernel of every kernel):

  rank 0, each step: `planted_victim_relu` (8 us) at +100 us, then `planted_victim_gemm` (300 us) at +1000 us;
  rank 1, each step: one `planted_hog_gemm`, placed by the step's scenario (seeded, fixed shares):
    none    (50 %): at +1400 us, 500 us: overlaps nothing of rank 0;
    inside  (30 %): starts 2 us after the relu and runs 500 us; the relu makes no progress meanwhile, so it
                    lasts its own time + 500 us and the hog lies inside it;
    partial (20 %): started before the relu and ends r = 20..200 us after the relu's start (400 us + r long);
                    the relu lasts its own time + r.
  The victim gemm never overlaps rank 1's work and is never slowed. Own times have 1 % (CV) noise.

So, on one GPU, the relu's ctx_other_process_kernels is 1 and its ctx_other_process_overlap the hog's share of
its interval (500/(own + 500), or r/(own + r)) in the inside and partial steps, 0 elsewhere; the relu's duration
is its own time plus exactly that overlap. truth.csv has one row per kernel launch (rank, kernel_name, step,
scenario, start_ns, end_ns, overlap_ns, expected_kernels, expected_overlap), computed from the construction,
not by the code under test.

`gpus` places the two processes (same timing in every variant, the relu stretched all the same):
  "shared"    both on device 0, each file lists one GPU, no host: gpu_identity assumes one shared GPU (a note);
  "same-host" both on device 0 of host node-a (Kineto top-level host_name): one GPU, known;
  "other-gpu" host node-a, rank 0 on device 0 and rank 1 on device 1 (both files list 2 GPUs): separate GPUs,
              so nothing may be attributed to co-running (expected 0 everywhere);
  "other-host" device 0 on node-a and on node-b: separate GPUs (expected 0);
  "unknown"   both on device 0, each file lists 2 GPUs, no host: cannot be known (expected NaN, and a note).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.demo.kineto_writer import gzip_text

STEPS = 120
STEP_NS = 2_000_000
RELU_AT, RELU_NS = 100_000, 8_000
GEMM_AT, GEMM_NS = 1_000_000, 300_000
HOG_NS = 500_000
HOG_IDLE_AT = 1_400_000
INSIDE_DELAY = 2_000
PARTIAL_BEFORE = 400_000
PARTIAL_R = (20_000, 200_000)
SCENARIOS = ("none", "inside", "partial")
SHARES = (0.5, 0.3, 0.2)
CV = 0.01
STEP_LEAD = 500_000  # the host's step (ProfilerStep#N) starts this long before the step's GPU time origin
NAMES = ("planted_victim_relu", "planted_victim_gemm", "planted_hog_gemm")
VARIANTS = {  # gpus -> ((device, host) of rank 0, (device, host) of rank 1), GPUs each file lists, expectation
    "shared": (((0, None), (0, None)), 1, "shared"),
    "same-host": (((0, "node-a"), (0, "node-a")), 1, "shared"),
    "other-gpu": (((0, "node-a"), (1, "node-a")), 2, "separate"),
    "other-host": (((0, "node-a"), (0, "node-b")), 1, "separate"),
    "unknown": (((0, None), (0, None)), 2, "unknown"),
}
_T0_NS = 1_790_000_000_000_000_000  # epoch ns, as Kineto's ts (µs with a ns fraction) carries them


def timeline(steps: int = STEPS, seed: int = 0) -> pd.DataFrame:
    """One row per kernel launch of both ranks: rank, kernel_name, step, scenario, start_ns, end_ns, overlap_ns
    (time the other rank's kernels cover of it), in rank then start order."""
    rng = np.random.default_rng([seed, 0xC0])
    scenario = rng.choice(len(SCENARIOS), steps, p=SHARES)
    r = rng.integers(PARTIAL_R[0], PARTIAL_R[1] + 1, steps)
    own = np.round(RELU_NS * rng.normal(1.0, CV, steps)).astype(np.int64)
    gemm = np.round(GEMM_NS * rng.normal(1.0, CV, steps)).astype(np.int64)
    hog_own = np.round(HOG_NS * rng.normal(1.0, CV, steps)).astype(np.int64)
    step0 = _T0_NS + np.arange(steps, dtype=np.int64) * STEP_NS
    relu_s = step0 + RELU_AT
    inside, partial = scenario == 1, scenario == 2
    hog_s = np.where(inside, relu_s + INSIDE_DELAY, np.where(partial, relu_s - PARTIAL_BEFORE, step0 + HOG_IDLE_AT))
    hog_e = np.where(partial, relu_s + r, hog_s + hog_own)
    overlap = np.where(inside, hog_e - hog_s, np.where(partial, r, 0))  # of the relu, by the hog
    relu_e = relu_s + own + overlap  # no progress while the hog runs
    gemm_s = step0 + GEMM_AT
    name = np.array(SCENARIOS)[scenario]
    steps_idx = np.arange(steps)
    parts = [
        (0, NAMES[0], relu_s, relu_e, overlap),
        (0, NAMES[1], gemm_s, gemm_s + gemm, np.zeros(steps, np.int64)),
        (1, NAMES[2], hog_s, hog_e, overlap),  # the hog's overlap with the relu is the same interval
    ]
    frames = [
        pd.DataFrame(
            {
                "rank": rank,
                "kernel_name": kname,
                "step": steps_idx,
                "scenario": name,
                "start_ns": s,
                "end_ns": e,
                "overlap_ns": ov,
            }
        )
        for rank, kname, s, e, ov in parts
    ]
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def truth(steps: int = STEPS, seed: int = 0, gpus: str = "shared") -> pd.DataFrame:
    """timeline() with the columns a correct ingest must give under the `gpus` variant: expected_kernels and
    expected_overlap (0 on separate GPUs, NaN where the GPU cannot be known)."""
    if gpus not in VARIANTS:
        raise ValueError(f"gpus must be one of {', '.join(VARIANTS)}")
    t = timeline(steps, seed)
    expect = VARIANTS[gpus][2]
    hit = (t["overlap_ns"] > 0).astype(float)
    share = t["overlap_ns"] / (t["end_ns"] - t["start_ns"])
    if expect == "shared":
        t["expected_kernels"], t["expected_overlap"] = hit, share
    elif expect == "separate":
        t["expected_kernels"], t["expected_overlap"] = 0.0, 0.0
    else:
        t["expected_kernels"], t["expected_overlap"] = np.nan, np.nan
    return t


def _us(ns: int) -> str:
    """Epoch ns as Kineto's µs text with a ns fraction (exact: the reader parses the decimal text)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _header(rank: int, devices: int, host: str | None) -> str:
    props = ", ".join(
        f'{{"id": {d}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017493504, "computeMajor": 9, '
        f'"computeMinor": 0, "warpSize": 32, "numSms": 132}}'
        for d in range(devices)
    )
    dist = f'{{"backend": "gloo", "rank": {rank}, "world_size": 2}}'
    host_line = f'  "host_name": "{host}",\n' if host else ""
    return (
        f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [{props}],\n  "distributedInfo": {dist},\n'
        f'{host_line}  "displayTimeUnit": "ms",\n  "traceEvents": [\n'
    )


def _rank_events(rows: pd.DataFrame, rank: int, device: int) -> list[str]:
    """Kineto events of one rank's kernels: per step a ProfilerStep#N annotation, per kernel its cpu_op, the
    cudaLaunchKernel inside it (same correlation) and the kernel."""
    pid, out = 1000 + rank, []
    for step, group in rows.groupby("step", sort=True):
        step_s = _T0_NS + int(step) * STEP_NS - STEP_LEAD  # before any launch of the step (a partial hog's too)
        out.append(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, "tid": {pid}, '
            f'"ts": {_us(step_s)}, "dur": {(STEP_NS - 10_000) / 1000:.3f}, "args": {{"External id": {step}}}}}'
        )
        for j, row in enumerate(group.itertuples(index=False)):
            corr = 10_000 + 10 * step + j
            launch = int(row.start_ns) - 30_000
            op = "aten::relu" if "relu" in row.kernel_name else "aten::mm"
            dur = (int(row.end_ns) - int(row.start_ns)) / 1000
            out.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {pid}, "tid": {pid}, "ts": {_us(launch - 2_000)}, '
                f'"dur": 8.000, "args": {{"External id": {corr}}}}}'
            )
            out.append(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {pid}, '
                f'"ts": {_us(launch)}, "dur": 4.000, "args": {{"External id": {corr}, "correlation": {corr}}}}}'
            )
            grid = 7168 if "relu" in row.kernel_name else 264
            out.append(
                f'{{"ph": "X", "cat": "kernel", "name": "{row.kernel_name}", "pid": {device}, "tid": 7, '
                f'"ts": {_us(int(row.start_ns))}, "dur": {dur:.3f}, "args": {{"External id": {corr}, '
                f'"device": {device}, "context": 1, "stream": 7, "correlation": {corr}, '
                f'"registers per thread": 28, "shared memory": 0, "grid": [{grid}, 1, 1], "block": [128, 1, 1]}}}}'
            )
    return out


def write_corun(outdir: str | Path, gpus: str = "shared", steps: int = STEPS, seed: int = 0) -> dict:
    """rank0.pt.trace.json.gz, rank1.pt.trace.json.gz, truth.csv and truth.json in OUTDIR (same bytes for the same
    arguments); returns truth.json's content."""
    t = truth(steps, seed, gpus)
    (place, listed, expect) = VARIANTS[gpus]
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    for rank, (device, host) in enumerate(place):
        path = outdir / f"rank{rank}.pt.trace.json.gz"
        with gzip_text(path) as fh:
            fh.write(_header(rank, listed, host))
            fh.write(",\n".join(_rank_events(t[t["rank"] == rank], rank, device)))
            fh.write('\n  ],\n  "traceName": "gpuvar-planted-corun"\n}\n')
        files.append(path.name)
    t.to_csv(outdir / "truth.csv", index=False, lineterminator="\n")
    relu = t[t["kernel_name"] == NAMES[0]]
    summary = {
        "gpus": gpus,
        "placement": [{"rank": r, "device": d, "host": h, "gpus_listed": listed} for r, (d, h) in enumerate(place)],
        "expected": expect,
        "files": files,
        "steps": steps,
        "seed": seed,
        "slowed": NAMES[0],
        "cause": "overlap with rank 1's planted_hog_gemm on the same GPU (the relu waits while it runs)",
        "relu_steps_overlapped": int((relu["overlap_ns"] > 0).sum()),
        "not_slowed": [NAMES[1], NAMES[2]],
    }
    (outdir / "truth.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary
