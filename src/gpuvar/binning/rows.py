"""Phase 7 of the binning job: the rows of chosen bins (the top-k, the random sample), gathered on rank 0.

Rank 0 broadcasts the bin ids; each rank names its rows in them (row group, row) and keeps their computed
values; the row groups to re-read (the needed columns, up to the last needed row: a column chunk decodes from
its start) are spread over all ranks by decode cost, since the chosen bins often sit in a few ranks' shares;
rank 0 gathers the pieces and puts them back in file order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar.binning.columns import open_parquet, plain_strings
from gpuvar.binning.plan import ID_COLUMNS, Plan
from gpuvar.binning.timeline import Bins
from gpuvar.canonical_io import from_numpy, strings_from_codes


@dataclass(frozen=True)
class RowSource:
    """What a rank knows of its share's rows after the statistics."""

    row_groups: tuple[int, ...]  # the share's row groups, in file order
    offsets: np.ndarray  # local index of each row group's first row, plus the total
    ok: np.ndarray  # rows with a target
    computed: dict[str, np.ndarray]  # per row: the target (under its name) and the linked-copy columns
    bins: Bins
    axis: np.ndarray | None  # the axis values still in memory (sorted path), else None
    codes: np.ndarray | None  # group codes still in memory (sorted path), else None
    group_names: list[str]  # group key of each code


def gather_rows(plan: Plan, comm, src: RowSource, chosen: np.ndarray) -> pa.Table | None:
    """The rows of the `chosen` bins with their computed columns and bin, on rank 0 (None elsewhere).

    Collective: every rank calls it with the same `chosen`."""
    rank, size = comm.Get_rank(), comm.Get_size()
    empty = np.empty(0, np.int64)
    hit, b = _hits(src, chosen) if len(chosen) and len(src.ok) else (empty, empty)
    g_of = np.searchsorted(src.offsets, hit, side="right") - 1
    groups = np.asarray(src.row_groups, dtype=np.int64)[g_of] if len(hit) else empty
    local = hit - src.offsets[g_of] if len(hit) else empty
    wanted = {}
    for g in np.unique(groups).tolist():
        wanted[g] = local[groups == g]
    for part in comm.allgather(wanted if size > 1 else {}):
        wanted.update(part)  # a row group belongs to one share
    if not wanted:
        return None
    schema = plan.schema
    cols = (
        schema.names
        if plan.opts.features.strip() in ("auto", "")
        else [c for c in dict.fromkeys([*ID_COLUMNS, *plan.features]) if c in schema.names]
    )
    known = _known_columns(plan, src, hit, cols)  # taken from memory, not decoded again
    todo = [c for c in cols if c not in known]
    mine = _spread({g: int(r[-1]) + 1 for g, r in wanted.items()}, size)[rank]
    pieces = {}
    if mine and todo:
        strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        pf = open_parquet(plan.opts.kernels, read_dictionary=strings)  # decode strings once per dictionary
        for g in mine:
            pieces[g] = [plain_strings(p) for p in _take_rows(pf, g, todo, wanted[g])]
    computed = {**{k: v[hit] for k, v in src.computed.items()}, "bin": b}
    parts = comm.gather((pieces, known, computed), root=0)
    if rank != 0:
        return None
    read = {}
    for p, _, _ in parts:
        read.update(p)
    if todo:
        t = pa.concat_tables([piece for g in sorted(read) for piece in read[g]])
    else:
        t = pa.Table.from_arrays([], names=[])
    for name in cols:  # the known columns back at their place, in the file's type
        if name in known:
            column = pa.concat_arrays([k[name] for _, k, _ in parts])
            typ = schema.field(name).type  # (kernel_name is read as a dictionary: the value type)
            typ = typ.value_type if pa.types.is_dictionary(typ) else typ
            if column.type != typ:
                column = column.cast(typ)
            t = (
                t.add_column(cols.index(name), name, column)
                if t.num_columns
                else pa.Table.from_arrays([column], names=[name])
            )
    # only `bin` (which the causal step ignores): a rank column would look like a feature; join bins.parquet
    for name in computed:
        t = t.append_column(name, from_numpy(np.concatenate([c[name] for _, _, c in parts])))
    return t


def _hits(src: RowSource, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(share row index, bin id) of this share's rows with a target in the chosen bins, in file order."""
    bins = src.bins
    if bins.fast:  # each chosen bin is one run of rows
        ids, starts = bins.ids, bins.starts
        sel = np.flatnonzero(np.isin(ids, chosen))
        ends = np.append(starts[1:], len(src.ok))[sel]
        hit = np.concatenate([np.arange(a, b) for a, b in zip(starts[sel].tolist(), ends.tolist())] or [[]])
        hit = hit.astype(np.int64)
        of = np.repeat(ids[sel], ends - starts[sel])
        if not src.ok.all():
            keep = src.ok[hit]
            hit, of = hit[keep], of[keep]
        return hit, of
    wanted = np.zeros(bins.n_bins + 1, bool)  # index -1 (rows without a bin) hits the last, False entry
    wanted[chosen] = True
    hit = np.flatnonzero(wanted[bins.rows])
    return hit, bins.rows[hit].astype(np.int64)


def _known_columns(plan: Plan, src: RowSource, hit: np.ndarray, cols: list[str]) -> dict[str, pa.Array]:
    """Columns of the hit rows this rank still holds (sorted path): the axis, and kernel_name by code."""
    known = {}
    if src.axis is not None and plan.axis in cols:
        known[plan.axis] = from_numpy(src.axis[hit])
    if src.codes is not None and plan.opts.group == "kernel" and "kernel_name" in cols:
        known["kernel_name"] = strings_from_codes(src.codes[hit], src.group_names)
    return known


def _spread(cost: dict[int, int], size: int) -> list[list[int]]:
    """Row groups per rank, largest cost first to the least-loaded rank (ties: lowest rank); deterministic."""
    load, plan = [0] * size, [[] for _ in range(size)]
    for g in sorted(cost, key=lambda g: (-cost[g], g)):
        r = min(range(size), key=lambda r: (load[r], r))
        load[r] += cost[g]
        plan[r].append(g)
    return [sorted(p) for p in plan]


def _take_rows(pf: pq.ParquetFile, group: int, cols: list[str], rows: np.ndarray, batch: int = 1 << 16) -> list:
    """Rows (sorted indices) of one row group, decoding batch by batch and stopping after the last one."""
    out, first = [], 0
    for rb in pf.iter_batches(batch_size=batch, row_groups=[group], columns=cols, use_threads=False):
        last = first + rb.num_rows
        sel = rows[(rows >= first) & (rows < last)]
        if len(sel):
            out.append(pa.Table.from_batches([rb]).take(from_numpy(sel - first)))
        first = last
        if first > rows[-1]:
            break
    return out
