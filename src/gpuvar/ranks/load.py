"""Inputs of `gpuvar ranks`: launches per rank (canonical tables) and each rank's collectives.

Collectives come from the host side when the original traces are given (`--traces`): a collective is a
CPU-side op or annotation of the communication backend (gloo:/nccl: first, then c10d::, then
record_param_comms), because only the host sees a rank *waiting* inside a host collective such as gloo's.
An ingest folder has device activity only; there a collective is the host round trip the device shows: from
the end of a step's last device-to-host copy to the start of the host-to-device copy after it (this also
counts the host's copy and sync overhead, so it overstates the wait slightly; docs/ranks.md).

Where the job communicates through NCCL, the collectives are its NCCL kernels (`ncclDevKernel_*`,
`ncclKernel_*`), from either input: the host op of an NCCL collective only enqueues it, and the waiting happens
on the device, inside the kernel. A rank arrives when its kernel starts; it waits for the others inside it, so
its wait is its kernel time minus the shortest rank's kernel time for that collective (the transfer every rank
shares), as HolisticTraceAnalysis counts it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.ingest.gpu_identity import Recorded
from gpuvar.ranks.gpus import assign as assign_gpus

KERNEL_COLUMNS = ["rank", "step", "start", "end", "launch_op", "call_site", "kernel_name"]
# read when present: the physical GPU (gpuvar.ranks.gpus) and the size of the work (gpuvar.ranks.lateness)
OPTIONAL_KERNEL_COLUMNS = ["device_id", "grid_size", "workgroup_size", "op_flops"]
NCCL_KERNEL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel")
COPY_COLUMNS = ["rank", "step", "start", "end", "launch_op", "copy_kind_name", "device_id"]
# host collective ops, most specific first: the first tier a rank has is used for that rank
COLLECTIVE_TIERS = (("gloo:", "nccl:", "mpi:", "ucc:"), ("c10d::",), ("record_param_comms",))


@dataclass
class RankInput:
    """Launches of every rank plus their collectives (rank, seq, start, end in ns)."""

    kernels: pd.DataFrame
    copies: pd.DataFrame
    collectives: pd.DataFrame
    span: dict[int, tuple[int, int]]  # each rank's profiled time: first to last recorded event (ns)
    collective_source: str
    sources: list[str] = field(default_factory=list)
    gpu_notes: list[str] = field(default_factory=list)  # how the ranks' physical GPUs were told apart


def _frame(table, columns: list[str], source) -> pd.DataFrame:
    if table is None:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("rank", "start", "end") else object) for c in columns})
    frame = table.to_pandas() if hasattr(table, "to_pandas") else table
    optional = ("call_site", "launch_op", "copy_kind_name", "kernel_name", "device_id")
    columns = columns + [c for c in OPTIONAL_KERNEL_COLUMNS if c in frame.columns and c not in columns]
    missing = [c for c in columns if c not in frame.columns and c not in optional]
    if missing:
        raise InputError(
            source, f"no {', '.join(missing)} column: re-run `gpuvar ingest` (steps need a current ingest)"
        )
    for c in columns:
        if c not in frame.columns:
            frame[c] = None
    return frame[columns].copy()


def _rank_of(kernels: pd.DataFrame, position: int) -> int:
    ranks = kernels["rank"].dropna().unique() if "rank" in kernels else []
    return int(ranks[0]) if len(ranks) == 1 else position


def _assign_rank(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    frame = frame.copy()
    frame["rank"] = rank
    return frame


def _check(kernels: pd.DataFrame, sources: list[str]) -> None:
    where = sources[0] if len(sources) == 1 else ", ".join(sources)
    if kernels.empty:
        raise InputError(where, "no kernel launches")
    if kernels["step"].isna().all():
        raise InputError(where, "no step is known (no ProfilerStep#N and no cudaDeviceSynchronize): cannot align ranks")


def _span(*frames: pd.DataFrame) -> dict[int, tuple[int, int]]:
    both = pd.concat([f[["rank", "start", "end"]] for f in frames if not f.empty])
    g = both.groupby("rank")
    return {int(r): (int(a), int(b)) for r, a, b in zip(g.size().index, g["start"].min(), g["end"].max())}


def ingest_part(folder: str | Path, position: int, many: bool, ranks: list[int] | None = None):
    """One ingest folder's (kernels, copies) in the canonical columns read here; with `many` (one folder per
    rank) its rank is the one it records, else its position; `ranks`: only those ranks' rows (a merged folder
    read in shares by gpuvar.ranks.job)."""
    folder = Path(folder)
    path = folder / "kernels.parquet"
    if not path.is_file():
        raise InputError(folder, "not an ingest folder (no kernels.parquet); run `gpuvar ingest` first")
    only = {"filters": [("rank", "in", list(ranks))]} if ranks is not None else {}
    k = _frame(pd.read_parquet(path, **only), KERNEL_COLUMNS, path)
    m_path = folder / "memcpy.parquet"
    m = _frame(pd.read_parquet(m_path, **only) if m_path.is_file() else None, COPY_COLUMNS, m_path)
    if many:
        rank = _rank_of(k, position)
        k, m = _assign_rank(k, rank), _assign_rank(m, rank)
    return k, m


def from_ingest(folders: list[str | Path]) -> RankInput:
    """One merged ingest (a rank column with several ranks) or several single-rank ingest folders."""
    kernels, copies, sources = [], [], []
    for position, folder in enumerate(folders):
        k, m = ingest_part(folder, position, len(folders) > 1)
        kernels.append(k)
        copies.append(m)
        sources.append(str(Path(folder)))
    kernels = pd.concat(kernels, ignore_index=True)
    copies = pd.concat(copies, ignore_index=True)
    _check(kernels, sources)
    if len(folders) > 1 and kernels.groupby("rank").ngroups < len(folders):
        raise InputError(", ".join(sources), "two folders record the same rank; merge them with `gpuvar ingest-merge`")
    nccl = nccl_collectives(kernels)
    if not nccl.empty:
        return RankInput(kernels, copies, nccl, _span(kernels, copies), "NCCL kernels", sources)
    return RankInput(kernels, copies, copy_round_trips(copies), _span(kernels, copies), "copies", sources)


def nccl_collectives(kernels: pd.DataFrame) -> pd.DataFrame:
    """The ranks' NCCL kernels as collectives; `end` - `start` is the wait: the kernel's time minus the shortest
    rank's for the same collective (matched by order on each rank)."""
    names = kernels["kernel_name"].astype(str)
    hit = kernels[names.str.match(NCCL_KERNEL)]
    out = _sequence(
        pd.DataFrame({"rank": hit["rank"], "start": hit["start"], "end": hit["end"], "name": names[hit.index]})
    )
    if out.empty:
        return out
    duration = out["end"] - out["start"]
    transfer = duration.groupby(out["seq"]).transform("min")
    out["end"] = out["start"] + (duration - transfer)
    return out


def copy_round_trips(copies: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: the device-idle interval from the last DtoH copy to the HtoD copy after it."""
    rows = []
    kinds = copies["copy_kind_name"].astype(str)
    for (rank, step), g in copies[kinds.isin(["DtoH", "HtoD"])].sort_values("start").groupby(["rank", "step"]):
        kind, start, end = g["copy_kind_name"].to_numpy(), g["start"].to_numpy(), g["end"].to_numpy()
        for i in range(len(g) - 2, -1, -1):
            if kind[i] == "DtoH" and kind[i + 1] == "HtoD":
                rows.append((int(rank), int(end[i]), int(start[i + 1]), "DtoH..HtoD"))
                break
    out = pd.DataFrame(rows, columns=["rank", "start", "end", "name"])
    return _sequence(out)


def _sequence(collectives: pd.DataFrame) -> pd.DataFrame:
    collectives = collectives.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    collectives["seq"] = collectives.groupby("rank").cumcount()
    return collectives[["rank", "seq", "start", "end", "name"]]


def host_collectives(cpu_ops, source, rank: int) -> pd.DataFrame:
    """The rank's collectives from its raw `cpu_ops` table (ts in decimal µs, dur in µs) as ns intervals."""
    ops = cpu_ops.to_pandas() if hasattr(cpu_ops, "to_pandas") else cpu_ops
    names = ops["name"].astype(str)
    for tier in COLLECTIVE_TIERS:
        hit = ops[names.str.startswith(tier)]
        if not hit.empty:
            break
    else:
        raise InputError(source, "no collective op (gloo:/nccl:/c10d::/record_param_comms) among the host ops")
    start = np.array([int(round(float(t) * 1000)) for t in hit["ts"]], dtype=np.int64)
    end = start + np.rint(hit["dur"].to_numpy(dtype=np.float64) * 1000).astype(np.int64)
    return pd.DataFrame({"rank": rank, "start": start, "end": end, "name": hit["name"].astype(str).to_numpy()})


def _host_span(raw, rank: int) -> tuple[int, int] | None:
    lo, hi = [], []
    for name in ("cpu_ops", "runtime"):
        t = raw.tables.get(name)
        if t is None or t.num_rows == 0 or "ts" not in t.column_names:
            continue
        ts = t.column("ts").to_pylist()
        dur = t.column("dur").to_pylist() if "dur" in t.column_names else [0.0] * len(ts)
        starts = [int(round(float(a) * 1000)) for a in ts]
        lo.append(min(starts))
        hi.append(max(s + int(round(float(d or 0) * 1000)) for s, d in zip(starts, dur)))
    return (min(lo), max(hi)) if lo else None


@dataclass
class TracePart:
    """One rank's trace as `from_traces` reads it."""

    kernels: pd.DataFrame
    copies: pd.DataFrame
    cpu_ops: object  # the raw host ops table (its collectives: host_collectives)
    rank: int
    span: tuple[int, int]  # first to last recorded event, host ops included
    recorded: Recorded


def trace_part(path: str | Path, position: int) -> TracePart:
    """One original trace read and normalized in memory; its rank is the one it records, else its position."""
    from gpuvar.ingest import normalize_trace, read_source

    raw = read_source(path)
    if "cpu_ops" not in raw.tables:
        raise InputError(path, f"{raw.format} trace has no host ops: pass the ingest folder instead of --traces")
    out, k, m = normalize_trace(raw)
    recorded = Recorded(
        host=out.host,
        names={int(d["id"]): str(d.get("name")) for d in out.devices if "id" in d},
        uuids={int(d["id"]): str(d["uuid"]) for d in out.devices if d.get("uuid")},
        listed=len(out.devices) or None,
    )
    k = _frame(k, KERNEL_COLUMNS, path)
    m = _frame(m, COPY_COLUMNS, path)
    rank = _rank_of(k, position)
    k, m = _assign_rank(k, rank), _assign_rank(m, rank)
    device = _span(k, m)[rank]
    host = _host_span(raw, rank) or device
    span = (min(device[0], host[0]), max(device[1], host[1]))
    return TracePart(k, m, raw.tables["cpu_ops"], rank, span, recorded)


def from_traces(paths: list[str | Path]) -> RankInput:
    """The original profiler traces, one per rank: read and normalized in memory; collectives from the NCCL
    kernels when every rank has them, else from host ops."""
    kernels, copies, host_ops, spans, sources, recorded = [], [], [], {}, [], []
    for position, path in enumerate(paths):
        part = trace_part(path, position)
        if part.rank in spans:
            raise InputError(path, f"rank {part.rank} is given twice")
        recorded.append(part.recorded)
        host_ops.append((part.cpu_ops, path, part.rank))
        spans[part.rank] = part.span
        kernels.append(part.kernels)
        copies.append(part.copies)
        sources.append(str(path))
    kernels = pd.concat(kernels, ignore_index=True)
    copies = pd.concat(copies, ignore_index=True)
    _check(kernels, sources)
    gpu_notes = assign_gpus(kernels, copies, recorded, list(spans))
    collectives, what = nccl_collectives(kernels), "NCCL kernels "
    if set(collectives["rank"]) != set(spans):  # not every rank runs NCCL: the host ops of the backend
        hosts = [host_collectives(ops, path, rank) for ops, path, rank in host_ops]
        collectives, what = _sequence(pd.concat(hosts, ignore_index=True)), "host ops "
    return RankInput(kernels, copies, collectives, spans, collective_label(what, collectives), sources, gpu_notes)


def collective_label(what: str, collectives: pd.DataFrame) -> str:
    """`collective_source` of --traces: where the collectives come from and their first names."""
    names = sorted(set(collectives["name"]))
    return what + ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")
