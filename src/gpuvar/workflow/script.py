"""The one runner of the workflow's rules (workflow/scripts/gpuvar_command.py): a rule names its `gpuvar`
command and every option it passes in `params:`, and this turns them into the command's arguments.

    params:
        command="causal",            # gpuvar causal
        positional=input.rows,       # its positional arguments (a path or a list)
        random_rows=input.sample,    # --random-rows <path>
        features=["a", "b"],         # --features a,b    (a list: comma-separated, as every list option)
        combine=True,                # --combine         (False: --no-combine; None or []: not passed)

Snakemake's `script:` directive hands params, inputs, outputs and the log over as Python objects, so no value of
a config or a file name is ever parsed by a shell. The command runs in-process, exactly as `gpuvar ...` would
from a terminal (same checks, same one-line errors), with stdout and stderr going to the rule's log.
"""

from __future__ import annotations

import os
import shlex
import sys

from gpuvar.options import option_words


def param_words(name: str, value) -> list[str]:
    """One named param as the option it stands for (name `random_rows` is --random-rows); None or an empty
    list passes nothing."""
    if value is None or (isinstance(value, list | tuple) and not value):
        return []
    return option_words("--" + name.replace("_", "-"), value)


def command_line(params) -> list[str]:
    """`gpuvar` arguments from a rule's params (name -> value, in the rule's order): the command's words,
    the positional arguments, then every other param as an option."""
    named = dict(params.items())
    words = str(named.pop("command")).split()
    positional = named.pop("positional", [])
    words += [str(p) for p in ([positional] if isinstance(positional, str) else positional)]
    for name, value in named.items():
        words += param_words(name, value)
    return words


def run_rule(snakemake) -> None:
    """Run the rule's `gpuvar` command with output to snakemake.log[0]; exit with its status."""
    run_gpuvar(snakemake, *command_line(snakemake.params))


def run_gpuvar(snakemake, command: str, *arguments) -> None:
    """Run `gpuvar <command> <arguments>` with output to snakemake.log[0] (its first line: the command);
    exit with its status."""
    from gpuvar.cli import main

    argv = [command, *(str(a) for a in arguments)]
    log = snakemake.log[0] if len(snakemake.log) else os.devnull
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log, "w") as handle:  # like `> log 2>&1`: also what native code and child processes print
        # the log starts with the command, quoted so that it can be pasted into a shell to rerun the job
        handle.write(f"$ gpuvar {shlex.join(argv)}\n")
        handle.flush()
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # leave without tearing down Arrow's thread pools (see gpuvar.cli.entry); MPI is never used from a script
    os._exit(code)
