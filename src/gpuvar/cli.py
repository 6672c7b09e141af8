"""`gpuvar` command line: one subcommand per pipeline stage, each runnable without Snakemake.

Every stage module `gpuvar.<stage>.cli` exposes `configure(parser)` and `run(args) -> int`; heavy imports
stay inside `run` so `gpuvar --help` is instant. A GpuvarError (bad input, bad config) prints one line
and exits 2 — no traceback for a user mistake.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from gpuvar import __version__
from gpuvar.errors import GpuvarError, describe

SUBCOMMANDS = {
    "ingest": ("gpuvar.ingest.cli", "read a profiler file into canonical Parquet (read + normalize)"),
    "read": ("gpuvar.ingest.read_cli", "ingest step 1: a profiler file's tables as read (vendor column names)"),
    "normalize": ("gpuvar.ingest.normalize_cli", "ingest step 2: Table 1 and the canonical schema over `gpuvar read`"),
    "ingest-merge": ("gpuvar.ingest.merge_cli", "combine per-rank ingests into one dataset with a rank column"),
    "demo-data": ("gpuvar.demo.cli", "write deterministic synthetic traces in real profiler formats"),
    "split-kineto": ("gpuvar.demo.kineto_split", "two runs of one program from one Kineto trace (a known answer)"),
    "bin": ("gpuvar.binning.cli", "MPI binning: per-bin statistics and top-k variable windows"),
    "causal": ("gpuvar.causal.cli", "DirectLiNGAM causal discovery on the top-k rows"),
    "causal-checks": ("gpuvar.causal.checks_table", "one table of every causal graph and its assumption checks"),
    "plot": ("gpuvar.plots.cli", "draw causal graphs, parallel coordinates, timelines, scaling"),
    "findings": ("gpuvar.findings.cli", "findings: variance decomposition, verdicts, ranked actionable kernels"),
    "explain": ("gpuvar.explain", "one command for a first answer: ingest, bin, causal, findings"),
    "verify": ("gpuvar.findings.verify_cli", "check each finding's prediction on a re-run with its cause removed"),
    "ranks": ("gpuvar.ranks.cli", "per-rank analysis: the late rank per step, waiting in collectives, why"),
    "compare": ("gpuvar.compare.cli", "compare two runs: slower kernels, moved windows, changed causes"),
    "bench": ("gpuvar.bench.cli", "benchmarks printing JSON"),
    "schema": ("gpuvar.schema_cli", "print the canonical schema as Markdown"),
    "config-reference": ("gpuvar.config_reference", "print every config key (type, default, bounds) as Markdown"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with `only`, that command's options alone are built (the others are
    listed, not configured): configuring a command imports its module, and some import pydantic, numpy or
    pandas, which every MPI rank of `gpuvar bin` would pay at start-up."""
    parser = argparse.ArgumentParser(prog="gpuvar", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpuvar {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.configure(p)
        p.set_defaults(_module=module)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is not a global option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


# Commands that add their files to the output folder (the others swap it in whole; gpuvar.atomic.Output), and
# those of them that write straight into it (the others go through gpuvar.atomic.staged_folder)
ADDING = {"ingest", "normalize", "ingest-merge", "bin", "demo-data", "split-kineto"}
UNSTAGED = {"ingest", "normalize", "demo-data", "split-kineto"}
MPI_COMMANDS = {"bin", "ranks"}  # run by every process of an MPI job (mpiexec/srun)
DEMO_FOLDER_FORMATS = {"set", "pair", "canonical"}  # `gpuvar demo-data`'s other formats write one file
_NOT_INPUTS = {"output", "command", "verbose", "_module", "html"}


def output_of(args):
    """The output folder `args` make their command write (gpuvar.atomic.Output), or None: a file, or nothing."""
    from pathlib import Path

    command = args.command
    folder = getattr(args, "output", None)
    if folder is None or command in ("causal-checks",):
        return None
    if (
        command == "plot"
        and args.figure != "causal"
        or command == "demo-data"
        and args.format not in DEMO_FOLDER_FORMATS
    ):
        return None  # a figure's stem, one demo file
    adds = command in ADDING or command == "findings" and args.combine
    return stage_output(command, Path(folder), _inputs(args), adds)


def stage_output(command: str, folder: Path, inputs, adds: bool | None = None):
    """The output rule (gpuvar.atomic.Output) of `command` writing `folder` from `inputs`: what a command run
    from the command line claims, and what `gpuvar explain` claims for each stage it runs."""
    from gpuvar.atomic import Output

    return Output(
        folder,
        command,
        inputs=tuple(inputs),
        replaces=not (command in ADDING if adds is None else adds),
        mark_early=command in UNSTAGED,
        # the MPI jobs (bin, ranks): every process runs the command, rank 0 locks while it writes (staged_folder)
        lock=command not in MPI_COMMANDS,
    )


def _inputs(args):
    """Every argument naming an existing file or folder, besides the output: what the command reads."""
    from pathlib import Path

    for key, value in vars(args).items():
        if key in _NOT_INPUTS:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, str | Path) and str(item) and os.path.lexists(item):
                yield Path(item)


def run_command(args) -> int:
    """Run a parsed command under the output rule of gpuvar.atomic: its output folder claimed first (one line
    and no work when it is a user's folder, another command's output or holds an input)."""
    from contextlib import nullcontext

    from gpuvar.atomic import claimed
    from gpuvar.progress import Heartbeat

    output = output_of(args)
    own = getattr(args._module, "SAYS_PROGRESS", False)  # (explain prints its own, every 20 s)
    beat = nullcontext() if own else Heartbeat(logging.getLogger("gpuvar.progress").info, LOG_PROGRESS_S)
    with claimed(output) if output is not None else nullcontext(), beat:
        return int(args._module.run(args) or 0)


LOG_PROGRESS_S = 60.0  # a command's step logged this often (explain prints its own every 20 s)


ONE_CORE_COMMANDS = {"bin"}  # each process uses one core and no BLAS: numpy's OpenBLAS starts no thread pool


def configure_logging(level: int) -> None:
    """The command's log lines on stderr (also set up in the processes a command starts for a stage: explain)."""
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stderr
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command(argv)
    if command in ONE_CORE_COMMANDS and "numpy" not in sys.modules:  # (in a process that has numpy: no effect)
        # before numpy is imported: OpenBLAS otherwise starts a thread per core in every MPI rank at import, and on a
        # node whose cores all run ranks those threads take CPU from the other ranks' start-up (2 ranks on 2 cores:
        # numpy's import 0.17 -> 0.07 s of CPU per rank). The binning job calls no BLAS routine.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser(command).parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose else logging.INFO)
    from gpuvar.text_safety import plain

    try:
        return run_command(args)
    except GpuvarError as exc:
        print(f"gpuvar {args.command}: error: {plain(exc)}", file=sys.stderr)  # (file and kernel names in it)
        return 2
    except BrokenPipeError:  # `gpuvar schema | head`: the reader left; not an error worth a message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # unwritable output, disk full, missing directory: the environment, not a bug
        if args.verbose:
            raise
        print(f"gpuvar {args.command}: error: {plain(describe(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpuvar {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """Console entry point: run `main`, then leave without tearing down native thread pools.

    Arrow's C++ thread pools can abort the interpreter at shutdown ("terminate called without an active
    exception", apache/arrow#34314) after all work is done, turning a finished command into exit -6. Once
    output is flushed nothing is left to clean up, so the process ends with os._exit. MPI ranks exit
    normally instead: mpi4py finalizes MPI in an atexit hook that mpiexec waits for (finalizing by hand and
    leaving with os._exit saved ~0.1 s a run but made `mpiexec -n 3` exit 9 now and then under load). Before
    that, gc.freeze: the interpreter's garbage collections at exit then skip every object the run made, which
    took half of a rank's exit (`gpuvar bin`, 20 M rows, 2 ranks: 0.11-0.14 -> 0.05-0.06 s from main's return
    to mpiexec's exit); the exit is otherwise the same (atexit hooks, MPI's finalize, streams flushed).
    """
    code = main()
    if "mpi4py.MPI" in sys.modules:
        import gc

        gc.freeze()
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe (`gpuvar schema | head`): nothing more can be written anyway
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
