"""Vectorised synthetic GPU trace with a documented, planted causal structure.

The trace is produced in chunks (each seeded from (seed, chunk index)) so 100 M rows never sit in memory at
once and any chunk size gives the same rows. Format writers (nsys SQLite, rocprof CSV, ncu CSV, canonical
Parquet) all consume these chunks, so every demo dataset carries the same ground truth:

Planted structure (per kernel launch j of kernel i, on one device, `STREAMS` streams):
  * grid_x  -> duration   positive: duration grows by `GRID_X_NS` ns per block (kernel-specific scale).
  * grid_y  -> duration   negative: each extra grid_y step shortens the kernel by `GRID_Y_NS` ns.
  * grid_x  -> tcp_pending_stall (memory stall cycles counter) -> duration   positive (AMD/ncu counters).
  * the copy issued just before the kernel on its stream drives memory_stall = |kernel duration - copy
    duration|: copy duration = bytes / bandwidth + latency, so bytes (+); device-to-device copies (copyKind
    8) run ~35x faster than host copies, so DtoD lowers the stall on average (-), yet carry a heavy
    exponential tail that makes the stalls of DtoD-linked kernels erratic.
  * contention windows: in ~15 % of windows of `WINDOW_LAUNCHES` consecutive launches (~200 ms of trace)
    the kernel noise is 4x larger, so some time bins are far more variable than others (what the top-k bin
    ranking must find). Windows follow the launch index, so a chunk never depends on earlier chunks' times:
    chunks are generated at t0 = 0 and shifted, in parallel.
Noise is non-Gaussian (exponential / uniform), as LiNGAM requires.

A `Change` (used by the planted comparison pair, gpuvar.demo.planted_pair) alters one kernel of a second run:
its durations are scaled (a slowdown) and, optionally, its grid_y driver is removed (mean-compensated, so the
slowdown stays the stated factor on average). `draw` gives a second run of the same distribution (same
contention windows, new random draws); draw 0 is the ordinary demo, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STREAMS = 4
WINDOW_LAUNCHES = 16_384
MAX_COPY_NS = 1_000_000
MAX_COPY_LEAD_NS = MAX_COPY_NS + 500  # a copy starts at most this long before its kernel
GRID_X_NS = 0.9
GRID_Y_NS = 1500.0
STALL_PER_BLOCK = 3.0
NS_PER_STALL_CYCLE = 0.4
COPY_KINDS = np.array([1, 2, 8])  # HtoD, DtoH, DtoD (CUDA enum codes)
COPY_KIND_P = np.array([0.5, 0.3, 0.2])
COPY_PROBABILITY = 0.5
DEFAULT_CHUNK_ROWS = 2_000_000

# (demangled name, short name, base duration ns, registers/thread, static smem, grid_x choices, block_x)
KERNELS = [
    (
        "void gemm_tile_kernel<float, 128>(float const*, float const*, float*, int, int, int)",
        "gemm_tile_kernel",
        40_000,
        96,
        16384,
        (64, 128, 256, 512),
        256,
    ),
    (
        "void elementwise_add_kernel<float>(float*, float const*, float const*, long)",
        "elementwise_add_kernel",
        6_000,
        16,
        0,
        (256, 512, 1024, 2048),
        256,
    ),
    (
        "void layer_norm_kernel<float>(float*, float const*, float const*, int)",
        "layer_norm_kernel",
        12_000,
        32,
        2048,
        (128, 256, 512),
        128,
    ),
    ("reduce_sum_kernel(float const*, float*, int)", "reduce_sum_kernel", 9_000, 24, 4096, (32, 64, 128, 256), 512),
    (
        "void softmax_kernel<float, 64>(float*, float const*, int)",
        "softmax_kernel",
        15_000,
        40,
        8192,
        (128, 256, 384),
        256,
    ),
    (
        "transpose_naive_kernel(float const*, float*, int, int)",
        "transpose_naive_kernel",
        20_000,
        20,
        0,
        (64, 128, 256),
        1024,
    ),
]
KERNEL_P = np.array([0.25, 0.25, 0.15, 0.15, 0.1, 0.1])


@dataclass(frozen=True)
class Change:
    """What a candidate run changes in one kernel (see the module docstring)."""

    kernel: int
    slowdown: float = 1.0
    drop_grid_y: bool = False


GRID_Y_P = np.array([0.6, 0.3, 0.1])
GRID_Y_MEAN_STEPS = float(GRID_Y_P @ np.array([0, 1, 3]))  # E[grid_y - 1]


@dataclass
class DemoChunk:
    """One chunk of kernels and of the copies issued just before some of them (canonical names, ns)."""

    kernels: dict[str, np.ndarray]
    memcpy: dict[str, np.ndarray]


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def _window_multiplier(seed: int, launch_id: np.ndarray) -> np.ndarray:
    """Noise multiplier of the contention window each launch falls in (same for any chunking)."""
    table = np.where(_rng(seed, 7_777).random(4096) < 0.15, 4.0, 1.0)
    return table[(launch_id // WINDOW_LAUNCHES) % table.size]


def chunk_bounds(rows: int, chunk_rows: int = DEFAULT_CHUNK_ROWS):
    """(index, first row, row count) of each chunk."""
    for index, first in enumerate(range(0, rows, chunk_rows)):
        yield index, first, min(chunk_rows, rows - first)


def make_chunk(
    seed: int,
    index: int,
    first: int,
    count: int,
    t0: int,
    variant: int = 0,
    draw: int = 0,
    change: Change | None = None,
) -> tuple[DemoChunk, int]:
    """Rows [first, first+count) of the trace starting at time t0; returns the chunk and the next t0.

    `variant` shifts the kernel mix and coefficients a little, so datasets of one demo (e.g. four MPI ranks)
    differ the way the paper's ranks do while keeping the planted signs.
    """
    rng = _rng(seed, variant, index, *((draw,) if draw else ()))
    k = len(KERNELS)
    kid = rng.choice(k, size=count, p=KERNEL_P)
    base = np.array([x[2] for x in KERNELS], dtype=np.float64)[kid]
    grid_choices = [np.array(x[5]) for x in KERNELS]
    pick = rng.random(count)
    grid_x = np.empty(count, dtype=np.int64)
    for i, choices in enumerate(grid_choices):
        m = kid == i
        grid_x[m] = choices[np.minimum((pick[m] * len(choices)).astype(np.int64), len(choices) - 1)]
    grid_y = rng.choice(np.array([1, 2, 4]), size=count, p=GRID_Y_P)
    block_x = np.array([x[6] for x in KERNELS], dtype=np.int64)[kid]
    registers = np.array([x[3] for x in KERNELS], dtype=np.int64)[kid]
    static_smem = np.array([x[4] for x in KERNELS], dtype=np.int64)[kid]
    dynamic_smem = rng.choice(np.array([0, 4096, 8192]), size=count, p=[0.7, 0.2, 0.1])
    stream = rng.integers(0, STREAMS, size=count) + 7  # nsys stream ids start above the default stream

    has_copy = rng.random(count) < COPY_PROBABILITY
    n_copy = int(has_copy.sum())
    copy_kind = rng.choice(COPY_KINDS, size=n_copy, p=COPY_KIND_P)
    copy_bytes = (rng.integers(1, 64, size=n_copy) * 65536).astype(np.int64)
    bandwidth = np.where(copy_kind == 8, 800.0, np.where(copy_kind == 1, 24.0, 22.0))  # bytes/ns
    copy_dur = copy_bytes / bandwidth + 2_000 + rng.exponential(1_500, n_copy)
    copy_dur += np.where(copy_kind == 8, rng.exponential(25_000, n_copy), 0.0)  # DtoD heavy tail
    copy_dur = np.minimum(np.round(copy_dur), MAX_COPY_NS).astype(np.int64)

    scale = 1.0 + 0.15 * variant
    stall = STALL_PER_BLOCK * grid_x * scale + rng.exponential(400.0, count)
    gap = rng.integers(1_000, 8_000, size=count)
    own_copy_time = np.zeros(count, dtype=np.int64)
    own_copy_time[has_copy] = copy_dur + 500
    # timeline: each launch starts after the previous one's share of the streams plus its own copy
    provisional = base + GRID_X_NS * scale * grid_x
    step = (provisional / STREAMS).astype(np.int64) + gap + own_copy_time // STREAMS
    start = t0 + np.cumsum(step) - step[0]
    launch_id = np.arange(first, first + count, dtype=np.int64)
    mult = _window_multiplier(seed + variant, launch_id)
    noise = (rng.exponential(0.04, count) + rng.uniform(-0.02, 0.02, count)) * base * mult
    duration = base + GRID_X_NS * scale * grid_x - GRID_Y_NS * (grid_y - 1) + NS_PER_STALL_CYCLE * stall + noise
    if change is not None:
        hit = kid == change.kernel
        if change.drop_grid_y:
            duration[hit] += GRID_Y_NS * (grid_y[hit] - 1 - GRID_Y_MEAN_STEPS)
        duration[hit] *= change.slowdown
    duration = np.maximum(np.round(duration), 500).astype(np.int64)
    copy_start = start[has_copy] - own_copy_time[has_copy]

    kernels = {
        "launch_id": launch_id,
        "kernel_index": kid.astype(np.int64),
        "start": start.astype(np.int64),
        "end": start.astype(np.int64) + duration,
        "duration": duration,
        "device_id": np.zeros(count, dtype=np.int64),
        "stream_id": stream.astype(np.int64),
        "correlation_id": 2 * launch_id + 1,
        "grid_x": grid_x,
        "grid_y": grid_y.astype(np.int64),
        "grid_z": np.ones(count, dtype=np.int64),
        "block_x": block_x,
        "block_y": np.ones(count, dtype=np.int64),
        "block_z": np.ones(count, dtype=np.int64),
        "registers_per_thread": registers,
        "static_shared_memory": static_smem,
        "dynamic_shared_memory": dynamic_smem.astype(np.int64),
        "tcp_pending_stall": np.round(stall).astype(np.int64),
    }
    memcpy = {
        "launch_id": launch_id[has_copy],
        "start": copy_start.astype(np.int64),
        "end": copy_start.astype(np.int64) + copy_dur,
        "duration": copy_dur,
        "device_id": np.zeros(n_copy, dtype=np.int64),
        "stream_id": stream[has_copy].astype(np.int64),
        "correlation_id": 2 * launch_id[has_copy],
        "bytes": copy_bytes,
        "copy_kind": copy_kind.astype(np.int64),
    }
    next_t0 = int(start[-1] + step[-1]) if count else t0
    return DemoChunk(kernels, memcpy), next_t0


def generate(
    rows: int,
    seed: int,
    variant: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    t0: int = 1_000_000_000,
    draw: int = 0,
    change: Change | None = None,
):
    """Yield DemoChunks covering `rows` kernel launches, deterministically."""
    for index, first, count in chunk_bounds(rows, chunk_rows):
        chunk, t0 = make_chunk(seed, index, first, count, t0, variant, draw, change)
        yield chunk


def kernel_names() -> tuple[list[str], list[str]]:
    """(demangled names, short names), indexed by `kernel_index`."""
    return [k[0] for k in KERNELS], [k[1] for k in KERNELS]
