"""A planted two-rank job in canonical tables (seeded): the answer `gpuvar ranks` must find is known.

Each step both ranks run GEMMs (launch_op aten::mm) then ReLUs, copy a result to the host (DtoH), meet in a host
collective and copy back (HtoD). Rank 0's GEMMs always take GEMM_NS; rank 1's take GEMM_NS * U(0.4, 2.0), so
rank 1 is late exactly in the steps where its GEMMs are longer, and its GEMM time is what makes it late.

With collective="nccl" the ranks meet in a device-side NCCL all-reduce kernel instead (as PyTorch jobs on NCCL
do): each rank's kernel starts when the rank arrives and ends when the last rank has arrived plus the transfer,
so a rank waits max(arrival) - its arrival inside the kernel; no host copies.

With cause="host" rank 1's GEMMs are as fixed as rank 0's and its host is what varies: the gap before each of
its launches is GAP_NS * U(1, 100) (an allocation, a shape-dependent host path), so the split of its time to the
collective must name its host gaps. The ReLU runs on as many blocks as the rank's rows (grid_size), the GEMM on a
capped grid of 132, as cuBLAS does: the step's size is in the threads launched, not in the GEMM's grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.layout import KERNELS_TABLE, MEMCPY_TABLE

GEMM_NS = 1_000_000
RELU_NS = 50_000
COPY_NS = 2_000
GAP_NS = 20_000  # host gap before each launch
EXCHANGE_NS = 100_000  # the collective's own transfer time, after the last rank arrives


NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def planted_job(
    steps: int = 60, gemms: int = 4, seed: int = 0, collective: str = "copies", cause: str = "gemm"
) -> dict:
    """Per rank (kernels, copies) DataFrames plus the truth: the last rank per step and the waits."""
    rng = np.random.default_rng(seed)
    drawn = rng.uniform(0.4, 2.0, steps)
    host = {0: np.ones(steps), 1: rng.uniform(1.0, 100.0, steps) if cause == "host" else np.ones(steps)}
    scale = {0: np.ones(steps), 1: drawn if cause == "gemm" else np.ones(steps)}
    tables = {r: ([], []) for r in (0, 1)}
    t = {0: 10_000_000, 1: 10_000_000}
    truth = {"last": [], "wait_ns": {0: 0, 1: 0}}
    for s in range(steps):
        arrival = {}
        for r in (0, 1):
            kernels, copies = tables[r]
            now = t[r]
            gap = int(GAP_NS * host[r][s])
            rows = int(4096 * scale[r][s])
            for i in range(gemms):
                now += gap
                d = int(GEMM_NS * scale[r][s])
                kernels.append((r, s, now, now + d, "aten::mm", f"aten::mm#{i}.0", "sgemm", 132, 384))
                now += d + gap
                kernels.append(
                    (r, s, now, now + RELU_NS, "aten::clamp_min", f"aten::clamp_min#{i}.0", "relu", rows, 128)
                )
                now += RELU_NS
            now += GAP_NS
            if collective == "copies":
                copies.append((r, s, now, now + COPY_NS, "aten::copy_", "DtoH"))
                now += COPY_NS
            arrival[r] = now
        done = max(arrival.values()) + EXCHANGE_NS
        truth["last"].append(max((0, 1), key=lambda r: (arrival[r], -r)))
        for r in (0, 1):
            if collective == "nccl":
                truth["wait_ns"][r] += max(arrival.values()) - arrival[r]
                call = "c10d::allreduce_#0.0"
                tables[r][0].append((r, s, arrival[r], done, "c10d::allreduce_", call, NCCL_KERNEL, 1, 512))
                t[r] = done + GAP_NS
            else:
                truth["wait_ns"][r] += done - arrival[r]
                tables[r][1].append((r, s, done, done + COPY_NS, "aten::copy_", "HtoD"))
                t[r] = done + COPY_NS + GAP_NS
    out = {}
    for r, (kernels, copies) in tables.items():
        k = pd.DataFrame(
            kernels,
            columns=[
                "rank",
                "step",
                "start",
                "end",
                "launch_op",
                "call_site",
                "kernel_name",
                "grid_size",
                "workgroup_size",
            ],
        )
        m = pd.DataFrame(copies, columns=["rank", "step", "start", "end", "launch_op", "copy_kind_name"])
        k["duration"] = k["end"] - k["start"]
        m["duration"] = m["end"] - m["start"]
        out[r] = (k, m)
    return {"ranks": out, "truth": truth}


def write_planted(folder: str | Path, **kwargs) -> tuple[list[Path], dict]:
    """One ingest-like folder per rank (kernels.parquet, memcpy.parquet); returns the folders and the truth."""
    job = planted_job(**kwargs)
    folders = []
    for r, (k, m) in job["ranks"].items():
        path = Path(folder) / f"rank{r}"
        path.mkdir(parents=True, exist_ok=True)
        k.to_parquet(path / KERNELS_TABLE, index=False)
        m.to_parquet(path / MEMCPY_TABLE, index=False)
        folders.append(path)
    return folders, job["truth"]


def write_merged(folders: list[Path], target: str | Path) -> Path:
    """The planted ranks' tables as one ingest folder (a `merge: true` dataset's merged tables), for the rank
    analysis that reads it in shares of its ranks."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for name in (KERNELS_TABLE, MEMCPY_TABLE):
        pd.concat([pd.read_parquet(Path(f) / name) for f in folders]).to_parquet(target / name, index=False)
    return target


def shift_timeline(folder: str | Path, ns: int) -> None:
    """Move one rank's kernels and copies `ns` later: ranks recorded in different runs, whose timelines do not
    overlap (the rank analysis refuses them)."""
    for name in (KERNELS_TABLE, MEMCPY_TABLE):
        frame = pd.read_parquet(Path(folder) / name)
        frame[["start", "end"]] += ns
        frame.to_parquet(Path(folder) / name, index=False)
