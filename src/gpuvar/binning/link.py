"""Part of phase 3 (target): link each kernel of this rank's share to a copy of the memcpy file, batch by batch.

The link rule is gpuvar.targets.link_latest: the latest copy on the same device(+stream) started at or before the
kernel (ties: the last one in file order). A batch of kernels with starts in [a, b] needs only the last copy per
link key started before a (the "carry") and the copies started in [a, b], so no rank holds the copies of its share:
 - carry    - the sorted distinct first kernel starts of the ranks cut the time axis into pieces; each piece's
              last copy per key is computed by one rank (a streamed read of the copies in it) and allgathered, and
              a rank's carry is the pieces before its first kernel (copy_carry; collective).
 - streamed - kernels in start order (a canonical file; CopyStream): the copies of the rank's span are read once,
              in file order, alongside the batches; those before a batch are folded into the carry.
 - held     - kernels out of start order, or copies out of start order (met while streaming: Unordered): the
              copies of the rank's span are held (HeldCopies), sorted by key once.
Each row group also gets a checkpoint (its first kernel start a and the carry before a), from which the top-k rows
pass links any of its rows again from the copies in [a, row's start] (relink), on whichever rank reads it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar import targets as T
from gpuvar.binning import read
from gpuvar.binning.columns import floats, ints, open_parquet
from gpuvar.binning.plan import Plan
from gpuvar.binning.read import NULL, Scan
from gpuvar.canonical_io import from_numpy
from gpuvar.errors import InputError

# linked column -> memcpy column it takes its value from
LINKED_FROM = (("linked_copy_kind", "copy_kind"), ("linked_copy_bytes", "bytes"), ("linked_copy_duration", "duration"))
COPY = ("key", "start", "duration", "bytes", "copy_kind")  # a copy as the link keeps it (key, start: int64)
MIN, MAX = -(2**63), 2**63 - 1
Copies = dict[str, np.ndarray]
Checkpoint = tuple[int, Copies]  # (first kernel start of a row group, last copy per key started before it)


class Unordered(Exception):
    """The copies are not in start order: the rank links from held copies instead."""


def no_copies() -> Copies:
    return {c: np.zeros(0, np.int64 if c in ("key", "start") else np.float64) for c in COPY}


def _cat(*parts: Copies) -> Copies:
    parts = [p for p in parts if len(p["key"])]
    if not parts:
        return no_copies()
    return parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in COPY}


def _head(copies: Copies, k: int) -> Copies:
    return {c: v[:k] for c, v in copies.items()}


def _tail(copies: Copies, k: int) -> Copies:
    return {c: v[k:] for c, v in copies.items()}


def last_per_key(copies: Copies) -> Copies:
    """The last copy per link key (latest start; among equal starts the last in order), ordered by key."""
    order = np.lexsort((copies["start"], copies["key"]))  # stable: equal starts keep their order
    keys = copies["key"][order]
    last = order[np.flatnonzero(np.append(keys[1:] != keys[:-1], True))] if len(keys) else order
    last = last[copies["key"][last] != T.NO_KEY]
    return {c: v[last] for c, v in copies.items()}


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
        self.cols = [
            c for c in ("start", "end", "duration", "device_id", "stream_id", "bytes", "copy_kind") if c in names
        ]
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
            t = t.filter(from_numpy(keep))
            start = start[keep]
        names = self.names
        dev = floats(t.column("device_id"))
        stream = floats(t.column("stream_id")) if self.how == "stream" else None
        dur = (
            floats(t.column("duration"))
            if "duration" in names
            else floats(pc.subtract(t.column("end"), t.column("start")))
        )
        nan = np.full(t.num_rows, np.nan)
        return {
            "key": T.link_key(dev, stream, self.how),
            "start": start,
            "duration": dur,
            "bytes": floats(t.column("bytes")) if "bytes" in names else nan,
            "copy_kind": floats(t.column("copy_kind")) if "copy_kind" in names else nan,
        }

    def last_per_key(self, lo: int, hi: int, carry: Copies | None = None) -> Copies:
        """The last copy per key of `carry` followed by the copies in [lo, hi], folded a batch at a time."""
        out = carry if carry is not None else no_copies()
        for chunk in self.chunks(lo, hi):
            out = last_per_key(_cat(out, chunk))
        return out


class CopyIndex:
    """Copies sorted by (key, start) once, to link many kernels: the rule of gpuvar.targets.link_latest."""

    def __init__(self, copies: Copies):
        idx = np.flatnonzero(copies["key"] != T.NO_KEY)
        order = idx[np.lexsort((copies["start"][idx], copies["key"][idx]))]  # by key, then start, stable
        self.copies = {c: v[order] for c, v in copies.items()}
        keys = self.copies["key"]
        uniq, first = np.unique(keys, return_index=True)
        self.bounds = dict(zip(uniq.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(keys)])))

    def find(self, kkey: np.ndarray, kstart: np.ndarray) -> np.ndarray:
        """Position (in self.copies) of each kernel's linked copy; -1 where none."""
        out = np.full(len(kkey), -1, dtype=np.int64)
        if not self.bounds or not len(kkey):
            return out
        starts = self.copies["start"]
        k_order = np.argsort(kkey, kind="stable")
        k_sorted = kkey[k_order]
        ku, kfirst = np.unique(k_sorted, return_index=True)
        for key, lo, hi in zip(ku.tolist(), kfirst.tolist(), [*kfirst[1:].tolist(), len(k_order)]):
            if key == T.NO_KEY or key not in self.bounds:
                continue
            a, b = self.bounds[key]
            rows = k_order[lo:hi]
            pos = np.searchsorted(starts[a:b], kstart[rows], side="right") - 1
            found = pos >= 0
            out[rows[found]] = a + pos[found]
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

    def before(self, a: int) -> Copies:
        """The last copy per key started before `a`."""
        starts, take = self.copies["start"], []
        for lo, hi in self.bounds.values():
            j = int(np.searchsorted(starts[lo:hi], a, side="left")) - 1
            if j >= 0:
                take.append(lo + j)
        take = np.asarray(take, dtype=np.int64)
        return {c: v[take] for c, v in self.copies.items()}


def _unlinked(n: int) -> dict[str, np.ndarray]:
    return {name: np.full(n, np.nan) for name, _ in LINKED_FROM}


def _span(kstart: np.ndarray) -> tuple[int, int] | None:
    has = kstart != NULL
    if not has.any():
        return None
    s = kstart if has.all() else kstart[has]
    return int(s.min()), int(s.max())


def copy_carry(plan: Plan, comm, scan: Scan, reader: MemcpyReader) -> Copies:
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
    before = [every[i] for i in range(len(pieces)) if pieces[i][1] < scan.start_lo]
    return last_per_key(_cat(*before))


class CopyStream:
    """The copies of the rank's span read once, in file order, beside kernel batches in start order."""

    held = False

    def __init__(self, reader: MemcpyReader, carry: Copies, lo: int, hi: int):
        self.reader, self.first_carry, self.span = reader, carry, (lo, hi)
        self._chunks = reader.chunks(lo, hi)
        self.carry = carry
        self.pending = no_copies()  # copies read, started at or after the current batch's first kernel
        self._last = MIN  # the last start read
        self._more = True
        self._a = MIN
        self.checkpoints: dict[int, Checkpoint] = {}
        self.held_rows = 0  # most copies held at once (besides the carry)

    def _fold(self, a: int) -> None:
        k = int(np.searchsorted(self.pending["start"], a, side="left"))
        if k:
            self.carry = last_per_key(_cat(self.carry, _head(self.pending, k)))
            self.pending = _tail(self.pending, k)

    def link(self, group: int, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
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
            self.pending = _cat(self.pending, chunk)
            self._fold(a)
            self.held_rows = max(self.held_rows, len(self.pending["start"]))
        if group not in self.checkpoints:
            self.checkpoints[group] = (a, self.carry)
        m = int(np.searchsorted(self.pending["start"], b, side="right"))
        return CopyIndex(_cat(self.carry, _head(self.pending, m))).linked(kkey, kstart)


class HeldCopies:
    """The copies of the rank's span held, for kernels (or copies) out of start order."""

    held = True

    def __init__(self, reader: MemcpyReader, carry: Copies, lo: int, hi: int, scan: Scan):
        self.index = CopyIndex(_cat(carry, *reader.chunks(lo, hi)))
        self.held_rows = len(self.index.copies["key"])
        self.checkpoints = {
            g: (s[0], self.index.before(s[0])) for g, s in zip(scan.row_groups, scan.start_spans) if s[0] <= s[1]
        }

    def link(self, group: int, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
        return self.index.linked(kkey, kstart)


def held_instead(stream: CopyStream, scan: Scan) -> HeldCopies:
    """The same link from held copies, for a rank whose copies turned out to be out of start order."""
    return HeldCopies(stream.reader, stream.first_carry, *stream.span, scan)


def make_links(plan: Plan, comm, scan: Scan, held: bool = False) -> CopyStream | HeldCopies | None:
    """How this rank links its batches (None without a memcpy file): streamed when its kernel starts are in
    order, else held (or when `held`). Collective when linking."""
    if not plan.link:
        return None
    reader = MemcpyReader(plan)
    carry = copy_carry(plan, comm, scan, reader)
    lo = scan.start_lo if scan.start_lo is not None else 0
    hi = scan.start_hi if scan.start_hi is not None else -1
    if held or not scan.starts_ordered:
        return HeldCopies(reader, carry, lo, hi, scan)
    return CopyStream(reader, carry, lo, hi)


def relink(reader: MemcpyReader, checkpoint: Checkpoint, kstart: np.ndarray, kkey: np.ndarray) -> dict[str, np.ndarray]:
    """The linked-copy columns of kernels of one row group from its checkpoint (the top-k rows pass)."""
    span = _span(kstart)
    if span is None:
        return _unlinked(len(kstart))
    a, carry = checkpoint
    return CopyIndex(_cat(carry, *reader.chunks(a, span[1]))).linked(kkey, kstart)
