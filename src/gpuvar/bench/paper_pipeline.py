"""`gpuvar bench paper-scale --to findings`: the paper's four traces from trace to findings page.

Why a pipeline and not only binning: binning is the one stage the paper distributes, but a user waits for the
findings page; this times every stage on the same traces. Each trace is an Nsight Systems SQLite export (the
demo's synthetic trace, variant i, as `gpuvar bench ingest` writes it; cached in --data-dir), then the workflow's
chain for one dataset, each stage a process as Snakemake runs it: `gpuvar ingest`, `mpiexec -n RANKS gpuvar bin`
(kernel_variability, the config's defaults), `gpuvar causal` (the top-k rows against the random bins' rows),
`gpuvar findings` (every launch, with the causal folder), then the page over the four (`gpuvar findings
--combine`). A stage runs its traces --jobs at a time (binning: all at once, as the paper's job); its wall time
is from its first start to its last end; each process's peak RSS comes from wait4 (a process and its children,
the largest of them; the binning ranks' from bin.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuvar.errors import GpuvarError
from gpuvar.layout import (
    BIN_REPORT,
    EXPLAIN_FINDINGS,
    EXPLAIN_INGEST,
    FINDINGS_PAGE,
    FINDINGS_RECORD,
    INGEST_REPORT,
    KERNELS_TABLE,
    MEMCPY_TABLE,
    SAMPLE_ROWS,
    TOPK_ROWS,
)

GPUVAR = [sys.executable, "-m", "gpuvar.cli"]
TARGET = "kernel_variability"


def nsys_trace(data_dir: Path, rows: int, seed: int, variant: int) -> tuple[Path, float | None]:
    """The cached demo Nsight Systems export of `rows` kernels (written if absent); seconds spent writing it."""
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = Path(data_dir) / f"nsys-rows{rows}-seed{seed}-variant{variant}.sqlite"
    if path.is_file():
        return path, None
    t0 = time.perf_counter()
    write_nsys_demo(path, rows, seed, variant)
    return path, round(time.perf_counter() - t0, 2)


def write_traces(data_dir: Path, rows: int, seed: int, count: int, jobs: int) -> tuple[list[Path], list]:
    """The `count` demo exports (nsys_trace), the missing ones written `jobs` at a time in their own processes: one
    20 M-kernel export takes ~2 minutes to write, and a 16-core machine need not write four in a row."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    with ProcessPoolExecutor(max_workers=max(1, min(jobs, count))) as pool:
        done = list(pool.map(partial(nsys_trace, data_dir, rows, seed), range(count)))
    return [path for path, _ in done], [seconds for _, seconds in done]


def run_jobs(cmds: list[list[str]], logs: list[Path], jobs: int) -> tuple[float, list[dict]]:
    """Run the commands, `jobs` at a time; (wall seconds from the first start to the last end, per command its
    wall seconds and peak RSS). A failure is a GpuvarError with the command's last log line."""
    t0 = time.perf_counter()
    running: dict[int, tuple[int, float]] = {}
    done: dict[int, dict] = {}
    todo = list(range(len(cmds)))
    while todo or running:
        while todo and len(running) < max(1, jobs):
            i = todo.pop(0)
            with open(logs[i], "wb") as fh:
                proc = subprocess.Popen(cmds[i], stdout=fh, stderr=subprocess.STDOUT)
            running[proc.pid] = (i, time.perf_counter())
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        i, started = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            last = logs[i].read_text(errors="replace").strip().splitlines()[-1:]
            raise GpuvarError(f"`{' '.join(cmds[i][2:5])} ...` failed (exit {code}): {last}")
        done[i] = {"wall_s": round(time.perf_counter() - started, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    return round(time.perf_counter() - t0, 3), [done[i] for i in range(len(cmds))]


def _defaults():
    """The config's defaults, as `gpuvar explain` uses them."""
    from types import SimpleNamespace

    from gpuvar.config import Binning, Causal, Targets

    return SimpleNamespace(binning=Binning(), causal=Causal(), targets=Targets())


def stage_commands(out: Path, trace: Path, name: str, args) -> dict[str, list[str]]:
    """Each stage's command for one trace (its outputs under `out`)."""
    from gpuvar.binning.cli import workflow_arguments
    from gpuvar.causal.cli import CONFIG_OPTIONS
    from gpuvar.options import arguments

    cfg = _defaults()
    ingest, bins, causal = out / "ingest", out / "bin", out / "causal"
    mpiexec = Path(sys.executable).with_name("mpiexec")
    launcher = [str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", str(args.ranks)]
    return {
        "ingest": [*GPUVAR, "ingest", str(trace), "-o", str(ingest), "--workers", str(args.ingest_workers)],
        "binning": [
            *launcher,
            *GPUVAR,
            "bin",
            str(ingest / KERNELS_TABLE),
            "--memcpy",
            str(ingest / MEMCPY_TABLE),
            *workflow_arguments(cfg, TARGET),
            "--bin-width",
            args.bin_width,
            "--top-k",
            str(args.top_k),
            "--workers-per-rank",
            str(args.workers_per_rank),
            "-o",
            str(bins),
        ],
        "causal": [
            *GPUVAR,
            "causal",
            str(bins / TOPK_ROWS),
            "--random-rows",
            str(bins / SAMPLE_ROWS),
            "--target",
            TARGET,
            *arguments(cfg, CONFIG_OPTIONS),
            "-o",
            str(causal),
        ],
        "findings": [
            *GPUVAR,
            "findings",
            str(ingest),
            "--causal",
            str(causal),
            "--name",
            name,
            "-o",
            str(out / "findings"),
        ],
    }


def run_to_findings(args, paper: dict) -> int:
    if args.jobs <= 0:
        raise GpuvarError(f"--jobs must be positive, got {args.jobs}")
    traces, generate_s = write_traces(args.data_dir, args.rows, args.seed, args.traces, args.jobs)
    load = os.getloadavg()[0]
    stages: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpuvar-paper-findings-") as tmp:
        outs = [Path(tmp) / f"trace{i}" for i in range(len(traces))]
        for out in outs:
            out.mkdir()
        cmds = [stage_commands(out, t, f"trace{i}", args) for i, (out, t) in enumerate(zip(outs, traces))]
        t_all = time.perf_counter()
        for stage in ("ingest", "binning", "causal", "findings"):
            jobs = len(traces) if stage == "binning" else args.jobs
            logs = [out / f"{stage}.log" for out in outs]
            wall, per = run_jobs([c[stage] for c in cmds], logs, jobs)
            stages[stage] = {"wall_s": wall, "jobs_at_once": jobs, "trace_wall_s": [p["wall_s"] for p in per]}
            stages[stage]["peak_rss_mb"] = [p["peak_rss_mb"] for p in per]
            if stage == "binning":
                reports = [json.loads((out / "bin" / BIN_REPORT).read_text()) for out in outs]
                stages[stage]["peak_rss_mb_per_rank"] = [r["peak_rss_mb_per_rank"] for r in reports]
                stages[stage]["phase_s"] = [r["seconds"] for r in reports]
        page = Path(tmp) / "page"
        wall, per = run_jobs(
            [
                [
                    *GPUVAR,
                    "findings",
                    "--combine",
                    *(str(o / EXPLAIN_FINDINGS / FINDINGS_RECORD) for o in outs),
                    "-o",
                    str(page),
                ]
            ],
            [Path(tmp) / "page.log"],
            1,
        )
        stages["page"] = {"wall_s": wall, "peak_rss_mb": [per[0]["peak_rss_mb"]]}
        total = time.perf_counter() - t_all
        records = [json.loads((o / EXPLAIN_FINDINGS / FINDINGS_RECORD).read_text())["datasets"][0] for o in outs]
        kernels = [
            json.loads((o / EXPLAIN_INGEST / INGEST_REPORT).read_text())["tables"]["kernels"]["rows_written"]
            for o in outs
        ]
        page_ok = (page / FINDINGS_PAGE).is_file()
    launches = sum(kernels)
    result = {
        "bench": "paper-scale",
        "to": "findings",
        "traces": len(traces),
        "rows_per_trace": args.rows,
        "ranks_per_trace": args.ranks,
        "jobs": args.jobs,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(load, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "wall_s": round(total, 3),
        "launches": launches,
        "launches_per_s": round(launches / total),
        "stages": stages,
        "peak_rss_mb_max": {name: max(s["peak_rss_mb"]) for name, s in stages.items()},
        "findings_per_trace": [len(r.get("findings", [])) for r in records],
        "page_written": page_ok,
        "generate_s": generate_s,
        "data": [str(p) for p in traces],
        "paper": paper,
    }
    print(json.dumps(result, sort_keys=True))
    return 0
