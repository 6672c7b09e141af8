"""A failing job's one-line error and its log reach the terminal (issue 35, item 7).

Before: under profiles/local (`make run`), a bad trace showed only Snakemake's `CalledProcessError ...
gpuvar_command.py ... returned non-zero exit status 2` and `Look above for error messages`, with nothing above:
the profile's `quiet: [rules, host]` hides the job block that would name the log, and the error is in the log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from gpuvar.workflow.failures import failed_jobs

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.timeout(300)
def test_reproducer_a_truncated_trace_under_the_local_profile(tmp_path):
    """`head -c 5000 demo/rank0.sqlite > broken.sqlite`, a config with that one source, `make run CONFIG=...`."""
    from gpuvar.demo.nsys_writer import write_nsys_demo

    whole = tmp_path / "rank0.sqlite"
    write_nsys_demo(whole, 20_000, 1, 0)
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(whole.read_bytes()[:5000])
    config = tmp_path / "broken.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"name": "broken", "source": str(broken)}]}))
    run = tmp_path / "runs" / "broken"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "--profile",
            "profiles/local",
            "--cores",
            "2",
            "--configfile",
            str(config),
            "--directory",
            str(run),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode != 0
    terminal = proc.stdout + proc.stderr
    log = run / "logs" / "ingest_trace" / "broken.log"
    assert f"gpuvar read: error: {broken}: truncated SQLite database" in terminal, terminal[-3000:]
    assert str(log) in terminal, terminal[-3000:]


def _log(root: Path, name: str, text: str, age_s: float = 0.0) -> Path:
    path = root / "logs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age_s:
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_failed_jobs_are_the_logs_of_this_run_that_end_in_an_error(tmp_path):
    since = time.time() - 60
    ok = _log(tmp_path, "normalize_columns/a.log", '$ gpuvar normalize ...\n{"format": "nsys-sqlite"}\n')
    read = _log(tmp_path, "ingest_trace/b.log", "$ gpuvar read b\ngpuvar read: error: b.sqlite: empty file\n")
    mpi = _log(tmp_path, "bin_trace/b_kernel_variability.log", "$ ...\ngpuvar bin: error: rank 1: error: x\n")
    bug = _log(tmp_path, "plot_parallel/c.log", "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n")
    _log(tmp_path, "ingest_trace/old.log", "gpuvar read: error: an earlier run\n", age_s=3600)
    found = failed_jobs(tmp_path / "logs", since)
    assert found == [
        (mpi, "gpuvar bin: error: rank 1: error: x"),
        (read, "gpuvar read: error: b.sqlite: empty file"),
        (bug, "KeyError: 'x'"),
    ]
    assert ok not in [path for path, _ in found]
