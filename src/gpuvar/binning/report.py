"""The last phase of the binning job, on rank 0: the three tables and the bin.json report (row accounting, rows
without a target by reason, the chosen bins, phase seconds and peak RSS per rank)."""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpuvar.binning.plan import Plan, source_name
from gpuvar.binning.ranking import Ranking
from gpuvar.binning.selection import explain_selection
from gpuvar.canonical_io import write_canonical
from gpuvar.errors import StageError
from gpuvar.layout import BINS_TABLE, SAMPLE_ROWS, TOPK_ROWS

log = logging.getLogger("gpuvar.binning")


class Timer:
    """Seconds per phase, logged on rank 0."""

    def __init__(self, rank: int):
        self.rank = rank
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(now - self._t, 4)
        self._t = now
        if self.rank == 0:
            log.info("%s: %.3f s", phase, self.seconds[phase])


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc, to 10 ms; None elsewhere): see binning.job.world."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in clock ticks after boot
    except (OSError, ValueError, IndexError):
        return None
    return round(max(0.0, uptime - started), 2)


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


@dataclass(frozen=True)
class Gathered:
    """What rank 0 holds at the end, from every rank (lists in rank order)."""

    ranking: Ranking
    topk_rows: list[pa.Table]  # non-empty pieces only
    sample_rows: list[pa.Table]
    rows_in: list[int]
    reasons: list[dict[str, int]]
    rows_binned: int
    n_groups: int
    gmin: int
    n_bins: int
    seconds: list[dict[str, float]]
    rss: list[float]
    startup: list[dict[str, float | None]]
    held: list[int]  # most rows each rank held at once


def write_tables(plan: Plan, bins: pa.Table, topk_rows: list[pa.Table], sample_rows: list[pa.Table]) -> None:
    """bins.parquet, topk_rows.parquet, sample_rows.parquet into the output folder."""
    opts, out = plan.opts, Path(plan.opts.output)
    meta = {
        "target": opts.target,
        "group": opts.group,
        "axis": plan.axis,
        "bin_width": plan.width,
        "bin_unit": plan.unit,
        "top_k": opts.top_k,
        "source": source_name(opts.kernels),
    }
    write_canonical(bins, out / BINS_TABLE, meta)
    write_canonical(_rows_table(plan, topk_rows), out / TOPK_ROWS, meta)
    write_canonical(_rows_table(plan, sample_rows), out / SAMPLE_ROWS, meta | {"selection": "random bins"})


def _rows_table(plan: Plan, rows: list[pa.Table]) -> pa.Table:
    if rows:
        return pa.concat_tables(rows).combine_chunks()
    empty = [pa.nulls(0, pa.float64()), pa.nulls(0, pa.int64())]
    return pa.Table.from_arrays(empty, names=[plan.opts.target, "bin"])


def build_report(plan: Plan, got: Gathered) -> dict:
    """bin.json's content; a StageError when rows in != rows binned + rows without a target."""
    opts = plan.opts
    dropped: dict[str, int] = {}
    for r in got.reasons:
        for reason, n in r.items():
            dropped[reason] = dropped.get(reason, 0) + n
    topk, sample = got.ranking.topk, got.ranking.sample
    report = {
        "kernels": [str(k) for k in opts.kernels] if isinstance(opts.kernels, list) else str(opts.kernels),
        "memcpy": str(opts.memcpy) if opts.memcpy else None,
        "target": opts.target,
        "group": opts.group,
        "link": opts.link if plan.link else None,
        "axis": plan.axis,
        "bin_width": plan.width,
        "bin_unit": plan.unit,
        "timeline_start": got.gmin if got.n_bins else None,
        "rows_in": int(sum(got.rows_in)),
        "rows_in_per_rank": [int(n) for n in got.rows_in],  # each rank's share as read
        "rows_binned": got.rows_binned,
        "rows_without_target": dict(sorted(dropped.items())),
        "groups": got.n_groups,
        "bins": int(got.n_bins),
        "non_empty_bins": int(got.ranking.table.num_rows),
        "top_k": opts.top_k,
        "top_k_bins": [int(x) for x in topk],
        "top_k_rows": int(sum(r.num_rows for r in got.topk_rows)),
        "random_sample_bins": [int(x) for x in sample],
        "sample_seed": opts.sample_seed,
        "random_sample_rows": int(sum(r.num_rows for r in got.sample_rows)),
        "stats_features": list(plan.features),
        "variance": "sample variance (ddof=1)",
        "ranks": len(got.rows_in),
        "workers_per_rank": opts.workers_per_rank,
        "seconds": {p: max(s.get(p, 0.0) for s in got.seconds) for p in got.seconds[0]},
        "seconds_per_rank": got.seconds,
        "startup_s_per_rank": got.startup,
        "peak_rss_mb_per_rank": got.rss,
        # the most kernel rows each rank held at once in its passes (a batch, an unfinished bin, a round's rows;
        # not the chosen rows rank 0 gathers, top_k_rows and random_sample_rows): bounded, not its share
        "rows_held_per_rank": [int(n) for n in got.held],
    }
    if report["rows_in"] != report["rows_binned"] + sum(dropped.values()):
        raise StageError(f"row accounting broken: {report['rows_in']} in != binned + without target")
    report.update(explain_selection(report))  # why no row has the target; "0 rows linked" warning
    return report
