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
shares), as HolisticTraceAnalysis counts it.

Inputs that cannot be one job are checked here (issue 35): a collective that ends before it starts, or one
recorded twice (same rank, start, end and name), is dropped and counted (RankInput.dropped); ranks whose
timelines do not overlap are refused (files of different jobs, or clocks hours apart); where the arrival skew is
far beyond what the first rank to arrive waited, the clocks disagree, and RankInput.warnings says so (the
analysis then states no late rank). A rank's profiled time runs from its first to its last launch or collective:
a stray host event (a ProfilerStep at another epoch) does not stretch it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpuvar.errors import InputError
from gpuvar.ingest.gpu_identity import Recorded
from gpuvar.ingest.host_collectives import NONE_FOUND
from gpuvar.layout import INGEST_REPORT, KERNELS_TABLE, MEMCPY_TABLE
from gpuvar.ranks.gpus import assign as assign_gpus

KERNEL_COLUMNS = ["rank", "step", "start", "end", "launch_op", "call_site", "kernel_name"]
# read when present: the physical GPU (gpuvar.ranks.gpus) and the size of the work (gpuvar.ranks.lateness)
OPTIONAL_KERNEL_COLUMNS = ["device_id", "grid_size", "workgroup_size", "op_flops"]
NCCL_KERNEL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel")
COPY_COLUMNS = ["rank", "step", "start", "end", "launch_op", "copy_kind_name", "device_id"]


@dataclass
class RankInput:
    """Launches of every rank plus their collectives (rank, seq, start, end in ns)."""

    kernels: pd.DataFrame
    copies: pd.DataFrame
    collectives: pd.DataFrame
    span: dict[int, tuple[int, int]]  # each rank's profiled time: first to last launch or collective (ns)
    collective_source: str
    sources: list[str] = field(default_factory=list)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)  # rank -> reason -> collectives dropped
    warnings: list[str] = field(default_factory=list)  # what makes the answer doubtful (clocks that disagree)
    clocks_agree: bool = True  # False: the arrival order across ranks is not known
    gpu_notes: list[str] = field(default_factory=list)  # how the ranks' physical GPUs were told apart


NEGATIVE = "negative duration"
DUPLICATE = "duplicate"
SKEW_SLACK_NS = 1_000_000  # timer differences between processes: a skew this much beyond the wait is still fine


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


def _read_columns(path: Path, columns: list[str], only: dict) -> pd.DataFrame:
    """The columns _frame keeps (and the optional ones) of a canonical table, as far as it has them. Why not the
    whole table: a canonical kernels table has ~54 columns and the rank analysis reads 7-11; at 256 ranks the
    whole tables were most of the analysis's time."""
    names = set(pq.read_schema(path).names)
    wanted = [c for c in dict.fromkeys(columns + OPTIONAL_KERNEL_COLUMNS) if c in names]
    return pd.read_parquet(path, columns=wanted, **only)


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


def rank_spans(*frames: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Each rank's profiled time over these frames (rank, start, end): its first start to its last end."""
    both = pd.concat([f[["rank", "start", "end"]] for f in frames if not f.empty])
    g = both.groupby("rank")
    return {int(r): (int(a), int(b)) for r, a, b in zip(g.size().index, g["start"].min(), g["end"].max())}


def drop_bad(collectives: pd.DataFrame, dropped: dict[str, dict[str, int]]) -> pd.DataFrame:
    """The collectives that can be a wait: one ending before it starts is dropped, and so is a second record of
    one (same rank, start, end and name: two exports or a repeated event); `dropped` counts each per rank."""
    negative = collectives["end"] < collectives["start"]
    repeated = collectives.duplicated(["rank", "start", "end", "name"]) & ~negative
    for reason, mask in ((NEGATIVE, negative), (DUPLICATE, repeated)):
        for rank, n in collectives.loc[mask, "rank"].value_counts().sort_index().items():
            dropped.setdefault(str(int(rank)), {})[reason] = dropped.get(str(int(rank)), {}).get(reason, 0) + int(n)
    return collectives[~(negative | repeated)]


def _human(ns: float) -> str:
    for unit, size in (("h", 3.6e12), ("min", 6e10), ("s", 1e9), ("ms", 1e6)):
        if abs(ns) >= size:
            return f"{ns / size:.3g} {unit}"
    return f"{ns / 1e3:.3g} µs"


def check_one_job(data: RankInput) -> RankInput:
    """Refuse ranks whose timelines do not overlap; warn (data.warnings, clocks_agree False) where the arrival
    skew of most collectives is far beyond what the first rank to arrive waited (in a blocking collective the
    first to arrive waits for the last, so its wait is at least the skew)."""
    if len(data.span) < 2:
        return data
    ranks = sorted(data.span)
    opens = max(ranks, key=lambda r: data.span[r][0])
    closes = min(ranks, key=lambda r: data.span[r][1])
    if data.span[opens][0] >= data.span[closes][1]:
        gap = data.span[opens][0] - data.span[closes][1]
        raise InputError(
            ", ".join(data.sources),
            f"the ranks' timelines do not overlap: rank {opens} starts {_human(gap)} after rank {closes} ends "
            "(files of different jobs, or clocks that differ); give the files of one job",
        )
    col = data.collectives
    starts = col.pivot_table(index="seq", columns="rank", values="start", aggfunc="first").reindex(columns=ranks)
    waits = (col["end"] - col["start"]).groupby([col["seq"], col["rank"]]).first().unstack().reindex(columns=ranks)
    both = starts.notna().all(axis=1) & waits.notna().all(axis=1)
    if not both.any():
        return data
    a, w = starts[both].to_numpy(np.float64), waits[both].to_numpy(np.float64)
    skew = a.max(axis=1) - a.min(axis=1)
    first_wait = w[np.arange(len(a)), a.argmin(axis=1)]
    beyond = skew > 2 * first_wait + SKEW_SLACK_NS
    if beyond.sum() * 2 > len(a):
        data.clocks_agree = False
        data.warnings.append(
            f"the ranks' clocks disagree: in {int(beyond.sum())} of {len(a)} collectives the ranks arrive "
            f"{_human(float(np.median(skew[beyond])))} apart (median), while the first to arrive waited "
            f"{_human(float(np.median(first_wait[beyond])))}; which rank is late is not stated (clocks offset, or "
            "files of different runs)"
        )
    return data


def ingest_part(folder: str | Path, position: int, many: bool, ranks: list[int] | None = None):
    """One ingest folder's (kernels, copies) in the canonical columns read here; with `many` (one folder per
    rank) its rank is the one it records, else its position; `ranks`: only those ranks' rows (a merged folder
    read in shares by gpuvar.ranks.job)."""
    folder = Path(folder)
    path = folder / KERNELS_TABLE
    if not path.is_file():
        raise InputError(folder, "not an ingest folder (no kernels.parquet); run `gpuvar ingest` first")
    only = {"filters": [("rank", "in", list(ranks))]} if ranks is not None else {}
    k = _frame(_read_columns(path, KERNEL_COLUMNS, only), KERNEL_COLUMNS, path)
    m_path = folder / MEMCPY_TABLE
    m = _frame(_read_columns(m_path, COPY_COLUMNS, only) if m_path.is_file() else None, COPY_COLUMNS, m_path)
    if many:
        rank = _rank_of(k, position)
        k, m = _assign_rank(k, rank), _assign_rank(m, rank)
    return k, m


def from_ingest(folders: list[str | Path]) -> RankInput:
    """One merged ingest (a rank column with several ranks) or several single-rank ingest folders. Folders that
    all keep their traces' host collectives (Kineto ingests: gpuvar.ingest.host_collectives) are read as their
    traces would be (from_traces), not through copies; so are the rank folders of a merged one (kept_parts)."""
    kept = host_op_folders([str(f) for f in folders])
    if kept is not None:
        return from_parts([folder_part(f, i) for i, f in enumerate(kept)], [str(Path(f)) for f in kept])
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
    dropped: dict[str, dict[str, int]] = {}
    nccl = nccl_collectives(kernels, dropped)
    if not nccl.empty:
        data = RankInput(kernels, copies, nccl, rank_spans(kernels, copies, nccl), "NCCL kernels", sources, dropped)
    else:
        trips = copy_round_trips(copies)
        data = RankInput(kernels, copies, trips, rank_spans(kernels, copies, trips), "copies", sources)
    return check_one_job(data)


def is_nccl(names: pd.Series) -> np.ndarray:
    """Which launches are NCCL kernels (NCCL_KERNEL on the name as text; a missing name is not), each distinct
    name matched once: a trace has ~100 names, not 100 k launches to run a regex on."""
    codes, distinct = pd.factorize(names)
    named = pd.Series(distinct, dtype=object).astype(str).str.match(NCCL_KERNEL).to_numpy(bool)
    return np.append(named, False)[codes]  # (a missing name, code -1, picks the False appended)


def nccl_collectives(kernels: pd.DataFrame, dropped: dict | None = None) -> pd.DataFrame:
    """The ranks' NCCL kernels as collectives; `end` - `start` is the wait: the kernel's time minus the shortest
    rank's for the same collective (matched by order on each rank). Bad records are dropped (drop_bad) and
    counted in `dropped`."""
    hit = kernels[is_nccl(kernels["kernel_name"])]
    frame = pd.DataFrame(
        {"rank": hit["rank"], "start": hit["start"], "end": hit["end"], "name": hit["kernel_name"].astype(str)}
    )
    out = numbered_collectives(drop_bad(frame, {} if dropped is None else dropped))
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
    return numbered_collectives(out)


def numbered_collectives(collectives: pd.DataFrame) -> pd.DataFrame:
    """The collectives with each rank's own sequence number (seq, by start): how the ranks' records of one
    collective are matched."""
    collectives = collectives.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    collectives["seq"] = collectives.groupby("rank").cumcount()
    return collectives[["rank", "seq", "start", "end", "name"]]


def host_collectives(ops: pd.DataFrame, source, rank: int) -> pd.DataFrame:
    """The rank's collectives (rank, start, end, name) from its trace's host collective ops (start, end, name:
    gpuvar.ingest.host_collectives, found at ingest or from the trace); InputError naming `source` if it has none."""
    if ops.empty:
        raise InputError(source, NONE_FOUND)
    return pd.DataFrame({"rank": rank, "start": ops["start"].to_numpy(np.int64), "end": ops["end"].to_numpy(np.int64),
                         "name": ops["name"].to_numpy(dtype=object)})  # fmt: skip


@dataclass
class TracePart:
    """One rank's trace as `from_traces` reads it: from the trace, or from the ingest folder that keeps it."""

    kernels: pd.DataFrame
    copies: pd.DataFrame
    collective_ops: pd.DataFrame  # its host collective ops (start, end, name; gpuvar.ingest.host_collectives)
    rank: int
    recorded: Recorded


def trace_part(path: str | Path, position: int) -> TracePart:
    """One original trace read and normalized in memory; its rank is the one it records, else its position."""
    from gpuvar.ingest import normalize_trace, read_source

    raw = read_source(path)
    if "cpu_ops" not in raw.tables:
        raise InputError(path, f"{raw.format} trace has no host ops: pass the ingest folder instead of --traces")
    out, k, m = normalize_trace(raw, release=True)
    recorded = Recorded.from_report({"devices": out.devices, "host": out.host})
    k, m = _frame(k, KERNEL_COLUMNS, path), _frame(m, COPY_COLUMNS, path)
    return _part(k, m, out.host_collectives, position, recorded)


def folder_part(folder: str | Path, position: int) -> TracePart:
    """One rank's trace from the ingest folder that keeps its host collectives (gpuvar.ingest.host_collectives):
    what trace_part reads from the trace, without reading it again."""
    import json

    from gpuvar.ingest import host_collectives as kept

    report = json.loads((Path(folder) / INGEST_REPORT).read_text())
    k, m = ingest_part(folder, position, False)
    return _part(k, m, kept.read(Path(folder)), position, Recorded.from_report(report))


def host_op_folders(folders: list[str]) -> list[str] | None:
    """The ingest folders to read as their traces would be read (folder_part), or None (read as ingest folders):
    `folders` when every one keeps its trace's host collectives; for one merged folder, the rank folders it was made
    from where they do (kept_parts)."""
    from gpuvar.ingest.host_collectives import kept_report

    if len(folders) == 1:
        folders = kept_parts(Path(folders[0])) or folders
    return folders if folders and all(kept_report(Path(f)) is not None for f in folders) else None


def kept_parts(folder: Path) -> list[str] | None:
    """The rank folders a merged ingest folder was made from (its ingest.json's parts), when every one is still
    there, keeps its trace's host collectives, was ingested from the file the merge recorded, and gets the rank the
    merge gave it (the one its kernels record, else its position); else None (the merged table is read). A part is
    looked for where the merge recorded it, then under the merged folder (ranks/<i>, where the workflow and explain
    put them), so a merged folder moved with its parts still finds them."""
    import json

    from gpuvar.ingest.host_collectives import kept_report
    from gpuvar.layout import EXPLAIN_RANK_INGEST

    try:
        report = json.loads((folder / INGEST_REPORT).read_text())
    except (OSError, ValueError):
        return None
    parts = report.get("parts") if isinstance(report, dict) and report.get("merged") else None
    if not isinstance(parts, list) or len(parts) < 2:
        return None
    found = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            return None
        places = [Path(str(part.get("folder"))), folder / EXPLAIN_RANK_INGEST / str(i)]
        place = next((p for p in places if (kept_report(p) or {}).get("source") == part.get("source")), None)
        if place is None or _rank_of_part(place, i) != part.get("rank"):
            return None
        found.append(str(place))
    return found


def _rank_of_part(folder: Path, position: int) -> int:
    """The rank folder_part gives a rank folder (_rank_of: the single rank its kernels record, else its position),
    from its rank column alone."""
    import pyarrow.compute as pc

    path = folder / KERNELS_TABLE
    if "rank" not in pq.read_schema(path).names:
        return position
    ranks = pc.unique(pq.read_table(path, columns=["rank"]).column("rank").drop_null()).to_pylist()
    return int(ranks[0]) if len(ranks) == 1 else position


def _part(k: pd.DataFrame, m: pd.DataFrame, collective_ops: pd.DataFrame, position: int, recorded) -> TracePart:
    rank = _rank_of(k, position)
    return TracePart(_assign_rank(k, rank), _assign_rank(m, rank), collective_ops, rank, recorded)


def from_traces(paths: list[str | Path]) -> RankInput:
    """The original profiler traces, one per rank: read and normalized in memory; collectives from the NCCL
    kernels when every rank has them, else from host ops."""
    return from_parts([trace_part(path, position) for position, path in enumerate(paths)], [str(p) for p in paths])


def from_parts(parts: list[TracePart], sources: list[str]) -> RankInput:
    """The ranks' traces (trace_part, or folder_part: their ingest folders) as one job."""
    kernels, copies, host_ops, ranks, recorded = [], [], [], set(), []
    for part, source in zip(parts, sources):
        if part.rank in ranks:
            raise InputError(source, f"rank {part.rank} is given twice")
        recorded.append(part.recorded)
        host_ops.append((part.collective_ops, source, part.rank))
        ranks.add(part.rank)
        kernels.append(part.kernels)
        copies.append(part.copies)
    kernels = pd.concat(kernels, ignore_index=True)
    copies = pd.concat(copies, ignore_index=True)
    _check(kernels, sources)
    gpu_notes = assign_gpus(kernels, copies, recorded, [rank for _, _, rank in host_ops])
    dropped: dict[str, dict[str, int]] = {}
    collectives, what = nccl_collectives(kernels, dropped), "NCCL kernels "
    if set(collectives["rank"]) != ranks:  # not every rank runs NCCL: the host ops of the backend
        dropped = {}
        hosts = [host_collectives(ops, source, rank) for ops, source, rank in host_ops]
        collectives, what = numbered_collectives(drop_bad(pd.concat(hosts, ignore_index=True), dropped)), "host ops "
    span = rank_spans(kernels, copies, collectives)
    label = collective_label(what, collectives)
    return check_one_job(RankInput(kernels, copies, collectives, span, label, sources, dropped, gpu_notes=gpu_notes))


def collective_label(what: str, collectives: pd.DataFrame) -> str:
    """`collective_source` of --traces: where the collectives come from and their first names."""
    names = sorted(set(collectives["name"]))
    return what + ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")
