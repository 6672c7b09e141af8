"""A synthetic multi-rank job through the pipeline, rank by rank: per stage wall time, peak RSS and the launches
each process held; one JSON.

The job (gpuvar.demo.planted_scale, seeded): --ranks PyTorch profiler traces of --launches-per-rank launches,
with a planted straggler (more data per step) and a planted size cause (a size per step that sets the add
kernels' grid and every GEMM's duration). Generated once per (ranks, launches, seed) into --data-dir and reused.
The stages, each as the workflow runs it for a `merge: true` dataset, with --workers processes (default: the
CPUs):
  ingest    one `gpuvar ingest` per rank file (gpuvar.ingest.ingest), the files dealt to --workers processes
            (the workflow's ingest_rank/normalize_rank: a job per file); the Kineto reader's own worker processes
            are off (GPUVAR_KINETO_WORKERS=0): the ranks already fill the cores;
  merge     `gpuvar ingest-merge` of every rank's folder into one dataset (the workflow's merge_ranks), in one
            process: a k-way merge of the ranks' files (gpuvar.ingest.merge_rows), its scratch level's merges
            two at a time (threads) when --workers allows, as the rule's 2 threads; the stages below read the
            rank folders, as they did before the merge was bounded;
  binning   `mpiexec -n W gpuvar bin` over every rank's kernels.parquet, one table on one global timeline
            (kernel_variability, 10 ms bins, top 20 and 20 random bins, the workflow's defaults);
  ranks     `mpiexec -n W gpuvar ranks` over the per-rank ingest folders (gpuvar.ranks.job);
  findings  `gpuvar findings` per rank folder (--findings-ranks of them: all by default), dealt to W processes.
Per process: peak RSS (ru_maxrss; the ingest processes' children too) and the launch rows it held at once
(`rows_held`: kernels + copies of the largest rank it read; the merge's most rows held at once, and the co-running
keys it held beside them; a binning rank's most rows held at once, bin.json's rows_held_per_rank). `one_process_held_all` says
whether any process held every launch. The truth: the straggler named by `gpuvar ranks`, and per analysed rank
whether the add and GEMM groups' findings are explained by a size driver. The load average before and after
is reported: on a shared machine it says how much of the wall time was the machine's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from gpuvar.errors import GpuvarError
from gpuvar.layout import (
    BIN_REPORT,
    EXPLAIN_FINDINGS,
    EXPLAIN_INGEST,
    EXPLAIN_RANKS,
    FINDINGS_RECORD,
    KERNELS_TABLE,
    RANKS_RECORD,
)

SIZE_OPS = ("aten::add", "aten::mm")  # the planted size cause: their durations follow the step's size


def configure_scale(p):
    p.add_argument("--ranks", type=int, default=8, help="ranks of the job (default: %(default)s)")
    p.add_argument("--launches-per-rank", type=int, default=5000, help="launches per rank (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="job seed (default: %(default)s)")
    p.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="processes per stage (default: the CPUs, %(default)s)"
    )
    p.add_argument(
        "--findings-ranks",
        type=int,
        default=0,
        help="ranks analysed by `gpuvar findings`: 0 = all (default); k = the straggler and k-1 others evenly spaced",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpuvar-bench-scale",
        help="cache of generated jobs (default: %(default)s)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the stages' outputs in this folder")


def _rss_mb(who) -> float:
    import resource

    return round(resource.getrusage(who).ru_maxrss / 1024.0, 1)


def _generate_part(folder: str, ranks: int, launches: int, seed: int, which: list[int]) -> None:
    from gpuvar.demo.planted_scale import write_scale_job

    write_scale_job(folder, ranks, launches, seed, which=which)


def generate(folder: Path, ranks: int, launches: int, seed: int, workers: int) -> tuple[dict, float]:
    """The job's traces and truth.json, written by `workers` processes (cached: reused when truth.json exists)."""
    from gpuvar.demo.planted_scale import TRUTH, write_scale_job

    if (folder / TRUTH).is_file():
        return json.loads((folder / TRUTH).read_text()), 0.0
    t0 = time.perf_counter()
    blocks = [list(range(ranks))[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for done in [pool.submit(_generate_part, str(folder), ranks, launches, seed, b) for b in blocks if b]:
            done.result()
    truth = write_scale_job(folder, ranks, launches, seed, which=[])  # truth.json last: the cache is complete
    return truth, round(time.perf_counter() - t0, 3)


def _ingest_part(items: list[tuple[str, str]]) -> dict:
    """One ingest process: its rank files one after the other."""
    from gpuvar.ingest import ingest

    held = read = 0
    for trace, out in items:
        report = ingest(trace, out)
        rows = sum(t.get("rows_written", 0) for t in report["tables"].values())
        held, read = max(held, rows), read + rows
    return {
        "ranks": len(items),
        "rows_held": held,
        "rows_read": read,
        "peak_rss_mb": _rss_mb(0),  # RUSAGE_SELF
        "children_peak_rss_mb": _rss_mb(-1),  # RUSAGE_CHILDREN
    }


def _findings_part(items: list[tuple[str, str, str]]) -> dict:
    """One findings process: `gpuvar findings` of its rank folders one after the other."""
    import contextlib
    import io

    import pyarrow.parquet as pq

    from gpuvar.cli import main

    held = read = 0
    for folder, out, name in items:
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["findings", folder, "-o", out, "--name", name])
        if code:
            raise GpuvarError(f"gpuvar findings {folder} failed (exit {code})")
        rows = pq.read_metadata(Path(folder) / KERNELS_TABLE).num_rows
        held, read = max(held, rows), read + rows
    return {"ranks": len(items), "rows_held": held, "rows_read": read, "peak_rss_mb": _rss_mb(0)}


def _merge_part(items: list[tuple[list[str], str, int]]) -> dict:
    """The merge process: `gpuvar ingest-merge --jobs J` of the rank folders (the workflow's merge_ranks, which
    takes 2 threads)."""
    from gpuvar.ingest.merge import merge

    (folders, out, jobs), held = items[0], {}
    report = merge(folders, out, stats=held, jobs=jobs)
    tables = report["tables"]
    return {
        "ranks": len(folders),
        "rows_held": max(t["rows_held"] for t in held.values()),
        "corun_keys_held": max(t["corun_keys_held"] for t in held.values()),
        "rows_read": sum(t["rows_read"] for t in tables.values()),
        "balanced": all(t["balanced"] for t in tables.values()),
        "peak_rss_mb": _rss_mb(0),
    }


def _pool(function, blocks: list[list], workers: int) -> list[dict]:
    """function(block) in `workers` fresh processes (spawned: each one's peak RSS is its own)."""
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return [f.result() for f in [pool.submit(function, b) for b in blocks if b]]


def _mpi(args: list[str], workers: int) -> subprocess.CompletedProcess:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    cmd = [str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", str(workers), sys.executable, "-m", "gpuvar.cli"]
    proc = subprocess.run(cmd + args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GpuvarError(f"gpuvar {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc


def findings_ranks(ranks: int, straggler: int, count: int) -> list[int]:
    """Every rank (count 0 or >= ranks), else the straggler and count-1 others evenly spaced."""
    if count <= 0 or count >= ranks:
        return list(range(ranks))
    others = [r for r in range(ranks) if r != straggler]
    step = len(others) / (count - 1) if count > 1 else 1
    return sorted({straggler, *(others[int(i * step)] for i in range(count - 1))})


def size_explained(findings_dir: Path) -> dict[str, bool]:
    """Per planted size op: is its finding explained, first driver of the size kind?"""
    record = json.loads((findings_dir / FINDINGS_RECORD).read_text())["datasets"][0]
    by_group = {f["group"]: f for f in record["findings"]}
    out = {}
    for op in SIZE_OPS:
        f = by_group.get(op)
        out[op] = bool(
            f and f["verdict"]["verdict"] == "explained" and f["drivers"] and f["drivers"][0]["kind"] == "size"
        )
    return out


def run_scale(args) -> int:
    from gpuvar.demo.planted_scale import trace_name

    for name in ("ranks", "launches_per_rank", "workers"):
        if getattr(args, name) <= 0:
            raise GpuvarError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.ranks < 2:
        raise GpuvarError(f"--ranks must be at least 2, got {args.ranks}")
    w = args.workers
    job = args.data_dir / f"ranks{args.ranks}-launches{args.launches_per_rank}-seed{args.seed}"
    truth, generate_s = generate(job, args.ranks, args.launches_per_rank, args.seed, w)
    total = args.ranks * truth["launches_per_rank"]
    load_before = os.getloadavg()[0]
    keep = args.keep
    with tempfile.TemporaryDirectory(prefix="gpuvar-bench-scale-") as tmp:
        out = Path(keep) if keep else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        folders = [out / EXPLAIN_INGEST / f"rank{r}" for r in range(args.ranks)]
        stages = {}

        def timed(name: str, run) -> dict:
            t0 = time.perf_counter()
            record = run()
            wall = time.perf_counter() - t0
            record = {"wall_s": round(wall, 3), **record}
            launches = record.pop("launches", total)
            record["launches"] = launches
            record["launches_per_s"] = round(launches / wall) if wall > 0 else None
            stages[name] = record
            return record

        def ingest() -> dict:
            os.environ["GPUVAR_KINETO_WORKERS"] = "0"  # the ranks fill the cores; no reader processes besides
            items = [(str(job / trace_name(r)), str(f)) for r, f in enumerate(folders)]
            return {"processes": _pool(_ingest_part, [items[i::w] for i in range(w)], w)}

        def merging() -> dict:
            processes = _pool(_merge_part, [[([str(f) for f in folders], str(out / "merged"), min(w, 2))]], 1)
            return {"processes": processes, "launches": processes[0]["rows_read"]}

        def binning() -> dict:
            bins = out / "bin"
            files = [str(f / KERNELS_TABLE) for f in folders]
            _mpi(
                ["bin", *files, "--bin-width", "10ms", "--top-k", "20", "--sample-bins", "20", "--output", str(bins)], w
            )
            report = json.loads((bins / BIN_REPORT).read_text())
            held = report["rows_held_per_rank"]  # a batch, a bin, a round's rows: not its share (rows_in_per_rank)
            processes = [
                {"rank": i, "rows_held": h, "rows_read": n, "peak_rss_mb": rss}
                for i, (h, n, rss) in enumerate(zip(held, report["rows_in_per_rank"], report["peak_rss_mb_per_rank"]))
            ]
            kernels = report["rows_in"]
            return {"processes": processes, "launches": kernels, "phase_s": report["seconds"]}

        def ranks() -> dict:
            proc = _mpi(["ranks", *map(str, folders), "-o", str(out / "ranks")], w)
            record = json.loads(proc.stdout.strip().splitlines()[-1])
            return {"processes": record["processes"], "findings": record["findings"][:1]}

        straggler_named = None
        analysed: list[int] = []

        def findings() -> dict:
            nonlocal analysed
            analysed = findings_ranks(args.ranks, straggler_named, args.findings_ranks)
            items = [(str(folders[r]), str(out / EXPLAIN_FINDINGS / f"rank{r}"), f"rank{r}") for r in analysed]
            processes = _pool(_findings_part, [items[i::w] for i in range(w)], w)
            kernels = sum(p["rows_read"] for p in processes)
            return {"processes": processes, "ranks_analysed": len(analysed), "launches": kernels}

        t_all = time.perf_counter()
        timed("ingest", ingest)
        timed("merge", merging)
        timed("binning", binning)
        timed("ranks", ranks)
        ranks_record = json.loads((out / EXPLAIN_RANKS / RANKS_RECORD).read_text())
        straggler_named = ranks_record["straggler"]
        gemm_sites = [
            s for s in ranks_record.get("call_sites_across_ranks", []) if s["call_site"].startswith("aten::mm")
        ]
        timed("findings", findings)
        total_wall = time.perf_counter() - t_all
        explained = {r: size_explained(out / EXPLAIN_FINDINGS / f"rank{r}") for r in analysed}
    held = max(p["rows_held"] for s in stages.values() for p in s["processes"])
    result = {
        "bench": "scale",
        "ranks": args.ranks,
        "launches_per_rank": truth["launches_per_rank"],
        "launches": total,
        "steps": truth["steps"],
        "workers": w,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "generate_s": generate_s,
        "data": str(job),
        "trace_bytes": sum((job / trace_name(r)).stat().st_size for r in range(args.ranks)),
        "wall_s": round(total_wall, 3),
        "launches_per_s": round(total / total_wall),
        "stages": stages,
        "rows_held_max": held,
        "one_process_held_all": held >= total,
        "peak_rss_mb_max": {
            name: max(max(p["peak_rss_mb"], p.get("children_peak_rss_mb", 0)) for p in s["processes"])
            for name, s in stages.items()
        },
        "truth": {
            "straggler": truth["straggler"],
            "straggler_named": straggler_named,
            "straggler_found": straggler_named == truth["straggler"],
            "size_ops": list(SIZE_OPS),
            "ranks_analysed": len(explained),
            "ranks_with_size_driver_explained": {op: sum(e[op] for e in explained.values()) for op in SIZE_OPS},
            "straggler_size_driver_explained": explained.get(truth["straggler"]),
            # the call sites across ranks (gpuvar.ranks.sites): the straggler's GEMMs, on more data, are slower
            "gemm_sites_shown": len(gemm_sites),
            "gemm_sites_slowest_on_straggler": sum(s["slowest_rank"] == truth["straggler"] for s in gemm_sites),
            # ... and the rank analysis says so in one finding, at any number of ranks
            "sites_finding_names_straggler": any(
                f.startswith(f"rank {truth['straggler']} is the slowest rank at ") for f in ranks_record["findings"]
            ),
        },
    }
    print(json.dumps(result, sort_keys=True))
    return 0
