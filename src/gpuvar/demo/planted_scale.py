"""Planted truth at scale: a synchronous data-parallel job of R ranks, one PyTorch profiler (Kineto) trace per rank.

Why Kineto: it is what multi-rank PyTorch users have (one `.pt.trace.json.gz` per rank from
tensorboard_trace_handler, the rank in `distributedInfo`), and it carries everything the rank analysis and the
findings use: ProfilerStep#N ranges (steps), the cpu_op that launched each kernel (launch_op, call sites), the
launch configuration (grid, block) and NCCL kernels (the collectives). Written gzip level 1, compact (one event a
line), so 25.6 M launches take ~3 GB of disk (~13 GB as plain JSON).

The program, per rank and step s: a size n[r, s] = SIZE_UNIT * k, k drawn uniformly (seeded per rank) from
SIZE_RANGE, or STRAGGLER_SIZE_RANGE on the straggler rank (it gets more data per step: load imbalance). Then
`blocks` repetitions of three ops, each launching one kernel on stream 7:
  aten::mm          "gemm_sm90_128x128": a persistent grid of 132 CTAs whatever n (as cuBLAS launches), duration
                    GEMM_NS_PER_ROW * n: the size is in the duration, not in the grid;
  aten::add         "elementwise_add_kernel": grid n * 4 blocks of 256 threads, duration ELEMENTWISE_NS +
                    ELEMENTWISE_NS_PER_BLOCK * blocks: the size is in the grid;
  aten::layer_norm  "layer_norm_kernel": grid 1024, duration LAYER_NORM_NS: no size;
every duration times 1 + Gamma(2, 0.01) noise. The host launches with gaps of U(HOST_GAP_NS); the GPU runs each
kernel when the host has launched it and the previous one ended. Then the step's all-reduce: an NCCL kernel
(c10d::allreduce_) that starts when the rank arrives and ends for every rank when the last one has arrived plus
the transfer (TRANSFER_NS * (1 + noise)): the ranks that came early wait inside it. The next step starts on
every rank after that end (its ProfilerStep#N range covers its host ops).

The answer: the straggler is the rank most often last (its n exceeds every other rank's in most steps); its time
to the collective follows its GEMM time, which follows its size (threads launched in the step); and on every rank
the add kernels' duration follows their grid (a size driver of the findings), the GEMMs' the step's threads.
Every rank's trace is independent given the arrivals, so the job is written rank by rank in bounded memory after
one cheap pass that computes each rank's arrival per step.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuvar.demo.kineto_writer import gzip_text
from gpuvar.output import replacing, write_text

SIZE_UNIT = 256
SIZE_RANGE = (1, 8)  # k of n = SIZE_UNIT * k on the other ranks (inclusive)
STRAGGLER_SIZE_RANGE = (5, 12)  # on the straggler
# durations of a training step's kernels (a step of 1,000 launches takes ~0.1-0.3 s, as in real jobs): the job's
# timeline then spans ~2,000 of the workflow's 10 ms bins at 100 steps, not a handful holding every rank's launches
GEMM_NS_PER_ROW = 120.0
ELEMENTWISE_NS, ELEMENTWISE_NS_PER_BLOCK = 15_000.0, 12.0
LAYER_NORM_NS = 60_000.0
NOISE_GAMMA = (2.0, 0.01)
HOST_GAP_NS = (2_000, 6_000)
TRANSFER_NS = 400_000.0
OPS = (
    ("aten::mm", "gemm_sm90_128x128", 168),
    ("aten::add", "elementwise_add_kernel", 24),
    ("aten::layer_norm", "layer_norm_kernel", 40),
)
NCCL_OP = "c10d::allreduce_"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GPUS_PER_NODE = 8
HOST_PID, STREAM, NCCL_STREAM = 4242, 7, 21
_BASE_NS = 1_700_000_000_000_000_000  # epoch ns: every rank on one clock
TRUTH = "truth.json"


def trace_name(rank: int) -> str:
    return f"rank{rank:05d}.pt.trace.json.gz"


def layout(launches_per_rank: int, steps: int | None = None) -> tuple[int, int]:
    """(steps, op blocks per step): one NCCL kernel and 3 * blocks compute kernels per step, as close to
    launches_per_rank launches in all as whole blocks allow (the rest of the budget is not launched)."""
    if steps is None:
        steps = int(min(200, max(50, launches_per_rank // 1000)))
    blocks = (launches_per_rank // steps - 1) // len(OPS)
    if blocks < 1:
        raise ValueError(f"{launches_per_rank} launches per rank are too few for {steps} steps")
    return steps, blocks


def straggler_of(ranks: int, seed: int) -> int:
    return int(np.random.default_rng([seed, 0x57A66]).integers(0, ranks))


def _rank_draws(rank: int, straggler: int, steps: int, blocks: int, seed: int) -> dict[str, np.ndarray]:
    """Everything random on one rank (the same arrays on every call: the arrival pass and the writer agree)."""
    rng = np.random.default_rng([seed, rank])
    lo, hi = STRAGGLER_SIZE_RANGE if rank == straggler else SIZE_RANGE
    n = SIZE_UNIT * rng.integers(lo, hi + 1, steps)
    per_step = blocks * len(OPS)
    noise = 1.0 + rng.gamma(NOISE_GAMMA[0], NOISE_GAMMA[1], (steps, per_step))
    gaps = rng.integers(HOST_GAP_NS[0], HOST_GAP_NS[1] + 1, (steps, per_step + 1))
    add_blocks = n * 4
    base = np.empty((steps, per_step))
    base[:, 0::3] = (GEMM_NS_PER_ROW * n)[:, None]
    base[:, 1::3] = (ELEMENTWISE_NS + ELEMENTWISE_NS_PER_BLOCK * add_blocks)[:, None]
    base[:, 2::3] = LAYER_NORM_NS
    dur = np.rint(base * noise).astype(np.int64)
    return {"n": n, "dur": dur, "gaps": gaps, "add_blocks": add_blocks}


def _work(d: dict[str, np.ndarray]) -> np.ndarray:
    """Per step: the time from the step's start to the rank's arrival at the collective (host launches with its
    gaps; a kernel runs when launched and when the previous one has ended)."""
    steps, per_step = d["dur"].shape
    out = np.empty(steps, np.int64)
    for s in range(steps):
        host, gpu = 0, 0
        for j in range(per_step):
            host += int(d["gaps"][s, j])
            gpu = max(gpu, host) + int(d["dur"][s, j])
        out[s] = max(gpu, host + int(d["gaps"][s, per_step]))
    return out


def arrivals(ranks: int, steps: int, blocks: int, seed: int) -> np.ndarray:
    """Time from step start to arrival at the collective, (ranks, steps)."""
    straggler = straggler_of(ranks, seed)
    return np.stack([_work(_rank_draws(r, straggler, steps, blocks, seed)) for r in range(ranks)])


def step_starts(work: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each step's start (same on every rank) and the collective's end, from the arrivals (ns from the base)."""
    ranks, steps = work.shape
    transfer = TRANSFER_NS * (1 + np.random.default_rng([seed, 0x7F]).gamma(2.0, 0.05, steps))
    start = np.empty(steps, np.int64)
    end = np.empty(steps, np.int64)
    t = 1_000_000
    for s in range(steps):
        start[s] = t
        end[s] = t + int(work[:, s].max()) + int(transfer[s])
        t = int(end[s]) + 10_000
    return start, end


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _header(rank: int, ranks: int) -> str:
    device = rank % GPUS_PER_NODE
    props = [
        {
            "id": d,
            "name": "NVIDIA H100 80GB HBM3",
            "totalGlobalMem": 84929347584,
            "computeMajor": 9,
            "computeMinor": 0,
            "warpSize": 32,
            "numSms": 132,
        }  # fmt: skip
        for d in range(GPUS_PER_NODE)
    ]
    info = {"backend": "nccl", "rank": rank, "world_size": ranks}
    return (
        f'{{"schemaVersion": 1, "distributedInfo": {json.dumps(info)}, "deviceProperties": {json.dumps(props)},\n'
        f'"traceName": "rank{rank}", "deviceId": {device},\n"traceEvents": [\n'
    )


def write_rank(path: Path, rank: int, ranks: int, steps: int, blocks: int, seed: int, start, end) -> int:
    """Write one rank's trace; returns its kernel launches."""
    d = _rank_draws(rank, straggler_of(ranks, seed), steps, blocks, seed)
    device = rank % GPUS_PER_NODE
    per_step = blocks * len(OPS)
    ext = corr = 0
    launches = 0
    with replacing(path) as tmp, gzip_text(tmp) as fh:
        fh.write(_header(rank, ranks))
        first = True
        for s in range(steps):
            lines = []
            t0 = _BASE_NS + int(start[s])
            host = gpu = t0
            dur, gaps = d["dur"][s].tolist(), d["gaps"][s].tolist()
            blocks_add = int(d["add_blocks"][s])
            for j in range(per_step):
                op, kernel, regs = OPS[j % 3]
                host += gaps[j]
                ext += 1
                corr += 1
                begin = max(gpu, host)
                gpu = begin + dur[j]
                grid = "[132, 1, 1]" if j % 3 == 0 else (f"[{blocks_add}, 1, 1]" if j % 3 == 1 else "[1024, 1, 1]")
                lines.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {HOST_PID}, "tid": {HOST_PID}, '
                    f'"ts": {_us(host - 1500)}, "dur": 1.400, "args": {{"External id": {ext}}}}}'
                )
                lines.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {HOST_PID}, '
                    f'"tid": {HOST_PID}, "ts": {_us(host - 900)}, "dur": 0.800, '
                    f'"args": {{"External id": {ext}, "correlation": {corr}}}}}'
                )
                lines.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": {device}, "tid": {STREAM}, '
                    f'"ts": {_us(begin)}, "dur": {_us(dur[j])}, "args": {{"External id": {ext}, "device": {device}, '
                    f'"stream": {STREAM}, "correlation": {corr}, "registers per thread": {regs}, '
                    f'"shared memory": 0, "grid": {grid}, "block": [256, 1, 1]}}}}'
                )
            arrive = max(gpu, host + gaps[per_step])
            ext += 1
            corr += 1
            done = _BASE_NS + int(end[s])
            lines.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{NCCL_OP}", "pid": {HOST_PID}, "tid": {HOST_PID}, '
                f'"ts": {_us(arrive - 1500)}, "dur": 1.400, "args": {{"External id": {ext}}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {HOST_PID}, '
                f'"tid": {HOST_PID}, "ts": {_us(arrive - 900)}, "dur": 0.800, '
                f'"args": {{"External id": {ext}, "correlation": {corr}}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "kernel", "name": "{NCCL_KERNEL}", "pid": {device}, "tid": {NCCL_STREAM}, '
                f'"ts": {_us(arrive)}, "dur": {_us(done - arrive)}, "args": {{"External id": {ext}, '
                f'"device": {device}, "stream": {NCCL_STREAM}, "correlation": {corr}, "registers per thread": 96, '
                f'"shared memory": 0, "grid": [32, 1, 1], "block": [512, 1, 1]}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": {HOST_PID}, '
                f'"tid": {HOST_PID}, "ts": {_us(t0 - 2000)}, "dur": {_us(done - t0 + 4000)}, "args": {{}}}}'
            )
            launches += per_step + 1
            fh.write(("" if first else ",\n") + ",\n".join(lines))
            first = False
        fh.write('\n],\n"traceName": "gpuvar-planted-scale"}\n')
    return launches


def write_scale_job(
    folder, ranks: int, launches_per_rank: int, seed: int = 0, steps: int | None = None, which=None
) -> dict:
    """Write the job's traces (every rank, or the ranks in `which`) and truth.json into `folder`; returns the truth.
    `which` lets several processes write one job: each computes the same arrivals and writes its own ranks."""
    if ranks < 2:
        raise ValueError(f"a multi-rank job needs at least 2 ranks, got {ranks}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    steps, blocks = layout(launches_per_rank, steps)
    work = arrivals(ranks, steps, blocks, seed)
    start, end = step_starts(work, seed)
    last = np.argmax(work, axis=0)  # the first maximal rank: ties count for the lower rank
    straggler = straggler_of(ranks, seed)
    launches = 0
    for r in range(ranks) if which is None else which:
        launches += write_rank(folder / trace_name(r), r, ranks, steps, blocks, seed, start, end)
    truth = {
        "ranks": ranks,
        "steps": steps,
        "blocks_per_step": blocks,
        "launches_per_rank": steps * (blocks * len(OPS) + 1),
        "straggler": straggler,
        "straggler_last_steps": int((last == straggler).sum()),
        "size_unit": SIZE_UNIT,
        "size_range": list(SIZE_RANGE),
        "straggler_size_range": list(STRAGGLER_SIZE_RANGE),
        "seed": seed,
        "traces": [trace_name(r) for r in range(ranks)],
    }
    if which is None:
        write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", folder / TRUTH)
    return truth
