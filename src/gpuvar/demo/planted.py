"""Planted-truth traces for the causal traps, written in the real Nsight Systems and Nsight Compute formats.

Each trace carries a known answer, so tests can check that the causal stage finds it end to end (ingest ->
bin -> causal) and that it does not fall into the traps real traces set:

`traps` (kernel_variability; 4 kernels):
  * grid_x -> duration (+), inside every kernel.
  * near-duplicate decoy: nsys `localMemoryTotal` / ncu `dram__bytes_read.sum` = grid_x x const + small
    noise (corr >= 0.99 with grid_x) and NO effect of its own. Without merging, least squares splits grid_x's
    effect into two huge opposite ones.
  * categorical driver (nsys only): `cacheConfig` takes codes 1, 2, 3 (`codes` relabels them); only the
    middle code (2, before relabelling) lengthens the kernel. On the numeric code the effect is ~0.
  * decoy: nsys `localMemoryPerThread` (scratch_per_workitem) / ncu `smsp__inst_executed.sum`: random, no
    effect.
  * every-group driver: dynamic shared memory lengthens every kernel by the same amount per byte, while
    its level differs a lot between kernels (so the whole-trace rows only find it within kernels).
`selection` (kernel_variability; 1 kernel): grid_x and block_x independent, both drive the duration (+);
  launches are spaced so a 2 us bin holds two launches. Keeping the bins with the most variable durations
  keeps launches whose grid_x + block_x is extreme, which makes grid_x and block_x dependent in the kept
  rows: an edge between them there is induced by the selection (absent from a random sample of bins).
Noise is exponential (non-Gaussian), as LiNGAM needs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from gpuvar.demo import ncu_writer, nsys_writer
from gpuvar.output import replacing

KERNELS = (
    "void planted_gemm<float>(float const*, float*)",
    "planted_axpy(float*, float const*, int)",
    "void planted_norm<float>(float*, int)",
    "planted_scan(int*, int)",
)
BASE_NS = np.array([30_000.0, 8_000.0, 12_000.0, 20_000.0])
SMEM_LEVELS = (np.array([0, 4096]), np.array([16384, 20480]), np.array([32768, 36864]), np.array([49152, 53248]))
GRID_X_NS = 12.0  # per block
CACHE_MIDDLE_NS = 1_500.0  # cacheConfig's middle code
SMEM_NS = 0.35  # per byte of dynamic shared memory, in every kernel


def traps(n: int, seed: int, codes: tuple[int, int, int] = (1, 2, 3)) -> dict[str, np.ndarray]:
    """Canonical-named columns of the `traps` trace; `codes` relabels cacheConfig's levels (1, 2, 3)."""
    rng = np.random.default_rng([seed, 0x7A1])
    kid = rng.integers(0, len(KERNELS), n)
    grid_x = rng.integers(16, 512, n)
    level = rng.choice(3, n, p=[0.45, 0.2, 0.35])  # -> the relabelled codes; level 1 (the middle) is the rarest
    smem = np.choose(kid, [rng.choice(levels, n) for levels in SMEM_LEVELS])
    duration = (
        BASE_NS[kid] + GRID_X_NS * grid_x + CACHE_MIDDLE_NS * (level == 1) + SMEM_NS * smem + rng.exponential(600.0, n)
    )
    duration = np.round(duration).astype(np.int64)
    gap = rng.integers(2_000, 6_000, n)
    start = 1_000_000_000 + np.cumsum(duration + gap) - (duration[0] + gap[0] if n else 0)
    return {
        "kernel_index": kid,
        "start": start,
        "end": start + duration,
        "duration": duration,
        "grid_x": grid_x,
        "grid_y": np.ones(n, np.int64),
        "grid_z": np.ones(n, np.int64),
        "block_x": np.full(n, 256),
        "block_y": np.ones(n, np.int64),
        "block_z": np.ones(n, np.int64),
        "cache_config": np.asarray(codes)[level],
        "dynamic_shared_memory": smem,
        "near_duplicate": np.round(grid_x * 64 + rng.normal(0, 300, n)).astype(np.int64),
        "decoy": rng.integers(0, 4096, n),
    }


def selection(n: int, seed: int) -> dict[str, np.ndarray]:
    """Columns of the `selection` trace: one kernel, launches 1 us apart (two per 2 us bin)."""
    rng = np.random.default_rng([seed, 0x5E1])
    grid_x = rng.integers(1, 1024, n)
    block_x = rng.integers(1, 33, n) * 32
    duration = np.round(300 + 0.4 * grid_x + 12.0 * block_x + rng.exponential(60.0, n)).astype(np.int64)
    start = 1_000_000_000 + np.arange(n, dtype=np.int64) * 1_000
    return {
        "kernel_index": np.zeros(n, np.int64),
        "start": start,
        "end": start + np.minimum(duration, 990),
        "duration": np.minimum(duration, 990),
        "grid_x": grid_x,
        "grid_y": np.ones(n, np.int64),
        "grid_z": np.ones(n, np.int64),
        "block_x": block_x,
        "block_y": np.ones(n, np.int64),
        "block_z": np.ones(n, np.int64),
        "cache_config": np.zeros(n, np.int64),
        "dynamic_shared_memory": np.zeros(n, np.int64),
        "near_duplicate": np.zeros(n, np.int64),
        "decoy": np.zeros(n, np.int64),
    }


def write_nsys(path, cols: dict[str, np.ndarray]) -> Path:
    """An nsys SQLite export (kernel table, StringIds, enums) holding `cols`."""
    path = Path(path)
    with replacing(path) as tmp:
        strings, ids = [], []
        for name in KERNELS:
            base = len(strings) + 1
            short = name.split("(")[0].split("<")[0].split()[-1]
            strings += [(base, name), (base + 1, short), (base + 2, nsys_writer.mangled_name(short))]
            ids.append((base, base + 1, base + 2))
        name_ids = np.array(ids, dtype=np.int64)[cols["kernel_index"]]
        n = len(cols["start"])
        values = {
            "start": cols["start"],
            "end": cols["end"],
            "deviceId": np.zeros(n, np.int64),
            "streamId": np.full(n, 7),
            "correlationId": np.arange(n) * 2 + 1,
            "demangledName": name_ids[:, 0],
            "shortName": name_ids[:, 1],
            "mangledName": name_ids[:, 2],
            "registersPerThread": np.full(n, 32),
            "gridX": cols["grid_x"],
            "gridY": cols["grid_y"],
            "gridZ": cols["grid_z"],
            "blockX": cols["block_x"],
            "blockY": cols["block_y"],
            "blockZ": cols["block_z"],
            "staticSharedMemory": np.zeros(n, np.int64),
            "dynamicSharedMemory": cols["dynamic_shared_memory"],
            "localMemoryPerThread": cols["decoy"],
            "localMemoryTotal": cols["near_duplicate"],
            "cacheConfig": cols["cache_config"],
            "gridId": np.arange(n) + 1,
        }
        const = {
            "contextId": 1,
            "greenContextId": 0,
            "globalPid": 281_475_000_000_000,
            "launchType": 0,
            "sharedMemoryExecuted": 65536,
            "graphNodeId": None,
            "sharedMemoryLimitConfig": 0,
        }
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("BEGIN")
            for ddl in nsys_writer.SCHEMA:
                con.execute(ddl)
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
            con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", nsys_writer.MEMCPY_OPER)
            cols_sql = ", ".join("?" * len(nsys_writer.KERNEL_COLUMNS))
            rows = nsys_writer._zip_rows(nsys_writer.KERNEL_COLUMNS, values, const, n)
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({cols_sql})", rows)
            con.execute("COMMIT")
        finally:
            con.close()
    return path


def write_ncu(path, cols: dict[str, np.ndarray], seed: int) -> Path:
    """An Nsight Compute `--page raw` CSV (wide, units row) of the same launches; the decoy counters are
    `dram__bytes_read.sum` (near-duplicate of grid_x) and `smsp__inst_executed.sum` (independent)."""
    path = Path(path)
    metrics = {
        "dram__bytes_read.sum": ("byte", cols["near_duplicate"]),
        "gpu__time_duration.sum": ("ns", cols["duration"]),
        "launch__shared_mem_per_block_dynamic": ("byte/block", cols["dynamic_shared_memory"]),
        "smsp__inst_executed.sum": ("inst", cols["decoy"] * 1000 + 7),
    }
    n = len(cols["start"])
    header = ncu_writer.IDENTITY_HEADER + tuple(metrics)
    with replacing(path) as tmp:
        with open(tmp, "w", encoding="utf-8-sig", newline="") as fh:
            fh.write(ncu_writer._row(header))
            fh.write(ncu_writer._row(("",) * len(ncu_writer.IDENTITY_HEADER) + tuple(u for u, _ in metrics.values())))
            formatted = [ncu_writer._formatted(np.asarray(v)) for _, v in metrics.values()]
            for i in range(n):
                k = int(cols["kernel_index"][i])
                size = lambda p: f"({cols[p + '_x'][i]}, {cols[p + '_y'][i]}, {cols[p + '_z'][i]})"  # noqa: E731
                ident = (
                    i,
                    4242 + seed,
                    "planted",
                    "127.0.0.1",
                    KERNELS[k],
                    1,
                    7,
                    size("block"),
                    size("grid"),
                    0,
                    "9.0",
                )
                fh.write(ncu_writer._row(ident + tuple(f[i] for f in formatted)))
    return path
