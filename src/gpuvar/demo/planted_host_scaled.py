"""A big, regular Nsight Systems export with CUDA API calls and emit_nvtx ranges, for timing and memory
measurements of the ingest of such captures (`gpuvar bench ingest --api-calls`, docs/performance.md).

Why apart from gpuvar.demo.planted_host_pieces: that export holds every host-side trap in a few thousand launches;
this one holds none, but is written fast enough for tens of millions of launches (numpy, chunks of ~1 M kernels,
journalling and syncing off), in the same tables, schema and row orders.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from gpuvar.demo.nsys_writer import mangled_name
from gpuvar.demo.planted_host_pieces import CORRELATION_BASE, RUNTIME_BLOCK, string_ids
from gpuvar.demo.planted_host_tables import (
    LAUNCH,
    MEMCPY_ASYNC,
    PID_A,
    TID_BACKWARD_A,
    TID_MAIN_A,
    flushed_in_blocks,
    global_id,
    write_common,
)
from gpuvar.output import replacing

# --- the scaled export -----------------------------------------------------------------------------------------
# One iteration of the scaled loop: ten kernels, five copies, one API call each, twelve emit_nvtx ranges (ns from
# the iteration's start). The main thread runs the forward and three copies while the backward thread runs its
# three ops (the threads interleave); elementwise_kernel is launched outside any op. Calls are far enough apart
# that the stream never queues: kernel rows in GPU start order are in call order.
SCALED_KERNELS = (
    "gemm_tile64_kernel",
    "gemm_tile128_kernel",
    "bias_act_kernel",
    "relu_kernel",
    "elementwise_kernel",
    "gemm_dgrad_kernel",
    "gemm_wgrad_kernel",
    "accumulate_grad_kernel",
)
GEMM = -1  # the forward GEMM: gemm_tile64_kernel or gemm_tile128_kernel by the iteration's size
# (offset, thread: 0 main / 1 backward, kernel name or 'HtoD'/'DtoH' for a copy), in time order
SCALED_CALLS = (
    (3_000, 0, GEMM),
    (10_000, 0, "bias_act_kernel"),
    (16_500, 0, "relu_kernel"),
    (23_500, 0, "HtoD"),
    (34_000, 0, GEMM),
    (41_000, 0, "bias_act_kernel"),
    (47_500, 0, "relu_kernel"),
    (53_500, 0, "elementwise_kernel"),
    (57_500, 1, "gemm_dgrad_kernel"),
    (60_500, 0, "HtoD"),
    (65_500, 1, "gemm_wgrad_kernel"),
    (68_500, 0, "DtoH"),
    (71_000, 0, "DtoH"),
    (73_500, 1, "accumulate_grad_kernel"),
    (76_000, 0, "DtoH"),
)
# (start, end, thread, op name, has a sequence number), in start order
SCALED_RANGES = (
    (0, 14_000, 0, "aten::linear", True),
    (1_000, 9_000, 0, "aten::addmm", True),
    (15_000, 21_000, 0, "aten::relu", True),
    (22_000, 30_000, 0, "aten::copy_", False),
    (31_000, 45_000, 0, "aten::linear", True),
    (32_000, 40_000, 0, "aten::addmm", True),
    (46_000, 52_000, 0, "aten::relu", True),
    (56_000, 63_000, 1, "aten::mm", False),
    (58_000, 66_000, 0, "aten::copy_", False),
    (64_000, 71_000, 1, "aten::mm", False),
    (67_000, 79_000, 0, "aten::copy_", False),
    (72_000, 78_000, 1, "aten::add_", False),
)
SCALED_ITERATION_NS = 82_000
SCALED_CHUNK_ITERATIONS = 100_000  # ~1 M kernel rows per chunk


def write_scaled_host_export(path: Path, launches: int, seed: int = 0) -> Path:
    """Write a big export of the scaled loop above: `launches` kernels (the last iteration cut where they reach the
    count), half as many copies, one CUDA API call per kernel or copy, 1.2 NVTX ranges per kernel; process A's
    two threads, no step markers (steps come from the repeating pattern). Written in chunks of ~1 M kernels with
    journalling and syncing off; rows in the orders nsys writes them (module docstring). Same seed, same bytes."""
    if launches < 1:
        raise ValueError("launches must be at least 1")
    path = Path(path)
    ids = string_ids("ncclAllReduce")
    with replacing(path) as tmp:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            con.execute("BEGIN")
            write_common(con, ids, path, f"scaled launches={launches} seed={seed}")
            _write_scaled_rows(con, ids, launches, np.random.default_rng(seed))
            con.execute("COMMIT")
        finally:
            con.close()
    return path


def _write_scaled_rows(con: sqlite3.Connection, ids: dict[str, int], launches: int, rng: np.random.Generator) -> None:
    per_iteration = sum(1 for _, _, what in SCALED_CALLS if what not in ("HtoD", "DtoH"))
    iterations = -(-launches // per_iteration)
    call_offset = np.array([c[0] for c in SCALED_CALLS], np.int64)
    call_thread = np.array([global_id(PID_A, (TID_MAIN_A, TID_BACKWARD_A)[c[1]]) for c in SCALED_CALLS], np.int64)
    is_copy = np.array([c[2] in ("HtoD", "DtoH") for c in SCALED_CALLS])
    copy_kind = np.array([1 if c[2] == "HtoD" else 2 for c in SCALED_CALLS], np.int64)[is_copy]
    fixed_name = np.array([ids.get(c[2], 0) if c[2] != GEMM else 0 for c in SCALED_CALLS], np.int64)[~is_copy]
    gemm = np.array([c[2] == GEMM for c in SCALED_CALLS])[~is_copy]
    api = np.where(is_copy, ids[MEMCPY_ASYNC], ids[LAUNCH]).astype(np.int64)
    r_start, r_end, r_thread, r_name, r_seq = (np.array(col) for col in zip(*SCALED_RANGES))
    r_gtid = np.array([global_id(PID_A, (TID_MAIN_A, TID_BACKWARD_A)[t]) for t in r_thread], np.int64)
    tile = np.array([ids["gemm_tile64_kernel"], ids["gemm_tile128_kernel"]], np.int64)
    mangled = {ids[n]: ids[mangled_name(n)] for n in SCALED_KERNELS}
    mangle = np.zeros(max(ids.values()) + 1, np.int64)
    mangle[list(mangled)] = list(mangled.values())
    gpid = global_id(PID_A)
    k_sql = (
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, 1, 0, 7, ?3, "
        f"{gpid}, ?4, ?4, ?5, 0, 0, 32, ?6, 1, 1, 256, 1, 1, 0, 0, 0, 0, ?3, 32768, NULL, 0)"
    )
    m_sql = (
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?1, ?2, 0, 1, 0, 51, ?3, "
        f"{gpid}, ?4, ?5, NULL, ?5, 3 - ?5, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )  # srcKind/dstKind: pinned (1) -> device (2) for HtoD (copyKind 1), device -> pinned for DtoH (2)
    r_sql = "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)"
    n_sql = (
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES "
        "(?1, ?2, 59, ?3 || coalesce(', seq = ' || ?4, '') || ', op_id = ' || ?5, ?6, 0)"
    )
    names = [str(n) for n in r_name]
    t0, corr0, written = 1_000_000, CORRELATION_BASE, 0
    for first in range(0, iterations, SCALED_CHUNK_ITERATIONS):
        n = min(SCALED_CHUNK_ITERATIONS, iterations - first)
        length = SCALED_ITERATION_NS + rng.integers(0, 3_000, n)
        start_of = t0 + np.concatenate([[0], np.cumsum(length)[:-1]])
        t0 = int(start_of[-1] + length[-1])
        size = rng.integers(1, 9, n)
        # API calls, in time order (iterations do not overlap, the pattern is in time order)
        call_start = (start_of[:, None] + call_offset[None, :] + rng.integers(0, 400, (n, len(call_offset)))).ravel()
        call_end = call_start + 1_000 + rng.integers(0, 2_000, call_start.shape)
        corr = corr0 + np.arange(len(call_start), dtype=np.int64)
        corr0 = int(corr[-1]) + 1
        thread = np.tile(call_thread, n)
        order = flushed_in_blocks(thread, call_start, call_end, 4 * RUNTIME_BLOCK)
        con.executemany(
            r_sql,
            zip(
                call_start[order].tolist(),
                call_end[order].tolist(),
                thread[order].tolist(),
                corr[order].tolist(),
                np.tile(api, n)[order].tolist(),
            ),
        )
        # kernels: 2.5 us after their call, 0.6-1.6 us long (the stream never queues)
        launch = np.tile(~is_copy, n)
        k_start = call_start[launch] + 2_500
        name = np.where(gemm[None, :], tile[(size >= 5).astype(int)][:, None], fixed_name[None, :]).ravel()
        grid = np.where(gemm[None, :], 128 * size[:, None], 64).ravel()
        keep = min(len(k_start), launches - written)
        k_start, name, grid = k_start[:keep], name[:keep], grid[:keep]
        k_end = k_start + 600 + rng.integers(0, 1_000, keep)
        con.executemany(
            k_sql,
            zip(
                k_start.tolist(),
                k_end.tolist(),
                corr[launch][:keep].tolist(),
                name.tolist(),
                mangle[name].tolist(),
                grid.tolist(),
            ),
        )
        written += keep
        m_start = call_start[~launch] + 2_000
        m_bytes = rng.integers(1 << 16, 1 << 22, len(m_start))
        con.executemany(
            m_sql,
            zip(
                m_start.tolist(),
                (m_start + 500 + m_bytes // 20_000).tolist(),
                corr[~launch].tolist(),
                m_bytes.tolist(),
                np.tile(copy_kind, n).tolist(),
            ),
        )
        # emit_nvtx ranges: op_id numbers every range, seq the forward ones
        op_id = 100 + (first + np.arange(n))[:, None] * len(r_start) + np.arange(len(r_start))[None, :]
        seq_count = np.cumsum(r_seq)
        seq = 10 + (first + np.arange(n))[:, None] * int(r_seq.sum()) + seq_count[None, :]
        seq_values = np.where(r_seq[None, :], seq, -1).ravel().tolist()
        con.executemany(
            n_sql,
            zip(
                (start_of[:, None] + r_start[None, :]).ravel().tolist(),
                (start_of[:, None] + r_end[None, :]).ravel().tolist(),
                names * n,
                [s if s >= 0 else None for s in seq_values],
                op_id.ravel().tolist(),
                np.tile(r_gtid, n).tolist(),
            ),
        )
