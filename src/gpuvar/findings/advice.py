"""What to do and how to check it, by cause, by the GPU's vendor and by the kind of kernel.

Why by vendor: an AMD user told to run `nvidia-smi -lgc` or to profile with Nsight Compute cannot act on it; the
same advice exists for both vendors under other names (clocks: `nvidia-smi -lgc` / `rocm-smi
--setperfdeterminism`; counters: Nsight Compute / rocprofv3 or Omniperf). Why by kind: a collective kernel
(NCCL, RCCL, gloo) lasts as long as the slowest rank takes to arrive, so its spread is the other ranks' lateness,
not this GPU's clock: the rank analysis is where to look.

Each advice is (do, check, could also be). The texts that do not depend on the finding are the dataset's
`shared_advice` (the page prints them once); a finding names the one it uses.
"""

from __future__ import annotations

import re

NVIDIA, AMD, UNKNOWN = "NVIDIA", "AMD", "unknown"
COLLECTIVE = re.compile(r"(?i)\b(?:nccl|rccl|gloo|c10d|all_?reduce|all_?gather|reduce_?scatter|broadcast|send_?recv)")
_AMD_FORMATS = ("rocprof-csv", "rocprof-db", "omniperf-pmc-perf", "rocprofv3-csv", "rocpd-sqlite")
_NVIDIA_FORMATS = ("nsys-sqlite", "nsys-rep", "ncu-csv", "ncu-rep")
_AMD_DEVICE = re.compile(r"(?i)\b(?:AMD|Instinct|Radeon|gfx\d+|MI\d{3}|ROCm)\b")


def vendor_of(fmt: str | None, devices: object = None) -> str:
    """NVIDIA or AMD from the trace's format and, for Kineto (both vendors), its device names."""
    if fmt in _AMD_FORMATS:
        return AMD
    if fmt in _NVIDIA_FORMATS:
        return NVIDIA
    text = str(devices or "")
    if _AMD_DEVICE.search(text):
        return AMD
    if re.search(r"(?i)NVIDIA|Tesla|GeForce|H100|H200|A100|V100|RTX", text):
        return NVIDIA
    return UNKNOWN


def is_collective(group: str, kernels: list[str]) -> bool:
    return bool(COLLECTIVE.search(group)) or any(COLLECTIVE.search(k) for k in kernels)


def _clocks(vendor: str) -> str:
    return {
        NVIDIA: "lock the GPU clocks (`nvidia-smi -lgc <MHz>`)",
        AMD: "make clocks deterministic (`rocm-smi --setperfdeterminism <MHz>`)",
    }.get(vendor, "lock the GPU clocks (`nvidia-smi -lgc` on NVIDIA, `rocm-smi --setperfdeterminism` on AMD)")


def _counters(vendor: str) -> str:
    return {
        NVIDIA: "collect its counters with Nsight Compute (`ncu --set full -k <kernel>`)",
        AMD: "collect its counters with rocprofv3 (`rocprofv3 --pmc ...`) or Omniperf",
    }.get(vendor, "collect its counters (Nsight Compute on NVIDIA, rocprofv3 / Omniperf on AMD)")


def shared_advice(vendor: str) -> dict[str, dict]:
    """The advice texts of one dataset by key (printed once per dataset on the page)."""
    return {
        "size": {
            "do": "The spread follows problem size: it is the workload, not noise. To make steps predictable, bucket "
            "or pad sizes to a few fixed shapes; to make them faster, tune for the sizes that cost most.",
            "could_also_be": [
                "anything that scales with the same size (memory traffic, the kernel variant the library picks)",
                "unrecorded causes of the remainder (clocks, contention)",
            ],
        },
        "copy": {
            "do": "Launches that overlap a memory copy on the same GPU are slower (bandwidth contention): issue the "
            "copy outside this phase of the step, or make it smaller / pinned and asynchronous earlier.",
            "could_also_be": [
                "anything else that happens in the same steps as the copies (inputs, allocator activity)"
            ],
        },
        "streams": {
            "do": "Launches that share the GPU with kernels on other streams are slower: serialise the streams around "
            "this kernel or give it stream priority.",
            "could_also_be": ["the concurrent kernels' own inputs vary with the step"],
        },
        "other_process": {
            "do": "Launches that overlap kernels of another process on the same GPU are slower: that process (another "
            "rank, another job) shares the GPU. Give each process its own GPU (CUDA_VISIBLE_DEVICES / "
            "ROCR_VISIBLE_DEVICES per rank), or use MPS / partitioning (MIG) if sharing is intended.",
            "could_also_be": ["the other process's work varies with the step, so overlap and size move together"],
        },
        "rank": {
            "do": "One rank's launches differ from the others': compare that rank's GPU, clocks and inputs.",
            "could_also_be": ["different data per rank", "a different GPU model or clock on that rank"],
        },
        "collective": {
            "do": "A collective's duration includes waiting for the other ranks to arrive: its spread is lateness of "
            "other ranks, not this GPU. Read the rank analysis (ranks.md: the late rank and what makes it late).",
            "could_also_be": ["network or interconnect contention", "a rank slowed by its own inputs"],
        },
        "counter": {
            "do": "The spread follows the work the kernel did (bytes moved, instructions): find what makes that work "
            "vary (input sizes, data-dependent paths, cache behaviour).",
            "could_also_be": ["problem size that the launch configuration does not show"],
        },
        "unexplained": {
            "do": f"No recorded launch parameter, input shape or context explains it: {_clocks(vendor)}, check for "
            f"other processes on the GPU, and {_counters(vendor)} to see which unit stalls.",
            "could_also_be": [
                "clock or power changes",
                "other work on the GPU or the host",
                "data-dependent control flow",
            ],
        },
    }


def advice_key(category: str, top_feature: str | None, collective: bool) -> str:
    """Which shared advice a finding uses."""
    if collective:
        return "collective"
    if category in ("size", "size and context") and top_feature is not None and not top_feature.startswith("ctx_"):
        return "size"
    if top_feature is not None:
        if top_feature.startswith("ctx_copy") or top_feature.startswith("ctx_memset"):
            return "copy"
        if top_feature.startswith("ctx_other_process") or top_feature.startswith("other processes"):
            return "other_process"
        if top_feature.startswith("ctx_kernels"):
            return "streams"
        if top_feature.startswith("rank="):
            return "rank"
        if category == "counters":
            return "counter"
    return "unexplained"


def check_text(key: str, top_label: str | None, vendor: str, cv_within: str, remain: str) -> str:
    """The experiment that would confirm the finding (its own numbers in it)."""
    if key == "size":
        return (
            f"Re-run with {top_label}; expect the CV within call sites to fall from {cv_within} "
            f"to about the unexplained remainder ({remain} of its variance)."
        )
    if key == "copy":
        return (
            f"Re-run with the concurrent copies removed or moved; expect the CV within call sites to fall from "
            f"{cv_within} towards the unexplained remainder ({remain} of its variance)."
        )
    if key == "other_process":
        return f"Re-run with this process alone on its GPU; expect the CV within call sites to fall from {cv_within}."
    if key == "streams":
        return "Re-run with the other streams' work moved before/after; expect the slow launches to disappear."
    if key == "rank":
        return "Swap the ranks' GPUs or inputs; expect the difference to follow the cause."
    if key == "collective":
        return (
            "Align the ranks (fix the late rank's cause); expect this collective's time to fall to its transfer time."
        )
    if key == "counter":
        return f"Re-run with the same inputs ({top_label}); expect the CV within call sites to fall from {cv_within}."
    rerun = {
        NVIDIA: "Re-run with locked clocks (`nvidia-smi -lgc <MHz>`)",
        AMD: "Re-run with deterministic clocks (`rocm-smi --setperfdeterminism <MHz>`)",
    }.get(vendor, "Re-run with locked clocks (`nvidia-smi -lgc` / `rocm-smi --setperfdeterminism`)")
    return (
        f"{rerun} and nothing else on the GPU; if the CV within call sites ({cv_within}) stays, "
        f"{_counters(vendor)} for the slowest launches."
    )
