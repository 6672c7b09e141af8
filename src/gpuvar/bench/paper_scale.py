"""The paper's scalability job at once: --traces demo traces of --rows rows each, every one binned by its own
`mpiexec -n RANKS gpuvar bin`, all started together; one JSON.

The paper (Fig. 5b) bins 4 traces of ~93 M launches, 272 K bins, in 80 s on 1024 ranks (240 s on 128); the
defaults are its sizes, with 4 ranks per trace. Trace i is the canonical demo trace of variant i (the kernel
mixes of the demo's rank0 to rank3), generated once per (rows, seed, variant) into --data-dir (shared with
`bench binning`; 93 M rows take ~10 min and ~1.6 GB each) and reused. The binning job is `bench binning`'s:
10 ms bins, the target's statistics, the top-k bins and their rows. wall_s runs from starting the first mpiexec
to the last one's exit; trace_wall_s is each job's own, phase_s its bin.json phases (slowest rank). Small
sizes run on a laptop: `--rows 2000000 --ranks 2`. The load average before the start is reported: on a shared
machine it says how much of the wall time was the machine's.

--to findings: from trace to findings page instead (gpuvar.bench.paper_pipeline): each trace an Nsight Systems
SQLite export (the demo's, variant i, cached in --data-dir), then stage by stage as the workflow runs one dataset:
`gpuvar ingest`, `mpiexec -n RANKS gpuvar bin` (kernel_variability, the config's defaults), `gpuvar causal`,
`gpuvar findings` (with the causal folder), and one page over the four (`gpuvar findings --combine`). Per stage:
wall time (its --jobs traces at once; the binning jobs all at once, as above) and each process's peak RSS.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from gpuvar.errors import GpuvarError
from gpuvar.layout import BIN_REPORT

PAPER = {"traces": 4, "rows_per_trace": 93_000_000, "bins": 272_000, "ranks": 1024, "wall_s": 80.0}


def configure_paper_scale(p):
    p.add_argument(
        "--rows",
        type=int,
        default=PAPER["rows_per_trace"],
        help="kernel launches per trace (default: %(default)s, the paper's)",
    )
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks per trace (default: %(default)s)")
    p.add_argument("--traces", type=int, default=PAPER["traces"], help="traces binned at once (default: %(default)s)")
    p.add_argument("--bin-width", default="10ms", help="bin width (default: %(default)s, the paper's)")
    p.add_argument("--top-k", type=int, default=20, help="top-k bins kept per trace (default: %(default)s)")
    p.add_argument("--sample-bins", type=int, default=0, help="random bins with rows per trace (default: %(default)s)")
    p.add_argument("--workers-per-rank", type=int, default=1, help="threads per rank (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="demo trace seed (default: %(default)s)")
    p.add_argument(
        "--to",
        choices=("binning", "findings"),
        default="binning",
        help="binning: the canonical traces binned (default); findings: from Nsight Systems traces to the findings page",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 2,
        help="--to findings: traces written, ingested, analysed and explained at once (default: the CPUs, %(default)s)",
    )
    p.add_argument(
        "--ingest-workers",
        type=int,
        default=0,
        help="--to findings: `gpuvar ingest --workers` of each trace (default: %(default)s)",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpuvar-bench-binning",
        help="cache of generated traces, shared with `bench binning` (default: %(default)s)",
    )


def run_paper_scale(args) -> int:
    from gpuvar.bench.binning import bin_command, demo_trace
    from gpuvar.binning.partition import bin_width

    for name in ("rows", "ranks", "traces"):
        if getattr(args, name) <= 0:
            raise GpuvarError(f"--{name} must be positive, got {getattr(args, name)}")
    width, unit = bin_width(args.bin_width)
    if unit != "ns":
        raise GpuvarError("bench paper-scale needs a time bin width (e.g. 10ms)")
    if args.to == "findings":
        from gpuvar.bench.paper_pipeline import run_to_findings

        return run_to_findings(args, PAPER)
    traces, generate_s = [], []
    for variant in range(args.traces):
        path, seconds = demo_trace(args.data_dir, args.rows, args.seed, variant)
        traces.append(path)
        generate_s.append(seconds)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory(prefix="gpuvar-paper-scale-") as tmp:
        outs = [Path(tmp) / f"trace{i}" for i in range(len(traces))]
        logs = [Path(tmp) / f"trace{i}.log" for i in range(len(traces))]
        cmds = [
            bin_command(path, args.ranks, args.bin_width, args.workers_per_rank, out, args.top_k, args.sample_bins)
            for path, out in zip(traces, outs)
        ]
        t0 = time.perf_counter()
        procs = []
        for cmd, log in zip(cmds, logs):
            with open(log, "wb") as fh:  # (the child keeps its own descriptor)
                procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT))
        ends: dict[int, float] = {}
        while len(ends) < len(procs):  # each job's end, as it comes
            for i, proc in enumerate(procs):
                if i not in ends and proc.poll() is not None:
                    ends[i] = time.perf_counter()
            time.sleep(0.01)
        wall = max(ends.values()) - t0
        for i, proc in enumerate(procs):
            if proc.returncode != 0:
                last = logs[i].read_text(errors="replace").strip().splitlines()[-1:]
                raise GpuvarError(f"gpuvar bin of {traces[i]} failed (exit {proc.returncode}): {last}")
        reports = [json.loads((out / BIN_REPORT).read_text()) for out in outs]
    rows = sum(r["rows_in"] for r in reports)
    result = {
        "bench": "paper-scale",
        "traces": len(traces),
        "rows_per_trace": args.rows,
        "ranks_per_trace": args.ranks,
        "total_ranks": args.ranks * len(traces),
        "bin_width_ns": width,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(load, 2) if load is not None else None,
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall),
        "trace_wall_s": [round(ends[i] - t0, 3) for i in range(len(traces))],
        "phase_s": [r["seconds"] for r in reports],
        "rows_binned": [r["rows_binned"] for r in reports],
        "bins": [r["non_empty_bins"] for r in reports],
        "top_k_rows": [r["top_k_rows"] for r in reports],
        "peak_rss_mb_per_rank": [r["peak_rss_mb_per_rank"] for r in reports],
        "startup_s_per_rank": [r["startup_s_per_rank"] for r in reports],
        "generate_s": generate_s,
        "data": [str(p) for p in traces],
        "paper": PAPER,
    }
    print(json.dumps(result, sort_keys=True))
    return 0
