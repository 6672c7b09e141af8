"""The two variability targets of the paper (§2.2), as plain numpy functions on canonical columns.

* kernel_variability = duration - mean duration of the launch's group over the WHOLE trace. The group is the
  kernel name by default (`group="kernel"`): a mean per full launch configuration (`"launch_config"`) would
  remove every launch feature's effect by construction, so it is an option (pure noise of identical launches),
  not the default (§1 of the shared field guide ../shared/GUIDE.md, outside the repo). Group sums are exact
  integers, so the means do not depend on how rows are split.
* memory_stall = |kernel duration - duration of the linked memcpy|. nsys `correlationId` links an activity to
  its CUDA API call, never a kernel to a copy, so the link is explicit: the latest memcpy (by start; the last
  one in file order among equal starts) on the same device and stream (`link="stream"`, default) or on the same
  device, any stream (`link="device"`) whose start is <= the kernel's start. A kernel with no such copy has no
  memory_stall; callers count it under `NO_LINK_REASON[link]`, never drop it silently.

The MPI job (gpuvar.binning.job) calls these on each rank's share; they are equally usable on a whole table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuvar.errors import GpuvarError

LINKED_COPY_COLUMNS = ("linked_copy_kind", "linked_copy_bytes", "linked_copy_duration")  # a kernel's linked copy


@dataclass(frozen=True)
class Target:
    """What the stages need to know about a target, in one place instead of `if target == ...` in each."""

    name: str
    definition: str
    links_copies: bool  # needs each kernel linked to a memcpy: start times and a memcpy table
    unit: str = "ns"  # of its values; its variance is in unit²
    # columns `features: auto` leaves out of a causal graph of this target, with why
    not_features: tuple[tuple[str, str], ...] = tuple(
        (c, "copy-link column: used by memory_stall only (kernels without a linked copy would be lost)")
        for c in LINKED_COPY_COLUMNS
    )

    @property
    def variance_unit(self) -> str:
        return f"{self.unit}²"


_TARGETS = {
    "kernel_variability": Target(
        "kernel_variability", "duration - mean duration of the launch's group over the whole trace", False
    ),
    "memory_stall": Target(
        "memory_stall",
        "|kernel duration - duration of the linked memcpy|",
        True,
        not_features=(("linked_copy_duration", "part of memory_stall's definition (|kernel - copy duration|)"),),
    ),
}


def target(name: str) -> Target:
    """The Target called `name`; another column (a paper dataset's perf_variability) is analysed like a
    kernel_variability: a plain column with no copy link."""
    return _TARGETS.get(name) or Target(name, f"the column {name}", False)


GROUPS = ("kernel", "launch_config", "call_site")
GROUP_COLUMN = {"launch_config": "launch_config", "call_site": "call_site"}  # the column a group adds to the name
LINKS = ("stream", "device")
GROUP_SEPARATOR = "\x1f"  # between kernel name and launch config in a launch_config group key
NO_LINK_REASON = {
    "stream": "no earlier memcpy on the same device and stream",
    "device": "no earlier memcpy on the same device",
}
NO_KEY = np.iinfo(np.int64).min  # link key of a row whose device/stream is unknown


def check_choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    """Return value if allowed, else a one-line GpuvarError."""
    if value not in allowed:
        raise GpuvarError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
    return value


def group_key(kernel_name: str, launch_config: str | None, group: str) -> str:
    """The group a launch's mean duration is taken over: its kernel name, or name + launch configuration (or
    name + call site: `launch_config` is then the call site's key)."""
    if group == "kernel":
        return kernel_name
    return f"{kernel_name}{GROUP_SEPARATOR}{launch_config if launch_config is not None else '?'}"


def group_sums(codes: np.ndarray, durations: np.ndarray, n_groups: int) -> tuple[list[int], list[int]]:
    """Exact per-group (sum, count) of int64 durations as Python ints (order-independent, so rank-independent).

    float64 bincount is exact while every partial sum stays below 2**53; otherwise sum per group in int64.
    """
    codes = np.asarray(codes, dtype=np.int64)
    durations = np.asarray(durations, dtype=np.int64)
    counts = np.bincount(codes, minlength=n_groups)
    if len(durations) and int(np.abs(durations).max()) * len(durations) < 2**53:
        sums = np.bincount(codes, weights=durations, minlength=n_groups)
        return [int(s) for s in sums], [int(c) for c in counts]
    return [int(durations[codes == g].sum()) for g in range(n_groups)], [int(c) for c in counts]


def group_means(sums: dict[str, int], counts: dict[str, int]) -> dict[str, float]:
    """Mean per group key: one correctly rounded division of exact integers."""
    return {key: sums[key] / counts[key] for key in sorted(counts) if counts[key]}


def kernel_variability(durations: np.ndarray, codes: np.ndarray, means: np.ndarray) -> np.ndarray:
    """duration - mean of the row's group (means indexed by code), as float64."""
    return np.asarray(durations, dtype=np.float64) - np.asarray(means, dtype=np.float64)[codes]


def link_key(device_id: np.ndarray, stream_id: np.ndarray | None, link: str) -> np.ndarray:
    """int64 link key per row (device, or device and stream); NO_KEY where a needed id is null (NaN)."""
    dev = np.asarray(device_id, dtype=np.float64)
    bad = np.isnan(dev)
    key = np.where(bad, 0, dev).astype(np.int64) << 32
    if link == "stream":
        st = np.asarray(stream_id, dtype=np.float64)
        bad |= np.isnan(st)
        key += np.where(np.isnan(st), 0, st).astype(np.int64) & 0xFFFFFFFF
    key[bad] = NO_KEY
    return key


def link_latest(k_key: np.ndarray, k_start: np.ndarray, m_key: np.ndarray, m_start: np.ndarray) -> np.ndarray:
    """Index of each kernel's linked memcpy: the latest copy with the same key and start <= the kernel's start.

    Ties on start resolve to the last copy in input order. -1 where there is none (or the kernel's key is
    NO_KEY). O((n + m) log(n + m)): copies and kernels are grouped by key with stable sorts, then one
    searchsorted per key.
    """
    k_key, k_start = np.asarray(k_key), np.asarray(k_start)
    m_key, m_start = np.asarray(m_key), np.asarray(m_start)
    out = np.full(len(k_key), -1, dtype=np.int64)
    usable = m_key != NO_KEY
    m_idx = np.flatnonzero(usable)
    m_order = m_idx[np.lexsort((m_start[m_idx], m_key[m_idx]))]  # by key, then start, stable
    m_keys_sorted = m_key[m_order]
    uniq, first = np.unique(m_keys_sorted, return_index=True)
    bounds = dict(zip(uniq.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(m_order)])))
    k_order = np.argsort(k_key, kind="stable")
    k_sorted = k_key[k_order]
    ku, kfirst = np.unique(k_sorted, return_index=True)
    for key, lo, hi in zip(ku.tolist(), kfirst.tolist(), [*kfirst[1:].tolist(), len(k_order)]):
        if key == NO_KEY or key not in bounds:
            continue
        a, b = bounds[key]
        copies = m_order[a:b]
        rows = k_order[lo:hi]
        pos = np.searchsorted(m_start[copies], k_start[rows], side="right") - 1
        found = pos >= 0
        out[rows[found]] = copies[pos[found]]
    return out


def memory_stall(k_duration: np.ndarray, m_duration: np.ndarray, link: np.ndarray) -> np.ndarray:
    """|kernel duration - linked copy duration| as float64; NaN where link == -1 (no linked copy)."""
    k = np.asarray(k_duration, dtype=np.float64)
    out = np.full(len(k), np.nan)
    has = link >= 0
    out[has] = np.abs(k[has] - np.asarray(m_duration, dtype=np.float64)[link[has]])
    return out
