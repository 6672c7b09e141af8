"""Bin a canonical kernel table on the global timeline and keep the top-k most variable bins (MPI).

Run as `mpiexec -n R gpuvar bin ...` (or `srun`); plain `gpuvar bin ...` runs one rank. Rank 0 writes
OUTPUT/bins.parquet (every non-empty bin: count, min, max, mean, var (sample, ddof=1), std, q25, median, q75
of the target and of the --features, bin start/end, variance rank), OUTPUT/topk_rows.parquet (the rows of the
top-k bins with the target, linked-copy columns and features) and OUTPUT/bin.json (row accounting, rows without
a target by reason, phase seconds, peak RSS per rank).
"""

from __future__ import annotations

from pathlib import Path


def configure(p):
    p.add_argument("kernels", type=Path, help="canonical kernels.parquet (from gpuvar ingest)")
    p.add_argument("--memcpy", type=Path, default=None,
                   help="canonical memcpy.parquet: links each kernel to a copy (needed for memory_stall)")
    p.add_argument("--target", default="kernel_variability", help="kernel_variability (default) or memory_stall")
    p.add_argument("--group", default="kernel",
                   help="kernel_variability mean per 'kernel' name (default) or per 'launch_config' (name + config)")
    p.add_argument("--link", default="stream",
                   help="memcpy link: latest copy started at or before the kernel on the same device and 'stream' "
                        "(default) or on the same 'device'")
    p.add_argument("--bin-width", default="10ms",
                   help="bin width with a unit ns/us/ms/s (e.g. 10ms), or a plain number of launches for data "
                        "without timestamps (Nsight Compute)")
    p.add_argument("--top-k", type=int, default=20, help="bins kept, by the target's variance (default 20)")
    p.add_argument("--features", default="auto",
                   help="columns to also compute per-bin statistics of: 'auto' (duration; top-k rows keep every "
                        "column), 'none', or f1,f2 (top-k rows keep identification columns and these)")
    p.add_argument("--workers-per-rank", type=int, default=1, help="threads per rank for the per-bin statistics")
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    p.add_argument("--launch-bin-width", type=int, default=None,
                   help="for traces without timestamps (Nsight Compute): bin over launch order with this many "
                        "launches per bin even when --bin-width has a time unit")
    p.add_argument("--sample-bins", type=int, default=None,
                   help="also write the rows of this many randomly chosen bins to sample_rows.parquet (default: "
                        "--top-k; 0: none; -1: every bin): the causal step compares them with the top-k bins to flag "
                        "selection-induced edges")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the random bin sample")
    # fmt: skip


MAX_WORKERS = 64


def _check(args) -> None:
    """Bounds and input paths, before MPI starts any work: one line naming the option or the file."""
    from gpuvar.errors import GpuvarError, InputError, path_problem

    if not 1 <= args.workers_per_rank <= MAX_WORKERS:
        raise GpuvarError(f"--workers-per-rank must be from 1 to {MAX_WORKERS}, got {args.workers_per_rank}")
    if not 1 <= args.top_k <= 1_000_000:
        raise GpuvarError(f"--top-k must be from 1 to 1000000, got {args.top_k}")
    if args.launch_bin_width is not None and not 1 <= args.launch_bin_width <= 1_000_000_000:
        raise GpuvarError(f"--launch-bin-width must be from 1 to 1000000000, got {args.launch_bin_width}")
    for path in (args.kernels, args.memcpy):
        problem = path and path_problem(path)
        if problem:
            raise InputError(path, problem)


def run(args) -> int:
    from mpi4py import MPI

    from gpuvar.atomic import staged_folder
    from gpuvar.binning.job import BinOptions, run_rank

    _check(args)
    opts = BinOptions(
        kernels=args.kernels, memcpy=args.memcpy, target=args.target, group=args.group, link=args.link,
        bin_width=args.bin_width, top_k=args.top_k, features=args.features,
        workers_per_rank=args.workers_per_rank, output=args.output, launch_bin_width=args.launch_bin_width,
        sample_bins=args.sample_bins, sample_seed=args.sample_seed,
    )  # fmt: skip
    if MPI.COMM_WORLD.Get_rank() != 0:
        return run_rank(opts)  # only rank 0 writes
    # rank 0 writes into a temporary folder; bins, top-k rows and bin.json (last) move into OUTPUT together
    with staged_folder(args.output, replace=False, last=("bin.json",)) as tmp:
        opts.output = tmp
        code = run_rank(opts)
        if code:
            raise SystemExit(code)
    return code
