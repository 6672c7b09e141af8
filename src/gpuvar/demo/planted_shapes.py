"""Planted truth for input shapes and label drift: a Kineto trace recorded with record_shapes=True (issue 34).

Why: on real H100 traces the problem size (a sequence length drawn per step) drives every GEMM, but the launch
record hides it. cuBLAS picks the kernel variant by size, so one kernel name serves different GEMMs of the step
from one step to the next (label drift), and its persistent grid does not follow the size: it even switches its
raster from 66x2 to 132x1 as the size grows, so grid_y goes DOWN while the duration goes up. Only the op's
input shapes (Kineto `Input Dims`) carry the size. This trace plants exactly that, with the answer known.

The program: per step a size n = 128 * k, k drawn uniformly from 1..16 (seeded), and five ops in a fixed order,
each launching one kernel on stream 7 of device 0 (an H100: 132 SMs), fp32:
  0 aten::mm       "Wq"      [n, 768] x [768, 768]
  1 aten::bmm      "scores"  [12, n, 64] x [12, 64, n]
  2 aten::softmax  "softmax" [12, n, n], dim -1
  3 aten::mul      "scale"   [n, 768] * Scalar 0.125
  4 aten::mm       "MLP"     [n, 768] x [768, 3072]
Kernels (the planted causes):
  * GEMM (aten::mm): the variant is picked by the output size, "gemm_128x128" when M*N < NAME_SWITCH_MN (1024 x
    768) else "gemm_64x256": Wq runs 128x128 for n < 1024 and 64x256 above, MLP 128x128 only at n = 128. So
    "the first gemm_64x256 launched by aten::mm in the step" is MLP for 256 <= n < 1024 and Wq for n >= 1024.
    Grid: persistent, always 132 CTAs: (66, 2, 1) while M <= GRID_SWITCH_M (1152), (132, 1, 1) above.
    Duration = FLOPs / rate(variant) + LAUNCH_NS, FLOPs = 2 M N K; rates GEMM_RATE (FLOP per ns).
  * aten::bmm: "gemm_batched_128x128", grid (ceil(n/128)^2, 1, 12), FLOPs 2*12*n*n*64 at BMM_RATE.
  * softmax: "softmax_kernel", one block per row: grid (12 n, 1, 1); duration = bytes moved (read + write, 4 B
    per element) / ELEMENTWISE_BYTES_PER_NS.
  * mul: "elementwise_mul_kernel", grid (ceil(numel / 1024), 1, 1) (256 threads x 4 elements); the same model.
  * every duration is then multiplied by 1 + Gamma(2, 0.01) and gets + Exponential(300 ns): right-skewed,
    non-Gaussian noise, independent of everything else.
The trace has ProfilerStep#N ranges (user_annotation), one cpu_op per op with `Input Dims`, `Input type`,
`Input Strides` and `Concrete Inputs` as PyTorch 2.x writes them, a cudaLaunchKernel (cuda_runtime) inside it
with the kernel's correlation id, the kernel (grid, block, registers, shared memory, occupancy), ac2g flow
events and a cudaDeviceSynchronize ending each step. truth.json: n per step, the rules above and one row per
launch (step, op, occurrence of the op in the step, role, kernel, FLOPs, grid, duration).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gpuvar.demo.kineto_writer import gzip_text
from gpuvar.output import replacing

D_MODEL, HEADS, HEAD_DIM, D_MLP = 768, 12, 64, 3072
SIZE_UNIT, SIZE_STEPS = 128, 16  # n = 128 * k, k in 1..16
NAME_SWITCH_MN = 1024 * D_MODEL  # GEMM variant: 128x128 below this M*N, 64x256 from it
GRID_SWITCH_M = 1152  # GEMM raster: 66x2 up to this M, 132x1 above
GEMM_RATE = {"gemm_128x128": 280_000.0, "gemm_64x256": 360_000.0}  # FLOP per ns (280 / 360 TFLOP/s)
BMM_KERNEL, BMM_RATE = "gemm_batched_128x128", 250_000.0
ELEMENTWISE_BYTES_PER_NS = 2_500.0  # 2.5 TB/s
LAUNCH_NS = 2_000.0
NOISE_GAMMA = (2.0, 0.01)  # multiplicative: 1 + Gamma(shape, scale)
NOISE_EXP_NS = 300.0  # additive: Exponential(mean)
PROGRAM = (  # (op, role)
    ("aten::mm", "Wq"),
    ("aten::bmm", "scores"),
    ("aten::softmax", "softmax"),
    ("aten::mul", "scale"),
    ("aten::mm", "MLP"),
)
LAUNCHES_PER_STEP = len(PROGRAM)
TRACE_NAME = "shapes.pt.trace.json.gz"
HOST_PID, DEVICE, STREAM = 4242, 0, 7
_BASE_NS = 1_700_000_000_000_000_000  # epoch ns
_REGISTERS = {"gemm_128x128": 168, "gemm_64x256": 154, BMM_KERNEL: 128, "softmax_kernel": 32}


def gemm_variant(m: int, n: int) -> str:
    """The kernel name the planted library picks for an [m, k] x [k, n] GEMM."""
    return "gemm_128x128" if m * n < NAME_SWITCH_MN else "gemm_64x256"


def gemm_grid(m: int) -> tuple[int, int, int]:
    """The planted persistent grid: 132 CTAs whatever the size, rastered 66x2 up to GRID_SWITCH_M, then 132x1."""
    return (66, 2, 1) if m <= GRID_SWITCH_M else (132, 1, 1)


def _op(role: str, n: int) -> dict:
    """One op's inputs (dims, types, strides, concrete) and its kernel (name, grid, block, FLOPs, bytes)."""
    if role in ("Wq", "MLP"):
        cols = D_MODEL if role == "Wq" else D_MLP
        name = gemm_variant(n, cols)
        return {
            "dims": [[n, D_MODEL], [D_MODEL, cols]],
            "types": ["float", "float"],
            "strides": [[D_MODEL, 1], [cols, 1]],
            "concrete": ["", ""],
            "kernel": name,
            "grid": gemm_grid(n),
            "block": (256, 1, 1),
            "flops": 2.0 * n * cols * D_MODEL,
            "rate": GEMM_RATE[name],
        }
    if role == "scores":
        tiles = math.ceil(n / 128) ** 2
        return {
            "dims": [[HEADS, n, HEAD_DIM], [HEADS, HEAD_DIM, n]],
            "types": ["float", "float"],
            "strides": [[n * HEAD_DIM, HEAD_DIM, 1], [n * HEAD_DIM, n, 1]],
            "concrete": ["", ""],
            "kernel": BMM_KERNEL,
            "grid": (tiles, 1, HEADS),
            "block": (256, 1, 1),
            "flops": 2.0 * HEADS * n * n * HEAD_DIM,
            "rate": BMM_RATE,
        }
    if role == "softmax":
        return {
            "dims": [[HEADS, n, n], [], []],
            "types": ["float", "Scalar", ""],
            "strides": [[n * n, n, 1], [], []],
            "concrete": ["", "-1", ""],
            "kernel": "softmax_kernel",
            "grid": (HEADS * n, 1, 1),
            "block": (128, 1, 1),
            "bytes": 2.0 * 4 * HEADS * n * n,
        }
    numel = n * D_MODEL  # scale
    return {
        "dims": [[n, D_MODEL], []],
        "types": ["float", "Scalar"],
        "strides": [[D_MODEL, 1], []],
        "concrete": ["", "0.125"],
        "kernel": "elementwise_mul_kernel",
        "grid": (math.ceil(numel / 1024), 1, 1),
        "block": (256, 1, 1),
        "bytes": 2.0 * 4 * numel,
    }


def _us(ns: int) -> str:
    """Epoch ns as Kineto's µs text with a ns fraction (a float would lose the fraction at 1.7e15 µs)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(cat: str, name: str, pid, tid, ts: int, dur: int, args: dict) -> str:
    return (
        f'  {{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid}, '
        f'"ts": {_us(ts)}, "dur": {_us(dur)}, "args": {json.dumps(args)}}}'
    )


def _flow(ph: str, corr: int, pid, tid, ts: int) -> str:
    bp = ', "bp": "e"' if ph == "f" else ""
    return f'  {{"ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {_us(ts)}, "cat": "ac2g", "name": "ac2g"{bp}}}'


def _header() -> str:
    props = {
        "id": DEVICE,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 84929347584,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
    }
    return f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [{json.dumps(props)}],\n  "traceEvents": [\n'


def write_planted_shapes(folder, steps: int = 60, seed: int = 0) -> dict:
    """Write `folder`/shapes.pt.trace.json.gz and `folder`/truth.json; returns the truth (without the per-launch
    rows)."""
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 0x5A9E5])
    sizes = (SIZE_UNIT * rng.integers(1, SIZE_STEPS + 1, steps)).tolist()
    noise_mul = 1.0 + rng.gamma(NOISE_GAMMA[0], NOISE_GAMMA[1], (steps, LAUNCHES_PER_STEP))
    noise_add = rng.exponential(NOISE_EXP_NS, (steps, LAUNCHES_PER_STEP))
    events, launches = [], []
    host = _BASE_NS  # the host thread's clock
    gpu_free = host  # when stream 7 is next idle
    ext = corr = 0
    for step, n in enumerate(sizes):
        step_start = host
        body = []
        seen: dict[str, int] = {}
        for j, (op_name, role) in enumerate(PROGRAM):
            op = _op(role, n)
            base = op["flops"] / op["rate"] if "flops" in op else op["bytes"] / ELEMENTWISE_BYTES_PER_NS
            dur = int(round((base + LAUNCH_NS) * noise_mul[step, j] + noise_add[step, j]))
            ext += 1
            corr += 1
            op_ts, launch_ts = host + 1_000, host + 9_000
            op_dur, launch_dur = 14_000, 4_000
            start = max(launch_ts + 5_000, gpu_free + 1_500)
            gpu_free = start + dur
            host = op_ts + op_dur
            body.append(
                _x(
                    "cpu_op",
                    op_name,
                    HOST_PID,
                    HOST_PID,
                    op_ts,
                    op_dur,
                    {
                        "External id": ext,
                        "Sequence number": 0,
                        "Fwd thread id": 0,
                        "Record function id": 0,
                        "Concrete Inputs": op["concrete"],
                        "Input type": op["types"],
                        "Input Strides": op["strides"],
                        "Input Dims": op["dims"],
                        "Ev Idx": ext - 1,
                    },
                )
            )
            body.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    HOST_PID,
                    HOST_PID,
                    launch_ts,
                    launch_dur,
                    {"External id": ext, "cbid": 211, "correlation": corr},
                )
            )
            body.append(_flow("s", corr, HOST_PID, HOST_PID, launch_ts))
            grid, block = op["grid"], op["block"]
            ctas, threads = grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2]
            regs = _REGISTERS.get(op["kernel"], 16)
            body.append(
                _x(
                    "kernel",
                    op["kernel"],
                    DEVICE,
                    STREAM,
                    start,
                    dur,
                    {
                        "queued": 0,
                        "device": DEVICE,
                        "context": 1,
                        "stream": STREAM,
                        "correlation": corr,
                        "registers per thread": regs,
                        "shared memory": 0 if regs < 64 else 98304,
                        "blocks per SM": round(ctas / 132, 6),
                        "warps per SM": round(ctas * threads / 32 / 132, 6),
                        "grid": list(grid),
                        "block": list(block),
                        "est. achieved occupancy %": min(100, int(100 * min(ctas, 132) * threads / (132 * 2048))),
                        "External id": ext,
                    },
                )
            )
            body.append(_flow("f", corr, DEVICE, STREAM, start))
            launches.append(
                {
                    "step": step,
                    "op": op_name,
                    "occurrence": seen.get(op_name, 0),
                    "role": role,
                    "kernel": op["kernel"],
                    "correlation": corr,
                    "flops": op.get("flops"),
                    "bytes": op.get("bytes"),
                    "grid": list(grid),
                    "duration_ns": dur,
                }
            )
            seen[op_name] = seen.get(op_name, 0) + 1
        corr += 1  # the synchronisation's own correlation id
        sync_ts = host + 1_000
        sync_end = max(sync_ts + 2_000, gpu_free + 1_000)
        body.append(
            _x(
                "cuda_runtime",
                "cudaDeviceSynchronize",
                HOST_PID,
                HOST_PID,
                sync_ts,
                sync_end - sync_ts,
                {"External id": 0, "cbid": 165, "correlation": corr},
            )
        )
        host = sync_end + 20_000
        step_range = _x(
            "user_annotation",
            f"ProfilerStep#{step}",
            HOST_PID,
            HOST_PID,
            step_start,
            host - 10_000 - step_start,
            {"External id": 0, "Record function id": 0, "Ev Idx": 0},
        )
        events.append(step_range)
        events.extend(body)
    trace = folder / TRACE_NAME
    with replacing(trace) as tmp:
        with gzip_text(tmp) as fh:
            fh.write(_header())
            fh.write(",\n".join(events))
            fh.write('\n  ],\n  "traceName": "gpuvar-planted-shapes"\n}\n')
    truth = {
        "seed": seed,
        "steps": steps,
        "trace": TRACE_NAME,
        "n": sizes,
        "program": [{"op": op, "role": role} for op, role in PROGRAM],
        "planted": {
            "gemm_variant": f"aten::mm picks gemm_128x128 when M*N < {NAME_SWITCH_MN}, else gemm_64x256 (label drift)",
            "gemm_grid": f"persistent 132 CTAs: (66, 2, 1) for M <= {GRID_SWITCH_M}, (132, 1, 1) above: grid_y goes "
            "down as the size grows (a library choice, not a cause)",
            "gemm_duration": "op_flops / rate(variant) + launch, rates " + json.dumps(GEMM_RATE) + " FLOP/ns",
            "bmm_duration": f"op_flops / {BMM_RATE} FLOP/ns + launch; grid follows n",
            "elementwise_duration": f"bytes moved / {ELEMENTWISE_BYTES_PER_NS} B/ns + launch; grid proportional to "
            "op_numel (softmax: one block per row)",
            "noise": f"x (1 + Gamma{NOISE_GAMMA}) + Exponential(mean {NOISE_EXP_NS} ns), independent",
            "cause": "n (the step's size) causes every duration through op_flops / op_numel; nothing else varies",
        },
        "launch_ns": LAUNCH_NS,
    }
    from gpuvar.output import write_json

    write_json({**truth, "launches": launches}, folder / "truth.json")
    return {**truth, "path": str(trace), "kernel": len(launches)}
