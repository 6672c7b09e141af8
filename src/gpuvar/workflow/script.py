"""Runner for workflow/scripts/*.py: a rule's script hands a `gpuvar` command its arguments as a list.

Snakemake's `script:` directive passes inputs, outputs, params and the log as Python objects, so no value of a
config or a file name is ever parsed by a shell. The command runs in-process, exactly as `gpuvar ...` would
from a terminal (same checks, same one-line errors), with stdout and stderr going to the rule's log.
"""

from __future__ import annotations

import os
import sys


def run_gpuvar(snakemake, command: str, *arguments) -> None:
    """Run `gpuvar <command> <arguments>` with output to snakemake.log[0]; exit with its status."""
    from gpuvar.cli import main

    argv = [command, *(str(a) for a in arguments)]
    log = snakemake.log[0] if len(snakemake.log) else os.devnull
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log, "w") as handle:  # like `> log 2>&1`: also what native code and child processes print
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # leave without tearing down Arrow's thread pools (see gpuvar.cli.entry); MPI is never used from a script
    os._exit(code)
