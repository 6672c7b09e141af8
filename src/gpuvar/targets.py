"""The variability targets (paper §2.2): one Target object per target, the only place a target is defined.

A Target says everything a stage needs: its name (the `{target}` wildcard, the config's `targets`, `gpuvar bin
--target`, the column the binning job writes), its unit (the plots' axes), whether it needs each kernel linked to
a copy, which columns `features: auto` leaves out of its causal graph, and `compute`, the function the binning
job calls on each rank's rows. Adding a target is adding one entry to TARGETS: every reader looks it up there
when it runs (gpuvar.config, gpuvar.binning, gpuvar.causal.prepare, gpuvar.plots, workflow/rules/common.smk).

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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from gpuvar.errors import GpuvarError

LINKED_COPY_COLUMNS = ("linked_copy_kind", "linked_copy_bytes", "linked_copy_duration")  # a kernel's linked copy


class Rows:
    """The per-row inputs a target is computed from, for a run of rows: float64 durations, the group mean on
    demand, and the linked copy's columns (`linked`, with a memcpy table: LINKED_COPY_COLUMNS, NaN where no copy
    is linked). The binning job makes one per cache-sized slice of a rank's share; a library caller one for a
    whole table."""

    __slots__ = ("_buffer", "_codes", "_means", "duration", "linked")

    def __init__(
        self,
        duration: np.ndarray,
        codes: np.ndarray | None = None,
        means: np.ndarray | None = None,
        linked: Mapping[str, np.ndarray] | None = None,
        buffer: np.ndarray | None = None,
    ):
        self.duration = duration
        self._codes, self._means, self._buffer = codes, means, buffer  # buffer: reused for the gathered means
        self.linked = linked or {}

    def group_mean(self) -> np.ndarray:
        """The mean duration of each row's group (`group`: kernel name, launch configuration or call site) over
        the whole trace; gathered when a target asks, so a target that does not use it costs nothing."""
        out = None if self._buffer is None else self._buffer[: len(self._codes)]
        return np.take(self._means, self._codes, out=out, mode="clip")  # (codes index means: clip never acts)


# compute(rows, out) -> the target per row (float64, NaN where it has none), written into `out` when given. `out`
# may be rows.duration itself (the binning job writes the target over the durations it read): read every input
# before writing, row for row, as one numpy ufunc with out= does.
Compute = Callable[[Rows, "np.ndarray | None"], np.ndarray]


def kernel_variability(rows: Rows, out: np.ndarray | None = None) -> np.ndarray:
    """duration - the mean duration of the row's group over the whole trace."""
    return np.subtract(rows.duration, rows.group_mean(), out=out)


def memory_stall(rows: Rows, out: np.ndarray | None = None) -> np.ndarray:
    """|duration - the linked copy's duration|; NaN where no copy is linked."""
    diff = np.subtract(rows.duration, rows.linked["linked_copy_duration"], out=out)
    return np.abs(diff, out=diff)


COPY_LINK_NOT_FEATURES = tuple(
    (c, "copy-link column: used by memory_stall only (kernels without a linked copy would be lost)")
    for c in LINKED_COPY_COLUMNS
)


@dataclass(frozen=True)
class Target:
    """What the stages need to know about a target, in one place instead of `if target == ...` in each."""

    name: str
    unit: str  # of its values ('' for a ratio); its variance is in unit²
    links_copies: bool  # needs each kernel linked to a memcpy: start times and a memcpy table
    # columns `features: auto` leaves out of a causal graph of this target, with why (listing one keeps it)
    excluded_features: tuple[tuple[str, str], ...]
    compute: Compute | None  # None: a column the rows already hold (not one `gpuvar bin` computes)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("kernel_variability", "ns", False, COPY_LINK_NOT_FEATURES, kernel_variability),
        Target(
            "memory_stall",
            "ns",
            True,
            (("linked_copy_duration", "part of memory_stall's definition (|kernel - copy duration|)"),),
            memory_stall,
        ),
    )
}

DEFAULT_TARGET = next(iter(TARGETS))  # kernel_variability: the paper's target, what `explain` and `bin` analyse


def target(name: str) -> Target:
    """The Target called `name`; another column (a paper dataset's perf_variability) is analysed like a
    kernel_variability: a plain column in ns with no copy link, which `gpuvar bin` cannot compute."""
    return TARGETS.get(name) or Target(name, "ns", False, COPY_LINK_NOT_FEATURES, None)


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


def group_means(sums: dict[str, int], counts: dict[str, int]) -> dict[str, float]:
    """Mean per group key: one correctly rounded division of exact integers."""
    return {key: sums[key] / counts[key] for key in sorted(counts) if counts[key]}


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
