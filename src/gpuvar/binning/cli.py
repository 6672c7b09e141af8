"""Bin a canonical kernel table on the global timeline and keep the top-k most variable bins (MPI).

Run as `mpiexec -n R gpuvar bin ...` (or `srun`); plain `gpuvar bin ...` runs one rank. Rank 0 writes
OUTPUT/bins.parquet (every non-empty bin: count, min, max, mean, var (sample, ddof=1), std, q25, median, q75
of the target and of the --features, bin start/end, variance rank), OUTPUT/topk_rows.parquet (the rows of the
top-k bins with the target, linked-copy columns and features) and OUTPUT/bin.json (row accounting, rows without
a target by reason, phase seconds, peak RSS per rank).
"""

from __future__ import annotations

from pathlib import Path

from gpuvar import targets as T
from gpuvar.binning.plan import CONFIG_OPTIONS
from gpuvar.binning.selection import sample_bin_count
from gpuvar.layout import BIN_REPORT
from gpuvar.options import add_options, arguments, comma_list, default


def configure(p):

    p.add_argument(
        "kernels",
        type=Path,
        nargs="+",
        help="canonical kernels.parquet (from gpuvar ingest); several (a job's per-rank tables) are binned as one "
        "table, their rows one after the other, on one global timeline",
    )
    p.add_argument(
        "--memcpy",
        type=Path,
        default=None,
        help="canonical memcpy.parquet: links each kernel to a copy (needed for memory_stall); one "
        "without rows counts as none",
    )
    p.add_argument(
        "--target",
        default=T.DEFAULT_TARGET,
        choices=tuple(T.TARGETS),
        help=f"{' or '.join(T.TARGETS)} (default: %(default)s)",
    )
    p.add_argument(
        "--features",
        default=default("binning", "features"),
        help="columns to also compute per-bin statistics of: 'auto' (duration; top-k rows keep every "
        "column), 'none', or f1,f2 (top-k rows keep identification columns and these; default: %(default)s)",
    )
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    add_options(p, CONFIG_OPTIONS)
    p.add_argument(
        "--sample-bins",
        type=int,
        default=None,
        help="also write the rows of this many randomly chosen bins to sample_rows.parquet (default: "
        "--top-k; 0: none; -1: every bin): the causal step compares them with the top-k bins to flag "
        "selection-induced edges",
    )


def workflow_arguments(cfg, target: str) -> list[str]:
    """`gpuvar bin` options for `target` from validated config `cfg` (what the MPI rules pass, each quoted):
    the random bin sample has as many bins as the top-k, or every bin when the causal step analyses all."""
    sample_bins = sample_bin_count(cfg.binning, cfg.causal)
    return [
        "--target",
        target,
        "--features",
        comma_list(cfg.binning.features),
        "--sample-bins",
        str(sample_bins),
        *arguments(cfg, CONFIG_OPTIONS),
    ]


def _copies(path: Path | None) -> Path | None:
    """The memcpy table to link, or None: ingest writes memcpy.parquet always, with no rows when the source has
    no copies, and binning treats that exactly like no table (same outputs as before the file was declared)."""
    import pyarrow.parquet as pq

    return path if path is not None and pq.read_metadata(path).num_rows > 0 else None


def bin_settings(kernels: Path | list[Path], memcpy: Path | None, output: Path, **values):
    """BinOptions for one run: the inputs checked (here, before MPI starts any work: any rank can fail), a
    copies table without rows taken as none, every value not given the config's default. Several kernels files
    (a job's per-rank tables) are binned as one table (gpuvar.binning.columns.ParquetFiles)."""
    from gpuvar.binning.job import BinOptions
    from gpuvar.errors import InputError, path_problem

    files = list(kernels) if isinstance(kernels, list | tuple) else [kernels]
    for path in (*files, memcpy):
        problem = path and path_problem(path)
        if problem:
            raise InputError(path, problem)
    one = files[0] if len(files) == 1 else files
    return BinOptions(kernels=one, memcpy=_copies(memcpy), output=output, **values)


def _options(args):
    """The job's settings from the command line."""
    names = ("target", "group", "link", "bin_width", "top_k", "features", "workers_per_rank")
    return bin_settings(
        args.kernels,
        args.memcpy,
        args.output,
        launch_bin_width=args.launch_bin_width,
        sample_bins=args.sample_bins,
        sample_seed=args.sample_seed,
        **{name: getattr(args, name) for name in names},
    )


def run(args) -> int:
    """argv -> settings (every rank, agreed) -> execute."""
    from gpuvar.binning.job import Agreed, settle, together, world

    comm = world()
    try:
        return execute(together(comm, _options, args), comm)
    except Agreed as agreed:
        return settle(agreed)


def execute(opts, comm=None) -> int:
    """The binning job with settings `opts` (BinOptions) on the ranks of `comm` (MPI's world, or one rank):
    what `gpuvar bin` and `gpuvar explain` run. Every step before the job is agreed on by all ranks
    (binning.job.together): a rank that cannot read an input, or rank 0 that cannot create its staging folder,
    ends every rank at once with one line from rank 0, instead of leaving the others waiting in the job's first
    collective (and a Slurm allocation held)."""
    from contextlib import ExitStack
    from dataclasses import replace

    from gpuvar.atomic import staged_folder
    from gpuvar.binning.job import Agreed, run_rank, settle, together, world

    comm = comm or world()
    output = opts.output
    try:
        with ExitStack() as stack:
            # rank 0 writes into a temporary folder; bins, top-k rows and bin.json (last) move into OUTPUT together
            staging = staged_folder(output, replace=False, last=(BIN_REPORT,))
            tmp = together(comm, stack.enter_context, staging, root=0)
            if comm.Get_rank() != 0:
                return run_rank(opts, comm)  # only rank 0 writes
            code = run_rank(replace(opts, output=tmp), comm)
            if code:
                raise SystemExit(code)
            return code
    except Agreed as agreed:
        return settle(agreed)
