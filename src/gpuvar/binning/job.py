"""The MPI binning job: targets, fixed-width bins on the global timeline, per-bin statistics, top-k bins.

run_job chains the phases, each a function of one module from frozen inputs to a frozen output (collectives
named; every rank calls every phase):
 0. plan     - gpuvar.binning.plan: options checked against the files, resolved once (width, axis, columns).
 1. scan     - gpuvar.binning.read.scan_share: this rank's row-balanced share of row groups read once, a batch at
               a time: exact group duration sums, the axis span and order, each row group's span; what the bins
               pass needs of each batch is kept, bounded (gpuvar.binning.kept).
 2. means    - gpuvar.binning.target.group_means: allgather of the exact group totals.
 3. timeline - gpuvar.binning.timeline: allgather of the axis spans: the bins, the sorted path or the general one.
    link     - gpuvar.binning.link.make_links (with a memcpy file): allgather of the copies' carry per rank.
 4. bins     - gpuvar.binning.bin_pass: the share a batch at a time (kept, or read again): link, target, bins, and every
               bin's statistics (sorted path: alltoall of one bin per rank; general path: rounds of Alltoallv).
 5. ranking  - gpuvar.binning.ranking (rank 0, after a gather): bins by the target's variance, top-k, random
               sample; bcast.
 6. rows     - gpuvar.binning.rows: the rows of the top-k and the sampled bins, a third pass over only the row
               groups holding them, gathered on rank 0 (timed as topk_rows, the split as sample_rows).
 7. report   - gpuvar.binning.report (rank 0): bins.parquet, topk_rows.parquet, sample_rows.parquet, then bin.json.
Determinism: a bin's statistics are a function of its rows' values in file order, computed by one rank on the
whole bin, and each row's target is the same arithmetic in every pass, so bins.parquet and topk_rows.parquet
are byte-identical for any number of ranks and any batch size.
Memory bound per rank (issue 38): a batch of BATCH_ROWS rows (gpuvar.binning.read) and per-bin and per-group
summaries, plus on the sorted path the bin still being read and the one it gives to the rank before, on the
general path up to ROUND_ROWS rows (gpuvar.binning.spill; beyond that they wait in temporary files), and with
a memcpy file the copies of one batch's time span (all of the share's span when its kernels or copies are out of
start order). bin.json reports each rank's most rows held at once (rows_held_per_rank).
Start-up: the ranks import numpy, pyarrow and mpi4py only (no pandas, no pydantic: Array.to_numpy and
pa.array(ndarray) would import pandas, so numbers cross between numpy and Arrow through the buffers).
Failure: a fallible step outside the collectives (the options and staging folder in binning/cli.py, the plan,
rank 0's ranking and writes) is followed by `together`'s agreement, so every rank ends at once with exit 2 and
rank 0 prints one line. Any other exception on a rank prints one line `rank N: error: ...` and aborts the job
(MPI Abort; the library's own abort message is silenced), so mpiexec/srun exits non-zero at once instead of hanging
in the next collective; rank 0 writes into a staging folder (binning/cli.py), so an aborted job leaves no
output. The job has no failure hook: tests inject faults by replacing a phase function of this module on one
rank (tests/test_binning.py).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

from gpuvar import targets as T
from gpuvar.binning.bin_pass import needs_copies, share_statistics, stat_features
from gpuvar.binning.kept import Kept, keeps, timeline_origin
from gpuvar.binning.link import make_links
from gpuvar.binning.per_bin import empty_statistics
from gpuvar.binning.plan import BinOptions, Collective, make_plan, source_name
from gpuvar.binning.ranking import rank_bins
from gpuvar.binning.read import open_kernels, scan_share
from gpuvar.binning.report import Gathered, Timer, build_report, peak_rss_mb, process_age_s, write_tables
from gpuvar.binning.rows import gather_rows
from gpuvar.binning.target import group_means
from gpuvar.binning.timeline import make_timeline
from gpuvar.errors import StageError, describe
from gpuvar.heap import give_back
from gpuvar.layout import BIN_REPORT
from gpuvar.output import write_json

__all__ = ["Agreed", "BinOptions", "run_job", "run_rank", "together", "world"]  # binning/cli.py uses these
log = logging.getLogger("gpuvar.binning")


class Agreed(Exception):
    """A failure every rank learnt of in `together`: rank 0 reports `error` (its own, or one naming the failing
    rank) on one line, the others exit 2 without a word, and nobody aborts, so cleanup (the staging folder) runs."""

    def __init__(self, error: BaseException | None):
        super().__init__(describe(error) if error is not None else "")
        self.error = error


def together(comm, step, *args, root: int | None = None):
    """`step(*args)` on every rank (or on `root` only), then agree: when any rank failed, every rank raises
    Agreed, instead of the others waiting forever in the next collective. Returns the step's result (None on
    the ranks that did not run it). Collective."""
    result, error = None, None
    if root is None or comm.Get_rank() == root:
        try:
            result = step(*args)
        except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
            error = exc
    failed = [(r, m) for r, m in enumerate(comm.allgather(None if error is None else describe(error))) if m]
    if not failed:
        return result
    if comm.Get_rank() != 0:
        raise Agreed(None)
    raise Agreed(error if error is not None else StageError(f"rank {failed[0][0]}: {failed[0][1]}"))


def settle(agreed: Agreed) -> int:
    """Rank 0 re-raises the agreed error (the CLI prints it on one line, naming the real output, not the staging
    folder); the other ranks return exit code 2."""
    if agreed.error is None:
        return 2
    raise agreed.error


_STARTUP = {"before_mpi": None, "mpi_init": None}  # this rank's start-up, as world() measured it


def world():
    """MPI's world communicator, with MPICH settings made before MPI starts: a rank waiting in a collective yields
    its core instead of spinning (on a node shared with other work a spinning rank takes the time of the ranks
    still computing; 20 M rows on this 2-core machine: 1.29 -> 1.16 s mean of 7 runs). Other MPIs ignore it.

    Also times this rank's start-up, which comes before the job can time anything and does not shrink with more
    ranks: `before_mpi`, the process's age when MPI is about to start (interpreter, imports, options: slow when
    many ranks import numpy and pyarrow from a shared file system at once), and `mpi_init`, MPI's own start (it
    waits for every rank to arrive, so the slowest rank's `before_mpi` shows up in the others' `mpi_init`).
    bin.json reports both per rank (startup_s_per_rank)."""
    os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    if "mpi4py.MPI" not in sys.modules:
        _STARTUP["before_mpi"] = process_age_s()
        t0 = time.perf_counter()
        from mpi4py import MPI

        _STARTUP["mpi_init"] = round(time.perf_counter() - t0, 3)
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_job(opts: BinOptions, comm) -> dict | None:
    """Run the whole job on `comm`; returns the bin.json report on rank 0 (None elsewhere)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    timer = Timer(rank)
    plan = together(comm, make_plan, opts)  # validation only; a file one node cannot read fails the job too
    if rank == 0:
        log.info(
            "binning %s: target %s, %s bins of %d %s, %d ranks x %d workers",
            source_name(opts.kernels),
            opts.target,
            plan.axis,
            plan.width,
            plan.unit,
            size,
            opts.workers_per_rank,
        )
    # what the bins pass needs of each batch, kept (bounded) so that it decodes nothing (gpuvar.binning.kept)
    kept = Kept(plan, timeline_origin(open_kernels(plan), plan) if keeps(plan, needs_copies(plan)) else None)
    scan = scan_share(plan, rank, size, keep=kept.add)
    timer.lap("scan")
    means = group_means(comm, scan)
    timer.lap("means")
    if T.target(opts.target).links_copies and plan.axis != "start":
        raise Collective(f"{opts.target} needs kernel start times: give --bin-width with a time unit (e.g. 10ms)")
    timeline = make_timeline(plan, comm, scan)
    links = make_links(plan, comm, scan)
    timer.lap("link")
    done = share_statistics(plan, comm, scan, timeline, means, links, kept)
    timer.lap("bins")
    n_valid = comm.allreduce(done.binned)
    without = dict(scan.reasons)
    for reason, n in done.reasons.items():
        without[reason] = without.get(reason, 0) + n
    if n_valid == 0 and plan.axis == "start" and comm.allreduce(without.get("no start timestamp", 0)) > 0:
        raise Collective("no kernel has a start time (Nsight Compute data?): give --bin-width as a number of launches")
    parts = comm.gather(done.parts, root=0)
    ordered = None
    if rank == 0:  # in bin order: by round (the general path's), then rank
        pieces = [(k, r, stats) for r, part in enumerate(parts) for k, stats in part]
        ordered = [stats for _, _, stats in sorted(pieces, key=lambda p: p[:2])]
        ordered = ordered or [empty_statistics(stat_features(plan))]
    ranking = together(comm, rank_bins, plan, ordered, timeline.gmin, root=0)
    topk, sample = comm.bcast((ranking.topk, ranking.sample) if rank == 0 else None, root=0)
    timer.lap("rank")
    # the rows of the top-k and of the random bins in one pass: a chosen bin's row group is decoded once
    chosen = np.union1d(topk, sample).astype(np.int64)
    rows, rows_held = gather_rows(plan, comm, scan, timeline, means, links, chosen)
    timer.lap("topk_rows")
    if rows is not None:  # one chunk per column, so the selections are too: the write takes them without a copy
        give_back()  # Arrow's allocator kept the pages of the row groups decoded (0.08 GB at 256 ranks)
        rows = rows.combine_chunks()
        give_back()  # and of the chunks just copied
    topk_rows, sample_rows = ([_rows_of(rows, topk)], [_rows_of(rows, sample)]) if rank == 0 else (None, None)
    rows = None  # (the union of both: it sat beside them and their copies through the write, 0.19 GB at 256 ranks)
    timer.lap("sample_rows")
    held = comm.gather(max(scan.largest_batch, kept.peak_rows, done.held_rows, rows_held), root=0)
    reasons = comm.gather(without, root=0)
    n_in = comm.gather(scan.rows, root=0)
    if rank == 0:
        topk_rows = [r for r in topk_rows if r is not None]
        sample_rows = [r for r in sample_rows if r is not None]
    table = ranking.table if rank == 0 else None
    together(comm, write_tables, plan, table, topk_rows, sample_rows, root=0)  # disk full: every rank ends
    if rank == 0:
        timer.lap("write")
    seconds = comm.gather(timer.seconds, root=0)
    rss = comm.gather(peak_rss_mb(), root=0)
    startup = comm.gather(dict(_STARTUP), root=0)

    def finish() -> dict:
        got = Gathered(
            ranking,
            topk_rows,
            sample_rows,
            n_in,
            reasons,
            n_valid,
            means.n_groups,
            timeline.gmin,
            timeline.n_bins,
            seconds,
            rss,
            startup,
            held,
        )
        report = build_report(plan, got)
        write_json(report, Path(opts.output) / BIN_REPORT)
        return report

    return together(comm, finish, root=0)  # rank 0's report; the rows accounting check can fail


def _rows_of(rows, bins: np.ndarray):
    """The rows (gather_rows' table, in file order) of the given bins; None when there are none."""
    if rows is None or not len(bins):
        return None
    from pyarrow._compute import SetLookupOptions

    from gpuvar.binning.columns import arrow
    from gpuvar.canonical_io import from_numpy  # (pa.array(ndarray) would import pandas)

    wanted = SetLookupOptions(from_numpy(np.asarray(bins, dtype=np.int64)))
    picked = arrow("filter", rows, arrow("is_in", rows.column("bin"), options=wanted))
    return picked if picked.num_rows else None


def run_rank(opts: BinOptions, comm=None) -> int:
    """Entry point on every rank: runs the job; an agreed failure ends every rank with exit 2 and one line from
    rank 0, any other exception a prompt whole-job abort with one line from the failing rank."""
    comm = comm or world()
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        run_job(opts, comm)
        return 0
    except Agreed as agreed:
        return settle(agreed)
    except Collective:
        if rank == 0 or size == 1:
            raise
        return 2
    except Exception as exc:  # noqa: BLE001 - any failure must stop every rank
        if size == 1:
            raise
        print(f"gpuvar bin: rank {rank}: error: {describe(exc)}", file=sys.stderr, flush=True)
        log.debug("rank %d: error: %s", rank, exc, exc_info=True)  # the traceback, with -v only
        sys.stderr.flush()
        time.sleep(0.5)  # let mpiexec/srun forward the message before Abort tears the job's I/O down
        silence_stderr()  # the MPI library's own "Abort(1) on node N ..." would be a second line
        comm.Abort(1)
        return 1


def silence_stderr() -> None:
    """Point this process's stderr at /dev/null once its one-line error is out (and -v's traceback, if asked)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stderr.fileno())
    os.close(devnull)
