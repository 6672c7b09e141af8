"""Write a synthetic trace as a rocprof v1 counter CSV (`rocprof -i counters.txt --timestamp on`).

Layout: the current rocprof v1 header (`Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,
scr,arch_vgpr,accum_vgpr,sgpr,wave_size,sig,obj`), the Table 1 counters, then `DispatchNs,BeginNs,EndNs,
CompleteNs`. Rows come from `gpuvar.demo.synth` chunks, so the file carries the synth ground truth:
  * grd = grid_x * block_x work-items and wgr = block_x, so `gpuvar ingest` recovers grid_x as grid_size.
    rocprof's grd is one number: synth's grid_y cannot be expressed, and its (negative) effect on duration
    appears as independent non-Gaussian noise.
  * TCP_PENDING_STALL_CYCLES_sum is synth's tcp_pending_stall exactly: grid_x -> stall -> duration.
  * Every other counter is an effect, never a cause, of the launch configuration and duration, with its
    own non-Gaussian (uniform or exponential) noise, so none is an exact copy of another:
    SQ_WAVES = grid_x * ceil(block_x / 64) waves; SQ_CYCLES ~ duration * 1.7 GHz; SQ_BUSY_CYCLES a fraction of
    SQ_CYCLES; instruction counts ~ waves x per-kernel mix; TCC_READ/WRITE ~ memory wavefronts; TCC_HIT +
    TCC_MISS = TCC_READ + TCC_WRITE with a per-kernel hit rate; TA buffer / TD wavefronts ~ VMEM reads/writes.
Kernel names carry rocprof's ' [clone .kd]' suffix (the reader strips it). Vectorised with pyarrow's CSV
writer, chunk by chunk, and written atomically (gpuvar.output.replacing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from gpuvar.demo import synth
from gpuvar.errors import GpuvarError
from gpuvar.output import replacing

CLOCK_GHZ = 1.7
WAVE = 64
COUNTERS = (
    "SQ_WAVES",
    "SQ_BUSY_CYCLES",
    "SQ_CYCLES",
    "SQ_INSTS_VALU",
    "SQ_INSTS_SALU",
    "SQ_INSTS_VMEM",
    "TCC_HIT_sum",
    "TCC_MISS_sum",
    "TCC_READ_sum",
    "TCC_WRITE_sum",
    "TCP_PENDING_STALL_CYCLES_sum",
    "TA_BUFFER_READ_WAVEFRONTS_sum",
    "TA_BUFFER_WRITE_WAVEFRONTS_sum",
    "TD_LOAD_WAVEFRONT_sum",
    "TD_STORE_WAVEFRONT_sum",
)
# per kernel (synth.KERNELS order): VALU, SALU, VMEM instructions per wave, read share of VMEM, L2 hit rate
KERNEL_MIX = np.array(
    [
        [900.0, 120.0, 64.0, 0.67, 0.80],  # gemm: compute heavy, cache friendly
        [12.0, 10.0, 3.0, 0.67, 0.20],  # elementwise add: streaming
        [60.0, 25.0, 6.0, 0.50, 0.55],  # layer norm
        [40.0, 30.0, 4.0, 0.90, 0.35],  # reduce
        [80.0, 20.0, 8.0, 0.50, 0.60],  # softmax
        [10.0, 8.0, 4.0, 0.50, 0.10],  # naive transpose: uncoalesced, misses
    ]
)
ACCUM_VGPR = np.array([4, 0, 0, 0, 0, 0])
SGPR = np.array([48, 16, 24, 24, 32, 16])


def _noisy(rng: np.random.Generator, base: np.ndarray, kind: str, scale: float) -> np.ndarray:
    """base * (1 + non-Gaussian noise): exponential (one-sided, heavy tail) or uniform, rounded to >= 0."""
    n = len(base)
    noise = rng.exponential(scale, n) if kind == "exp" else rng.uniform(-scale, scale, n)
    return np.maximum(np.round(base * (1.0 + noise)), 0).astype(np.int64)


def counters(chunk: synth.DemoChunk, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The Table 1 counter columns of one chunk (see the module docstring for how each is derived)."""
    k = chunk.kernels
    kid = k["kernel_index"]
    mix = KERNEL_MIX[kid]
    waves = k["grid_x"] * -(-k["block_x"] // WAVE)
    cycles = _noisy(rng, k["duration"] * CLOCK_GHZ, "uniform", 0.02)
    vmem = _noisy(rng, waves * mix[:, 2], "exp", 0.05)
    reads = np.round(vmem * mix[:, 3]).astype(np.int64)
    writes = vmem - reads
    tcc_read = _noisy(rng, reads * 4.0, "uniform", 0.05)
    tcc_write = _noisy(rng, writes * 4.0, "uniform", 0.05)
    requests = tcc_read + tcc_write
    hit_rate = np.clip(mix[:, 4] + rng.uniform(-0.05, 0.05, len(kid)), 0.0, 1.0)
    hits = np.round(requests * hit_rate).astype(np.int64)
    return {
        "SQ_WAVES": waves.astype(np.int64),
        "SQ_BUSY_CYCLES": np.round(cycles * rng.uniform(0.85, 0.99, len(kid))).astype(np.int64),
        "SQ_CYCLES": cycles,
        "SQ_INSTS_VALU": _noisy(rng, waves * mix[:, 0], "exp", 0.03),
        "SQ_INSTS_SALU": _noisy(rng, waves * mix[:, 1], "uniform", 0.05),
        "SQ_INSTS_VMEM": vmem,
        "TCC_HIT_sum": hits,
        "TCC_MISS_sum": requests - hits,
        "TCC_READ_sum": tcc_read,
        "TCC_WRITE_sum": tcc_write,
        "TCP_PENDING_STALL_CYCLES_sum": k["tcp_pending_stall"].astype(np.int64),
        "TA_BUFFER_READ_WAVEFRONTS_sum": _noisy(rng, reads.astype(np.float64), "uniform", 0.02),
        "TA_BUFFER_WRITE_WAVEFRONTS_sum": _noisy(rng, writes.astype(np.float64), "uniform", 0.02),
        "TD_LOAD_WAVEFRONT_sum": _noisy(rng, reads.astype(np.float64), "exp", 0.02),
        "TD_STORE_WAVEFRONT_sum": _noisy(rng, writes.astype(np.float64), "exp", 0.02),
    }


def _queue_index(stream: np.ndarray, seen: dict[int, int]) -> np.ndarray:
    """Per-queue packet index (rocprof's queue-index), continued across chunks through `seen`."""
    out = np.empty(len(stream), dtype=np.int64)
    for q in np.unique(stream):
        mask = stream == q
        start = seen.get(int(q), 0)
        out[mask] = start + np.arange(int(mask.sum()), dtype=np.int64)
        seen[int(q)] = start + int(mask.sum())
    return out


def chunk_table(chunk: synth.DemoChunk, seed: int, variant: int, index: int, seen: dict[int, int]) -> pa.Table:
    """One chunk as a rocprof v1 counter-CSV table (column order as rocprof writes it)."""
    k = chunk.kernels
    n = len(k["start"])
    rng = np.random.default_rng(np.random.SeedSequence([seed, variant, index, 0xA3D]))
    kid = k["kernel_index"]
    names = [f"{name} [clone .kd]" for name in synth.kernel_names()[0]]
    pid = 40_000 + variant
    obj = np.array([f"0x7f3c{0xB4D2D580 + 0x40 * i:x}" for i in range(len(names))], dtype=object)
    cols = {
        "Index": k["launch_id"],
        "KernelName": pa.DictionaryArray.from_arrays(pa.array(kid, pa.int32()), pa.array(names)).cast(pa.string()),
        "gpu-id": k["device_id"],
        "queue-id": k["stream_id"],
        "queue-index": _queue_index(k["stream_id"], seen),
        "pid": np.full(n, pid, dtype=np.int64),
        "tid": np.full(n, pid, dtype=np.int64),
        "grd": k["grid_x"] * k["block_x"],
        "wgr": k["block_x"],
        "lds": k["static_shared_memory"] + k["dynamic_shared_memory"],
        "scr": np.zeros(n, dtype=np.int64),
        "arch_vgpr": k["registers_per_thread"],
        "accum_vgpr": ACCUM_VGPR[kid],
        "sgpr": SGPR[kid],
        "wave_size": np.full(n, WAVE, dtype=np.int64),
        "sig": pa.array(np.full(n, "0x0", dtype=object), pa.string()),
        "obj": pa.array(obj[kid], pa.string()),
        **counters(chunk, rng),
        "DispatchNs": k["start"] - rng.integers(2_000, 30_000, n),
        "BeginNs": k["start"],
        "EndNs": k["end"],
        "CompleteNs": k["end"] + rng.integers(1_000, 60_000, n),
    }
    return pa.table({name: (v if isinstance(v, pa.Array) else pa.array(v, pa.int64())) for name, v in cols.items()})


def write_rocprof_demo(path, rows: int, seed: int, variant: int = 0) -> dict:
    """Write `rows` synthetic dispatches as a rocprof v1 counter CSV at `path`; returns what was written."""
    if rows <= 0:
        raise GpuvarError(f"rows must be a positive number of kernel launches, got {rows}")
    path = Path(path)
    seen: dict[int, int] = {}
    options = pacsv.WriteOptions(include_header=True, quoting_style="needed")
    with replacing(path) as tmp:
        writer = None
        try:
            for index, chunk in enumerate(synth.generate(rows, seed, variant)):
                table = chunk_table(chunk, seed, variant, index, seen)
                if writer is None:
                    writer = pacsv.CSVWriter(str(tmp), table.schema, write_options=options)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
    return {
        "path": str(path),
        "format": "rocprof-csv",
        "kernels": rows,
        "counters": list(COUNTERS),
        "seed": seed,
        "variant": variant,
    }
