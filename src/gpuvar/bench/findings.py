"""`gpuvar findings` on a canonical demo trace of --rows launches: wall time, peak RSS and the rows it held.

The findings stage runs in a child process (`python -m gpuvar.bench.findings INGEST OUTPUT`: analyse_dataset and
write_dataset, as `gpuvar findings` runs them), so its peak resident memory (its own high-water mark, interpreter
and imports included) is the stage's, not this process's or the data generator's. The child reports the most
launches it held at once for one group
(`held_rows_max_per_group`: every launch of a group up to the fit's cap, its stratified sample above it;
gpuvar.findings.sample) and how many groups were sampled. The trace is generated once per (rows, seed) into
--data-dir (the binning benchmark's cache: the same files) and reused; --ingest runs an existing ingest folder
instead (e.g. `gpuvar bench ingest`'s Nsight Systems output). Memory and time are measured here, never asserted
in a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def configure_findings(p):
    p.add_argument(
        "--rows", type=int, default=1_000_000, help="kernel launches in the demo trace (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="demo trace seed (default: %(default)s)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpuvar-bench-binning",
        help="cache of generated traces, one folder per rows+seed (default: %(default)s)",
    )
    p.add_argument("--ingest", type=Path, default=None, help="an existing ingest folder instead of the demo trace")


def run_findings(args) -> int:
    from gpuvar.errors import GpuvarError

    generate_s = None
    if args.ingest is not None:
        folder = args.ingest
    else:
        from gpuvar.bench.binning import demo_trace

        if args.rows <= 0:
            raise GpuvarError(f"--rows must be positive, got {args.rows}")
        path, generate_s = demo_trace(args.data_dir, args.rows, args.seed)
        folder = path.parent
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gpuvar-bench-findings-") as tmp:
        t0 = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "gpuvar.bench.findings", str(folder), str(Path(tmp) / "out")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = child.communicate()
        wall = time.perf_counter() - t0
    code = child.returncode
    if code:
        raise GpuvarError(f"the findings child failed (exit {code}): {err.strip().splitlines()[-1:]}")
    stats = json.loads(out.strip().splitlines()[-1])
    peak_kb = stats.pop("peak_rss_kb")
    print(
        json.dumps(
            {
                "bench": "findings",
                "ingest": str(folder),
                "rows": stats.pop("launches"),
                "wall_s": round(wall, 2),
                "analyse_s": stats.pop("analyse_s"),
                "write_s": stats.pop("write_s"),
                "peak_rss_mb": round(peak_kb / 1024, 1),
                **stats,
                "generate_s": generate_s,
                "cpu_count": os.cpu_count(),
                "load_avg_1min_before": round(load, 2),
                "load_avg_1min_after": round(os.getloadavg()[0], 2),
            },
            indent=2,
        )
    )
    return 0


def own_peak_rss_kb() -> int:
    """This process's peak resident memory since it was started by exec: VmHWM, the high-water mark of its own
    address space. Why not ru_maxrss: Linux keeps it across fork and exec, so a child started by a parent that
    had just generated a 1 M-launch trace reported the parent's 1.8 GB. ru_maxrss where /proc is not there."""
    import resource

    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(folder: str, out: str) -> None:
    """Run the findings stage as `gpuvar findings` does and print its numbers as one JSON line."""
    from gpuvar.findings.run import analyse_dataset, write_dataset

    t0 = time.perf_counter()
    record, table, kept = analyse_dataset("bench", Path(folder))
    t1 = time.perf_counter()
    write_dataset(record, table, Path(out), kept)
    t2 = time.perf_counter()
    sampled = [f for f in (*record["findings"],) if f.get("sample")]
    print(
        json.dumps(
            {
                "launches": record["launches"],
                "groups": record["groups"],
                "groups_sampled_on_the_page": len(sampled),
                "held_rows_max_per_group": getattr(kept, "held_rows_max", None),
                "groups_sampled": getattr(kept, "groups_sampled", None),
                "fit_cap": getattr(kept, "fit_cap", None),
                "analyse_s": round(t1 - t0, 2),
                "write_s": round(t2 - t1, 2),
                "peak_rss_kb": own_peak_rss_kb(),
            }
        )
    )


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
