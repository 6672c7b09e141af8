"""What each run ran on, and warnings where the two differ.

Why: a comparison of an A100 job with a V100 job, or of 8 ranks with 2, reads like a regression report but is
not one; the user must see that before any kernel row. The facts come from what the readers record: ingest.json
`devices` (GPU name, SM count, clock where the profiler stores them: Kineto deviceProperties, nsys
TARGET_INFO_GPU), the profiler format, and the ranks and devices that ran kernels. Clock settings are compared
where both runs record a clock; nothing is claimed where they do not.
"""

from __future__ import annotations

import pandas as pd

from gpuvar.compare.inputs import Kernels

COMMON_TIME_FLOOR = 0.5  # below this share of GPU time in keys of both runs, the programs look different


def describe(k: Kernels) -> dict:
    """Format, GPU names / SM counts / clocks (as recorded), number of ranks and of devices that ran kernels."""
    devices = k.report.get("devices") or []
    ranks = k.devices["rank"].dropna().nunique() if "rank" in k.devices.columns else 0
    return {
        "format": k.report.get("format"),
        "gpu_names": sorted({str(d.get("name")) for d in devices if d.get("name")}),
        "sm_counts": sorted({int(d["sm_count"]) for d in devices if isinstance(d.get("sm_count"), int)}),
        "clocks_hz": sorted({int(d["clock_hz"]) for d in devices if isinstance(d.get("clock_hz"), int)}),
        "ranks": int(max(ranks, 1)),
        "gpus_used": int(len(k.devices)) if "device_id" in k.devices.columns else None,  # distinct pairs
        "resampling": k.units,
    }


def _differs(a, b) -> bool:
    return bool(a) and bool(b) and a != b


def warnings(base: dict, cand: dict, table: pd.DataFrame, names: tuple[str, str]) -> list[str]:
    """One sentence per difference that makes the runs hard to compare."""
    out = []
    fields = (
        ("gpu_names", "GPU models differ"),
        ("sm_counts", "SM counts differ"),
        ("clocks_hz", "recorded GPU clocks differ"),
        ("format", "profiler formats differ"),
    )
    for field, what in fields:
        if _differs(base[field], cand[field]):
            out.append(f"{what}: {names[0]} {_text(base[field])}, {names[1]} {_text(cand[field])}")
    if base["ranks"] != cand["ranks"]:
        out.append(f"rank counts differ: {names[0]} {base['ranks']}, {names[1]} {cand['ranks']}")
    if base["gpus_used"] and cand["gpus_used"] and base["gpus_used"] != cand["gpus_used"]:
        out.append(f"GPUs running kernels differ: {names[0]} {base['gpus_used']}, {names[1]} {cand['gpus_used']}")
    if not table.empty:
        total = table["total_ns_b"].sum() + table["total_ns_c"].sum()
        both = table.loc[table["status"] == "both", ["total_ns_b", "total_ns_c"]].to_numpy().sum()
        if total > 0 and both / total < COMMON_TIME_FLOOR:
            out.append(
                f"only {100 * both / total:.0f} % of the GPU time is in kernels both runs have: different programs, "
                "library versions or GPUs (cuBLAS picks other kernels); per-kernel ratios cover the rest only"
            )
    return out


def _text(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)
