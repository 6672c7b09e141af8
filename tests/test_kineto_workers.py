"""The Kineto reader's decode workers die with their parent and never hold its output; a trace that changes while
it is read is one line (issue 35, item 8).

Before: after `kill -9` (or the OOM killer) of a big Kineto ingest its workers lived on (110 MB each) holding the
parent's stdout, so `gpuvar ingest big.json | cat` never ended; a trace truncated while it was read ended the
ingest with SIGBUS (exit 135, no message): the main process maps an uncompressed trace.

Both are made deterministic here: a wrapper starts `gpuvar ingest` with worker processes for a small trace, and
its decode function either holds the worker (it writes its pid, then sleeps) or truncates the trace once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_WRAPPER = """
import os, sys, time
from gpuvar.ingest import json_stream, kineto
mode, marker, trace = sys.argv[1], sys.argv[2], sys.argv[3]
kineto.PARALLEL_MIN_BYTES = 0
os.environ["GPUVAR_KINETO_WORKERS"] = "2"
json_stream.CHUNK = 64 << 10
original = kineto._piece_at_in_worker

def held(*args):
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(60)
    return original(*args)

def truncating(path, offset, size, ends):
    if not os.path.exists(marker):  # once: the first piece a worker reads
        open(marker, "w").close()
        os.truncate(trace, os.path.getsize(trace) // 3)
    return original(path, offset, size, ends)

kineto._piece_at_in_worker = held if mode == "held" else truncating
from gpuvar.cli import main
sys.exit(main(["ingest", trace, "-o", sys.argv[4]]))
"""


@pytest.fixture
def trace(tmp_path) -> Path:
    """An uncompressed Kineto trace of ~6 MB (many 64 KB pieces), as the profiler writes it."""
    from gpuvar.demo.kineto_writer import write_kineto_demo

    path = tmp_path / "big.json"
    write_kineto_demo(path, 5000, 1, rank=0, world=1)
    return path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie is dead (its new parent has not reaped it yet)


def test_reproducer_workers_die_with_a_killed_ingest_and_release_its_output(trace, tmp_path):
    marker = tmp_path / "workers"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, "held", str(marker), str(trace), str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):  # a worker holds a piece: the pool is up
            if marker.exists() and marker.read_text().strip():
                break
            time.sleep(0.05)
        else:
            pytest.fail("no worker started")
        workers = [int(p) for p in marker.read_text().split()]
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=20)  # EOF on both pipes: no worker holds them (was: 60 s)
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, workers)), "the decode workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in [int(p) for p in marker.read_text().split()] if marker.exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_reproducer_a_trace_truncated_while_it_is_read_is_one_line(trace, tmp_path):
    marker = tmp_path / "truncated"
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, "truncate", str(marker), str(trace), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert marker.exists(), "the trace was not truncated during the read"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-2000:])
    assert str(trace) in lines[0] and "changed while it was read" in lines[0], lines[0]
