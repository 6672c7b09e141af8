"""Which ranks share a physical GPU (gpuvar.ingest.gpu_identity), for the late rank's split of its time.

Why: on a GPU shared by two processes (ranks of a job on a one-GPU node, or two jobs), a rank whose next kernel
waits while the other process's kernels run looks idle from its own trace: without this, that time would count
as its host gaps. With the physical GPU of every launch known, the time the GPU spent on other processes' kernels
while the rank had nothing running is its own part (gpuvar.ranks.lateness)."""

from __future__ import annotations

import numpy as np
import pandas as pd

GPU = "_gpu"  # the physical-GPU code column added to the rank input's kernels and copies (-1: unknown)


def assign(kernels: pd.DataFrame, copies: pd.DataFrame, recorded: list, ranks: list[int]) -> list[str]:
    """Add the physical-GPU code of every launch to both tables (in place); returns the notes saying how."""
    from gpuvar.ingest.gpu_identity import merged_gpus

    position = {rank: i for i, rank in enumerate(ranks)}
    both = pd.concat([kernels[["rank", "device_id"]], copies[["rank", "device_id"]]], ignore_index=True)
    part = both["rank"].map(position).to_numpy(dtype=np.int64)
    device = pd.to_numeric(both["device_id"], errors="coerce").astype("Int64")
    gpu, notes = merged_gpus(recorded, part, device, ranks)
    kernels[GPU] = gpu[: len(kernels)]
    copies[GPU] = gpu[len(kernels) :]
    return notes


def sharing(kernels: pd.DataFrame, rank: int) -> bool | None:
    """Whether `rank` shares a physical GPU with another rank (None: its GPU or theirs is unknown)."""
    if GPU not in kernels.columns:
        return None
    mine = set(kernels.loc[kernels["rank"] == rank, GPU].unique())
    others = set(kernels.loc[kernels["rank"] != rank, GPU].unique())
    return shares_gpu(mine, others)


def shares_gpu(mine: set, others: set) -> bool | None:
    """`sharing` from the GPU codes of the rank's kernels and of the other ranks' kernels."""
    if -1 in mine or not mine:
        return None
    if mine & others:
        return True
    return None if -1 in others else False
