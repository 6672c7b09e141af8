"""Link each kernel of a rank's share to a copy of the memcpy file, batch by batch, holding no more copies than
a batch's time span needs.

The link rule is gpuvar.targets.link_latest: the latest copy on the same device(+stream) started at or before the
kernel (ties: the last one in file order). Kernels with starts in [a, b] need only the last copy per link key
started before a (the "carry") and the copies started in [a, b]:
 - carry    - the sorted distinct first kernel starts of the ranks cut the time axis into pieces; each piece's
              last copy per key is computed by one rank (a streamed read of the copies in it) and allgathered, and
              a rank's carry is the pieces before its first kernel (copy_carry; collective).
 - streamed - kernels in start order (a canonical file; CopyStream): the copies of the rank's span are read once
              per pass, in file order, alongside the kernels; those before the kernels at hand are folded into the
              carry (one copy per key).
 - held     - kernels out of start order, or copies out of start order (met while streaming: Unordered): the
              copies of the rank's span are held (HeldCopies), grouped by key once.
Phase 4 links every kernel only when a statistic needs the copy (memory_stall, a linked-copy feature); the top-k
rows pass links its rows with a fresh stream (Links.stream) either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpuvar import targets as T
from gpuvar.binning import read
from gpuvar.binning.columns import arrow, floats, ints, open_parquet
from gpuvar.binning.plan import Plan
from gpuvar.binning.read import NULL, Scan
from gpuvar.canonical_io import from_numpy
from gpuvar.errors import InputError

# linked column -> memcpy column it takes its value from
LINKED_FROM = (("linked_copy_kind", "copy_kind"), ("linked_copy_bytes", "bytes"), ("linked_copy_duration", "duration"))
COPY = ("key", "start", "duration", "bytes", "copy_kind")  # a copy as the link keeps it (key, start: int64)
MIN = -(2**63)
FEW_KEYS = 16  # up to this many link keys, a key's rows are found by comparison (faster than a search or a sort)
Copies = dict[str, np.ndarray]


class Unordered(Exception):
    """The kernels or copies are not in start order: the rank links from held copies instead."""


def no_copies() -> Copies:
    return {c: np.zeros(0, np.int64 if c in ("key", "start") else np.float64) for c in COPY}


def _cat(*parts: Copies) -> Copies:
    parts = [p for p in parts if len(p["key"])]
    if not parts:
        return no_copies()
    return parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in COPY}


def _take(copies: Copies, rows) -> Copies:
    return {c: v[rows] for c, v in copies.items()}


def last_per_key(copies: Copies) -> Copies:
    """The last copy per link key (latest start; among equal starts the last in order), ordered by key."""
    order = np.lexsort((copies["start"], copies["key"]))  # stable: equal starts keep their order
    keys = copies["key"][order]
    last = order[np.flatnonzero(np.append(keys[1:] != keys[:-1], True))] if len(keys) else order
    last = last[copies["key"][last] != T.NO_KEY]
    return _take(copies, last)


def key_codes(known: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of each key in the sorted array `known` (len(known) where it is not there), as the smallest integer
    type: numpy sorts 16-bit integers stably by radix, in linear time."""
    k = len(known)
    small = k < 2**15 - 1
    if k <= FEW_KEYS:
        codes = np.full(len(keys), k, np.int16)
        for i, key in enumerate(known.tolist()):
            codes[keys == key] = i
        return codes
    codes = np.searchsorted(known, keys)
    codes[known[np.minimum(codes, k - 1)] != keys] = k
    return codes.astype(np.int16 if small else np.int64)


def last_of_each(codes: np.ndarray, k: int) -> np.ndarray:
    """Index of the last row of each code 0..k-1 (-1 where none)."""
    last = np.full(k, -1, np.int64)
    n = len(codes)
    if k <= FEW_KEYS:
        for i in range(k):
            hit = codes[::-1] == i
            j = int(np.argmax(hit))
            if hit[j]:
                last[i] = n - 1 - j
        return last
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=k + 1)[:k]
    ends = np.cumsum(counts)
    last[counts > 0] = order[ends[counts > 0] - 1]
    return last


def _grow(known: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`known` with any new key of `keys` (targets.NO_KEY is never a key)."""
    new = keys[(key_codes(known, keys) == len(known)) & (keys != T.NO_KEY)]
    return np.union1d(known, new) if len(new) else known


class MemcpyReader:
    """The copies of the memcpy file with a start in a range, in file order, a batch at a time (row groups
    pruned by the start statistics)."""

    def __init__(self, plan: Plan):
        self.path, self.how = plan.opts.memcpy, plan.opts.link
        self.pf = open_parquet(self.path)
        names = self.pf.schema_arrow.names
        need = ["start", "device_id"] + (["stream_id"] if self.how == "stream" else [])
        missing = [c for c in need if c not in names] + ([] if "duration" in names or "end" in names else ["duration"])
        if missing:
            raise InputError(self.path, f"missing column(s) {', '.join(missing)} (not a canonical memcpy file?)")
        self.names = names
        wanted = ("start", "duration" if "duration" in names else "end", "device_id", "stream_id", "bytes", "copy_kind")
        self.cols = [c for c in wanted if c in names]
        self._start = names.index("start")

    def chunks(self, lo: int, hi: int) -> Iterator[Copies]:
        """Copies with lo <= start <= hi (a null start is never linked), in file order."""
        md = self.pf.metadata
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(self._start).statistics
            if lo > hi or (st is not None and st.has_min_max and (st.max < lo or st.min > hi)):
                continue
            try:
                parts = self.pf.iter_batches(
                    batch_size=read.BATCH_ROWS, row_groups=[g], columns=self.cols, use_threads=False
                )
                for rb in parts:
                    copies = self._copies(pa.Table.from_batches([rb]), lo, hi)
                    if len(copies["key"]):
                        yield copies
            except (OSError, pa.ArrowException) as exc:
                raise InputError(self.path, f"row group {g} unreadable ({exc})") from None

    def _copies(self, t: pa.Table, lo: int, hi: int) -> Copies:
        start, valid = ints(t.column("start"))
        keep = (start >= lo) & (start <= hi)
        if valid is not None:
            keep &= valid
        if not keep.any():
            return no_copies()  # (and no empty column: combining no chunks imports pandas)
        if not keep.all():
            t = arrow("filter", t, from_numpy(keep))
            start = start[keep]
        names = self.names
        dev = floats(t.column("device_id"))
        stream = floats(t.column("stream_id")) if self.how == "stream" else None
        if "duration" in names:
            dur = floats(t.column("duration"))
        else:
            dur = floats(arrow("subtract", t.column("end"), t.column("start")))
        nan = np.full(t.num_rows, np.nan)
        return {
            "key": T.link_key(dev, stream, self.how),
            "start": start,
            "duration": dur,
            "bytes": floats(t.column("bytes")) if "bytes" in names else nan,
            "copy_kind": floats(t.column("copy_kind")) if "copy_kind" in names else nan,
        }

    def last_per_key(self, lo: int, hi: int) -> Copies:
        """The last copy per key of the copies in [lo, hi], folded a batch at a time."""
        out = no_copies()
        for chunk in self.chunks(lo, hi):
            out = last_per_key(_cat(out, chunk))
        return out


class CopyIndex:
    """Copies grouped by link key, each key's in start order, to link many kernels: the rule of
    gpuvar.targets.link_latest (the latest copy with the kernel's key started at or before it; among equal
    starts the last in order). `known`: the sorted keys, given when each key's copies already come in start
    order (the stream: a stable grouping by key then suffices, no sort by start)."""

    def __init__(self, copies: Copies, known: np.ndarray | None = None):
        keys = copies["key"]
        if known is None:
            idx = np.flatnonzero(keys != T.NO_KEY)
            order = idx[np.lexsort((copies["start"][idx], keys[idx]))]  # by key, then start, stable
            known = np.unique(keys[idx])
            codes = key_codes(known, keys[order])
        else:
            codes = key_codes(known, keys)
            order = np.argsort(codes, kind="stable")
            codes = codes[order]
            order = order[: int(np.searchsorted(codes, len(known)))]  # (unknown keys and NO_KEY sort last)
            codes = codes[: len(order)]
        self.known, self.copies, self.order = known, copies, order
        self.starts = copies["start"][order]
        self.bounds = np.searchsorted(codes, np.arange(len(known) + 1)).astype(np.int64)

    def find(self, kkey: np.ndarray, kstart: np.ndarray) -> np.ndarray:
        """Row (in the copies given) of each kernel's linked copy; -1 where none."""
        out = np.full(len(kkey), -1, dtype=np.int64)
        k = len(self.known)
        if not k or not len(kkey) or not len(self.order):
            return out
        codes = key_codes(self.known, kkey)
        order = np.argsort(codes, kind="stable")
        cuts = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=k + 1))))
        for c in np.flatnonzero(np.diff(cuts[: k + 1])).tolist():
            a, b = int(self.bounds[c]), int(self.bounds[c + 1])
            if b == a:
                continue
            rows = order[cuts[c] : cuts[c + 1]]
            pos = np.searchsorted(self.starts[a:b], kstart[rows], side="right") - 1
            found = pos >= 0
            out[rows[found]] = self.order[a + pos[found]]
        return out

    def linked(self, kkey: np.ndarray, kstart: np.ndarray) -> dict[str, np.ndarray]:
        """{linked column: float64 per kernel (NaN: no linked copy)}."""
        link = self.find(kkey, kstart)
        hit = link >= 0
        out = {}
        for name, col in LINKED_FROM:
            values = np.full(len(link), np.nan)
            values[hit] = self.copies[col][link[hit]]
            out[name] = values
        return out


def _unlinked(n: int) -> dict[str, np.ndarray]:
    return {name: np.full(n, np.nan) for name, _ in LINKED_FROM}


def _span(kstart: np.ndarray) -> tuple[int, int] | None:
    has = kstart != NULL
    if not has.any():
        return None
    s = kstart if has.all() else kstart[has]
    return int(s.min()), int(s.max())


def copy_carry(comm, scan: Scan, reader: MemcpyReader) -> Copies:
    """The last copy per key started before this rank's first kernel (collective)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    bounds = sorted({v for v in comm.allgather(scan.start_lo) if v is not None})
    if not bounds:
        return no_copies()
    pieces = [(MIN, bounds[0] - 1)] + [(bounds[j], bounds[j + 1] - 1) for j in range(len(bounds) - 1)]
    mine = {i: reader.last_per_key(*pieces[i]) for i in range(len(pieces)) if i % size == rank}
    every: dict[int, Copies] = {}
    for part in comm.allgather(mine):
        every.update(part)
    if scan.start_lo is None:
        return no_copies()
    return last_per_key(_cat(*[every[i] for i in range(len(pieces)) if pieces[i][1] < scan.start_lo]))


class CopyStream:
    """The copies of the rank's span read once, in file order, beside kernels in start order."""

    def __init__(self, reader: MemcpyReader, carry: Copies, lo: int, hi: int):
        self._chunks = reader.chunks(lo, hi)
        self.known = _grow(np.zeros(0, np.int64), carry["key"])  # the link keys met so far, sorted
        self.carry = carry  # the last copy per key started before the kernels at hand, ordered by key
        self.pending = no_copies()  # the copies read since, in start order
        self._last = MIN  # the last start read
        self._more = True
        self._a = MIN
        self.held_rows = 0  # most copies held at once

    def _fold(self, a: int) -> None:
        """The copies read that started before `a` into the carry."""
        k = int(np.searchsorted(self.pending["start"], a, side="left"))
        if not k:
            return
        head, self.pending = _take(self.pending, slice(0, k)), _take(self.pending, slice(k, None))
        last = last_of_each(key_codes(self.known, head["key"]), len(self.known))
        mine = key_codes(self.known, self.carry["key"])
        keep = last[mine] < 0  # carried keys with no later copy
        rows = np.flatnonzero(last >= 0)
        merged = _cat(_take(self.carry, keep), _take(head, last[rows]))
        codes = np.concatenate([mine[keep], rows]).astype(np.int64)
        self.carry = _take(merged, np.argsort(codes, kind="stable"))

    def link(self, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
        """The linked-copy columns of kernels whose starts come after those linked before."""
        span = _span(kstart)
        if span is None:
            return _unlinked(len(kstart))
        a, b = span
        if a < self._a:
            raise Unordered()
        self._a = a
        self._fold(a)
        while self._more and (not len(self.pending["start"]) or self.pending["start"][-1] <= b):
            chunk = next(self._chunks, None)
            if chunk is None:
                self._more = False
                break
            s = chunk["start"]
            if s[0] < self._last or (len(s) > 1 and bool((s[1:] < s[:-1]).any())):
                raise Unordered()
            self._last = int(s[-1])
            self.known = _grow(self.known, chunk["key"])
            self.pending = _cat(self.pending, chunk)
            self._fold(a)
            self.held_rows = max(self.held_rows, len(self.pending["start"]))
        m = int(np.searchsorted(self.pending["start"], b, side="right"))
        copies = _cat(self.carry, _take(self.pending, slice(0, m)))
        return CopyIndex(copies, self.known).linked(kkey, kstart)


class HeldCopies:
    """The copies of the rank's span held, for kernels (or copies) out of start order."""

    def __init__(self, reader: MemcpyReader, carry: Copies, lo: int, hi: int):
        self.index = CopyIndex(_cat(carry, *reader.chunks(lo, hi)))
        self.held_rows = len(self.index.order)

    def link(self, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
        return self.index.linked(kkey, kstart)


@dataclass(frozen=True)
class Links:
    """How this rank links its kernels: the copies of its span, [lo, hi], after its carry."""

    reader: MemcpyReader
    carry: Copies
    lo: int
    hi: int
    ordered: bool  # its kernel starts are in order: the copies can be streamed

    def stream(self, held: bool = False) -> CopyStream | HeldCopies:
        """A fresh pass over the copies: streamed when the kernel starts are in order (and `held` is not asked)."""
        if held or not self.ordered:
            return HeldCopies(self.reader, self.carry, self.lo, self.hi)
        return CopyStream(self.reader, self.carry, self.lo, self.hi)


def make_links(plan: Plan, comm, scan: Scan) -> Links | None:
    """This rank's links (None without a memcpy file); collective when linking."""
    if not plan.link:
        return None
    reader = MemcpyReader(plan)
    carry = copy_carry(comm, scan, reader)
    lo = scan.start_lo if scan.start_lo is not None else 0
    hi = scan.start_hi if scan.start_hi is not None else -1
    return Links(reader, carry, lo, hi, scan.starts_ordered)
