"""Write a synthetic trace as an Nsight Compute CSV (long "details" or wide `--page raw` layout).

The file looks like the real `ncu --csv` exports (§2 of the shared field guide ../shared/GUIDE.md, outside the
repo): UTF-8 BOM, CRLF, every field quoted, numbers with thousands separators ("53,261,312"), sizes as
"(256, 1, 1)", section "Command line profiler metrics";
the long layout also has the two `==PROF==` lines ncu prints before the CSV. Units are ncu's base units
(as with `--print-units base`), so the values round-trip exactly. Launches come from `synth.generate`.

Planted structure of the ncu dataset (on top of synth's, see its docstring):
  * grid_x -> dram__bytes_read.sum (+): bytes read = threads launched x a kernel-specific bytes/thread,
    times (1 + Exp(0.1)) noise; dram__bytes_write.sum grows with grid_x the same way (uniform noise).
  * dram__bytes_read.sum -> gpu__time_duration.sum (+): the kernel duration is synth's duration (which
    already has grid_x (+), grid_y (-) and the stall counter (+)) plus bytes read / DRAM_BYTES_PER_NS.
  * smsp__pcsamp_warps_issue_stalled_long_scoreboard (+): synth's memory-stall counter (tcp_pending_stall,
    which grows with grid_x) under the ncu name for warps stalled waiting on memory.
  * sm__cycles_elapsed.avg = duration x SM_CLOCK_GHZ (a child of duration, not a cause).
  * the other counters (L1 sectors, L2 hit rate, instructions, launch sizes, registers, shared memory)
    follow the launch configuration with independent noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuvar.demo import synth
from gpuvar.errors import GpuvarError
from gpuvar.output import replacing

IDENTITY_HEADER = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
LONG_HEADER = IDENTITY_HEADER + ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
SECTION = "Command line profiler metrics"
PROCESS_NAME = "gpuvar_demo"
HOST_NAME = "127.0.0.1"
COMPUTE_CAPABILITY = "9.0"
DRAM_BYTES_PER_NS = 600.0  # ~600 GB/s effective
SM_CLOCK_GHZ = 1.755
STALL_METRIC = "smsp__pcsamp_warps_issue_stalled_long_scoreboard"
# per synth kernel: (DRAM bytes read / thread, bytes written / thread, L1 sectors per 32 B read,
#                    L2 hit rate %, instructions per warp)
KERNEL_TRAFFIC = [
    (32.0, 4.0, 2.0, 72.0, 2400),
    (8.0, 4.0, 1.0, 35.0, 40),
    (8.0, 4.0, 1.5, 55.0, 300),
    (4.0, 0.05, 1.0, 30.0, 180),
    (8.0, 4.0, 1.2, 60.0, 420),
    (4.0, 4.0, 4.0, 20.0, 60),
]
# metric name -> unit, in the order ncu lists them (alphabetical)
METRICS = {
    "dram__bytes_read.sum": "byte",
    "dram__bytes_write.sum": "byte",
    "gpu__time_duration.sum": "ns",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "sector",
    "launch__block_size": "",
    "launch__grid_size": "",
    "launch__registers_per_thread": "register/thread",
    "launch__shared_mem_per_block_dynamic": "byte/block",
    "launch__shared_mem_per_block_static": "byte/block",
    "lts__t_sector_hit_rate.pct": "%",
    "sm__cycles_elapsed.avg": "cycle",
    STALL_METRIC: "",
    "smsp__inst_executed.sum": "inst",
}


def _rng(seed: int, variant: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, variant, chunk, 0x6E6375]))


def metric_values(k: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The metric arrays of one chunk of synth kernels (planted structure in the module docstring)."""
    n = len(k["launch_id"])
    traffic = np.array(KERNEL_TRAFFIC)[k["kernel_index"]]
    blocks = k["grid_x"] * k["grid_y"] * k["grid_z"]
    threads_per_block = k["block_x"] * k["block_y"] * k["block_z"]
    threads = (blocks * threads_per_block).astype(np.float64)
    read = np.round(threads * traffic[:, 0] * (1.0 + rng.exponential(0.1, n))).astype(np.int64)
    write = np.round(threads * traffic[:, 1] * (1.0 + rng.uniform(0.0, 0.05, n))).astype(np.int64)
    duration = k["duration"] + np.round(read / DRAM_BYTES_PER_NS).astype(np.int64)
    hit = np.clip(traffic[:, 3] + rng.uniform(-5.0, 5.0, n), 0.0, 100.0)
    return {
        "dram__bytes_read.sum": read,
        "dram__bytes_write.sum": write,
        "gpu__time_duration.sum": duration,
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": np.round(read / 32.0 * traffic[:, 2]).astype(np.int64),
        "launch__block_size": threads_per_block,
        "launch__grid_size": blocks,
        "launch__registers_per_thread": k["registers_per_thread"],
        "launch__shared_mem_per_block_dynamic": k["dynamic_shared_memory"],
        "launch__shared_mem_per_block_static": k["static_shared_memory"],
        "lts__t_sector_hit_rate.pct": np.round(hit, 2),
        "sm__cycles_elapsed.avg": np.round(duration * SM_CLOCK_GHZ * (1.0 + rng.uniform(0.0, 0.01, n)), 2),
        STALL_METRIC: k["tcp_pending_stall"],
        "smsp__inst_executed.sum": (np.ceil(threads / 32.0) * traffic[:, 4]).astype(np.int64),
    }


def _formatted(values: np.ndarray) -> list[str]:
    """ncu number formatting: thousands separators, two decimals for non-integral metrics."""
    if values.dtype.kind in "iu":
        return [f"{v:,}" for v in values.tolist()]
    return [f"{v:,.2f}" for v in values.tolist()]


def _q(text: str) -> str:
    return '"' + str(text).replace('"', '""') + '"'


def _row(fields) -> str:
    return ",".join(_q(f) for f in fields) + "\r\n"


def _identity_prefixes(k: dict[str, np.ndarray], pid: int) -> list[str]:
    """The quoted identity fields of each launch, ending with a comma."""
    names = [_q(name) for name in synth.kernel_names()[0]]
    fixed = f'"{pid}",{_q(PROCESS_NAME)},{_q(HOST_NAME)}'
    cols = [
        k[c].tolist()
        for c in (
            "launch_id",
            "kernel_index",
            "stream_id",
            "device_id",
            "block_x",
            "block_y",
            "block_z",
            "grid_x",
            "grid_y",
            "grid_z",
        )
    ]
    return [
        f'"{lid}",{fixed},{names[ki]},"1","{st}","({bx}, {by}, {bz})","({gx}, {gy}, {gz})","{dev}",'
        f'"{COMPUTE_CAPABILITY}",'
        for lid, ki, st, dev, bx, by, bz, gx, gy, gz in zip(*cols)
    ]


def _long_lines(prefixes: list[str], metrics: dict[str, list[str]]) -> list[str]:
    tails = {name: f"{_q(SECTION)},{_q(name)},{_q(unit)}," for name, unit in METRICS.items()}
    return [f'{prefix}{tails[name]}"{metrics[name][i]}"\r\n' for i, prefix in enumerate(prefixes) for name in METRICS]


def _wide_lines(prefixes: list[str], metrics: dict[str, list[str]]) -> list[str]:
    values = list(zip(*(metrics[name] for name in METRICS)))
    return [prefix + ",".join(f'"{v}"' for v in row) + "\r\n" for prefix, row in zip(prefixes, values)]


def write_ncu_demo(path, launches: int, seed: int, variant: int = 0, layout: str = "long") -> dict:
    """Write `launches` synthetic kernel launches as an ncu CSV at `path`; returns what was written.

    Deterministic in (launches, seed, variant); the long and wide layouts carry identical values. Written to
    a temporary file and renamed, so an interrupted run leaves no partial CSV behind.
    """
    if layout not in ("long", "wide"):
        raise GpuvarError(f"ncu demo layout must be 'long' or 'wide', got {layout!r}")
    if launches <= 0:
        raise GpuvarError(f"ncu demo launches must be positive, got {launches}")
    path = Path(path)
    pid = 40_000 + (seed * 7 + variant) % 20_000
    data_rows = 0
    with replacing(path) as tmp:
        with open(tmp, "w", encoding="utf-8-sig", newline="") as fh:
            if layout == "long":
                fh.write(f"==PROF== Connected to process {pid} (/opt/gpuvar/bin/{PROCESS_NAME})\r\n")
                fh.write(f"==PROF== Disconnected from process {pid}\r\n")
                fh.write(_row(LONG_HEADER))
            else:
                fh.write(_row(IDENTITY_HEADER + tuple(METRICS)))
                fh.write(_row(("",) * len(IDENTITY_HEADER) + tuple(METRICS.values())))
            for index, chunk in enumerate(synth.generate(launches, seed, variant)):
                k = chunk.kernels
                metrics = {name: _formatted(v) for name, v in metric_values(k, _rng(seed, variant, index)).items()}
                prefixes = _identity_prefixes(k, pid)
                lines = _long_lines(prefixes, metrics) if layout == "long" else _wide_lines(prefixes, metrics)
                fh.writelines(lines)
                data_rows += len(lines)
    return {
        "path": str(path),
        "format": "ncu-csv",
        "layout": layout,
        "kernels": launches,
        "csv_rows": data_rows,
        "seed": seed,
        "variant": variant,
    }
