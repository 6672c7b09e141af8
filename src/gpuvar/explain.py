"""One command for a first answer: ingest TRACE (several files = the ranks of one job, ingested side by side in
worker processes, --jobs, then merged with a rank column), bin its timeline, run causal discovery on the most
variable windows (kernel_variability, the config's defaults) and write the findings; prints progress, then the top
findings and where the page is.

OUTPUT/ingest (kernels.parquet, ...), OUTPUT/bin, OUTPUT/causal, OUTPUT/findings/{findings.md,findings.json,
decomposition.csv, figures/}, and with several files OUTPUT/ranks (gpuvar ranks: stragglers, waits) and the
per-rank ingests under OUTPUT/ingest/ranks/: the same files the workflow writes for one dataset, so `gpuvar plot`,
`gpuvar compare` and `gpuvar causal-checks` read them as they read the workflow's.

A job of ISOLATED_LAUNCHES launches or more runs every stage after the ingest in a process of its own. Where two
cores and the memory allow (causal_beside), the causal graphs run in a process of their own beside the rank section
and the findings' analysis, which does not read them: the graphs are attached to the findings once both are done.

OUTPUT appears whole or not at all: every stage writes into one staging folder that replaces OUTPUT once the last
stage is done, so a failed rerun leaves the previous answer as it was, never one run's ingest beside another's
findings; a second `explain` into the same folder while one runs is refused (gpuvar.atomic). The inputs are
checked before any work (readable, a known format, no file given twice)."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from gpuvar.layout import (
    EXPLAIN_BINS,
    EXPLAIN_CAUSAL,
    EXPLAIN_FINDINGS,
    EXPLAIN_INGEST,
    EXPLAIN_RANK_INGEST,
    EXPLAIN_RANKS,
    FINDINGS_PAGE,
    KERNELS_TABLE,
    MEMCPY_TABLE,
    RANKS_PAGE,
    SAMPLE_ROWS,
    TOPK_ROWS,
)


def configure(p):
    p.add_argument(
        "traces",
        nargs="+",
        type=Path,
        help="profiler file(s); several = ranks of one job, or a rocprof / rocprofv3 kernel trace with its counter "
        "passes (results.csv pmc_1.csv ..., kernel_trace.csv counter_collection.csv). A folder: the traces directly "
        "in it, recognised by content, other files left out and named (one trace, or the ranks of one job when each "
        "records its rank, e.g. a tensorboard_trace_handler log folder)",
    )
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    p.add_argument("--name", default=None, help="dataset name on the findings page (default: the first file's stem)")
    p.add_argument("--format", default="auto", help="format name or 'auto': detect by content (default: %(default)s)")
    p.add_argument("--no-causal", action="store_true", help="skip binning and causal graphs: findings only (fastest)")
    p.add_argument("--top", type=int, default=5, help="findings printed (default: %(default)s; all are in findings.md)")
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        help="rank files ingested (and read for the rank section) at once, each in its own process, and merges of 16 "
        "ranks run at once when merging them (default: the cores this process may use, at most the rank files and "
        "what the free memory holds; gpuvar.explain.rank_jobs); one big Nsight Systems export: its ingest's "
        "processes, JOBS - 1 of them preparing its pieces (default: none below 4 cores, else up to 7; "
        "gpuvar.explain.piece_workers)",
    )


def _progress(message: str, t0: float) -> None:
    from gpuvar.text_safety import plain

    print(f"[{time.perf_counter() - t0:6.1f} s] {plain(message)}", file=sys.stderr, flush=True)


HEARTBEAT_S = 20.0  # how often a long stage says how far its step has come (gpuvar.progress.Heartbeat)
SAYS_PROGRESS = True  # (gpuvar.cli.run_command: no logged heartbeat beside this one)


RANK_LINES = 8  # rank files named one progress line each; a job of more: a line per tenth of its files
ISOLATED_LAUNCHES = 2_000_000  # a stage over this many launches runs in a process of its own (_isolated)


def _isolated(stage, *args, **kwargs):
    """stage(*args, **kwargs) in a fresh process of its own (spawned), its result returned here.

    Why: explain runs its stages one after the other in one process, and what a stage over millions of launches
    frees is not all given back (glibc's arenas keep the fragments of its small objects): on a job of 256 ranks
    of 100 k launches the process held 0.46 GB between stages, under the findings' own 0.6 GB. A process of its
    own gives everything back when it ends, for ~1 s of start-up, nothing beside a stage that long. The logging
    levels explain set are set there too, so the console is the same."""
    with Beside(stage, *args, **kwargs) as apart:
        return apart.wait()


def _stage_label(stage, args) -> str:
    return f"the stage `gpuvar {args[0]}`" if stage is _stage else "the findings stage"


def _levels() -> dict:
    import logging

    return {name: logging.getLogger(name).level for name in ("", "gpuvar", "gpuvar.causal")}


class Beside:
    """stage(*args, **kwargs) in a spawned process of its own while this process goes on (_isolated waits on it
    at once): wait() returns its result, its error, or a killed process as one line. Leaving the `with` block waits
    for the process to end, so no stage outlives explain's staging folder."""

    def __init__(self, stage, *args, **kwargs):
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        self.label = _stage_label(stage, args)
        self.pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
        self.future = self.pool.submit(_in_child, _levels(), stage, args, kwargs)

    def done(self) -> bool:
        return self.future.done()

    def wait(self):
        from gpuvar.errors import worker_death

        with worker_death(self.label):
            return self.future.result()

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


BESIDE_BYTES = 2 << 30  # the causal stage (0.29 GB and its bootstrap workers) beside the findings (<= 0.7 GB)
BESIDE_LAUNCHES = 50_000  # below, the findings take about what a process's start-up (~1 s) costs the graphs


def causal_beside(launches: int) -> bool:
    """Whether the causal graphs run beside the findings' analysis: a job of BESIDE_LAUNCHES launches or more, two
    cores or more, and the memory available for both. On the 2-core VM, a 2 M-launch export's causal stage took
    5.9 s on 1.7 cores (its bootstrap workers), the findings 5.9 s on one: explain 21.6 s one after the other,
    16.7 s side by side; the real 60 k-launch GPT-2 recording 8.8-8.9 s against 7.6-8.5 s; a real 5,700-launch
    trace the same either way (5.1-5.8 s), its findings taking what the process's start-up takes
    (docs/performance.md)."""
    from gpuvar.ingest.footprint import available_bytes, usable_cores

    if launches < BESIDE_LAUNCHES:
        return False
    free = available_bytes()
    return usable_cores() >= 2 and (free is None or free >= BESIDE_BYTES)


def beside_workers() -> int:
    """The processes fitting the causal stage's bootstrap (gpuvar.causal.bootstrap: that process and its helpers)
    when the stage runs beside the findings: the cores the findings' process leaves, and at least two, so that the
    stage takes the core the findings free when they end first (one on two cores had left it idle: a 300 k-launch
    trace waited 4 s for the graphs)."""
    from gpuvar.ingest.footprint import usable_cores
    from gpuvar.options import bounds

    return max(2, min(bounds("causal", "workers")["le"], usable_cores() - 1))


def _in_child(levels: dict, stage, args, kwargs):
    import logging

    from gpuvar.cli import configure_logging

    configure_logging(levels.pop(""))  # (what gpuvar.cli.main set up in the explain process)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    return stage(*args, **kwargs)


def _stage(command: str, folder: Path, inputs, work, *args, **kwargs):
    """Run one stage's function in this process under the output rule of its command (gpuvar.cli.stage_output:
    the folder claimed, marked as that command's output), its console output kept off explain's summary."""
    import io

    from gpuvar import progress
    from gpuvar.atomic import claimed
    from gpuvar.cli import stage_output
    from gpuvar.errors import GpuvarError
    from gpuvar.heap import give_back

    progress.finish()  # (a step of the stage before is not this one's)
    try:
        with claimed(stage_output(command, folder, inputs)), contextlib.redirect_stdout(io.StringIO()):
            code = work(*args, **kwargs)
    finally:
        progress.finish()
    give_back()  # what the stage freed goes back before the next one, in this same process, peaks
    if isinstance(code, int) and code:
        raise GpuvarError(f"stage `gpuvar {command}` failed (exit {code})")
    return code


def check_inputs(traces: list[Path], fmt: str) -> list[str]:
    """Before any work: every trace readable and of a known format, no file given twice (by path or content);
    the formats found. Bad input stops here in a second, not after the ingest, binning and causal stages."""
    import hashlib
    import os

    from gpuvar.errors import GpuvarError, InputError
    from gpuvar.ingest.detect import detect, formats

    found, seen = [], {}
    for trace in traces:
        if fmt == "auto":
            found.append(detect(trace).FORMAT)
        elif fmt not in formats():
            raise GpuvarError(f"--format {fmt!r} is not a format (supported: {', '.join(formats())})")
        else:
            found.append(fmt)
        try:
            if not trace.is_dir():
                with open(trace, "rb") as handle:  # readable (permissions), not only present
                    handle.read(1)
        except OSError as exc:
            raise InputError(trace, exc.strerror or str(exc)) from None
        key = os.path.realpath(trace)
        if key in seen:
            raise InputError(trace, f"given twice (also as {seen[key]}): each rank's file once")
        seen[key] = trace
    if len(traces) > 1:
        by_size: dict[int, list[Path]] = {}
        for trace in traces:
            if trace.is_file():
                by_size.setdefault(trace.stat().st_size, []).append(trace)
        for same_size in by_size.values():  # only files of one size can be copies: hash those alone
            digests: dict[str, Path] = {}
            for trace in same_size if len(same_size) > 1 else []:
                with open(trace, "rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
                if digest in digests:
                    raise InputError(trace, f"the same content as {digests[digest]}: one rank's trace given twice")
                digests[digest] = trace
    return found


def default_name(traces: list[Path], ranks: list[list[Path]]) -> str:
    """The dataset's name on the page when --name is not given: the trace's name without its suffixes; for the ranks
    of a job (`ranks`: the traces grouped by gpuvar.ingest.counter_passes.group_files), what their names share
    (digits and separators trimmed) and how many ranks ("rank (256 ranks)"), not the first rank's name, which reads
    as that rank alone."""
    import os

    first = traces[0].name.split(".")[0] or traces[0].name
    if len(ranks) == 1:
        return first
    shared = os.path.commonprefix([files[0].name.split(".")[0] for files in ranks]).rstrip("0123456789_-. ")
    return f"{shared or first} ({len(ranks)} ranks)"


def run(args) -> int:
    import logging

    from gpuvar.atomic import rewrite_files, staged_folder
    from gpuvar.findings.run import console_summary
    from gpuvar.ingest.counter_passes import group_files
    from gpuvar.ingest.footprint import peak_bytes, warn_if_short
    from gpuvar.progress import Heartbeat
    from gpuvar.text_safety import plain

    t0 = time.perf_counter()
    if not getattr(args, "verbose", False):  # the stages' INFO lines are for the workflow's logs, not this summary
        logging.getLogger("gpuvar").setLevel(logging.WARNING)
        logging.getLogger("gpuvar.causal").setLevel(logging.ERROR)  # graph verdicts are on the findings page
    args.traces = _opened(args.traces, args.format, t0)
    check_inputs(args.traces, args.format)
    out = args.output
    ranks = group_files(args.traces)  # one group: one trace (a kernel trace may come with its counter passes)
    peaks = [
        peak_bytes(files, args.format) for files in ranks
    ]  # each ingest's estimated memory (gpuvar.ingest.footprint)
    widest = max(range(len(ranks)), key=peaks.__getitem__)
    warn_if_short("explain", ranks[widest][0], peaks[widest])
    name = args.name or default_name(args.traces, ranks)
    beat = Heartbeat(lambda line: _progress(f"  {line}", t0), HEARTBEAT_S)
    with staged_folder(out) as tmp, beat:  # every stage writes in tmp; OUTPUT is replaced once, at the end
        record, rank_lines = _explain(args, ranks, peaks, name, tmp, t0)
        rewrite_files(tmp, out)  # paths the stages recorded name OUTPUT, not the staging folder
    _progress("done", t0)
    print(console_summary([record], args.top))
    for line in rank_lines:
        print(f"  ranks: {plain(line)}")  # (launching ops' names in it)
    if (out / EXPLAIN_RANKS / RANKS_PAGE).is_file():
        print(f"ranks page: {out / EXPLAIN_RANKS / RANKS_PAGE}")
    print(f"findings page: {out / EXPLAIN_FINDINGS / FINDINGS_PAGE}")
    return 0


def _opened(traces: list[Path], fmt: str, t0: float) -> list[Path]:
    """The traces to explain: a folder given (that no reader claims whole) is the traces in it, said in one progress
    line each, and refused unless they are one trace or the ranks of one job (gpuvar.ingest.folders)."""
    from gpuvar.ingest.folders import job_ranks, resolve_sources

    paths, opened = resolve_sources(traces, fmt)
    job_ranks(opened)
    for folder in opened:
        _progress(folder.note(), t0)
    return paths


def rank_jobs(ranks: list[list[Path]], jobs: int | None, peaks: list[int] | None = None) -> int:
    """How many rank files to ingest at once: `jobs` when given, else the cores this process may use, at most the
    rank files, and at most what the memory available now holds (footprint.available_bytes) at the largest file's
    estimated peak (`peaks`, each rank's gpuvar.ingest.footprint.peak_bytes; found here when not given). Why a cap on memory: a job's ranks are ingested side by side on a laptop as well as
    on a node, and eight 1 M-kernel Kineto traces at once need ~11 GB."""

    from gpuvar.errors import GpuvarError
    from gpuvar.ingest.footprint import available_bytes, peak_bytes, usable_cores

    if jobs is not None:
        if jobs < 1:
            raise GpuvarError(f"--jobs {jobs}: give 1 or more")
        return min(jobs, len(ranks))
    cores = usable_cores()
    free = available_bytes()  # (inside a Slurm job its limit, not the node's free memory; None: the cores decide)
    widest = max(peaks if peaks is not None else [peak_bytes(files) for files in ranks])
    by_memory = max(1, int(free // widest)) if free else len(ranks)
    return max(1, min(cores, len(ranks), by_memory))


WORKER_BYTES = 400 << 20  # a worker preparing pieces (nsys_piece_work): 200-260 MB measured at 64 Ki-row pieces
MAIN_BYTES = 1 << 30  # the ingest in pieces itself: <= 0.8 GB measured
MAX_PIECE_WORKERS = 7


def piece_workers(jobs: int | None) -> int:
    """Worker processes for one Nsight Systems export ingested in pieces (gpuvar.ingest.nsys_piece_work): `jobs` - 1
    when given, else none below 4 cores (on 2 they slowed a 2 M-kernel ingest from 5.3 to 6.9 s: the main process,
    the Parquet encoder and the worker share the cores), else the cores but 2, at most 7 (on a 16-core Xeon a 5 M-kernel
    export took 25.6 s with none, 16.1-16.7 s with 3, 13.0 s with 7: docs/performance.md), and at most what the
    available memory holds."""
    from gpuvar.ingest.footprint import available_bytes, usable_cores

    if jobs is not None:
        return max(0, jobs - 1)
    cores = usable_cores()
    free = available_bytes()
    by_memory = MAX_PIECE_WORKERS if free is None else max(0, int((free - MAIN_BYTES) // WORKER_BYTES))
    return 0 if cores < 4 else min(MAX_PIECE_WORKERS, cores - 2, by_memory)


def _ingest_rank(files: list[Path], part: Path, fmt: str) -> str | None:
    """One rank file's ingest, in a worker process: None, or the one line its error prints (the explain process
    raises the lowest failing rank's, so which error a user reads does not depend on which worker ended first)."""
    from gpuvar.errors import GpuvarError, describe
    from gpuvar.ingest import ingest as ingest_trace
    from gpuvar.ingest.cli import one_or_all

    try:
        _stage("ingest", part, files, ingest_trace, one_or_all(files), part, fmt)
    except (GpuvarError, OSError) as exc:
        return describe(exc)
    return None


def _ingest_ranks(ranks: list[list[Path]], parts: list[Path], fmt: str, jobs: int, t0: float) -> None:
    """Every rank file into its folder, `jobs` at a time in worker processes (one at a time: in this process).
    Each rank's ingest is its own: the folders are the same bytes for any `jobs`. An error stops the command with
    the lowest failing rank's line, once the ingests under way have ended."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from gpuvar.errors import GpuvarError, worker_death

    def named(k: int) -> str:
        return f"rank file {k}: {', '.join(map(str, ranks[k]))}"

    each = len(ranks) <= RANK_LINES  # one line per file; a job of hundreds of files: one per tenth of them
    tenths = {-(-len(ranks) * j // 10) for j in range(1, 11)}

    def ingested(k: int, done: int) -> None:
        if each:
            _progress(f"ingested {named(k)} ({done} of {len(ranks)})", t0)
        elif done in tenths:
            _progress(f"ingested {done} of {len(ranks)} rank files", t0)

    if jobs <= 1:
        if not each:
            _progress(f"ingest {len(ranks)} rank files, one at a time", t0)
        for k, part in enumerate(parts):
            if each:
                _progress(f"ingest {named(k)}", t0)
            failed = _ingest_rank(ranks[k], part, fmt)
            if failed:
                raise GpuvarError(failed)
            if not each:
                ingested(k, k + 1)
        return
    _progress(f"ingest {len(ranks)} rank files, {jobs} at a time", t0)
    failures = {}
    context = get_context("spawn")
    with worker_death("a rank file's ingest"), ProcessPoolExecutor(jobs, context, _rank_worker_start) as pool:
        futures = {pool.submit(_ingest_rank, ranks[k], part, fmt): k for k, part in enumerate(parts)}
        for done, future in enumerate(as_completed(futures), 1):
            if future.cancelled():  # (not started: an earlier rank failed)
                continue
            k = futures[future]
            failed = future.result()
            if failed:
                failures[k] = failed
                for other in futures:
                    other.cancel()  # (those not started yet)
            else:
                ingested(k, done)
    if failures:
        raise GpuvarError(failures[min(failures)])


def _rank_worker_start() -> None:
    """A rank-ingest worker decodes its Kineto trace in its own process: the workers already fill the cores, and a
    big trace's reader would otherwise fork two decode processes of its own in each (~110 MB each, twice the
    processes the cores run), as `gpuvar bench scale` found for its rank ingests."""
    import os

    os.environ["GPUVAR_KINETO_WORKERS"] = "0"


def _launches(folders) -> int:
    """The kernel launches of these ingest folders (their Parquet footers)."""
    import pyarrow.parquet as pq

    total = 0
    for folder in folders:
        try:
            total += pq.read_metadata(Path(folder) / KERNELS_TABLE).num_rows
        except (OSError, ValueError):  # (a stage that needs the table says what is wrong with it)
            pass
    return total


def _run(isolate: bool, stage, *args, **kwargs):
    """stage(*args, **kwargs) in a process of its own (_isolated) or in this one."""
    return _isolated(stage, *args, **kwargs) if isolate else stage(*args, **kwargs)


def _findings(isolate: bool, name: str, ingest: Path, causal, out: Path, output: Path, t0: float, beside=None) -> dict:
    """The findings stage: the analysis (in a process of its own when `isolate`), then OUTPUT/findings written here,
    the evidence figures first and the causal graphs attached once the causal stage running `beside` is done;
    returns the findings record."""
    from gpuvar.atomic import rewrite_paths
    from gpuvar.findings.run import analyse_dataset, causal_evidence, write_dataset

    record, table, kernels = _run(isolate, analyse_dataset, name, ingest)

    def finish(drawn: dict) -> dict:  # (after the figures, which do not show the causal graphs)
        if beside is not None:
            if not beside.done():
                _progress("waiting for the causal graphs", t0)
            beside.wait()
        causal_evidence(drawn, causal, None)
        return rewrite_paths(drawn, out, output)  # the folders it names, where they will be

    findings = out / EXPLAIN_FINDINGS
    return _stage("findings", findings, (ingest,), write_dataset, record, table, findings, kernels, finish)


def _explain(
    args, ranks: list[list[Path]], peaks: list[int], name: str, out: Path, t0: float
) -> tuple[dict, list[str]]:
    """Every stage of the traces grouped as `ranks` (one group per rank) into `out` (the staging folder): (the
    findings record, the ranks' findings). The stages after
    the ingest run each in a process of their own when the job has ISOLATED_LAUNCHES launches or more."""
    from gpuvar.binning.cli import bin_settings
    from gpuvar.binning.cli import execute as bin_execute
    from gpuvar.binning.selection import sample_bin_count
    from gpuvar.causal.cli import execute as causal_execute
    from gpuvar.causal.options import causal_options
    from gpuvar.config import Binning, Causal
    from gpuvar.ingest import ingest as ingest_trace
    from gpuvar.ingest.cli import one_or_all
    from gpuvar.ingest.merge import merge
    from gpuvar.ingest.nsys_plan import PieceSettings
    from gpuvar.ranks.section import rank_section
    from gpuvar.targets import DEFAULT_TARGET

    ingest = out / EXPLAIN_INGEST

    parts, jobs = [], 1
    if len(ranks) == 1:
        _progress(f"ingest {', '.join(map(str, ranks[0]))}", t0)
        pieces = PieceSettings(workers=piece_workers(args.jobs))
        _stage("ingest", ingest, ranks[0], ingest_trace, one_or_all(ranks[0]), ingest, args.format, pieces=pieces)
    else:
        parts = [ingest / EXPLAIN_RANK_INGEST / str(k) for k in range(len(ranks))]  # (layout.RANK_INGEST_DIR)
        jobs = rank_jobs(ranks, args.jobs, peaks)
        _ingest_ranks(ranks, parts, args.format, jobs, t0)
        _progress(f"merge {len(parts)} ranks", t0)
        isolate = _launches(parts) >= ISOLATED_LAUNCHES
        _run(isolate, _stage, "ingest-merge", ingest, parts, merge, parts, ingest, jobs=jobs)  # (jobs: threads)
    launches = _launches([ingest])
    big = launches >= ISOLATED_LAUNCHES
    causal = beside = None
    if not args.no_causal:
        target = DEFAULT_TARGET
        bins = out / EXPLAIN_BINS
        kernels, copies = ingest / KERNELS_TABLE, ingest / MEMCPY_TABLE
        sample_bins = sample_bin_count(Binning(), Causal())  # the config's defaults
        settings = bin_settings(kernels, copies, bins, target=target, sample_bins=sample_bins)
        _progress(f"bin the timeline ({settings.bin_width} windows, top {settings.top_k})", t0)
        _run(big, _stage, "bin", bins, (kernels, copies), bin_execute, settings)
        causal = out / EXPLAIN_CAUSAL
        rows, sample = bins / TOPK_ROWS, bins / SAMPLE_ROWS
        together = causal_beside(launches)
        options = causal_options(target=target, workers=beside_workers() if together else Causal().workers)
        stage = (_stage, "causal", causal, (rows, sample), causal_execute, options, rows, sample, causal)
        if together:
            _progress("causal graphs of the most variable windows, beside what follows", t0)
            beside = Beside(*stage)
        else:
            _progress("causal graphs of the most variable windows", t0)
            _run(big, *stage)
    with beside or contextlib.nullcontext():
        rank_lines = []
        if len(ranks) > 1:
            _progress(f"ranks: stragglers and waits across {len(ranks)} ranks", t0)
            traces, folder = [files[0] for files in ranks], out / EXPLAIN_RANKS
            rank_lines = _run(big, _stage, "ranks", folder, traces, rank_section, traces, parts, folder, 0, jobs)
        _progress("findings: variance decomposition and verdicts per kernel", t0)
        return _findings(big, name, ingest, causal, out, args.output, t0, beside), rank_lines
