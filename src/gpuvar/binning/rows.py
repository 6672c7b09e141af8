"""Phase 6 of the binning job: the rows of chosen bins (the top-k, the random sample), gathered on rank 0.

A third, bounded pass over only the row groups whose axis span (from the scan) meets a chosen bin. With a memcpy
file each rank first links the chosen rows of its own such row groups (their link and target columns only, the
copies streamed from its carry: gpuvar.binning.link) and shares those linked values. The row groups are then
spread over all ranks by decode cost (the chosen bins often sit in a few ranks' shares): a rank reads each of
its row groups a batch at a time (the output columns and the target's inputs; on a sorted file it stops after
the last chosen bin, since a Parquet column chunk decodes from its start), computes the target of the rows in a
chosen bin exactly as phase 4 did, and keeps those rows. Rank 0 gathers the pieces and puts them back in file
order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpuvar.binning import read
from gpuvar.binning.columns import arrow, open_parquet, plain_strings
from gpuvar.binning.link import LINKED_FROM, Links, Unordered
from gpuvar.binning.plan import ID_COLUMNS, Plan
from gpuvar.binning.read import Batch, Scan, batches, link_columns, open_kernels, scan_columns
from gpuvar.binning.target import Means, compute_target
from gpuvar.binning.timeline import Timeline
from gpuvar.canonical_io import from_numpy
from gpuvar.errors import InputError

TAKE_ROWS = 1 << 14  # rows decoded at once here: a finer step than BATCH_ROWS stops closer to the last chosen row
# (the 20 top-k bins of 20 M rows in one process, 19 row groups, fastest of 6: 0.21-0.22 s with 64 Ki, 0.17-0.18 s)


def output_columns(plan: Plan) -> list[str]:
    """The file's columns a row of topk_rows.parquet keeps: every one with --features auto, else the
    identification columns and the features."""
    schema = plan.schema
    if plan.opts.features.strip() in ("auto", ""):
        return list(schema.names)
    return [c for c in dict.fromkeys([*ID_COLUMNS, *plan.features]) if c in schema.names]


def string_columns(plan: Plan) -> list[str]:
    """The file's string columns, read as Arrow dictionaries: a value is decoded once per dictionary, not once per
    row. plan.schema already shows DICTIONARY_COLUMNS (kernel_name, launch_config, call_site) as dictionaries: they
    are string columns of the file too (left out, they were decoded row by row and dictionary-encoded again: the
    rows of the 20 top-k bins of 20 M rows, 19 row groups, in one process: 0.41 -> 0.25 s)."""
    return [
        f.name
        for f in plan.schema
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_dictionary(f.type)
    ]


class Chosen:
    """Which rows of a batch are chosen: a row with a target input (ok) in a chosen bin."""

    def __init__(self, plan: Plan, timeline: Timeline, bins: np.ndarray):
        self.gmin, self.width, self.n_bins = timeline.gmin, plan.width, timeline.n_bins
        self.wanted = np.zeros(max(self.n_bins, 1) + 1, bool)  # index n_bins: a row without a bin
        self.wanted[bins[bins < self.n_bins]] = True

    def rows(self, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(row index, bin) of the chosen rows of batch `b`, in file order."""
        bins = (b.axis - self.gmin) // self.width
        inside = (bins >= 0) & (bins < self.n_bins)
        hit = np.flatnonzero(b.ok & inside & self.wanted[np.where(inside, bins, self.n_bins)])
        return hit, bins[hit]


def gather_rows(
    plan: Plan, comm, scan: Scan, timeline: Timeline, means: Means, links: Links | None, chosen: np.ndarray
) -> tuple[pa.Table | None, int]:
    """The rows of the `chosen` bins with their computed columns and bin, on rank 0 (None elsewhere, and when no
    row is chosen), and the most rows (or copies) this rank held at once. Collective: every rank calls it with
    the same `chosen`."""
    rank, size = comm.Get_rank(), comm.Get_size()
    chosen = np.asarray(chosen, dtype=np.int64)
    pick = Chosen(plan, timeline, chosen)
    mine = _candidates(plan, scan, timeline, chosen) if len(chosen) else []
    linked, held = _link_chosen(plan, links, [(g, stop) for g, _, _, stop in mine], pick)
    mine = [(g, rows, cost, linked.get(g), stop) for g, rows, cost, stop in mine]
    every = [c for part in comm.allgather(mine) for c in part] if size > 1 else mine
    if not every:
        return None, held
    assigned = set(_spread({c[0]: c[2] for c in every}, size)[rank])
    pieces: dict[int, pa.Table] = {}
    todo = [c for c in every if c[0] in assigned]
    if todo:
        cols = output_columns(plan)
        pf = open_parquet(plan.opts.kernels, read_dictionary=string_columns(plan))  # strings once per dictionary
        for g, _, _, group_linked, stop in todo:
            piece, rows = _group_rows(plan, pf, g, cols, means, pick, group_linked, stop)
            held = max(held, rows)
            if piece is not None:
                pieces[g] = piece
    parts = comm.gather(pieces, root=0) if size > 1 else [pieces]
    if rank != 0:
        return None, held
    read_pieces = {}
    for p in parts:
        read_pieces.update(p)
    if not read_pieces:
        return None, held
    return pa.concat_tables([read_pieces[g] for g in sorted(read_pieces)]), held


def _candidates(plan: Plan, scan: Scan, timeline: Timeline, chosen: np.ndarray) -> list[tuple[int, int, int, int]]:
    """This share's row groups whose axis span meets a chosen bin: (group, rows, decode cost, axis value after
    which the row group holds no chosen row if it is in order; None if it is not)."""
    out = []
    gmin, w = timeline.gmin, plan.width
    for g, rows, (lo, hi), ordered in zip(scan.row_groups, scan.group_rows, scan.spans, scan.group_ordered):
        if lo > hi:
            continue
        b0, b1 = (lo - gmin) // w, (hi - gmin) // w
        i, j = int(np.searchsorted(chosen, b0, side="left")), int(np.searchsorted(chosen, b1, side="right"))
        if i >= j:
            continue
        stop = gmin + (int(chosen[j - 1]) + 1) * w  # the end of the last chosen bin in the row group
        cost = rows if hi == lo or not ordered else max(1, int(rows * min(1.0, (stop - lo) / (hi - lo + 1))))
        out.append((g, rows, cost, stop if ordered else None))
    return out


def _batches(plan: Plan, pf, g: int, columns: list[str], index: dict, stop: int | None):
    """Row group g's batches, up to the last chosen bin (`stop`) when the row group is in order."""
    for b in batches(plan, pf, [g], index, columns, rows=min(read.BATCH_ROWS, TAKE_ROWS)):
        yield b
        if stop is not None and len(b.axis) and int(b.axis[-1]) >= stop:
            return


def _link_chosen(plan: Plan, links: Links | None, groups, pick: Chosen) -> tuple[dict, int]:
    """{row group: linked-copy columns of its chosen rows, in file order} of this rank's row groups `groups`
    ((group, stop) in file order), and the most copies held at once; {} without a memcpy file."""
    if links is None or not groups:
        return {}, 0
    pf = open_kernels(plan)
    columns = list(dict.fromkeys([*scan_columns(plan), *link_columns(plan)]))

    def run(stream) -> dict:
        out = {}
        for g, stop in groups:
            parts = []
            for b in _batches(plan, pf, g, columns, {}, stop):
                hit, _ = pick.rows(b)
                if len(hit):
                    parts.append(stream.link(b.kstart[hit], b.kkey[hit]))
            if parts:
                out[g] = {name: np.concatenate([p[name] for p in parts]) for name, _ in LINKED_FROM}
        return out

    stream = links.stream()
    try:
        out = run(stream)
    except Unordered:
        stream = links.stream(held=True)
        out = run(stream)
    return out, stream.held_rows


def _group_rows(plan, pf, g, cols, means, pick: Chosen, linked, stop) -> tuple[pa.Table | None, int]:
    """The chosen rows of row group `g`, in file order, with the computed columns; and the rows held. `linked`:
    the linked-copy columns of its chosen rows (None without a memcpy file)."""
    need = list(dict.fromkeys([*cols, *scan_columns(plan), *link_columns(plan)]))
    index: dict[str, int] = {}
    out, held, done = [], 0, 0
    try:
        for b in _batches(plan, pf, g, need, index, stop):
            held = max(held, len(b.axis))
            hit, bins = pick.rows(b)
            if not len(hit):
                continue
            mine = {} if linked is None else {k: v[done : done + len(hit)] for k, v in linked.items()}
            done += len(hit)
            tv = compute_target(plan, b.take(hit), means.lut(index), mine)
            keep = np.flatnonzero(tv.ok)
            if not len(keep):
                continue
            piece = plain_strings(arrow("take", b.table.select(cols), from_numpy(hit[keep])))
            computed = {plan.opts.target: tv.values[keep], **{k: v[keep] for k, v in mine.items()}}
            computed["bin"] = bins[keep].astype(np.int64)
            for name, values in computed.items():
                piece = piece.append_column(name, from_numpy(values))
            out.append(piece)
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
