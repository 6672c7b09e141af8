"""The MPI rules' launcher (resources `mpi`): the one value of a profile that reaches `shell:`, so it is
allow-listed and checked word by word before any job runs."""

from __future__ import annotations

import re

from gpuvar.errors import ConfigError

LAUNCHERS = ("srun", "mpiexec", "mpirun", "mpiexec.hydra")
_LAUNCHER = re.compile(r"(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*/(?P<name>[A-Za-z0-9_.-]+)|(?P<bare>[A-Za-z0-9_.-]+)")
_OPTION = re.compile(r"-[A-Za-z][A-Za-z0-9]*|--[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:/@%+=-]+)?")


def launcher_words(value) -> list[str]:
    """The MPI rules' launcher (resources `mpi`, from the rule, a profile's set-resources or --set-resources)
    as words for `shell:`: one of LAUNCHERS (or an absolute path to one) followed by options only, `-x` or
    `--flag[=value]` with safe characters. Anything else (a `;`, `$(...)`, a quote, a second command, an
    option value as its own word) is a ConfigError naming the value: a profile must not run arbitrary shell."""
    words = str(value).split()
    first = _LAUNCHER.fullmatch(words[0]) if words else None
    name = first and (first["name"] or first["bare"])
    bad = [w for w in words[1:] if not _OPTION.fullmatch(w)]
    if name not in LAUNCHERS or bad:
        why = (
            f"word {bad[0]!r} is not an option like -x or --flag=value"
            if name in LAUNCHERS
            else f"the launcher must be one of {', '.join(LAUNCHERS)} (or an absolute path to one)"
        )
        raise ConfigError(f"invalid config: resources mpi={str(value)!r}: {why}")
    return words


def mpi_launcher(wildcards, resources) -> list[str]:
    """`params:` function of the MPI rules: their launcher words, validated when Snakemake builds the jobs,
    before any runs. A bad value stops Snakemake with one line (SystemExit: an exception would come back as
    Snakemake's InputFunctionException with a traceback), as a bad config does at start-up."""
    try:
        return launcher_words(resources.mpi)
    except ConfigError as error:
        raise SystemExit(f"gpuvar: {error}") from None
