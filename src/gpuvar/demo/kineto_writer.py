"""Deterministic synthetic PyTorch profiler (Kineto) traces, laid out as Kineto writes them.

Each kernel comes with the cpu_op that launched it (its External id is the kernel's), its cudaLaunchKernel
runtime event inside that op and an ac2g flow pair (as in real traces, most events are not GPU activity); every
STEP_LAUNCHES-th launch is followed by a cudaDeviceSynchronize that ends the step, so the demo has steps and call
sites; every 16th launch is preceded by a host-to-device or device-to-device copy and every 64th by a memset. Timestamps are epoch microseconds with a nanosecond fraction. Kernel duration grows with grid_x
and shrinks with grid_y (the demo's planted launch effects), plus per-rank skew and noise.
"""

from __future__ import annotations

import contextlib
import gzip
import io
from pathlib import Path

import numpy as np

from gpuvar.output import replacing

KERNELS = (
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
        6.0,
        28,
    ),
    ("ampere_sgemm_128x64_tn", 40.0, 122),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(Params)", 55.0, 232),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >"
        "(at::native::ReduceOp<float, at::native::MeanOps<float, float> >)",
        12.0,
        32,
    ),
    (
        "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>"
        "(float*, float const*, int, int, int)",
        9.0,
        40,
    ),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 80.0, 96),
)
OPS = ("aten::add", "aten::mm", "aten::linear", "aten::mean", "aten::_softmax", "nccl:all_reduce")  # per kernel kind
STEP_LAUNCHES = 32
COPIES = (("Memcpy HtoD (Pinned -> Device)", 22.0), ("Memcpy DtoD (Device -> Device)", 800.0))
_BASE_US = 1_700_000_000_000_000


def _header(rank: int | None, world: int) -> str:
    props = ",\n".join(
        f'    {{\n      "id": {d}, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84990623744,\n'
        f'      "computeMajor": 8, "computeMinor": 0, "warpSize": 32, "numSms": 108\n    }}'
        for d in range(max(world, 1))
    )
    info = f'{{"backend": "nccl", "rank": {rank}, "world_size": {world}}}'
    dist = "" if rank is None else f'  "distributedInfo": {info},\n'
    return f'{{\n  "schemaVersion": 1,\n{dist}  "deviceProperties": [\n{props}\n  ],\n  "traceEvents": [\n'


def _events(n: int, rng: np.random.Generator, rank: int, device: int, t0: int, first: int) -> tuple[list[str], int]:
    """Events of n kernels (global launch numbers first..first+n-1) starting after t0 (ns); returns them and the
    last kernel start."""
    kinds = rng.integers(0, len(KERNELS), n)
    grid_x = rng.choice(np.array([1, 4, 16, 64, 108, 216, 432]), n)
    grid_y = rng.integers(1, 5, n)
    block = rng.choice(np.array([128, 256, 512]), n)
    noise = rng.exponential(0.08, n)
    base = np.array([k[1] for k in KERNELS])[kinds]
    dur = base * (1 + 0.004 * grid_x) * (1.15 - 0.05 * grid_y) * (1 + 0.03 * rank) * (1 + noise)
    gaps = rng.uniform(2.0, 12.0, n)
    starts = t0 + np.cumsum(np.round((dur + gaps) * 1000).astype(np.int64))
    copy_bytes = rng.choice(np.array([4096, 65536, 1 << 20, 8 << 20]), n)
    out = []
    stream = 7
    for i in range(n):
        name, _, regs = KERNELS[kinds[i]]
        corr = 1000 + 3 * (first + i)  # unique in the trace: the runtime call and the op are found by it
        ts = int(starts[i])
        ts_us = f"{ts // 1000}.{ts % 1000:03d}"
        d_us = f"{dur[i]:.3f}"
        if i % 16 == 0:
            cname, bw = COPIES[(i // 16) % 2]
            cdur = copy_bytes[i] / bw / 1000
            cts = ts - int(cdur * 1000) - 1500
            out.append(
                f'  {{\n    "ph": "X", "cat": "gpu_memcpy", "name": "{cname}", "pid": {device}, "tid": {stream},\n'
                f'    "ts": {cts // 1000}.{cts % 1000:03d}, "dur": {cdur:.3f},\n    "args": {{\n'
                f'      "External id": {corr - 1}, "device": {device}, "context": 1, "stream": {stream}, '
                f'"correlation": {corr - 1}, "bytes": {copy_bytes[i]}, "memory bandwidth (GB/s)": {bw}\n    }}\n  }}'
            )
        if i % 64 == 32:
            mts = ts - 900
            out.append(
                f'  {{\n    "ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": {device}, '
                f'"tid": {stream},\n    "ts": {mts // 1000}.{mts % 1000:03d}, "dur": 0.640,\n    "args": {{\n'
                f'      "External id": {corr - 1}, "device": {device}, "context": 1, "stream": {stream}, '
                f'"correlation": {corr - 1}, "bytes": 512, "memory bandwidth (GB/s)": 0.8\n    }}\n  }}'
            )
        launch = ts - 4000
        op_ts = launch - 1000
        out.append(
            f'  {{\n    "ph": "X", "cat": "cpu_op", "name": "{OPS[kinds[i]]}", "pid": 4242, "tid": 4242,\n'
            f'    "ts": {op_ts // 1000}.{op_ts % 1000:03d}, "dur": 5.200,\n    "args": {{\n'
            f'      "External id": {corr}, "Record function id": 0\n    }}\n  }}'
        )
        out.append(
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,\n'
            f'    "ts": {launch // 1000}.{launch % 1000:03d}, "dur": 3.200,\n    "args": {{\n'
            f'      "External id": {corr}, "cbid": 211, "correlation": {corr}\n    }}\n  }}'
        )
        out.append(
            f'  {{\n    "ph": "X", "cat": "kernel", "name": "{name}", "pid": {device}, "tid": {stream},\n'
            f'    "ts": {ts_us}, "dur": {d_us},\n    "args": {{\n'
            f'      "External id": {corr},      "queued": 0, "device": {device}, "context": 1,      '
            f'"stream": {stream}, "correlation": {corr},      "registers per thread": {regs},      '
            f'"shared memory": {0 if regs < 64 else 16384},      "blocks per SM": {grid_x[i] * grid_y[i] / 108:.6f},'
            f'      "warps per SM": {grid_x[i] * grid_y[i] * block[i] / 32 / 108:.6f},      '
            f'"grid": [{grid_x[i]}, {grid_y[i]}, 1],      "block": [{block[i]}, 1, 1],      '
            f'"est. achieved occupancy %": {min(100, int(grid_x[i] * grid_y[i] * block[i] / 2048))}\n    }}\n  }}'
        )
        out.append(
            f'  {{\n    "ph": "f", "id": {corr}, "pid": {device}, "tid": {stream}, "ts": {ts_us},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
        if (first + i) % STEP_LAUNCHES == STEP_LAUNCHES - 1:
            sync = launch + 4500  # after the op that launched this kernel, before the next launch
            out.append(
                f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 4242, '
                f'"tid": 4242,\n    "ts": {sync // 1000}.{sync % 1000:03d}, "dur": 0.400,\n    "args": {{\n'
                f'      "External id": 0, "cbid": 165, "correlation": {corr + 1}\n    }}\n  }}'
            )
    return out, int(starts[-1])


@contextlib.contextmanager
def gzip_text(path: Path):
    """Text into a gzip file whose header holds no time stamp (mtime=0) and no file name, so the same trace
    is the same bytes on every run (gzip.open stores the current time)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, filename="", mtime=0) as gz:
        with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as text:
            yield text


def write_kineto_demo(path, kernels: int, seed: int = 0, rank: int | None = None, world: int = 1) -> dict:
    """Write a Kineto trace of `kernels` kernel events (gzip when the name ends in .gz); returns a summary."""
    path = Path(path)
    device = 0 if rank is None else rank
    opener = gzip_text if path.suffix == ".gz" else (lambda p: open(p, "w", encoding="utf-8", newline="\n"))
    with replacing(path) as tmp:
        counts = {"kernel": 0, "gpu_memcpy": 0, "gpu_memset": 0}
        with opener(tmp) as fh:
            fh.write(_header(rank, world))
            first, block, t0 = True, 50_000, _BASE_US * 1000
            for lo in range(0, kernels, block):
                n = min(block, kernels - lo)
                rng = np.random.default_rng([seed, 0 if rank is None else rank + 1, lo])
                events, t0 = _events(n, rng, rank or 0, device, t0, lo)
                counts["kernel"] += n
                counts["gpu_memcpy"] += (n + 15) // 16
                counts["gpu_memset"] += sum(1 for i in range(n) if i % 64 == 32)
                fh.write(("" if first else ",\n") + ",\n".join(events))
                first = False
            fh.write('\n  ],\n  "traceName": "gpuvar-demo"\n}\n')
    return {"path": str(path), "format": "pytorch-kineto", "rank": rank, **counts}
