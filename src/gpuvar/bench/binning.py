"""Binning benchmark: gpuvar's MPI job vs polars, DuckDB SQL and pandas on one canonical demo trace; one JSON.

All compute kernel_variability (duration - per-kernel-name mean) per fixed-width bin of start time: count,
min, max, mean, sample var, std and linear-interpolated quartiles. They are timed in the same run (the
machines drift by +-30 %, so compare ratios) and checked against each other: counts exact, every other
statistic within 1e-9 relative to the bin's magnitude m = max(|min|, |max|) (m**2 for var), since float sums
in another order differ in the last bits. polars (the fastest dataframe engine we know for this) also does
gpuvar's whole job: lazy scan, group_by on the bin with the sorted hint, then the top-k bins by variance and
their rows (ID columns + target, row groups pruned by start statistics), in a subprocess with
POLARS_MAX_THREADS = --ranks; its top-k bins and row count must equal gpuvar's. gpuvar is timed as the user
runs it (`mpiexec -n R gpuvar bin`, start-up included) doing the same job (--sample-bins 0: polars draws no
random bins; --sample-bins N adds the workflow's random-bin rows to gpuvar's side); the others from their
query's start, imports excluded (polars_import_s: what importing polars took in its subprocess).
gpuvar, polars and DuckDB run --repeat times, interleaved (the first run after an idle spell is up to 2x slower on
a shared VM); their fastest runs are compared, every run is listed (gpuvar_runs_s, polars_runs_s, duckdb_runs_s).
DuckDB runs in one process with --ranks threads, nothing written: duckdb_s is its statistics query alone; duckdb_job_s
the same job as gpuvar's and polars' (the statistics, the top-k bins, their rows fetched as Arrow), whose top-k
bins and row count must equal gpuvar's too (speedup_vs_duckdb, speedup_vs_duckdb_job).
gpuvar_fixed_s: gpuvar's wall time minus its phases (each phase's slowest rank, bin.json), i.e. mpiexec, the
interpreters, imports, MPI start and exit: the fixed cost of a run. gpuvar_startup_s: the slowest rank's part of it
before the job began (bin.json's startup_s_per_rank): before_mpi (interpreter, imports, options) and mpi_init.
machine_2proc_speedup: what 2 CPU-bound processes get over 1 at that moment (2.0 on idle cores), the ceiling
of a 1 -> 2 rank speedup on a shared machine.
The trace is generated once per (rows, seed) into --data-dir and reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuvar.errors import GpuvarError
from gpuvar.layout import BIN_REPORT, BINS_TABLE, KERNELS_TABLE

STATS = ["count", "min", "max", "mean", "var", "std", "q25", "median", "q75"]
TOLERANCE = 1e-9


def configure_binning(p):
    p.add_argument(
        "--rows", type=int, default=10_000_000, help="kernel launches in the demo trace (default: %(default)s)"
    )
    p.add_argument(
        "--ranks", type=int, default=2, help="MPI ranks for gpuvar, threads for DuckDB (default: %(default)s)"
    )
    p.add_argument("--bin-width", default="10ms", help="bin width (default: %(default)s)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpuvar-bench-binning",
        help="cache of generated traces, one folder per rows+seed (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help="demo trace seed (default: %(default)s)")
    p.add_argument(
        "--workers-per-rank",
        type=int,
        default=1,
        help="gpuvar threads per rank for the statistics (default: %(default)s)",
    )
    p.add_argument(
        "--engines", default="gpuvar,polars,duckdb,pandas", help="comma-separated subset to run (default: %(default)s)"
    )
    p.add_argument("--top-k", type=int, default=20, help="top-k bins (gpuvar and polars) (default: %(default)s)")
    p.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of gpuvar, polars and DuckDB, interleaved (the fastest of each is reported) (default: %(default)s)",
    )
    p.add_argument(
        "--sample-bins",
        type=int,
        default=0,
        help="gpuvar's random bins with rows (0: none, as polars; the workflow: top-k) (default: %(default)s)",
    )


def demo_trace(data_dir: Path, rows: int, seed: int, variant: int = 0) -> tuple[Path, float | None]:
    """kernels.parquet of a cached demo trace (generated if absent); seconds spent generating (None if cached).
    `variant` shifts the kernel mix (the demo's rank0..rank3 datasets are variants 0..3)."""
    import pyarrow.parquet as pq

    from gpuvar.canonical_io import ROW_GROUP_ROWS
    from gpuvar.demo.canonical_writer import write_canonical_demo

    folder = Path(data_dir) / (f"rows{rows}-seed{seed}" + (f"-variant{variant}" if variant else ""))
    path = folder / KERNELS_TABLE
    try:
        meta = pq.ParquetFile(path).metadata  # reused only in the current layout (its row groups)
        if meta.num_rows == rows and meta.row_group(0).num_rows == min(rows, ROW_GROUP_ROWS):
            return path, None
    except (OSError, ValueError):
        pass
    t0 = time.perf_counter()
    write_canonical_demo(folder, rows, seed, variant=variant)
    return path, round(time.perf_counter() - t0, 2)


# The polars reference, run as `python -c` with POLARS_MAX_THREADS set (it is read once, at import).
_POLARS = r"""
import json, sys, time
t_import = time.perf_counter()
import polars as pl
t_import = time.perf_counter() - t_import
path, width, k, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ID = json.loads(sys.argv[5])
t0 = time.perf_counter()
lf = pl.scan_parquet(path).select("kernel_name", "start", "duration")
v = pl.col("v")
stats_q = (
    lf.select(((pl.col("start") - pl.col("start").min()) // width).alias("bin"),
              (pl.col("duration") - pl.col("duration").mean().over("kernel_name")).alias("v"))
    .with_columns(pl.col("bin").set_sorted())
    .group_by("bin", maintain_order=True)
    .agg(pl.len().alias("count"), v.min().alias("min"), v.max().alias("max"), v.mean().alias("mean"),
         v.var().alias("var"), v.std().alias("std"), v.quantile(0.25, "linear").alias("q25"),
         v.quantile(0.5, "linear").alias("median"), v.quantile(0.75, "linear").alias("q75"))
)
means_q = lf.group_by("kernel_name").agg(pl.col("duration").mean().alias("mu"))
stats, means, tmin = pl.collect_all([stats_q, means_q, lf.select(pl.col("start").min())])
t_stats = time.perf_counter() - t0
tmin = tmin.item()
ranked = (stats.with_columns(pl.col("var").fill_nan(None))
          .sort(["var", "bin"], descending=[True, False], nulls_last=True))
top = sorted(ranked.head(k)["bin"].to_list())
in_top = pl.any_horizontal([pl.col("start").is_between(tmin + b * width, tmin + (b + 1) * width, closed="left")
                            for b in top])
rows = (pl.scan_parquet(path).select(ID).filter(in_top)
        .join(means.lazy(), on="kernel_name", how="left", maintain_order="left")
        .with_columns((pl.col("duration") - pl.col("mu")).alias("kernel_variability"),
                      ((pl.col("start") - tmin) // width).alias("bin"))
        .drop("mu").collect())
seconds = time.perf_counter() - t0
stats.write_parquet(out)
print(json.dumps({"seconds": seconds, "stats_s": t_stats, "import_s": t_import, "top_k_bins": top,
                  "top_k_rows": rows.height}))
"""


def bin_command(
    path: Path, ranks: int, width: str, workers: int, out: Path, top_k: int = 20, sample_bins: int = 0
) -> list[str]:
    """`mpiexec -n R gpuvar bin` of the trace with the benchmark's options (--features none: the target's
    statistics only)."""
    mpiexec = Path(sys.executable).with_name("mpiexec")
    return [
        str(mpiexec if mpiexec.exists() else "mpiexec"),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "gpuvar.cli",
        "bin",
        str(path),
        "--bin-width",
        width,
        "--features",
        "none",
        "--workers-per-rank",
        str(workers),
        "--top-k",
        str(top_k),
        "--sample-bins",
        str(sample_bins),
        "--output",
        str(out),
    ]


def compile_package() -> None:
    """Write gpuvar's bytecode (__pycache__) before gpuvar is timed, as `pip install` does: an environment with
    PYTHONDONTWRITEBYTECODE set (this VM's) otherwise compiles its ~30 modules in every rank of every run (~0.05 s
    per rank), which no installed copy does. A module edited later is compiled again (its source is newer)."""
    import compileall

    import gpuvar

    compileall.compile_dir(Path(gpuvar.__file__).parent, quiet=1)


def run_gpuvar(
    path: Path, ranks: int, width: str, workers: int, out: Path, top_k: int = 20, sample_bins: int = 0
) -> tuple[float, dict, dict]:
    """Wall seconds of `mpiexec -n R gpuvar bin`, its bin.json, and its per-bin statistics."""
    import pyarrow.parquet as pq

    cmd = bin_command(path, ranks, width, workers, out, top_k, sample_bins)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise GpuvarError(f"gpuvar bin failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    report = json.loads((out / BIN_REPORT).read_text())
    t = pq.read_table(out / BINS_TABLE, columns=["bin", *STATS])
    return wall, report, {c: t.column(c).to_numpy() for c in ["bin", *STATS]}


def _startup(per_rank: list[dict]) -> dict:
    """The slowest rank's start-up, by part (None where a rank could not measure it)."""
    out = {}
    for part in ("before_mpi", "mpi_init"):
        values = [r.get(part) for r in per_rank if r.get(part) is not None]
        out[part] = max(values) if values else None
    return out


def run_polars(path: Path, threads: int, width_ns: int, top_k: int, tmp: Path) -> tuple[dict, dict]:
    """polars' timings and top-k (seconds, stats_s, top_k_bins, top_k_rows), and its per-bin statistics."""
    import pyarrow.parquet as pq

    from gpuvar.binning.plan import ID_COLUMNS

    out = tmp / "polars-stats.parquet"
    cmd = [sys.executable, "-c", _POLARS, str(path), str(width_ns), str(top_k), str(out), json.dumps(ID_COLUMNS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "POLARS_MAX_THREADS": str(threads)})
    if proc.returncode != 0:
        raise GpuvarError(f"polars reference failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    t = pq.read_table(out)
    stats = {c: t.column(c).to_numpy(zero_copy_only=False) for c in ["bin", *STATS]}
    stats["bin"] = stats["bin"].astype(np.int64)
    stats = {c: np.asarray(v, dtype=np.float64) if c not in ("bin", "count") else v for c, v in stats.items()}
    return result, stats


_SPIN = r"""
import time, numpy as np
a = np.random.default_rng(0).random(1_000_000)
t = time.perf_counter()
for _ in range(25):
    np.sort(a)
print(time.perf_counter() - t)
"""


def machine_2proc_speedup() -> float:
    """What 2 CPU-bound processes get over 1 on this machine right now (2.0 on 2 idle cores): a fixed numpy
    workload timed alone, then twice at once. On a shared machine it bounds any 1 -> 2 rank speedup."""

    def spin(n: int) -> list[float]:
        procs = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True) for _ in range(n)]
        return [float(p.communicate()[0]) for p in procs]

    one = spin(1)[0]
    return round(2 * one / max(spin(2)), 2)


def run_duckdb(path: Path, threads: int, width_ns: int, top_k: int) -> tuple[dict, dict]:
    """DuckDB's timings (import and connection excluded) and per-bin statistics, in its fastest form we know: the
    three quartiles as one list-valued quantile_cont (one sort of a bin's values instead of three: 20 M rows,
    2 threads, 1.19-1.26 s instead of 1.55-1.81 s with three quantile_cont calls).

    `stats_s`: the statistics query alone. `seconds`: the job gpuvar and polars do, the statistics, then the top_k
    bins by variance (ties by bin, empty variance last, as polars ranks them) and their rows with the identity
    columns, each row's kernel_variability and bin, fetched as Arrow; the rows are selected by start-time ranges
    with the trace's first start as a literal, so DuckDB can skip row groups by their statistics."""
    import duckdb

    from gpuvar.binning.plan import ID_COLUMNS

    con = duckdb.connect()
    con.execute(f"SET threads={int(threads)}")
    f = str(path).replace("'", "''")
    sql = f"""
    WITH m AS (SELECT kernel_name, avg(duration) AS mu FROM read_parquet('{f}') GROUP BY kernel_name),
         t0 AS (SELECT min(start) AS t0 FROM read_parquet('{f}')),
         t AS (SELECT (k.start - t0.t0) // {width_ns} AS bin, k.duration - m.mu AS v
               FROM read_parquet('{f}') k JOIN m USING (kernel_name), t0),
         g AS (SELECT bin, count(*) AS count, min(v) AS min, max(v) AS max, avg(v) AS mean, var_samp(v) AS var,
                      stddev_samp(v) AS std, quantile_cont(v, [0.25, 0.5, 0.75]) AS q
               FROM t GROUP BY bin)
    SELECT bin, count, min, max, mean, var, std, q[1] AS q25, q[2] AS median, q[3] AS q75,
           (SELECT t0 FROM t0) AS t0 FROM g ORDER BY bin"""
    t0 = time.perf_counter()
    res = con.execute(sql).fetchnumpy()
    stats_s = time.perf_counter() - t0
    var = _floats(res["var"])
    bins = np.asarray(res["bin"], dtype=np.int64)
    ranked = np.lexsort((bins, np.where(np.isnan(var), np.inf, -var)))
    top = sorted(int(b) for b in bins[ranked[:top_k]])
    first = int(res["t0"][0]) if len(bins) else 0
    where = " OR ".join(f"(k.start >= {first + b * width_ns} AND k.start < {first + (b + 1) * width_ns})" for b in top)
    columns = ", ".join(f'k."{c}"' for c in ID_COLUMNS)
    relation = con.sql(f"""
    WITH m AS (SELECT kernel_name, avg(duration) AS mu FROM read_parquet('{f}') GROUP BY kernel_name)
    SELECT {columns}, k.duration - m.mu AS kernel_variability, (k.start - {first}) // {width_ns} AS bin
    FROM read_parquet('{f}') k LEFT JOIN m USING (kernel_name) WHERE {where or "false"}""")
    rows = relation.to_arrow_table() if hasattr(relation, "to_arrow_table") else relation.arrow()  # (2.0's name)
    seconds = time.perf_counter() - t0
    stats = {c: _floats(res[c]) if c != "bin" else np.asarray(res[c], np.int64) for c in res if c != "t0"}
    return {"seconds": seconds, "stats_s": stats_s, "top_k_bins": top, "top_k_rows": rows.num_rows}, stats


def _floats(column) -> np.ndarray:
    """A fetchnumpy column as float64, NaN where SQL gave NULL (np.asarray would read a masked NULL as 0.0: the
    variance of a one-launch bin)."""
    return np.ma.filled(np.ma.asarray(column).astype(np.float64), np.nan)


def run_pandas(path: Path, width_ns: int) -> tuple[float, dict]:
    import pandas as pd

    t0 = time.perf_counter()
    k = pd.read_parquet(path, columns=["kernel_name", "start", "duration"])
    v = k["duration"] - k.groupby("kernel_name", observed=True)["duration"].transform("mean")
    b = (k["start"] - k["start"].min()) // width_ns
    g = v.groupby(b.to_numpy())
    ref = g.agg(["count", "min", "max", "mean", "var", "std"])
    ref["q25"], ref["median"], ref["q75"] = g.quantile(0.25), g.quantile(0.5), g.quantile(0.75)
    seconds = time.perf_counter() - t0
    return seconds, {"bin": ref.index.to_numpy(np.int64), **{c: ref[c].to_numpy(np.float64) for c in STATS}}


def max_rel_diff(a: dict, b: dict) -> dict:
    """Per-statistic max |a-b| / bin magnitude (squared for var); bins must be identical (else inf)."""
    if len(a["bin"]) != len(b["bin"]) or not np.array_equal(a["bin"], b["bin"]):
        return {"bins": float("inf")}
    scale = np.maximum(np.abs(a["min"]), np.abs(a["max"])).astype(np.float64)
    scale[scale == 0] = 1.0
    out = {"count": float(np.abs(np.asarray(a["count"], float) - np.asarray(b["count"], float)).max(initial=0))}
    for s in STATS[1:]:
        x, y = np.asarray(a[s], float), np.asarray(b[s], float)
        both_nan = np.isnan(x) & np.isnan(y)
        d = np.where(both_nan, 0.0, np.abs(x - y) / (scale * scale if s == "var" else scale))
        out[s] = float(np.nan_to_num(d, nan=np.inf).max(initial=0))
    return out


def run_binning(args) -> int:
    from gpuvar.binning.partition import bin_width

    width, unit = bin_width(args.bin_width)
    if unit != "ns":
        raise GpuvarError("bench binning needs a time bin width (e.g. 10ms)")
    engines = {e.strip() for e in args.engines.split(",") if e.strip()}
    path, gen_s = demo_trace(args.data_dir, args.rows, args.seed)
    result: dict = {
        "rows": args.rows,
        "ranks": args.ranks,
        "bin_width_ns": width,
        "data": str(path),
        "generate_s": gen_s,
        "cpus": os.cpu_count(),
        "machine_2proc_speedup": machine_2proc_speedup(),
    }
    if "gpuvar" in engines:
        compile_package()
    outputs = {}
    report = None
    runs: dict[str, list[float]] = {"gpuvar": [], "polars": [], "duckdb": [], "duckdb_job": []}
    best: dict[str, tuple] = {}
    for _ in range(max(1, args.repeat)):  # interleaved; each engine's fastest run is reported
        if "gpuvar" in engines:
            with tempfile.TemporaryDirectory(prefix="gpuvar-bench-") as tmp:
                got = run_gpuvar(
                    path, args.ranks, args.bin_width, args.workers_per_rank, Path(tmp), args.top_k, args.sample_bins
                )
            runs["gpuvar"].append(round(got[0], 3))
            if "gpuvar" not in best or got[0] < best["gpuvar"][0]:
                best["gpuvar"] = got
        if "polars" in engines:
            with tempfile.TemporaryDirectory(prefix="gpuvar-bench-") as tmp:
                got = run_polars(path, args.ranks, width, args.top_k, Path(tmp))
            runs["polars"].append(round(got[0]["seconds"], 3))
            if "polars" not in best or got[0]["seconds"] < best["polars"][0]["seconds"]:
                best["polars"] = got
        if "duckdb" in engines:
            got = run_duckdb(path, args.ranks, width, args.top_k)
            runs["duckdb"].append(round(got[0]["stats_s"], 3))
            runs["duckdb_job"].append(round(got[0]["seconds"], 3))
            if "duckdb" not in best or got[0]["stats_s"] < best["duckdb"][0]["stats_s"]:
                best["duckdb"] = got
            if "duckdb_job" not in best or got[0]["seconds"] < best["duckdb_job"][0]["seconds"]:
                best["duckdb_job"] = got
    if "gpuvar" in best:
        wall, report, outputs["gpuvar"] = best["gpuvar"]
        result.update(
            gpuvar_s=round(wall, 3),
            gpuvar_runs_s=runs["gpuvar"],
            gpuvar_phase_s=report["seconds"],
            gpuvar_fixed_s=round(wall - sum(report["seconds"].values()), 3),
            gpuvar_startup_s=_startup(report["startup_s_per_rank"]),
            sample_bins=args.sample_bins,
            peak_rss_mb_per_rank=report["peak_rss_mb_per_rank"],
            rows_held_per_rank=report["rows_held_per_rank"],  # the most rows a rank held at once, not its share
            bins=report["non_empty_bins"],
            workers_per_rank=args.workers_per_rank,
        )
    if "polars" in best:
        ref, outputs["polars"] = best["polars"]
        result.update(
            polars_s=round(ref["seconds"], 3),
            polars_runs_s=runs["polars"],
            polars_stats_s=round(ref["stats_s"], 3),
            polars_import_s=round(ref["import_s"], 3),
            polars_threads=args.ranks,
        )
        if report is not None:
            result["polars_same_top_k"] = (
                ref["top_k_bins"] == report["top_k_bins"] and ref["top_k_rows"] == report["top_k_rows"]
            )
    if "duckdb" in best:
        ref, outputs["duckdb"] = best["duckdb"]
        job = best["duckdb_job"][0]
        result.update(
            duckdb_s=round(ref["stats_s"], 3),
            duckdb_runs_s=runs["duckdb"],
            duckdb_job_s=round(job["seconds"], 3),
            duckdb_job_runs_s=runs["duckdb_job"],
        )
        if report is not None:
            result["duckdb_same_top_k"] = (
                job["top_k_bins"] == report["top_k_bins"] and job["top_k_rows"] == report["top_k_rows"]
            )
    if "pandas" in engines:
        secs, outputs["pandas"] = run_pandas(path, width)
        result["pandas_s"] = round(secs, 3)
    if "gpuvar_s" in result and "polars_s" in result:
        result["gpuvar_over_polars"] = round(result["gpuvar_s"] / result["polars_s"], 2)
    if "gpuvar_s" in result and "duckdb_s" in result:
        result["speedup_vs_duckdb"] = round(result["duckdb_s"] / result["gpuvar_s"], 2)
        result["speedup_vs_duckdb_job"] = round(result["duckdb_job_s"] / result["gpuvar_s"], 2)
    if "gpuvar_s" in result and "pandas_s" in result:
        result["speedup_vs_pandas"] = round(result["pandas_s"] / result["gpuvar_s"], 2)
    names = sorted(outputs)
    diffs = {f"{a}_vs_{b}": max_rel_diff(outputs[a], outputs[b]) for i, a in enumerate(names) for b in names[i + 1 :]}
    result["max_rel_diff"] = diffs
    result["agree"] = all(d.get("count", 1) == 0 and max(d.values()) <= TOLERANCE for d in diffs.values()) and (
        result.get("polars_same_top_k", True) and result.get("duckdb_same_top_k", True)
    )
    print(json.dumps(result, sort_keys=True))
    return 0 if result["agree"] else 1
