"""How work is split: bin width parsing, row groups per rank, bins per rank (balanced by rows)."""

from __future__ import annotations

import numpy as np

from gpuvar.errors import GpuvarError
from gpuvar.units import parse_bin_width

MAX_BINS = 1 << 26  # a dense per-bin count array of this size is 512 MiB per rank: beyond it, refuse


def bin_width(text: str) -> tuple[int, str]:
    """'10ms' -> (10_000_000, 'ns'); '500' -> (500, 'launches'). One-line GpuvarError for anything else."""
    try:
        value, unit = parse_bin_width(text)
    except ValueError as exc:
        raise GpuvarError(f"--bin-width: {exc}") from None
    width = int(round(value))
    if width < 1 or abs(width - value) > 1e-9 * max(1.0, value):
        raise GpuvarError(f"--bin-width {text!r} is not a whole number of {unit} (at least 1)")
    return width, unit


def row_groups_for_rank(rows_per_group: list[int], rank: int, size: int) -> list[int]:
    """Contiguous row groups of this rank, balanced by rows: group g goes to the rank its middle row falls in (a
    share is then off by at most half a group; by the first row, rank 0 took the group that straddles the cut and
    with it up to a whole group more than the others: 20 M rows on 2 ranks, 10.22 M and 9.78 M, now 9.96 M and
    10.04 M, and rank 0 also ranks the bins and writes the outputs)."""
    total = sum(rows_per_group)
    if total == 0:
        return [g for g in range(len(rows_per_group)) if g % size == rank]
    first = np.cumsum([0, *rows_per_group[:-1]])
    middle2 = 2 * first + np.asarray(rows_per_group)  # twice the middle row: whole numbers
    owner = np.minimum(middle2 * size // (2 * total), size - 1)
    return [int(g) for g in np.flatnonzero(owner == rank)]


def bin_owners(counts: np.ndarray, size: int) -> np.ndarray:
    """Owner rank of each bin: contiguous bin ranges holding about total/size rows each."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(len(counts), dtype=np.int64)
    before = np.cumsum(counts) - counts
    return np.minimum(before * size // total, size - 1).astype(np.int64)


def check_bins(n_bins: int, width: int, unit: str) -> None:
    if n_bins > MAX_BINS:
        raise GpuvarError(
            f"--bin-width {width} {unit} gives {n_bins} bins on this trace (more than {MAX_BINS}); use a wider bin"
        )
