"""Planted truth shaped like the real program of ncu-csv/h100-random-sizes-full (shared/tools/record-h100/ncu_prog.py).

The program: `a = torch.randn(4096, 4096)` (one curand launch before the loop), then per iteration
n = 256 * randint(1, 16) rows drawn from `random.Random(seed)` (seed 11 gives the real recordings' sizes):
  curand   `torch.randn(n, 1024)`: distribution_elementwise_grid_stride_kernel, block 256, grid
           min(1056, numel / 256) - CONSTANT (1056) for n >= 512 - so the size is not in the launch configuration:
           the kernel loops over the data in passes of 1056 x 256 x 4 elements, and its duration and instructions
           follow the number of passes (a step function of n: 6.4 / 8.9 / 11.3 / 13.8 us on the real H100);
  sigmoid, mul  vectorized_elementwise_kernel, block 128, grid n (1024 elements per block): duration, DRAM bytes
           and instructions proportional to n;
  GEMM     TF32 (n x 1024) @ (1024 x 1024): cuBLAS picks a kernel variant and a capped grid by n (the table below,
           measured on the real H100 export); n = 256 runs a cutlass Kernel2 split-K GEMM plus a splitKreduce kernel.
Each duration is the kernel's mean for its work times (1 + a zero-mean, right-skewed Gamma noise) - not Gaussian,
as timing noise is not. Work counters follow n (dram__bytes_read.sum, dram__bytes_write.sum, lts__t_sectors.sum,
smsp__inst_executed.sum, launch__waves_per_multiprocessor). Time-like counters are computed FROM the duration, as
the hardware does: cycles elapsed = duration x clock (clocks not locked: SM 1.96 GHz +- 1 %), DRAM throughput % =
DRAM active cycles / DRAM elapsed cycles, SM throughput % = instructions / (elapsed cycles x peak issue rate),
per-second rates = count / duration, and on the details page Elapsed Cycles, Duration, SM Active Cycles, the
Frequencies, the Throughputs and the Workload Distribution cycles. So they correlate with the duration by
construction and must never be a cause.

`write_random_sizes` writes the raw page (`--page raw`, units row) or the details page (basic set sections plus a
"Command line profiler metrics" section with the work counters, as `--set basic --metrics ...` writes), and returns
the truth: one row per launch with its iteration (-1 for the fill of `a`), n, role and true work.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuvar.demo.ncu_export import COMMAND_LINE_SECTION, Launch, write_details, write_raw
from gpuvar.errors import GpuvarError

COLS = 1024  # every tensor of the program is n x 1024 float32
FILL_ROWS = 4096 * 4096 // COLS  # `a = torch.randn(4096, 4096)`: 16 M elements before the loop
SMS = 132
SM_CLOCK_HZ = 1.96e9
DRAM_CLOCK_HZ = 2.617e9
L2_CLOCK_HZ = 1.75e9
DRAM_BYTES_PER_ACTIVE_CYCLE = 1290.0  # fits the real fill: 44.6 MB written, 34,725 average DRAM active cycles
ISSUE_PER_SM_CYCLE = 4.0
L2_SECTORS_PER_CYCLE = 80 * 2.0

CURAND = (
    "void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4, void templates::normal_and_transform"
    "<float, float, at::CUDAGeneratorImpl *, void templates::normal_kernel<at::CUDAGeneratorImpl *>(const "
    "at::TensorBase &, double, double, T1)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 2)]"
    "::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, T3, T4)::[lambda("
    "curandStatePhilox4_32_10 *) (instance 2)], void at::<unnamed>::distribution_nullary_kernel<float, float, "
    "float4, at::CUDAGeneratorImpl *, void templates::normal_and_transform<float, float, at::CUDAGeneratorImpl *, "
    "void templates::normal_kernel<at::CUDAGeneratorImpl *>(const at::TensorBase &, double, double, T1)::[lambda() "
    "(instance 1)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)]>"
    "(at::TensorIteratorBase &, T3, T4)::[lambda(curandStatePhilox4_32_10 *) (instance 2)], void templates::"
    "normal_kernel<at::CUDAGeneratorImpl *>(const at::TensorBase &, double, double, T1)::[lambda() (instance 1)]::"
    "operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)]>(at::"
    "TensorIteratorBase &, T4, const T5 &, T6)::[lambda(int, float) (instance 1)]>(long, at::PhiloxCudaState, T3, T4)"
)
SIGMOID = (
    "void at::vectorized_elementwise_kernel<4, at::sigmoid_kernel_cuda(at::TensorIteratorBase &)::[lambda() "
    "(instance 2)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)], "
    "std::array<char *, 2>>(int, T2, T3)"
)
MUL = (
    "void at::vectorized_elementwise_kernel<4, at::AUnaryFunctor<float, float, float, binary_internal::MulFunctor"
    "<float>>, std::array<char *, 2>>(int, T2, T3)"
)
_XMMA = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize{}_execute_segment_k_off_kernel__5x_cublas"
KERNEL2 = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align4>(T1::Params)"
SPLITK = (
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, 0, float, float, float, 1, 0, 0, 0>"
    "(cublasLt::cublasSplitKParams<T6>, const T4 *, const T10 *, T9 *, T5 *, const T6 *, const T6 *, const T11 *, "
    "const T4 *, T11 *, void *, long, T6 *, int *, T6 *, T6 *, const T6 *, const T6 *, const T6 *, const T6 *, "
    "const T6 *)"
)


@dataclass(frozen=True)
class Kernel:
    """What a kernel's launches share: launch resources and the constants of its time and work model."""

    name: str
    block: tuple[int, int, int]
    registers: int
    dynamic_smem: int  # bytes per block
    smem_config: int  # bytes
    theoretical_warps: int  # per SM
    block_limits: tuple[int, int, int, int]  # barriers, registers, shared memory, warps
    achieved: float  # achieved / theoretical occupancy
    active: float  # SM active / elapsed cycles
    cv: float  # timing noise (coefficient of variation)
    cluster: int = 0


KERNELS = {
    "curand": Kernel(CURAND, (256, 1, 1), 44, 0, 32_768, 40, (32, 5, 32, 8), 0.81, 0.95, 0.006),
    "sigmoid": Kernel(SIGMOID, (128, 1, 1), 32, 0, 32_768, 64, (32, 16, 32, 16), 0.72, 0.78, 0.03),
    "mul": Kernel(MUL, (128, 1, 1), 32, 0, 32_768, 64, (32, 16, 32, 16), 0.70, 0.76, 0.03),
    "gemm": Kernel("", (384, 1, 1), 168, 231_424, 233_472, 12, (4, 1, 1, 5), 0.75, 0.85, 0.01, cluster=2),
    "gemm_splitk": Kernel(KERNEL2, (64, 1, 1), 168, 65_536, 200_704, 6, (32, 6, 3, 32), 0.64, 0.80, 0.01),
    "splitk_reduce": Kernel(SPLITK, (32, 16, 1), 32, 0, 16_384, 64, (32, 4, 16, 4), 0.76, 0.70, 0.02),
}
# cuBLAS's choice per m = n / 256 on the real H100 export (random_sizes_details.csv.gz): tile, grid, mean duration
# (ns), instructions per row of A; m = 12 was never drawn there (its row follows m = 13, 14). m = 1 is split-K.
GEMM_BY_M = {
    2: ("64x128x32_warpgroupsize1x1x1", (16, 4, 1), 12_700, 2664),
    3: ("64x128x32_warpgroupsize1x1x1", (24, 4, 1), 14_270, 2664),
    4: ("64x128x32_warpgroupsize1x1x1", (64, 2, 1), 16_305, 2664),
    5: ("64x256x32_warpgroupsize1x1x1", (20, 5, 1), 18_980, 1415),
    6: ("64x256x32_warpgroupsize1x1x1", (24, 4, 1), 19_100, 1415),
    7: ("64x256x32_warpgroupsize1x1x1", (28, 4, 1), 19_520, 1415),
    8: ("128x128x32_warpgroupsize1x1x1", (64, 2, 1), 20_830, 1889),
    9: ("64x128x32_warpgroupsize1x1x1", (28, 4, 1), 27_155, 2664),
    10: ("64x128x32_warpgroupsize1x1x1", (30, 4, 1), 27_460, 2664),
    11: ("64x128x32_warpgroupsize1x1x1", (30, 4, 1), 27_680, 2664),
    12: ("64x256x32_warpgroupsize1x1x1", (15, 8, 1), 29_000, 1415),
    13: ("64x256x32_warpgroupsize1x1x1", (15, 8, 1), 29_410, 1415),
    14: ("64x256x32_warpgroupsize1x1x1", (15, 8, 1), 29_380, 1415),
    15: ("128x128x32_warpgroupsize1x1x1", (132, 1, 1), 34_320, 1889),
    16: ("128x256x32_warpgroupsize2x1x1", (128, 1, 1), 31_120, 1175),
}
CURAND_PASS_ELEMENTS = 1056 * 256 * 4  # elements one pass of the grid-stride loop covers
LAYOUTS = ("raw", "details")


def sizes(iterations: int, seed: int) -> list[int]:
    """n per iteration, drawn exactly as ncu_prog.py draws them (`random.Random(seed)`, 256 * randint(1, 16))."""
    rng = random.Random(seed)
    return [256 * rng.randint(1, 16) for _ in range(iterations)]


def program(iterations: int, seed: int, launches: int | None = None) -> pd.DataFrame:
    """The launch sequence (one row per launch, in order): the fill of `a`, then per iteration curand, sigmoid,
    mul and the GEMM (plus splitKreduce at n = 256); cut at `launches` like `ncu -c`."""
    rows = [("curand_fill_a", -1, FILL_ROWS)]
    for it, n in enumerate(sizes(iterations, seed)):
        rows += [("curand", it, n), ("sigmoid", it, n), ("mul", it, n)]
        rows += [("gemm_splitk", it, n), ("splitk_reduce", it, n)] if n == 256 else [("gemm", it, n)]
    if launches is not None:
        rows = rows[:launches]
    plan = pd.DataFrame(rows, columns=["role", "iteration", "n"])
    plan.insert(0, "launch_id", np.arange(len(plan), dtype=np.int64))
    plan["elements"] = plan["n"] * COLS
    names, grids = [], []
    for role, n in zip(plan["role"], plan["n"]):
        name, grid = _launch_config(role, n)
        names.append(name)
        grids.append(grid)
    plan["kernel_name"] = names
    plan[["grid_x", "grid_y", "grid_z"]] = np.array(grids, dtype=np.int64)
    return plan


def _kernel(role: str) -> Kernel:
    return KERNELS["curand" if role == "curand_fill_a" else role]


def _launch_config(role: str, n: int) -> tuple[str, tuple[int, int, int]]:
    if role in ("curand", "curand_fill_a"):
        return CURAND, (min(1056, n * COLS // 256), 1, 1)
    if role in ("sigmoid", "mul"):
        return (SIGMOID if role == "sigmoid" else MUL), (n * COLS // 1024, 1, 1)
    if role == "gemm":
        tile, grid, _, _ = GEMM_BY_M[n // 256]
        return _XMMA.format(tile), grid
    if role == "gemm_splitk":
        return KERNEL2, (32, 2, 4)
    return SPLITK, (32, 16, 1)


def _work(plan: pd.DataFrame) -> pd.DataFrame:
    """Mean duration (ns) and the work counters of every launch, from its role and n (no noise yet)."""
    out = []
    for role, n, grid_x in zip(plan["role"], plan["n"], plan["grid_x"]):
        numel = n * COLS
        spill = 4.0 * numel * 0.07 * min(max((n - 2048) / 2048, 0.0), 1.0)  # writes beyond what L2 keeps
        if role in ("curand", "curand_fill_a"):
            passes = math.ceil(numel / CURAND_PASS_ELEMENTS)
            warps = grid_x * 256 / 32
            mean = 3950.0 + 2450.0 * passes
            read, write = 10_240.0, max(4.0 * numel - 40e6, 0.0) + spill
            inst, sectors = warps * (40 + 250 * passes), 4.0 * numel / 32 * 1.65
        elif role in ("sigmoid", "mul"):
            mean = (2950.0 + 2.15 * n) if role == "sigmoid" else (2850.0 + 2.10 * n)
            read, write = 4.0 * numel, spill
            inst, sectors = (696 if role == "sigmoid" else 116) * n, 4.0 * numel / 32 * 1.57
        elif role == "gemm":
            tile, _, mean, per_row = GEMM_BY_M[n // 256]
            tile_m, tile_n = (int(v) for v in tile.split("x")[:2])
            read, write = 4.0 * (numel + COLS * COLS) * 1.11, spill
            inst = per_row * n
            sectors = 4.0 * numel * (COLS / tile_n) / 32 + 4.0 * COLS * COLS * (n / tile_m) / 32
        elif role == "gemm_splitk":
            mean, read, write = 8_700.0, 4.0 * (numel + COLS * COLS) * 1.05, 4.0 * numel * 4
            inst, sectors = 2900 * n, 4.0 * numel * 16 / 32
        else:  # splitk_reduce: sums the 4 partial products
            mean, read, write = 4_770.0, 4.0 * numel * 4, 4.0 * numel
            inst, sectors = 520 * n, 4.0 * numel * 5 / 32
        out.append((mean, read, write, inst, sectors))
    return pd.DataFrame(out, columns=["mean_ns", "dram_read", "dram_write", "inst", "lts_sectors"], index=plan.index)


def simulate(plan: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The plan with every launch's true duration and counters (base units), seeded.

    Work counters get small multiplicative noise of their own (1 %, DRAM write 5 %); the duration gets the skewed
    timing noise; time-like counters are functions of the duration (and the measured clocks)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6E6375, 0x52]))
    m = len(plan)
    work = _work(plan)
    cv = np.array([_kernel(r).cv for r in plan["role"]])
    shape = 2.0  # Gamma(2) minus its mean, scaled to sd cv: zero-mean, right-skewed, non-Gaussian
    noise = (rng.gamma(shape, 1.0, m) - shape) / math.sqrt(shape)
    out = plan.copy()
    out["duration_ns"] = np.maximum(np.round(work["mean_ns"].to_numpy() * (1.0 + cv * noise)), 1.0)
    out["dram__bytes_read.sum"] = np.round(work["dram_read"] * rng.uniform(0.99, 1.01, m))
    out["dram__bytes_write.sum"] = np.round(work["dram_write"] * rng.uniform(0.95, 1.05, m))
    out["smsp__inst_executed.sum"] = np.round(work["inst"] * rng.uniform(0.999, 1.001, m))
    out["lts__t_sectors.sum"] = np.round(work["lts_sectors"] * rng.uniform(0.99, 1.01, m))
    sm_hz = SM_CLOCK_HZ * rng.uniform(0.99, 1.01, m)
    dram_hz = DRAM_CLOCK_HZ * rng.uniform(0.998, 1.002, m)
    seconds = out["duration_ns"].to_numpy() / 1e9
    active = np.array([_kernel(r).active for r in plan["role"]]) * rng.uniform(0.98, 1.02, m)
    out["gpc__cycles_elapsed.max"] = np.round(seconds * sm_hz)
    out["sm__cycles_elapsed.avg"] = out["gpc__cycles_elapsed.max"] * 0.9961
    out["sm__cycles_active.avg"] = out["sm__cycles_elapsed.avg"] * active
    out["dram__cycles_elapsed.avg"] = seconds * dram_hz
    dram_bytes = out["dram__bytes_read.sum"] + out["dram__bytes_write.sum"]
    out["dram__cycles_active.avg"] = np.minimum(
        dram_bytes / DRAM_BYTES_PER_ACTIVE_CYCLE, out["dram__cycles_elapsed.avg"]
    )
    out["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"] = (
        100.0 * out["dram__cycles_active.avg"] / out["dram__cycles_elapsed.avg"]
    )
    out["sm__throughput.avg.pct_of_peak_sustained_elapsed"] = np.minimum(
        100.0 * out["smsp__inst_executed.sum"] / (out["sm__cycles_elapsed.avg"] * SMS * ISSUE_PER_SM_CYCLE), 100.0
    )
    out["lts__throughput.avg.pct_of_peak_sustained_elapsed"] = np.minimum(
        100.0 * out["lts__t_sectors.sum"] / (seconds * L2_CLOCK_HZ * L2_SECTORS_PER_CYCLE), 100.0
    )
    out["dram__bytes_read.sum.per_second"] = out["dram__bytes_read.sum"] / seconds
    out["dram__cycles_elapsed.avg.per_second"] = dram_hz
    out["gpc__cycles_elapsed.max.per_second"] = sm_hz
    kernels = [_kernel(r) for r in plan["role"]]
    threads = np.array([k.block[0] * k.block[1] * k.block[2] for k in kernels])
    blocks = (plan["grid_x"] * plan["grid_y"] * plan["grid_z"]).to_numpy()
    per_sm = np.array([k.theoretical_warps * 32 // max(t, 1) for k, t in zip(kernels, threads)])
    out["launch__waves_per_multiprocessor"] = np.round(blocks / (SMS * np.maximum(per_sm, 1)), 2)
    theoretical = np.array([k.theoretical_warps for k in kernels]) / 64.0 * 100.0
    out["sm__warps_active.avg.pct_of_peak_sustained_active"] = (
        theoretical * np.array([k.achieved for k in kernels]) * rng.uniform(0.97, 1.03, m)
    )
    out["lts__t_sector_hit_rate.pct"] = np.clip(rng.normal(62.0, 4.0, m), 0.0, 100.0)
    return out


# --- the two pages ------------------------------------------------------------------------------------------
SOL = "GPU Speed Of Light Throughput"
LAUNCH = "Launch Statistics"
OCCUPANCY = "Occupancy"
DISTRIBUTION = "GPU and Memory Workload Distribution"
WORK_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum", "lts__t_sectors.sum")
# raw page columns: printed unit, base units per printed unit, printed as float (units copied from the real export)
RAW_COLUMNS = {
    "device__attribute_clock_rate": ("", 1.0, False),
    "device__attribute_display_name": ("", 1.0, False),
    "device__attribute_multiprocessor_count": ("", 1.0, False),
    "dram__bytes_read.sum": ("Mbyte", 1e6, True),
    "dram__bytes_read.sum.per_second": ("Tbyte/s", 1e12, True),
    "dram__bytes_write.sum": ("Mbyte", 1e6, True),
    "dram__cycles_active.avg": ("cycle", 1.0, True),
    "dram__cycles_elapsed.avg": ("cycle", 1.0, True),
    "dram__cycles_elapsed.avg.per_second": ("Ghz", 1e9, True),
    "gpc__cycles_elapsed.max": ("cycle", 1.0, True),
    "gpc__cycles_elapsed.max.per_second": ("Ghz", 1e9, True),
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1.0, True),
    "gpu__time_duration.sum": ("us", 1e3, True),
    "launch__block_size": ("", 1.0, False),
    "launch__grid_size": ("", 1.0, False),
    "launch__registers_per_thread": ("register/thread", 1.0, False),
    "launch__shared_mem_per_block_dynamic": ("Kbyte/block", 1e3, True),
    "launch__shared_mem_per_block_static": ("byte/block", 1.0, False),
    "launch__thread_count": ("thread", 1.0, False),
    "launch__waves_per_multiprocessor": ("", 1.0, False),
    "lts__t_sector_hit_rate.pct": ("%", 1.0, True),
    "lts__t_sectors.sum": ("sector", 1.0, True),
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1.0, True),
    "sm__cycles_active.avg": ("cycle", 1.0, True),
    "sm__cycles_elapsed.avg": ("cycle", 1.0, True),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1.0, True),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", 1.0, True),
    "smsp__inst_executed.sum": ("inst", 1.0, True),
}


def _launch_record(row, kernel: Kernel) -> Launch:
    grid = (int(row.grid_x), int(row.grid_y), int(row.grid_z))
    return Launch(int(row.launch_id), row.kernel_name, grid, kernel.block)


def _raw(launch: Launch, row, kernel: Kernel) -> None:
    blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    threads = kernel.block[0] * kernel.block[1] * kernel.block[2]
    launch.raw = {
        "device__attribute_clock_rate": 1_980_000,
        "device__attribute_display_name": "NVIDIA H100 80GB HBM3",
        "device__attribute_multiprocessor_count": SMS,
        "gpu__time_duration.sum": row["duration_ns"],
        "launch__block_size": threads,
        "launch__grid_size": blocks,
        "launch__registers_per_thread": kernel.registers,
        "launch__shared_mem_per_block_dynamic": kernel.dynamic_smem,
        "launch__shared_mem_per_block_static": 0,
        "launch__thread_count": blocks * threads,
    } | {name: row[name] for name in RAW_COLUMNS if name in row.index}


def _details(launch: Launch, row, kernel: Kernel) -> None:
    blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    threads = kernel.block[0] * kernel.block[1] * kernel.block[2]
    dram_pct = row["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    l2_pct = row["lts__throughput.avg.pct_of_peak_sustained_elapsed"]
    sm_pct = row["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    elapsed, active = row["sm__cycles_elapsed.avg"], row["sm__cycles_active.avg"]
    seconds = row["duration_ns"] / 1e9
    theoretical = kernel.theoretical_warps / 64.0 * 100.0
    achieved = row["sm__warps_active.avg.pct_of_peak_sustained_active"]
    barriers, reg_limit, smem_limit, warp_limit = kernel.block_limits
    launch.details = [
        (SOL, "DRAM Frequency", "hz", round(row["dram__cycles_elapsed.avg.per_second"], -7)),
        (SOL, "SM Frequency", "hz", round(row["gpc__cycles_elapsed.max.per_second"], -7)),
        (SOL, "Elapsed Cycles", "cycle", row["gpc__cycles_elapsed.max"]),
        (SOL, "Memory Throughput", "%", round(max(dram_pct, l2_pct), 2)),
        (SOL, "DRAM Throughput", "%", round(dram_pct, 2)),
        (SOL, "Duration", "ns", round(row["duration_ns"], -1)),
        (SOL, "L1/TEX Cache Throughput", "%", round(0.6 * l2_pct, 2)),
        (SOL, "L2 Cache Throughput", "%", round(l2_pct, 2)),
        (SOL, "SM Active Cycles", "cycle", round(active, 2)),
        (SOL, "Compute (SM) Throughput", "%", round(sm_pct, 2)),
        (LAUNCH, "Block Size", "", threads),
        (LAUNCH, "Cluster Scheduling Policy", "", "PolicySpread"),
        (LAUNCH, "Cluster Size", "", kernel.cluster),
        (LAUNCH, "Function Cache Configuration", "", "CachePreferNone"),
        (LAUNCH, "Grid Size", "", blocks),
        (LAUNCH, "Registers Per Thread", "register/thread", kernel.registers),
        (LAUNCH, "Shared Memory Configuration Size", "byte", kernel.smem_config),
        (LAUNCH, "Driver Shared Memory Per Block", "byte/block", 1024),
        (LAUNCH, "Dynamic Shared Memory Per Block", "byte/block", kernel.dynamic_smem),
        (LAUNCH, "Static Shared Memory Per Block", "byte/block", 0),
        (LAUNCH, "# SMs", "SM", SMS),
        (LAUNCH, "Stack Size", "", 1024),
        (LAUNCH, "Threads", "thread", blocks * threads),
        (LAUNCH, "# TPCs", "", SMS // 2),
        (LAUNCH, "Enabled TPC IDs", "", "all"),
        (LAUNCH, "Uses Green Context", "", 0),
        (LAUNCH, "Waves Per SM", "", row["launch__waves_per_multiprocessor"]),
        (OCCUPANCY, "Max Active Clusters", "cluster", SMS // 2 if kernel.cluster else 0),
        (OCCUPANCY, "Max Cluster Size", "block", 16 if kernel.cluster else 8),
        (OCCUPANCY, "Overall GPU Occupancy", "%", 0.59 if kernel.cluster else 0),
        (OCCUPANCY, "Cluster Occupancy", "%", 3.12 if kernel.cluster else 0),
        (OCCUPANCY, "Block Limit Barriers", "block", barriers),
        (OCCUPANCY, "Block Limit SM", "block", 32),
        (OCCUPANCY, "Block Limit Registers", "block", reg_limit),
        (OCCUPANCY, "Block Limit Shared Mem", "block", smem_limit),
        (OCCUPANCY, "Block Limit Warps", "block", warp_limit),
        (OCCUPANCY, "Theoretical Active Warps per SM", "warp", kernel.theoretical_warps),
        (OCCUPANCY, "Theoretical Occupancy", "%", round(theoretical, 2)),
        (OCCUPANCY, "Achieved Occupancy", "%", round(achieved, 2)),
        (OCCUPANCY, "Achieved Active Warps Per SM", "warp", round(achieved * 64 / 100, 2)),
        (DISTRIBUTION, "Average DRAM Active Cycles", "cycle", round(row["dram__cycles_active.avg"], 2)),
        (DISTRIBUTION, "Total DRAM Elapsed Cycles", "cycle", round(row["dram__cycles_elapsed.avg"] * 40)),
        (DISTRIBUTION, "Average L1 Active Cycles", "cycle", round(active, 2)),
        (DISTRIBUTION, "Total L1 Elapsed Cycles", "cycle", round(elapsed * SMS)),
        (DISTRIBUTION, "Average L2 Active Cycles", "cycle", round(seconds * L2_CLOCK_HZ * min(l2_pct / 60, 1.0), 2)),
        (DISTRIBUTION, "Total L2 Elapsed Cycles", "cycle", round(seconds * L2_CLOCK_HZ * 80)),
        (DISTRIBUTION, "Average SM Active Cycles", "cycle", round(active, 2)),
        (DISTRIBUTION, "Total SM Elapsed Cycles", "cycle", round(elapsed * SMS)),
        (DISTRIBUTION, "Average SMSP Active Cycles", "cycle", round(active * 0.9975, 2)),
        (DISTRIBUTION, "Total SMSP Elapsed Cycles", "cycle", round(elapsed * SMS * 4)),
    ] + [(COMMAND_LINE_SECTION, name, _WORK_UNITS[name], row[name]) for name in WORK_METRICS]
    bound = "Memory" if max(dram_pct, l2_pct) > sm_pct else "Compute"
    launch.rules = [
        (
            "SpeedOfLight",
            "SOLBottleneck",
            "OPT",
            f"{bound} is more heavily utilized than {'Compute' if bound == 'Memory' else 'Memory'}.",
            "",
            "",
        ),
        (
            "Occupancy",
            "AchievedOccupancy",
            "OPT",
            f"The difference between calculated theoretical ({theoretical:.1f}%) and measured achieved occupancy "
            f"({achieved:.1f}%) can be the result of warp scheduling overheads or workload imbalances.",
            "local",
            f"{max(theoretical - achieved, 0.0):.2f}",
        ),
    ]


_WORK_UNITS = {
    "dram__bytes_read.sum": "byte",
    "dram__bytes_write.sum": "byte",
    "smsp__inst_executed.sum": "inst",
    "lts__t_sectors.sum": "sector",
}


def launches_of(table: pd.DataFrame, layout: str) -> list[Launch]:
    """The ncu_export launches of a simulated table, for one page layout."""
    out = []
    for _, row in table.iterrows():
        kernel = _kernel(row["role"])
        launch = _launch_record(row, kernel)
        (_raw if layout == "raw" else _details)(launch, row, kernel)
        out.append(launch)
    return out


def write_random_sizes(
    path, iterations: int = 9, layout: str = "raw", seed: int = 11, launches: int | None = None, truth_path=None
) -> dict:
    """Write the planted program's trace as an ncu CSV page at `path`; returns {path, layout, launches, truth}.

    iterations: loop iterations (the real full-set file has 36 launches: iterations=9, launches=36); layout: 'raw'
    (`--page raw`) or 'details'; seed: the program's `random.Random` seed (11, as recorded) and the noise seed;
    launches: cut after this many launches, like `ncu -c`. `truth` is one row per launch: launch_id, role
    (curand_fill_a, curand, sigmoid, mul, gemm, gemm_splitk, splitk_reduce), iteration (-1: the fill of `a`
    before the loop), n (rows of 1024 floats), elements, kernel_name, grid, duration_ns and the work counters;
    `truth_path` also writes it as CSV."""
    if layout not in LAYOUTS:
        raise GpuvarError(f"random-sizes layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if iterations <= 0 or (launches is not None and launches <= 0):
        raise GpuvarError(f"iterations and launches must be positive, got {iterations} and {launches}")
    table = simulate(program(iterations, seed, launches), seed)
    pages = launches_of(table, layout)
    if layout == "raw":
        write_raw(path, pages, RAW_COLUMNS)
    else:
        write_details(path, pages)
    truth = table[
        ["launch_id", "role", "iteration", "n", "elements", "kernel_name", "grid_x", "grid_y", "grid_z", "duration_ns"]
        + list(WORK_METRICS)
    ]
    if truth_path is not None:
        truth.to_csv(truth_path, index=False)
    return {"path": str(path), "format": "ncu-csv", "layout": layout, "launches": len(truth), "truth": truth}
