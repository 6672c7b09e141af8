"""What may explain a launch's duration at its call site, by kind: the feature table of the findings.

Why kinds: a performance engineer acts differently on each, and the direction of each is known a priori.
  size      set by the program: launch configuration (grid, block, registers, shared memory), the launching op's
            input shapes (op_flops, op_numel, op_bytes, op_m/n/k/batch; gpuvar.ingest.shapes), the kernel variant
            the library picked (its name: cuBLAS and cuDNN pick one by size, so the name is a size-kind
            category, one indicator per variant) and the work of the launch's step (`step_threads`: threads
            launched by every kernel of the step, a proxy of the step's problem size for launches whose own
            grid does not carry it, such as capped GEMM grids)
  context   set by the rest of the program or the machine while the launch ran: copies and memsets in flight,
            kernels of other streams and of other processes on the same GPU, the rank (ctx_* of role `context`)
  counters  work and traffic the kernel did, measured by the profiler (bytes, sectors, requests, instructions,
            waves), and its stalls (cycles its warps waited on memory or a pipe): mediators between size and
            duration, allowed as drivers; time-like counters (cycles, rates per second or per elapsed time) are
            the duration in another unit and never used; ratios (hit rates, occupancy) are not offered
Columns whose role is `leak` (ctx_gap_ns, ctx_step_offset_ns, elapsed cycles, rates) are never features here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

CONTEXT_PREFIX = "ctx_"
STEP_THREADS = "step_threads"
VARIANT_PREFIX = "kernel="
VARIANT_LABEL = "kernel variant"
OTHER_PROCESSES = "other processes' kernels on the GPU"
OTHER_PROCESS_COLUMNS = ("ctx_other_process_overlap", "ctx_other_process_kernels")  # one driver: share, count
MAX_VARIANTS = 6  # indicator columns per group; rarer variants share the baseline
SIZE, CONTEXT, COUNTER = "size", "context", "counter"
DRIVER_COUNTER_KINDS = ("work", "stall")


@dataclass
class Features:
    """The candidate causes of one group's launches (rows aligned with the group's launches)."""

    table: pd.DataFrame  # float64 columns
    kinds: dict[str, str]  # column -> size | context | counter
    blocks: dict[str, list[str]] = field(default_factory=dict)  # driver name -> its columns (variants: several)

    def columns(self, *kinds: str) -> list[str]:
        return [c for c in self.table.columns if self.kinds[c] in kinds]


def size_columns(kernels: pd.DataFrame) -> list[str]:
    """Numeric, non-categorical columns whose role is launch configuration, input shape or a product of them."""
    from gpuvar.causal.roles import role_of

    out = []
    for name in kernels.columns:
        name = str(name)
        if name.startswith(CONTEXT_PREFIX) or not pd.api.types.is_numeric_dtype(kernels[name]):
            continue
        role = role_of(name)
        if role.role in ("launch", "derived") and not role.categorical:
            out.append(name)
    return out


def context_frame(kernels: pd.DataFrame, rank_counts: dict | None = None, ranks: bool = True) -> pd.DataFrame:
    """ctx_* columns of role context, plus 0/1 indicators of rank (the most frequent rank the baseline) when
    several ranks ran and `ranks`. `rank_counts`: launches per rank over the whole table, when `kernels` is a part
    of it (the baseline and the indicators are the table's, not the part's)."""
    from gpuvar.causal.roles import role_of

    cols = {
        c: pd.to_numeric(kernels[c], errors="coerce").astype(np.float64)
        for c in kernels.columns
        if str(c).startswith(CONTEXT_PREFIX) and role_of(str(c)).role == "context"
    }
    if ranks and "rank" in kernels.columns:
        rank = kernels["rank"]
        counts = rank.value_counts() if rank_counts is None else pd.Series(rank_counts, dtype=np.int64)
        if len(counts) > 1:
            baseline = sorted(counts.index[counts == counts.max()])[0]
            for level in sorted(counts.index):
                if level != baseline:
                    label = f"rank={level:g}" if isinstance(level, float) else f"rank={level}"
                    cols[label] = (rank == level).astype(np.float64).to_numpy()
    return pd.DataFrame(cols, index=kernels.index)


def counter_columns(kernels: pd.DataFrame) -> list[str]:
    """Numeric hardware-counter columns that may be drivers: work and traffic (bytes, sectors, requests,
    instructions, waves) and stalls (cycles warps waited on memory or a pipe: they lengthen the kernel, the
    kernel does not cause them), by gpuvar.causal.roles.counter_kind; time-like counters never, ratios not."""
    from gpuvar.causal.roles import counter_kind, role_of

    out = []
    for name in kernels.columns:
        name = str(name)
        if role_of(name).role != "counter" or not pd.api.types.is_numeric_dtype(kernels[name]):
            continue
        if counter_kind(name) in DRIVER_COUNTER_KINDS:
            out.append(name)
    return out


def step_threads(kernels: pd.DataFrame) -> pd.Series | None:
    """The `step_threads` column (gpuvar.ingest.step_size), computed when an older ingest or a planted table has
    none; None when the trace has no steps or no launch configuration."""
    from gpuvar.ingest.step_size import COLUMN
    from gpuvar.ingest.step_size import step_threads as compute

    if COLUMN in kernels.columns:
        values = pd.to_numeric(kernels[COLUMN], errors="coerce").astype(np.float64)
    else:
        values = pd.Series(compute(kernels), index=kernels.index)
    return None if values.isna().all() else values


_NUMBER = re.compile(r"\d+")


def variant_indicators(names: pd.Series) -> pd.DataFrame:
    """One 0/1 column per kernel variant of a group (the most frequent variants; the commonest is the baseline
    and gets none). A group running one kernel name has none."""
    counts = names.value_counts(sort=False)
    order = sorted(counts.index, key=lambda v: (-counts[v], str(v)))
    if len(order) < 2:
        return pd.DataFrame(index=names.index)
    cols = {}
    for variant in order[1:MAX_VARIANTS]:
        cols[f"{VARIANT_PREFIX}{variant}"] = (names == variant).astype(np.float64).to_numpy()
    return pd.DataFrame(cols, index=names.index)


def group_features(
    part: pd.DataFrame, size_cols: list[str], context: pd.DataFrame, counters: list[str], sites=None
) -> Features:
    """The feature table of one group's launches. A column is kept when, within each call site, it is known for
    every launch or for none: the models work within call sites, so a call site where a feature is unknown (the
    launch outside every step that has no step_threads, an op that records no shapes) just does not use it (its
    value is set to 0, constant within the site, so it drops out when centred); a column unknown for some
    launches of one call site is left out, never a launch."""
    frames, kinds = [], {}
    site_codes = pd.factorize(pd.Series(sites, index=part.index, dtype=object))[0] if sites is not None else None

    def add(frame: pd.DataFrame, kind: str) -> None:
        frame = frame.apply(pd.to_numeric, errors="coerce").astype(np.float64)
        missing = frame.isna()
        if site_codes is None:
            usable = ~missing.any()
        else:
            per_site = missing.groupby(site_codes).mean()
            usable = ((per_site == 0) | (per_site == 1)).all() & ~missing.all()
        frame = frame.loc[:, usable.to_numpy()].fillna(0.0)
        frames.append(frame)
        kinds.update(dict.fromkeys(frame.columns, kind))

    add(part[size_cols], SIZE)
    variants = variant_indicators(part["kernel_name"].astype("string").fillna("?"))
    add(variants, SIZE)
    if STEP_THREADS in part.columns:
        add(part[[STEP_THREADS]], SIZE)
    add(context.loc[part.index], CONTEXT)
    if counters:
        add(part[counters], COUNTER)
    table = pd.concat(frames, axis=1) if frames else pd.DataFrame(index=part.index)
    together = [c for c in OTHER_PROCESS_COLUMNS if c in table.columns]
    blocks = {c: [c] for c in table.columns if not c.startswith(VARIANT_PREFIX) and c not in together}
    variant_cols = [c for c in table.columns if c.startswith(VARIANT_PREFIX)]
    if variant_cols:
        blocks[VARIANT_LABEL] = variant_cols
    if together:  # how much of the launch and how many kernels overlapped: one cause, one driver
        blocks[OTHER_PROCESSES] = together
    return Features(table, kinds, blocks)
