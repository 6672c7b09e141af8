"""Part of phase 3 (target): link each kernel of this rank's share to a copy of the memcpy file.

The link rule is gpuvar.targets.link_latest (the latest copy on the same device(+stream) started at or before
the kernel). Rank r reads the memcpy rows with start in [first kernel start of r, first start of r+1) and gets
the last copy per link key of all earlier intervals from an allgather (the "carry"), so every kernel sees every
copy before it whatever the rank count. Collective: every rank calls link_copies.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar import targets as T
from gpuvar.binning.columns import floats, ints, open_parquet
from gpuvar.binning.plan import Plan
from gpuvar.binning.read import NULL
from gpuvar.canonical_io import from_numpy
from gpuvar.errors import InputError

# linked column -> memcpy column it takes its value from
LINKED_FROM = (("linked_copy_kind", "copy_kind"), ("linked_copy_bytes", "bytes"), ("linked_copy_duration", "duration"))


def link_copies(plan: Plan, comm, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
    """{linked column: float64 per kernel row (NaN: no linked copy)} for this rank's kernels."""
    rank = comm.Get_rank()
    starts = np.where(kstart != NULL, kstart, np.iinfo(np.int64).max)
    mine = int(starts.min()) if len(starts) and (kstart != NULL).any() else None
    firsts = comm.allgather(mine)
    have = [r for r, v in enumerate(firsts) if v is not None]
    lo = -(2**63) if not have or rank <= have[0] else firsts[rank]
    later = [firsts[r] for r in have if r > rank]
    hi = min(later) if later else 2**63 - 1
    if mine is None:
        lo = hi = 0  # this rank links nothing: reads no copies
    m = _read_memcpy(plan, lo, hi)
    carry = _carry(comm, m)
    key = np.concatenate([carry["key"], m["key"]])
    mstart = np.concatenate([carry["start"], m["start"]])
    link = T.link_latest(kkey, kstart, key, mstart)
    linked = {}
    for name, col in LINKED_FROM:
        values = np.concatenate([carry[col], m[col]])
        out = np.full(len(link), np.nan)
        out[link >= 0] = values[link[link >= 0]]
        linked[name] = out
    return linked


def _read_memcpy(plan: Plan, lo: int, hi: int) -> dict[str, np.ndarray]:
    """The copies with start in [lo, hi): link key, start, duration, bytes, copy_kind (row groups pruned by the
    start statistics)."""
    path, how = plan.opts.memcpy, plan.opts.link
    pf = open_parquet(path)
    names = pf.schema_arrow.names
    need = ["start", "device_id"] + (["stream_id"] if how == "stream" else [])
    missing = [c for c in need if c not in names] + (
        [] if {"duration"} & set(names) or "end" in names else ["duration"]
    )
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)} (not a canonical memcpy file?)")
    cols = [c for c in ("start", "end", "duration", "device_id", "stream_id", "bytes", "copy_kind") if c in names]
    parts = []
    si = names.index("start")
    for g in range(pf.metadata.num_row_groups):
        st = pf.metadata.row_group(g).column(si).statistics
        if lo >= hi or (st is not None and st.has_min_max and (st.max < lo or st.min >= hi)):
            continue
        t = pf.read_row_group(g, columns=cols, use_threads=False)
        s, valid = ints(t.column("start"))
        keep = (s >= lo) & (s < hi)
        parts.append(t.filter(from_numpy(keep if valid is None else keep & valid)))
    t = pa.concat_tables(parts) if parts else pf.schema_arrow.empty_table().select(cols)
    start, _ = ints(t.column("start"))
    dev = floats(t.column("device_id"))
    stream = floats(t.column("stream_id")) if how == "stream" else None
    if "duration" in names:
        dur = floats(t.column("duration"))
    else:
        dur = floats(pc.subtract(t.column("end"), t.column("start")))
    nanc = np.full(t.num_rows, np.nan)
    return {
        "key": T.link_key(dev, stream, how),
        "start": start,
        "duration": dur,
        "bytes": floats(t.column("bytes")) if "bytes" in names else nanc,
        "copy_kind": floats(t.column("copy_kind")) if "copy_kind" in names else nanc,
    }


def _carry(comm, m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Last copy per key of all earlier ranks' intervals (later intervals override earlier ones)."""
    rank = comm.Get_rank()
    order = np.lexsort((m["start"], m["key"]))
    keys = m["key"][order]
    last = order[np.flatnonzero(np.append(keys[1:] != keys[:-1], True))] if len(keys) else order
    last = last[m["key"][last] != T.NO_KEY]
    mine = {c: m[c][last] for c in m}
    merged: dict[int, tuple] = {}
    for r, part in enumerate(comm.allgather(mine)):
        if r >= rank:
            break
        for i, k in enumerate(part["key"].tolist()):
            merged[k] = tuple(part[c][i] for c in m)
    cols = list(m)
    rows = [merged[k] for k in sorted(merged)]
    return {c: np.array([r[j] for r in rows], dtype=m[c].dtype) for j, c in enumerate(cols)}
