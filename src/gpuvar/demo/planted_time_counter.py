"""Planted truth: time-like counters that track the duration by construction, beside the real causes (issue 34).

One kernel, a row gather `out[i] = table[index[i]]`, launched `launches` times on the Nsight Compute details page
(`ncu --import R --csv`, 2025.3 layout: gpuvar.demo.ncu_export). Per launch:
  rows      drawn uniformly from 64..4096 (step 64): grid_x = rows (one block of 256 threads per row of 1024 floats);
  misses    the share of gathered rows not in L2, uniform on [0, 1) (the index's randomness, not recorded);
  DRAM bytes read = 4096 bytes x rows x (0.25 + 0.75 misses): follows the grid AND the misses;
  duration  = 2.0 us + 1.1 ns x rows + bytes read / 2.4 bytes per ns, times (1 + 2 % right-skewed noise).
So the causes of the duration are grid_x (+, directly and through the bytes) and dram__bytes_read.sum (+, carrying
the misses), both recorded: grid_x in the launch configuration, the bytes in the "Command line profiler metrics"
section (`--metrics dram__bytes_read.sum,...`). The time-like counters are computed FROM the duration, as the
hardware does, and must never be a cause: Elapsed Cycles = duration x SM clock, Duration itself, SM Active Cycles,
SM/DRAM Frequency, DRAM Throughput = DRAM active cycles / DRAM elapsed cycles (bytes over duration), Compute (SM)
Throughput, and the Workload Distribution cycles; Average DRAM Active Cycles is the bytes divided by a constant, so
it is a near-duplicate of the real cause while being "active cycles" (refused by name, never merged with the bytes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuvar.demo.ncu_export import COMMAND_LINE_SECTION, Launch, write_details
from gpuvar.errors import GpuvarError

KERNEL = "void gather_rows_kernel<float, 256>(const float *, const long *, float *, long)"
BLOCK = (256, 1, 1)
COLS = 1024
SMS = 132
SM_CLOCK_HZ = 1.96e9
DRAM_CLOCK_HZ = 2.617e9
DRAM_BYTES_PER_ACTIVE_CYCLE = 1290.0
BYTES_PER_NS = 2.4
BASE_NS, NS_PER_ROW = 2000.0, 1.1
NOISE_CV = 0.02
SOL = "GPU Speed Of Light Throughput"
LAUNCH = "Launch Statistics"
DISTRIBUTION = "GPU and Memory Workload Distribution"
CAUSES = {"grid_x": 1, "dram__bytes_read.sum": 1}  # the planted causes and their signs
TIME_LIKE = (
    "Elapsed Cycles",
    "Duration",
    "SM Active Cycles",
    "SM Frequency",
    "DRAM Frequency",
    "DRAM Throughput",
    "Memory Throughput",
    "Compute (SM) Throughput",
    "Average DRAM Active Cycles",
    "Total DRAM Elapsed Cycles",
    "Average SM Active Cycles",
    "Total SM Elapsed Cycles",
)


def simulate(launches: int, seed: int) -> pd.DataFrame:
    """One row per launch: rows, misses, the true duration and every counter (base units), seeded."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7C0, 0x11]))
    rows = rng.integers(1, 65, launches) * 64
    misses = rng.random(launches)
    read = np.round(4.0 * COLS * rows * (0.25 + 0.75 * misses))
    mean = BASE_NS + NS_PER_ROW * rows + read / BYTES_PER_NS
    noise = (rng.gamma(2.0, 1.0, launches) - 2.0) / np.sqrt(2.0)  # zero mean, sd 1, right-skewed
    duration = np.round(mean * (1.0 + NOISE_CV * noise))
    sm_hz = SM_CLOCK_HZ * rng.uniform(0.99, 1.01, launches)
    dram_hz = DRAM_CLOCK_HZ * rng.uniform(0.998, 1.002, launches)
    seconds = duration / 1e9
    elapsed = np.round(seconds * sm_hz)
    dram_elapsed = seconds * dram_hz
    dram_active = np.minimum(read / DRAM_BYTES_PER_ACTIVE_CYCLE, dram_elapsed)
    inst = rows * 8 * 36.0  # 8 warps per block, 36 instructions each: fixed by the grid
    return pd.DataFrame(
        {
            "launch_id": np.arange(launches, dtype=np.int64),
            "rows": rows,
            "misses": misses,
            "duration_ns": duration,
            "dram__bytes_read.sum": read,
            "dram__bytes_write.sum": 4.0 * COLS * rows,
            "smsp__inst_executed.sum": inst,
            "elapsed": elapsed,
            "active": elapsed * 0.9 * rng.uniform(0.98, 1.02, launches),
            "sm_hz": sm_hz,
            "dram_hz": dram_hz,
            "dram_elapsed": dram_elapsed,
            "dram_active": dram_active,
            "dram_pct": 100.0 * dram_active / dram_elapsed,
            "sm_pct": np.minimum(100.0 * inst / (elapsed * SMS * 4.0), 100.0),
            "achieved": 100.0 * 0.8 * rng.uniform(0.97, 1.03, launches),
        }
    )


def _launch(row: dict) -> Launch:
    rows = int(row["rows"])
    launch = Launch(int(row["launch_id"]), KERNEL, (rows, 1, 1), BLOCK)
    launch.details = [
        (SOL, "DRAM Frequency", "hz", round(row["dram_hz"], -7)),
        (SOL, "SM Frequency", "hz", round(row["sm_hz"], -7)),
        (SOL, "Elapsed Cycles", "cycle", row["elapsed"]),
        (SOL, "Memory Throughput", "%", round(row["dram_pct"], 2)),
        (SOL, "DRAM Throughput", "%", round(row["dram_pct"], 2)),
        (SOL, "Duration", "ns", round(row["duration_ns"], -1)),
        (SOL, "SM Active Cycles", "cycle", round(row["active"], 2)),
        (SOL, "Compute (SM) Throughput", "%", round(row["sm_pct"], 2)),
        (LAUNCH, "Block Size", "", BLOCK[0]),
        (LAUNCH, "Grid Size", "", rows),
        (LAUNCH, "Registers Per Thread", "register/thread", 30),
        (LAUNCH, "Threads", "thread", rows * BLOCK[0]),
        (LAUNCH, "Waves Per SM", "", round(rows / (SMS * 8), 2)),
        ("Occupancy", "Theoretical Occupancy", "%", 100),
        ("Occupancy", "Achieved Occupancy", "%", round(row["achieved"], 2)),
        (DISTRIBUTION, "Average DRAM Active Cycles", "cycle", round(row["dram_active"], 2)),
        (DISTRIBUTION, "Total DRAM Elapsed Cycles", "cycle", round(row["dram_elapsed"] * 40)),
        (DISTRIBUTION, "Average SM Active Cycles", "cycle", round(row["active"], 2)),
        (DISTRIBUTION, "Total SM Elapsed Cycles", "cycle", round(row["elapsed"] * SMS)),
        (COMMAND_LINE_SECTION, "dram__bytes_read.sum", "byte", row["dram__bytes_read.sum"]),
        (COMMAND_LINE_SECTION, "dram__bytes_write.sum", "byte", row["dram__bytes_write.sum"]),
        (COMMAND_LINE_SECTION, "smsp__inst_executed.sum", "inst", row["smsp__inst_executed.sum"]),
    ]
    launch.rules = [("SpeedOfLight", "SOLBottleneck", "OPT", "Memory is more heavily utilized than Compute.", "", "")]
    return launch


def write_time_counter_trace(path, launches: int = 400, seed: int = 0) -> dict:
    """Write the planted details page at `path`; returns {path, layout, launches, causes, time_like, truth}
    (truth: launch_id, rows, misses, duration_ns and the work counters, one row per launch)."""
    if launches <= 0:
        raise GpuvarError(f"launches must be positive, got {launches}")
    table = simulate(launches, seed)
    write_details(path, [_launch(row) for row in table.to_dict("records")])
    truth = table[["launch_id", "rows", "misses", "duration_ns", "dram__bytes_read.sum", "smsp__inst_executed.sum"]]
    return {
        "path": str(path),
        "format": "ncu-csv",
        "layout": "details",
        "launches": launches,
        "causes": dict(CAUSES),
        "time_like": list(TIME_LIKE),
        "truth": truth,
    }
