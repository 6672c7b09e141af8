"""Which physical GPU each launch ran on, across the files (ranks) and processes of one table (issue 34 item 4).

Why: co-running context (gpuvar.ingest.corun) counts the kernels of *other processes on the same GPU*. A device
index alone does not name a GPU: every rank of a multi-node job has a device 0, and a rank given one GPU through
CUDA_VISIBLE_DEVICES sees it as device 0 whichever it is. The physical GPU is the GPU UUID where the file
records one, else the host plus the device index; where neither is recorded it cannot be known, and the rule
below says what is assumed, in a note of ingest.json, or leaves the columns NaN.

What each file records (ingest.json, written by the readers):
  * `host`: Kineto top-level `host_name` / `hostname` (Meta's builds write it; PyTorch's open-source profiler
    does not); Nsight Systems TARGET_INFO_SYSTEM_ENV `Hostname` (the profiled machine, not the exporter's);
    rocpd rocpd_info_node `machine_id` (else `hostname`).
  * `devices[].uuid`: Nsight Systems TARGET_INFO_GPU.uuid; rocpd rocpd_info_agent.uuid (when not 0); a Kineto
    deviceProperties `uuid` where a build writes one (none of the real traces here does).
  * `devices`: the GPUs the file lists (Kineto deviceProperties: those the process could see; Nsight Systems
    TARGET_INFO_GPU: those of the host).
  * `gpu_renumbered_processes` (Nsight Systems): processes whose CUDA device ids differ from the report's GPU
    ids (TARGET_INFO_CUDA_DEVICE cudaId != gpuId, CUDA_VISIBLE_DEVICES): which of the two the kernel table's
    deviceId holds is not documented, so their launches' GPU is unknown.

The rule, for the rows of several files merged (`merged_gpus`), in this order:
  1. every file records a UUID for every device its launches use: the physical GPU is the UUID;
  2. else every file records its host: the physical GPU is (host, device index);
  3. else, per device index d: a file alone in using d has that GPU to itself (a second process on it would
     have to sit on another node with the same index, or be renumbered). Files that share d:
       - `unknown_gpu="auto"` (default): when every one of them lists exactly one GPU, they are assumed to share
         it (ranks of one job on a one-GPU node, the usual torch.distributed test set-up, e.g. the real
         h100-2rank-gloo recording); else (they list several GPUs, or none) whether they share one cannot be
         known (a launcher gives the ranks of one node distinct devices, so most likely other nodes): their
         launches get NaN;
       - `"shared"`: assumed to share it; `"separate"`: assumed each on its own GPU (e.g. Slurm's per-task GPU
         binding, where every rank sees its GPU as device 0).
     Each assumption is a note naming the ranks and the device.
Within one file (`single_trace_gpus`: one trace holding several processes, as Nsight Systems records) the
processes ran on one host, so the device id names the GPU (except renumbered processes, above).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

UNKNOWN_GPU_MODES = ("auto", "shared", "separate")
UNKNOWN_GPU_DEFAULT = UNKNOWN_GPU_MODES[0]  # the merge's and `gpuvar ingest-merge --unknown-gpu`'s default


@dataclass(frozen=True)
class Recorded:
    """What one file (one ingest) records about the identity of its GPUs."""

    host: str | None = None
    uuids: dict[int, str] = field(default_factory=dict)  # device id -> GPU UUID
    names: dict[int, str] = field(default_factory=dict)  # device id -> GPU name
    listed: int | None = None  # how many GPUs the file lists (None: it lists none)
    renumbered: frozenset[int] = frozenset()  # process ids whose device ids may not be the report's GPU ids

    @classmethod
    def from_report(cls, report: dict) -> Recorded:
        """From an ingest.json (or the same keys of a reader's output)."""
        devices = [d for d in report.get("devices") or [] if isinstance(d, dict) and _int(d.get("id")) is not None]
        host = report.get("host")
        return cls(
            host=str(host) if host not in (None, "") else None,
            uuids={int(d["id"]): str(d["uuid"]) for d in devices if d.get("uuid") not in (None, "")},
            names={int(d["id"]): str(d.get("name", "?")) for d in devices},
            listed=len(devices) or None,
            renumbered=frozenset(int(p) for p in report.get("gpu_renumbered_processes") or []),
        )


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _device_codes(device: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(int64 device ids with nulls as -1, the distinct non-null ids)."""
    values = device.to_numpy(dtype=np.int64, na_value=-1) if len(device) else np.zeros(0, np.int64)
    return values, np.unique(values[values >= 0])


def single_trace_gpus(recorded: Recorded, device: pd.Series, process: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Physical-GPU code per row of one file's kernels (-1 unknown) and the notes that say how."""
    dev, _ = _device_codes(device)
    gpu = dev.copy()
    lost_count = 0
    if recorded.renumbered and len(process):
        pid = process.to_numpy(dtype=np.float64, na_value=np.nan)
        lost = np.isin(pid, np.array(sorted(recorded.renumbered), dtype=np.float64))
        gpu[lost] = -1
        lost_count = int(lost.sum())
    return gpu, single_trace_notes(recorded, lost_count)


def single_trace_notes(recorded: Recorded, lost: int) -> list[str]:
    """How single_trace_gpus named the GPUs; lost: the launches of renumbered processes (GPU unknown)."""
    host = f" ({recorded.host})" if recorded.host else ""
    notes = [f"several processes in one trace, so on one host{host}: a launch's physical GPU is its device id"]
    if lost:
        notes.append(
            f"processes {_list(sorted(recorded.renumbered))} see other CUDA device ids than the report's GPU ids "
            f"(TARGET_INFO_CUDA_DEVICE): their {lost} launches' physical GPU is unknown "
            "(ctx_other_process_* NaN)"
        )
    return notes


def merged_gpus(
    recorded: list[Recorded],
    part: np.ndarray,
    device: pd.Series,
    ranks: list[int],
    unknown_gpu: str = UNKNOWN_GPU_DEFAULT,
    process: pd.Series | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Physical-GPU code per row of a merged table (-1 unknown) and the notes that say how (module rule).

    part: each row's file (index into `recorded` and `ranks`); device: the rows' device_id; process: their
    process_id (for renumbered Nsight Systems processes), if any."""
    dev, _ = _device_codes(device)
    part = np.asarray(part, np.int64)
    pairs = pd.DataFrame({"part": part, "device": dev}).drop_duplicates()
    combos = sorted((int(p), int(d)) for p, d in zip(pairs["part"], pairs["device"]) if d >= 0)
    gpus = MergedGpus(recorded, combos, ranks, unknown_gpu)
    pid = process.to_numpy(dtype=np.float64, na_value=np.nan) if process is not None else None
    gpu, lost = gpus.codes(part, dev, pid)
    return gpu, gpus.notes + gpus.lost_notes(np.bincount(part[lost], minlength=len(recorded)))


class MergedGpus:
    """The physical GPU of each (file, device index) of a merged table, decided once from every such pair that
    occurs (`combos`, sorted, device >= 0): the rows can then be coded a few at a time (the k-way merge of
    gpuvar.ingest.merge_rows), with the notes of the whole table."""

    def __init__(self, recorded: list[Recorded], combos: list[tuple[int, int]], ranks: list[int], unknown_gpu: str):
        if unknown_gpu not in UNKNOWN_GPU_MODES:
            raise ValueError(f"unknown_gpu must be one of {', '.join(UNKNOWN_GPU_MODES)}, not {unknown_gpu!r}")
        self.recorded, self.ranks = recorded, ranks
        key: dict[tuple[int, int], str | None] = {}
        self.notes: list[str] = []
        if combos and all(d in recorded[p].uuids for p, d in combos):
            key = {(p, d): "uuid " + recorded[p].uuids[d] for p, d in combos}
            self.notes.append("physical GPU of a launch = the GPU UUID its file records")
        elif combos and all(recorded[p].host for p, _ in combos):
            key = {(p, d): f"host {recorded[p].host} device {d}" for p, d in combos}
            self.notes.append(
                "physical GPU of a launch = its file's host and the device id (no GPU UUID in every file)"
            )
        else:
            key, more = _by_index(recorded, combos, ranks, unknown_gpu)
            self.notes.extend(more)
        codes = {k: i for i, k in enumerate(sorted({v for v in key.values() if v is not None}))}
        self.table = np.full((len(recorded), max((d for _, d in combos), default=-1) + 2), -1, np.int64)
        for (p, d), k in key.items():
            if k is not None:
                self.table[p, d] = codes[k]

    def codes(self, part: np.ndarray, dev: np.ndarray, pid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(physical-GPU code per row, -1 unknown; the rows of renumbered processes, whose GPU is unknown) given
        the rows' file index, device id (-1: none) and process id (float, NaN: none; None: no such column)."""
        gpu = np.where(dev >= 0, self.table[part, np.maximum(dev, 0)], -1)
        lost = np.zeros(len(gpu), bool)
        if pid is not None and any(r.renumbered for r in self.recorded):
            for p, r in enumerate(self.recorded):
                if r.renumbered:
                    lost |= (part == p) & np.isin(pid, np.array(sorted(r.renumbered), dtype=np.float64))
            gpu[lost] = -1
        return gpu, lost

    def lost_notes(self, lost_per_file: np.ndarray) -> list[str]:
        """The notes on renumbered processes, given how many launches of each file codes() lost."""
        return [
            f"rank {self.ranks[p]}: processes {_list(sorted(r.renumbered))} see other CUDA device ids than the "
            f"report's GPU ids: their {int(lost_per_file[p])} launches' physical GPU is unknown"
            for p, r in enumerate(self.recorded)
            if lost_per_file[p]
        ]


def _by_index(recorded, combos, ranks, mode) -> tuple[dict, list[str]]:
    """Rule 3 of the module docstring: files without a UUID or host for every launch, matched by device index."""
    key, notes = {}, []
    users: dict[int, list[int]] = {}
    for p, d in combos:
        users.setdefault(d, []).append(p)
    alone = []
    for d, parts in sorted(users.items()):
        who = f"ranks {_list([ranks[p] for p in parts])} record device {d} and no GPU UUID or host"
        if len(parts) == 1:
            key[(parts[0], d)] = f"device {d}"
            alone.append(ranks[parts[0]])
            continue
        single = all(recorded[p].listed == 1 for p in parts)
        if mode == "shared" or (mode == "auto" and single):
            for p in parts:
                key[(p, d)] = f"device {d}"
            names = sorted({recorded[p].names.get(d, "?") for p in parts})
            why = (
                f"each process listed a single GPU ({', '.join(names)}): a one-GPU node"
                if mode == "auto"
                else "--unknown-gpu shared"
            )
            notes.append(
                f"{who}: assumed one shared GPU ({why}; ranks bound to separate GPUs through CUDA_VISIBLE_DEVICES "
                "would also each see device 0: then merge with --unknown-gpu separate)"
            )
        elif mode == "separate":
            for p in parts:
                key[(p, d)] = f"rank {ranks[p]} device {d}"
            notes.append(f"{who}: assumed each on its own GPU (--unknown-gpu separate)")
        else:
            for p in parts:
                key[(p, d)] = None
            listed = sorted({recorded[p].listed or 0 for p in parts})
            seen = "listed no GPUs" if listed == [0] else f"listed {'/'.join(map(str, listed))} GPUs"
            notes.append(
                f"{who}, and their processes {seen}: whether they shared a GPU cannot be known (ranks of one "
                "node usually get distinct devices, so other nodes are likely); ctx_other_process_* are NaN for "
                "their launches (--unknown-gpu shared or separate decides)"
            )
    if alone and len(users) > 1:
        notes.append(
            f"ranks {_list(sorted(alone))}: the only file(s) using their device index: a GPU of their own "
            "(no GPU UUID or host recorded)"
        )
    return key, notes


def _list(values) -> str:
    values = list(values)
    if len(values) <= 8:
        return ", ".join(map(str, values))
    return ", ".join(map(str, values[:8])) + f", ... ({len(values)} in all)"
