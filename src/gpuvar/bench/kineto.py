"""Kineto ingest throughput: `gpuvar ingest` on a generated PyTorch profiler trace of N kernel events.

The trace (kernel, cpu_op, cudaLaunchKernel, ac2g flow, step-ending cudaDeviceSynchronize, copy and memset
events, as Kineto lays them out) is cached by
(events, seed, compression) in --data-dir, so repeated runs time only the ingest. Prints one JSON object: kernel
events/s, all trace events/s, decompressed MB/s and the peak RSS of the process (ru_maxrss) next to the
decompressed size. The ingest runs in a child process (`gpuvar ingest`), so the peak RSS is the ingest's own
(RUSAGE_CHILDREN) and the rates use the ingest's own time from ingest.json (interpreter start excluded;
process_wall_s includes it).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuvar.layout import INGEST_REPORT


def configure_kineto(p):
    p.add_argument(
        "--events", type=int, default=1_000_000, help="kernel events in the generated trace (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="trace seed (default: %(default)s)")
    p.add_argument("--gzip", action="store_true", help="gzip the trace (as PyTorch writes .pt.trace.json.gz)")
    p.add_argument(
        "--data-dir",
        default=str(Path(tempfile.gettempdir()) / "gpuvar-bench-kineto"),
        help="cache of generated traces (default: %(default)s)",
    )


def run_kineto(args) -> int:
    from gpuvar.demo.kineto_writer import STEP_LAUNCHES, write_kineto_demo
    from gpuvar.errors import GpuvarError
    from gpuvar.ingest.compression import open_binary

    if args.events <= 0:
        raise GpuvarError(f"--events must be positive, got {args.events}")
    data = Path(args.data_dir)
    source = data / f"kineto-{args.events}-{args.seed}.json{'.gz' if args.gzip else ''}"
    if not source.exists():
        write_kineto_demo(source, args.events, args.seed, rank=0)
    size = 0
    with open_binary(source) as fh:
        while block := fh.read(1 << 24):
            size += len(block)
    out = data / f"out-{source.name}"
    cmd = [sys.executable, "-m", "gpuvar.cli", "ingest", str(source), "--output", str(out)]
    wall0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    child_wall = time.perf_counter() - wall0
    if proc.returncode != 0:
        raise GpuvarError(f"ingest of {source} failed: {proc.stderr.strip().splitlines()[-1:]}")
    report = json.loads((out / INGEST_REPORT).read_text())
    wall = report["seconds"]["total"]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    peak = usage.ru_maxrss / 1024
    kernels = report["tables"]["kernels"]["rows_written"]
    copies = report["tables"].get("memcpy", {}).get("rows_written", 0)
    # kernel + cpu_op + launch + flow per kernel, a sync per step, plus copies and memsets
    all_events = kernels * 4 + kernels // STEP_LAUNCHES + copies
    print(
        json.dumps(
            {
                "bench": "ingest-kineto",
                "kernel_events": kernels,
                "copy_events": copies,
                "trace_events": all_events,
                "gzip": bool(args.gzip),
                "decompressed_mb": round(size / 2**20, 1),
                "ingest_s": round(wall, 3),
                "process_cpu_s": round(cpu, 3),
                "kernel_events_per_s": round(kernels / wall),
                "trace_events_per_s": round(all_events / wall),
                "decompressed_mb_per_s": round(size / 2**20 / wall, 1),
                "peak_rss_mb": round(peak),
                "process_wall_s": round(child_wall, 3),
                "peak_rss_over_decompressed": round(peak / (size / 2**20), 2),
            },
            sort_keys=True,
        )
    )
    return 0
