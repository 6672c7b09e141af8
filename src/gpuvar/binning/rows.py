"""Phase 7 of the binning job: the rows of chosen bins (the top-k, the random sample), gathered on rank 0.

A third, bounded pass over only the row groups whose axis span (from the scan) meets a chosen bin. Those row
groups are spread over all ranks by decode cost (the chosen bins often sit in a few ranks' shares): a rank reads
each of its row groups a batch at a time (the output columns and the target's inputs; on a sorted file it stops
after the last chosen bin, since a Parquet column chunk decodes from its start), computes the target of the rows
in a chosen bin exactly as phase 4 did (the copy link from the row group's checkpoint, gpuvar.binning.link), and
keeps those rows. Rank 0 gathers the pieces and puts them back in file order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpuvar.binning import read
from gpuvar.binning.columns import open_parquet, plain_strings
from gpuvar.binning.link import MemcpyReader, relink
from gpuvar.binning.plan import ID_COLUMNS, Plan
from gpuvar.binning.read import Scan, decode, link_columns, scan_columns
from gpuvar.binning.target import Means, compute_target
from gpuvar.binning.timeline import Timeline
from gpuvar.canonical_io import from_numpy
from gpuvar.errors import InputError

TAKE_ROWS = 1 << 16  # rows decoded at once here: a finer step than BATCH_ROWS stops closer to the last chosen row


def output_columns(plan: Plan) -> list[str]:
    """The file's columns a row of topk_rows.parquet keeps: every one with --features auto, else the
    identification columns and the features."""
    schema = plan.schema
    if plan.opts.features.strip() in ("auto", ""):
        return list(schema.names)
    return [c for c in dict.fromkeys([*ID_COLUMNS, *plan.features]) if c in schema.names]


def gather_rows(
    plan: Plan, comm, scan: Scan, timeline: Timeline, means: Means, checkpoints: dict, chosen: np.ndarray
) -> tuple[pa.Table | None, int]:
    """The rows of the `chosen` bins with their computed columns and bin, on rank 0 (None elsewhere, and when no
    row is chosen), and the most rows this rank held at once. `checkpoints`: this rank's copy-link checkpoints
    per row group. Collective: every rank calls it with the same `chosen`."""
    rank, size = comm.Get_rank(), comm.Get_size()
    chosen = np.asarray(chosen, dtype=np.int64)
    mine = _candidates(plan, scan, timeline, checkpoints, chosen) if len(chosen) else []
    every = [c for part in comm.allgather(mine) for c in part] if size > 1 else mine
    if not every:
        return None, 0
    assigned = set(_spread({c[0]: c[2] for c in every}, size)[rank])
    todo = [c for c in every if c[0] in assigned]
    pieces: dict[int, pa.Table] = {}
    held = 0
    if todo:
        cols = output_columns(plan)
        strings = [f.name for f in plan.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        pf = open_parquet(plan.opts.kernels, read_dictionary=strings)  # decode strings once per dictionary
        reader = MemcpyReader(plan) if plan.link else None
        for g, _, _, checkpoint, stop in todo:
            piece, rows = _group_rows(plan, pf, reader, g, cols, timeline, means, checkpoint, chosen, stop)
            held = max(held, rows)
            if piece is not None:
                pieces[g] = piece
    parts = comm.gather(pieces, root=0) if size > 1 else [pieces]
    if rank != 0:
        return None, held
    read = {}
    for p in parts:
        read.update(p)
    if not read:
        return None, held
    return pa.concat_tables([read[g] for g in sorted(read)]), held


def _candidates(plan: Plan, scan: Scan, timeline: Timeline, checkpoints: dict, chosen: np.ndarray) -> list[tuple]:
    """This share's row groups whose axis span meets a chosen bin: (group, rows, decode cost, copy-link
    checkpoint, axis value after which a sorted row group holds no chosen row)."""
    out = []
    gmin, w = timeline.gmin, plan.width
    for g, rows, (lo, hi) in zip(scan.row_groups, scan.group_rows, scan.spans):
        if lo > hi:
            continue
        b0, b1 = (lo - gmin) // w, (hi - gmin) // w
        i, j = int(np.searchsorted(chosen, b0, side="left")), int(np.searchsorted(chosen, b1, side="right"))
        if i >= j:
            continue
        stop = gmin + (int(chosen[j - 1]) + 1) * w  # the end of the last chosen bin in the row group
        cost = rows if hi == lo else max(1, int(rows * min(1.0, (stop - lo) / (hi - lo + 1))))
        out.append((g, rows, cost, checkpoints.get(g), stop))
    return out


def _group_rows(plan, pf, reader, g, cols, timeline, means, checkpoint, chosen, stop) -> tuple[pa.Table | None, int]:
    """The chosen rows of row group `g`, in file order, with the computed columns; and the rows held."""
    need = list(dict.fromkeys([*cols, *scan_columns(plan), *link_columns(plan)]))
    index: dict[str, int] = {}
    wanted = np.zeros(max(timeline.n_bins, 1) + 1, bool)  # index n_bins: a row without a bin
    wanted[chosen[chosen < timeline.n_bins]] = True
    out, held = [], 0
    try:
        batches = pf.iter_batches(
            batch_size=min(read.BATCH_ROWS, TAKE_ROWS), row_groups=[g], columns=need, use_threads=False
        )
        for rb in batches:
            t = pa.Table.from_batches([rb])
            held = max(held, t.num_rows)
            b = decode(plan, g, t, index)
            bins = (b.axis - timeline.gmin) // plan.width
            inside = (bins >= 0) & (bins < timeline.n_bins)
            hit = np.flatnonzero(b.ok & inside & wanted[np.where(inside, bins, timeline.n_bins)])
            if len(hit):
                sub = b.take(hit)
                linked = relink(reader, checkpoint, sub.kstart, sub.kkey) if reader is not None else {}
                tv = compute_target(plan, sub, means.lut(index), linked)
                keep = np.flatnonzero(tv.ok)
                if len(keep):
                    rows = hit[keep]
                    piece = plain_strings(t.select(cols).take(from_numpy(rows)))
                    computed = {plan.opts.target: tv.values[keep], **{k: v[keep] for k, v in linked.items()}}
                    computed["bin"] = bins[rows].astype(np.int64)
                    for name, values in computed.items():
                        piece = piece.append_column(name, from_numpy(values))
                    out.append(piece)
            if timeline.fast and len(b.axis) and int(b.axis[-1]) >= stop:
                break
    except (OSError, pa.ArrowException) as exc:
        raise InputError(plan.opts.kernels, f"row group {g} unreadable ({exc})") from None
    return (pa.concat_tables(out) if out else None), held


def _spread(cost: dict[int, int], size: int) -> list[list[int]]:
    """Row groups per rank, largest cost first to the least-loaded rank (ties: lowest rank); deterministic."""
    load, plan = [0] * size, [[] for _ in range(size)]
    for g in sorted(cost, key=lambda g: (-cost[g], g)):
        r = min(range(size), key=lambda r: (load[r], r))
        load[r] += cost[g]
        plan[r].append(g)
    return [sorted(p) for p in plan]
