"""Ingest throughput: `gpuvar ingest` on a demo Nsight Systems SQLite of N kernel launches (rows/s).

The demo file is cached by (rows, seed) in --data-dir, so repeated runs time only the ingest. Prints one
JSON object with the wall time, CPU time and per-phase seconds of the ingest report.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path


def configure_ingest(p):
    p.add_argument("--rows", type=int, default=1_000_000, help="kernel launches in the demo trace")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "gpuvar-bench-ingest"))


def run_ingest(args) -> int:
    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.ingest import ingest

    data = Path(args.data_dir)
    source = data / f"demo-{args.rows}-{args.seed}.sqlite"
    if not source.exists():
        data.mkdir(parents=True, exist_ok=True)
        write_nsys_demo(source, args.rows, args.seed)
    out = data / f"out-{args.rows}-{args.seed}"
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = ingest(source, out)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    kernels = report["tables"]["kernels"]["rows_written"]
    memcpy = report["tables"].get("memcpy", {}).get("rows_written", 0)
    print(json.dumps({
        "bench": "ingest",
        "format": report["format"],
        "kernel_rows": kernels,
        "memcpy_rows": memcpy,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "kernel_rows_per_s": round(kernels / wall),
        "all_rows_per_s": round((kernels + memcpy) / wall),
        "read_s": report["seconds"]["read"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }, sort_keys=True))
    return 0
