"""`gpuvar ranks` as an MPI job: each process reads its share of the job's ranks, one at a time, and only per-step
summaries travel; outputs byte-identical to the one-process analysis (gpuvar.ranks.analyze.analyze) for any
number of processes. `mpiexec -n P gpuvar ranks ...` (or srun); plain `gpuvar ranks` is one process.

Why: a 1000-rank job of 100 k launches per rank is 10^8 launches; no process can hold them, and none needs to.
Everything the analysis computes from launches is per rank (gpuvar.ranks.analyze.local_steps: a rank's step
rows, the step of each of its collectives, its host gaps before arrival), except two things:
  * the collectives' waits: an NCCL collective's wait is the rank's kernel time minus the shortest rank's for
    that collective, and a job uses NCCL kernels or host ops depending on all ranks. The collectives are one row
    per rank and step, so every unit sends its candidates (its NCCL kernels; its copy round trips or host
    collective ops) and rank 0 chooses and computes the waits as gpuvar.ranks.load does. Bad records (drop_bad:
    repeated, negative) are per rank: each unit leaves them out before numbering its collectives, rank 0 counts
    them; the ranks' spans and the job checks (check_one_job: overlapping timelines, clocks) are rank 0's, from
    the units' spans and the chosen collectives; the waits inside each step and the median-pace counterfactual
    come from the step rows (gpuvar.ranks.analyze.combine);
  * what makes the straggler late (gpuvar.ranks.lateness): its own launches, plus, when it shares a physical GPU,
    the launches of the ranks on that GPU (one node's ranks). Rank 0 reads just those units again once the
    straggler is known; the physical GPUs come from every unit's recorded devices (small), as
    gpuvar.ranks.gpus.assign numbers them.
timeline.png draws at most 16 ranks over 4 steps: their owners read those ranks again and send only the
launches of those steps.

A unit is one input: a rank's ingest folder or trace, or for one merged ingest folder the share of its ranks a
process reads (Parquet row filters). Units are dealt out in contiguous blocks. Each process reports the launches
it held at once (`rows_held`: the largest unit; on rank 0 also the straggler's units), the launches it read in
all, its phases' seconds and its peak RSS: printed by rank 0 as `processes`.
Failures: as in gpuvar.binning.job, a failing step is agreed on (`together`), so every process ends at once and
rank 0 prints one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError, describe
from gpuvar.layout import KERNELS_TABLE
from gpuvar.ranks.analyze import LocalSteps, combine, launches_of, local_steps
from gpuvar.ranks.load import (
    RankInput,
    check_one_job,
    collective_label,
    copy_round_trips,
    drop_bad,
    folder_part,
    host_collectives,
    host_op_folders,
    ingest_part,
    is_nccl,
    nccl_collectives,
    numbered_collectives,
    rank_spans,
    trace_part,
)
from gpuvar.ranks.sites import site_moments


@dataclass(frozen=True)
class Unit:
    """One piece of the job's input read by one process at a time."""

    position: int  # its index among the inputs (a rank's position when its file records none)
    path: str
    traces: bool  # an original trace (--traces), else an ingest folder
    many: bool  # one input per rank (its rank: the one it records, else its position)
    ranks: tuple[int, ...] | None = None  # a merged folder: only these ranks' rows
    # a trace's ingest folder that keeps its host collectives (gpuvar.ingest.host_collectives): read instead of
    # the trace, which still names the unit (`path`)
    folder: str | None = None


@dataclass
class Summary:
    """What a unit sends: small (one row per rank and step or per collective), never its launches."""

    unit: Unit
    kernels: int
    copies: int
    kernel_ranks: list[int]
    has_step: bool
    span: dict[int, tuple[int, int]]
    nccl: pd.DataFrame  # its NCCL kernels (rank, start, end, kernel_name), file order
    other: pd.DataFrame | None  # copy round trips (ingest) or host collective ops (traces), as found
    other_error: InputError | None  # a trace without host collective ops (an error only if the job needs them)
    local_nccl: LocalSteps
    local_other: LocalSteps | None
    rank: int | None = None  # a trace's rank
    recorded: object = None  # a trace's gpuvar.ingest.gpu_identity.Recorded
    devices: dict[str, list[int]] = field(default_factory=dict)  # kernels / launches: distinct device ids
    sites: pd.DataFrame | None = None  # per (rank, call site) moments (gpuvar.ranks.sites.site_moments)


def plan_units(inputs: list[str], traces: bool, size: int, folders: list[str] | None = None) -> list[Unit]:
    """The units of the inputs: one per trace or ingest folder; one merged folder is split by rank into `size`.
    `folders`: the traces' ingest folders; a folder that keeps its trace's host collectives is read instead of the
    trace (it must have been ingested from it). Ingest folders that all keep them are read as their traces would
    be: host collectives give the exact wait, copies only show it (gpuvar.ranks.load). So are the rank folders a
    merged folder was made from, where they are still there and keep them (host_op_folders)."""
    many = len(inputs) > 1
    if folders is not None:
        if len(folders) != len(inputs):
            raise InputError(", ".join(folders), f"{len(folders)} ingest folders for {len(inputs)} traces")
        kept = [str(f) if _ingested_from(f, t) else None for t, f in zip(inputs, folders)]
        return [Unit(i, str(p), True, many, None, f) for i, (p, f) in enumerate(zip(inputs, kept))]
    kept = None if traces else host_op_folders([str(p) for p in inputs])
    if kept is not None:  # (for one merged folder: its rank folders)
        return [Unit(i, p, True, len(kept) > 1, None, p) for i, p in enumerate(kept)]
    if traces or many:
        return [Unit(i, str(p), traces, many) for i, p in enumerate(inputs)]
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(inputs[0]) / KERNELS_TABLE
    if not path.is_file():
        raise InputError(inputs[0], "not an ingest folder (no kernels.parquet); run `gpuvar ingest` first")
    if size == 1 or "rank" not in pq.read_schema(path).names:
        return [Unit(0, str(inputs[0]), False, False)]
    column = pq.read_table(path, columns=["rank"]).column("rank")
    ranks = sorted(int(r) for r in pc.unique(column.drop_null()).to_pylist())
    blocks = [ranks[len(ranks) * i // size : len(ranks) * (i + 1) // size] for i in range(size)]
    return [Unit(0, str(inputs[0]), False, False, tuple(b)) for b in blocks if b]


def _ingested_from(folder: str, trace: str) -> bool:
    """Whether `folder` keeps the host collectives of `trace`: False where it keeps none (ingested before they were
    kept, or from a format without host ops: the trace is read); InputError where it was ingested from another
    file (a rank's folder given for another rank's trace)."""
    from gpuvar.ingest.host_collectives import kept_report

    report = kept_report(Path(folder))
    if report is None:
        return False
    source = str(report.get("source", ""))
    if Path(source).resolve() != Path(trace).resolve():
        raise InputError(folder, f"was ingested from {source}, not from {trace}")
    return True


def share(units: list[Unit], rank: int, size: int) -> list[Unit]:
    """Contiguous blocks of units, as even as whole units allow."""
    return units[len(units) * rank // size : len(units) * (rank + 1) // size]


def _devices(frame: pd.DataFrame) -> list[int]:
    if frame.empty or "device_id" not in frame.columns:
        return []
    d = pd.to_numeric(frame["device_id"], errors="coerce").astype("Int64").dropna().unique()
    return sorted(int(x) for x in d)


def load(unit: Unit):
    """(kernels, copies, the trace part or None) of one unit."""
    if unit.traces:
        part = folder_part(unit.folder, unit.position) if unit.folder else trace_part(unit.path, unit.position)
        return part.kernels, part.copies, part
    k, m = ingest_part(unit.path, unit.position, unit.many, list(unit.ranks) if unit.ranks is not None else None)
    return k, m, None


def _nccl_rows(kernels: pd.DataFrame) -> pd.DataFrame:
    hit = kernels[is_nccl(kernels["kernel_name"])]
    return hit[["rank", "start", "end", "kernel_name"]].reset_index(drop=True)


def _as_collectives(nccl: pd.DataFrame) -> pd.DataFrame:
    """A unit's NCCL kernels as collectives with their seq (ends as recorded: only starts matter locally). The
    bad records gpuvar.ranks.load.drop_bad leaves out are left out here too, so the seq numbers are the job's:
    they are per rank, and a unit holds every record of its ranks."""
    return numbered_collectives(drop_bad(pd.DataFrame({"rank": nccl["rank"], "start": nccl["start"], "end": nccl["end"],
                                            "name": nccl["kernel_name"].astype(str)}), {}))  # fmt: skip


def summarize(unit: Unit) -> Summary:
    """Read one unit, reduce it to its Summary, drop its launches."""
    k, m, part = load(unit)
    data = RankInput(k, m, pd.DataFrame(), {}, "")
    launches = launches_of(data)
    nccl = _nccl_rows(k)
    other, error = None, None
    if part is not None:
        try:
            other = host_collectives(part.collective_ops, unit.path, part.rank)
        except InputError as exc:
            error = exc
    else:
        other = copy_round_trips(m)
    if other is None:
        local_other = None
    else:  # host ops are dropped and counted as gpuvar.ranks.load.from_traces does (copy round trips are not)
        local_other = local_steps(launches, numbered_collectives(drop_bad(other, {}) if part is not None else other))
    return Summary(
        unit=unit,
        kernels=len(k),
        copies=len(m),
        kernel_ranks=sorted(int(r) for r in k["rank"].dropna().unique()),
        has_step=bool(k["step"].notna().any()),
        span=rank_spans(k, m) if len(k) or len(m) else {},
        nccl=nccl,
        other=other,
        other_error=error,
        local_nccl=local_steps(launches, _as_collectives(nccl)),
        local_other=local_other,
        rank=part.rank if part is not None else None,
        recorded=part.recorded if part is not None else None,
        devices={"kernels": _devices(k), "launches": sorted(set(_devices(k)) | set(_devices(m)))},
        sites=site_moments(k),
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate, leaving out empty frames (an empty frame's object columns would turn int64 into object)."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0]


def _merge_local(parts: list[LocalSteps]) -> LocalSteps:
    steps = _concat([p.steps for p in parts]).sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    return LocalSteps(
        sorted({r for p in parts for r in p.ranks}),
        steps,
        _concat([p.col_steps for p in parts]),
        _concat([p.pre_idle for p in parts]),
    )


@dataclass
class Decided:
    """Rank 0's view of the whole job, from the summaries alone."""

    local: LocalSteps
    data: RankInput  # the collectives, spans, label, sources, dropped records and checks; no launches
    gpu: dict  # (unit position, device id) -> physical-GPU code (--traces), else {}
    summaries: list[Summary]


def _job_span(summaries: list[Summary], collectives: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Each rank's first to last launch or collective, as gpuvar.ranks.load's rank_spans over all of them."""
    span: dict[int, tuple[int, int]] = {}
    pieces = [s.span for s in summaries] + ([rank_spans(collectives)] if len(collectives) else [])
    for piece in pieces:
        for r, (a, b) in piece.items():
            span[r] = (min(span[r][0], a), max(span[r][1], b)) if r in span else (a, b)
    return dict(sorted(span.items()))


def decide(summaries: list[Summary], traces: bool, sources: list[str]) -> Decided:
    """The checks and choices of gpuvar.ranks.load.from_ingest / from_traces, made on the summaries: which
    collectives, their dropped records, each rank's span, and gpuvar.ranks.load.check_one_job."""
    where = sources[0] if len(sources) == 1 else ", ".join(sources)
    ranks: set[int] = set()  # the traces' ranks
    for s in summaries if traces else []:
        if s.rank in ranks:
            raise InputError(s.unit.path, f"rank {s.rank} is given twice")
        ranks.add(s.rank)
    if sum(s.kernels for s in summaries) == 0:
        raise InputError(where, "no kernel launches")
    if not any(s.has_step for s in summaries):
        raise InputError(where, "no step is known (no ProfilerStep#N and no cudaDeviceSynchronize): cannot align ranks")
    dropped: dict[str, dict[str, int]] = {}
    nccl = nccl_collectives(_concat([s.nccl for s in summaries]), dropped)
    gpu = _gpu_codes(summaries) if traces else {}
    if traces:
        if set(nccl["rank"]) == ranks:
            local, collectives, label = [s.local_nccl for s in summaries], nccl, collective_label("NCCL kernels ", nccl)
        else:
            failed = [s for s in summaries if s.other_error is not None]
            if failed:
                raise failed[0].other_error
            dropped = {}
            hosts = numbered_collectives(drop_bad(pd.concat([s.other for s in summaries], ignore_index=True), dropped))
            local, collectives, label = [s.local_other for s in summaries], hosts, collective_label("host ops ", hosts)
    else:
        if len(sources) > 1 and len({r for s in summaries for r in s.kernel_ranks}) < len(sources):
            raise InputError(
                ", ".join(sources), "two folders record the same rank; merge them with `gpuvar ingest-merge`"
            )
        if not nccl.empty:
            local, collectives, label = [s.local_nccl for s in summaries], nccl, "NCCL kernels"
        else:
            dropped = {}
            trips = numbered_collectives(_concat([s.other for s in summaries]))
            local, collectives, label = [s.local_other for s in summaries], trips, "copies"
    empty = pd.DataFrame({"rank": [], "step": [], "start": [], "end": []})
    span = _job_span(summaries, collectives)
    data = check_one_job(RankInput(empty, empty, collectives, span, label, sources, dropped))
    return Decided(_merge_local(local), data, gpu, summaries)


def _gpu_codes(summaries: list[Summary]) -> dict:
    """Physical-GPU codes of every (unit, device id) pair, numbered as gpuvar.ranks.gpus.assign numbers them."""
    from gpuvar.ingest.gpu_identity import merged_gpus

    pairs = [(i, d) for i, s in enumerate(summaries) for d in s.devices["launches"]]
    if not pairs:
        return {}
    part = np.array([p for p, _ in pairs], np.int64)
    device = pd.Series([d for _, d in pairs], dtype="Int64")
    codes, _ = merged_gpus([s.recorded for s in summaries], part, device, [s.rank for s in summaries])
    return {(summaries[p].unit.position, d): int(c) for (p, d), c in zip(pairs, codes)}


def with_gpus(frame: pd.DataFrame, position: int, gpu: dict) -> pd.DataFrame:
    """The frame with gpuvar.ranks.gpus.GPU codes from the job-wide table (-1: unknown)."""
    from gpuvar.ranks.gpus import GPU

    device = pd.to_numeric(frame["device_id"], errors="coerce").astype("Int64").to_numpy(dtype=np.int64, na_value=-1)
    frame[GPU] = np.array([gpu.get((position, int(d)), -1) if d >= 0 else -1 for d in device], dtype=np.int64)
    return frame


class Held:
    """The launches this process holds at once, at most (rows of kernels and copies tables)."""

    def __init__(self):
        self.max = 0
        self.read = 0

    def note(self, rows: int, at_once: int | None = None) -> None:
        self.read += rows
        self.max = max(self.max, rows if at_once is None else at_once)


def _read(units: list[Unit], gpu: dict, held: Held, keep=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The launches of `units` (position order), with GPU codes where `gpu` has them; `keep(frame)` filters each."""
    ks, ms, total = [], [], 0
    for unit in sorted(units, key=lambda u: u.position):
        k, m, _ = load(unit)
        if gpu:
            k, m = with_gpus(k, unit.position, gpu), with_gpus(m, unit.position, gpu)
        held.note(len(k) + len(m), total + len(k) + len(m))
        if keep is not None:
            k, m = keep(k), keep(m)
        total += len(k) + len(m)
        ks.append(k)
        ms.append(m)
    return pd.concat(ks, ignore_index=True), pd.concat(ms, ignore_index=True)


def _explainer(decided: Decided, held: Held, seed: int):
    """explain(steps, straggler) for combine: the straggler's units (and, on a shared GPU, those of the ranks on
    it) read again on rank 0."""
    from gpuvar.ranks.gpus import shares_gpu
    from gpuvar.ranks.lateness import lateness

    def codes(s: Summary, which: str) -> set[int]:
        return {decided.gpu.get((s.unit.position, d), -1) for d in s.devices[which]}

    def explain(steps: pd.DataFrame, straggler: int) -> dict:
        holder = [
            s for s in decided.summaries if straggler in s.span or straggler in s.kernel_ranks or s.rank == straggler
        ]
        shared = None
        units = [u if u.ranks is None else replace(u, ranks=(straggler,))
                 for u in (s.unit for s in holder)]  # fmt: skip
        if decided.gpu:
            mine = set().union(*(codes(s, "kernels") for s in holder if s.rank == straggler))
            others = set().union(*(codes(s, "kernels") for s in decided.summaries if s.rank != straggler))
            shared = shares_gpu(mine, others)
            if shared:
                gpus = set().union(*(codes(s, "launches") for s in holder)) - {-1}
                units += [s.unit for s in decided.summaries if s.rank != straggler and codes(s, "launches") & gpus]
        k, m = _read(units, decided.gpu, held)
        return lateness(steps, replace(decided.data, kernels=k, copies=m), straggler, shared, seed)

    return explain


def run_job(inputs: list[str], traces: bool, output: str, seed: int, comm, folders: list[str] | None = None):
    """The whole job on `comm`; rank 0 writes the outputs and returns {findings, processes}. `folders`: the
    traces' ingest folders that keep their host collectives, read instead of the traces (plan_units)."""
    from gpuvar.binning.job import together
    from gpuvar.binning.report import peak_rss_mb
    from gpuvar.ranks.report import timeline_window, write_outputs

    rank, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    held = Held()

    def lap(name: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        seconds[name] = round(now - t0, 4)
        t0 = now

    units = together(comm, plan_units, inputs, traces, size, folders)
    traces = all(u.traces for u in units)  # ingest folders that keep their traces' host collectives: as traces
    mine = share(units, rank, size)
    sources = list(dict.fromkeys(u.path for u in units))  # the inputs, or the rank folders of a merged one

    def read_mine() -> list[Summary]:
        out = []
        for summary in _summaries(mine, getattr(comm, "workers", 1)):
            out.append(summary)
            held.note(out[-1].kernels + out[-1].copies)
        return out

    summaries = together(comm, read_mine)
    lap("read")
    gathered = comm.gather(summaries, root=0)
    lap("gather")

    def analyse():
        decided = decide([s for part in gathered for s in part], traces, sources)
        moments = _concat([s.sites for s in decided.summaries])
        result = combine(decided.local, decided.data, _explainer(decided, held, seed), seed, moments)
        return decided, result

    decided, result = together(comm, analyse, root=0) or (None, None)
    lap("analyse")
    window = comm.bcast(timeline_window(result) if rank == 0 and not result.steps.empty else None, root=0)

    def drawn() -> list:
        if window is None:
            return []
        shown, ranks = window

        def keep(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[frame["step"].isin(shown) & frame["rank"].isin(ranks)]

        out = []
        for unit in mine:
            summary = next(s for s in summaries if s.unit == unit)
            if set(summary.span) & set(ranks) or set(summary.kernel_ranks) & set(ranks):
                if unit.ranks is not None:  # a merged folder's share: only the drawn ranks
                    unit = replace(unit, ranks=tuple(r for r in unit.ranks if r in ranks))
                once = Held()
                out.append((unit.position, _read([unit], {}, once, keep)))
                held.note(once.read, once.max)
        return out

    pieces = together(comm, drawn)
    pieces = comm.gather(pieces, root=0)
    lap("timeline")
    stats = comm.gather({"rank": rank, "units": len(mine), "rows_held": held.max, "rows_read": held.read,
                         "seconds": seconds, "peak_rss_mb": peak_rss_mb()}, root=0)  # fmt: skip

    def write() -> dict:
        got = sorted((p for part in pieces for p in part), key=lambda p: p[0])  # the inputs' order
        ks, ms = [k for _, (k, _) in got], [m for _, (_, m) in got]
        data = decided.data
        if ks:
            data = replace(data, kernels=pd.concat(ks, ignore_index=True), copies=pd.concat(ms, ignore_index=True))
        write_outputs(result, data, output)
        return {"output": str(output), "findings": result.findings, "processes": stats}

    return together(comm, write, root=0)


def _summaries(units: list[Unit], workers: int):
    """summarize(unit) of each unit, in order: here, or in `workers` worker processes (OneProcess.workers), each
    reading one unit at a time. The summaries are what MPI ranks send each other: small, and picklable."""
    if workers <= 1 or len(units) <= 1:
        yield from map(summarize, units)
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from gpuvar.errors import worker_death

    with worker_death("the reading of the rank files"):
        with ProcessPoolExecutor(min(workers, len(units)), mp_context=get_context("spawn")) as pool:
            yield from pool.map(summarize, units)


class OneProcess:
    """The job's communicator when it is one process inside another command (`gpuvar explain`'s rank section):
    the collectives of a world of one, without starting MPI. `workers`: processes that read the units (the rank
    files, each reduced to its summary), as explain ingests them side by side; the analysis stays here."""

    def __init__(self, workers: int = 1):
        self.workers = workers

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def gather(self, value, root: int = 0) -> list:
        return [value]

    def allgather(self, value) -> list:
        return [value]

    def bcast(self, value, root: int = 0):
        return value


def run_here(inputs: list[str], traces: bool, output: str, seed: int = 0, workers: int = 1, folders=None) -> dict:
    """The job in this process, as one process (OneProcess): one rank's launches held at a time, not the job's
    (one per worker process with `workers`: the same outputs). A failure raises its own error (an InputError for a
    bad input), as the one-process analysis did. `folders`: as run_job's."""
    from gpuvar.binning.job import Agreed

    try:
        return run_job(inputs, traces, output, seed, OneProcess(workers), folders)
    except Agreed as agreed:
        raise agreed.error from None


def run(inputs: list[str], traces: bool, output: str, seed: int = 0, comm=None, folders=None) -> dict | None:
    """Entry point on every process. An agreed failure ends every process with exit 2 and one line from rank 0;
    any other exception aborts the whole job at once with one line from the failing process (as `gpuvar bin`)."""
    import sys

    from gpuvar.binning.job import Agreed, settle, silence_stderr, world

    comm = comm or world()
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        return run_job(inputs, traces, output, seed, comm, folders)
    except Agreed as agreed:
        raise SystemExit(settle(agreed)) from None
    except Exception as exc:  # noqa: BLE001 - any failure must stop every process
        if size == 1:
            raise
        print(f"gpuvar ranks: rank {rank}: error: {describe(exc)}", file=sys.stderr, flush=True)
        time.sleep(0.5)  # let mpiexec/srun forward the line before Abort tears the job's I/O down
        silence_stderr()
        comm.Abort(1)
        return None
