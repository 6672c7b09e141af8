"""What the terminal shows when a workflow job fails: its one-line error and the path of its log.

Under profiles/local (`quiet: [rules, host]`, which keeps a run's console to its progress and findings)
Snakemake prints only `CalledProcessError ... returned non-zero exit status 2` for a failed job, and the error
itself is in the job's log (every gpuvar command prints one line there). The Snakefile's `onerror` handler
calls print_failed_jobs: the logs under logs/ written during this run that end in an error, each with its error
line, whatever the rule (a `script:` rule or the MPI job's `shell:`) and wherever it ran (Slurm included).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# the last line of a failed job's log: a gpuvar error (`gpuvar read: error: ...`, `gpuvar bin: interrupted`),
# an MPI rank's (`rank 1: error: ...`), or a traceback's last line (a bug: `KeyError: 'x'`)
ERROR_LINE = re.compile(
    r"^(?:gpuvar [\w-]+: (?:error: .+|interrupted)|rank \d+: error: .+|[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)$"
)
TAIL_BYTES = 16_384  # the end of a log is where its error is


def _last_line(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else None


def failed_jobs(logs: str | Path, since: float) -> list[tuple[Path, str]]:
    """(log, its error line) of every job log under `logs` written at or after `since` (epoch seconds) whose last
    line is an error, in path order."""
    found = []
    root = Path(logs)
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*.log")):
        try:
            if path.stat().st_mtime < since:
                continue
        except OSError:
            continue
        line = _last_line(path)
        if line is not None and ERROR_LINE.match(line):
            found.append((path, line))
    return found


def print_failed_jobs(since: float, logs: str | Path = "logs", stream=None) -> None:
    """After a failed run: each failed job's error line and its log (absolute: the run may be in runs/<name>/)."""
    stream = stream or sys.stderr
    for path, line in failed_jobs(logs, since - 1.0):  # (a coarse file-system clock)
        print(f"gpuvar: a job failed: {line}", file=stream)
        print(f"        its log: {path.resolve()}", file=stream)
