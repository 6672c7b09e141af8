"""The MPI binning job: targets, fixed-width bins on the global timeline, per-bin statistics, top-k bins.

Phases (each rank; collectives named):
 1. read     - this rank's contiguous, row-balanced share of Parquet row groups, only the needed columns,
               one row group at a time into preallocated arrays (no decode threads: one core per rank);
               exact integer duration sums per group (int64-accumulated bincount); checks whether the axis
               is non-decreasing and never null (the canonical layout: the sorted path below).
 2. means    - allgather of {group key: (sum, count)} (Python ints, merged in sorted key order): exact, so the
               means are identical for any rank count.
 3. target   - kernel_variability in place; memory_stall links each kernel to a copy read by interval:
               rank r reads the memcpy rows with start in [first start of r, first start of r+1) and gets the
               last copy per link key of all earlier intervals from an allgather (the "carry").
 4. exchange - allgather of each share's axis span; bin = (axis - global min) // width.
               Sorted path (every share ordered and the shares in rank order): bins stay (id, first row) runs
               found by binary search, a bin belongs to the lowest rank holding rows of it, so only the rows of
               a share's first bin move, to the rank before (alltoall of one bin's rows).
               General path (a file not sorted by start, null start times): allreduce of per-bin counts, bins
               go to ranks in contiguous ranges balanced by rows, rows move with Alltoallv on numpy buffers.
 5. stats    - the owner computes every statistic of its bins (gpuvar.binning.stats), optionally on a thread
               pool (--workers-per-rank); rank 0 gathers them, ranks bins by the target's variance.
 6. top-k    - rank 0 broadcasts the top-k bin ids; each rank names its rows in them (row group, row), the
               row groups to re-read (the needed columns, up to the last needed row) are spread over all ranks
               by decode cost, and rank 0 gathers the pieces and writes them in file order.
Determinism: the rows of a bin reach its owner in file order whatever the rank count and floating sums are
done by that owner only, so bins.parquet and topk_rows.parquet are byte-identical for any number of ranks.
Memory bound per rank: its share as target (float64) + row flag = 9 bytes/row, plus until the bins are found
the axis (8) and group code (4), plus on the general path the bin id (int32) and the received rows of the
bins it owns (12 bytes/row, about one share) during the statistics; features add 8 bytes/row each, twice.
Worker pool: numpy's sorts/partitions release the GIL, so threads scale the statistics phase on a many-core
node where a few ranks per node each own many bins (fewer ranks = fewer exchanges and smaller collectives).
On a 2-core machine with 2 ranks there is no spare core, so keep --workers-per-rank 1 there.
Start-up: the ranks import numpy, pyarrow and mpi4py only (no pandas, no pydantic: Array.to_numpy and
pa.array(ndarray) would import pandas, so numbers cross between numpy and Arrow through the buffers).
Failure: any exception on a rank is logged as `rank N: error: ...` and the job is aborted (MPI Abort), so
mpiexec/srun exits non-zero at once instead of hanging in the next collective. Test hook:
GPUVAR_BIN_FAIL_ON_RANK=N makes rank N raise after reading, =N:kill makes it die by SIGKILL there (as the
OOM killer would); used only by the tests.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar import targets as T
from gpuvar.binning.partition import bin_owners, bin_width, check_bins, row_groups_for_rank
from gpuvar.binning.selection import explain_selection
from gpuvar.binning.stats import STATS, bin_starts, bin_stats_at, bin_stats_parallel
from gpuvar.canonical_io import from_numpy, numpy_view, strings_from_codes, write_canonical, write_json
from gpuvar.errors import GpuvarError, InputError, StageError

log = logging.getLogger("gpuvar.binning")
FAIL_ENV = "GPUVAR_BIN_FAIL_ON_RANK"
LINKED = ("linked_copy_kind", "linked_copy_bytes", "linked_copy_duration")
ID_COLUMNS = ("kernel_name", "kernel_short_name", "launch_config", "launch_id", "start", "end", "duration",
              "device_id", "stream_id")  # fmt: skip
_NULL = np.iinfo(np.int64).min


def _inject_failure(rank: int) -> None:
    """The test hook of the module docstring: raise, or die without a word, on the named rank."""
    target, _, how = os.environ.get(FAIL_ENV, "").partition(":")
    if target != str(rank):
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise StageError(f"test failure injected by {FAIL_ENV}={rank}")
_CHUNK = 1 << 22  # rows per vectorised step where a full-size temporary would raise the memory peak


@dataclass
class BinOptions:
    kernels: Path
    memcpy: Path | None = None
    target: str = "kernel_variability"
    group: str = "kernel"
    link: str = "stream"
    bin_width: str = "10ms"
    top_k: int = 20
    features: str = "auto"  # 'auto' | 'none' | 'f1,f2'
    workers_per_rank: int = 1
    output: Path = Path("bin-out")
    launch_bin_width: int | None = None  # used instead of a time width when the trace has no timestamps
    sample_bins: int | None = None  # random bins whose rows go to sample_rows.parquet (None: top_k; 0: none)
    sample_seed: int = 0


def _has_timeline(pf) -> bool:
    """False when every `start` is null (per the Parquet statistics, no data read): Nsight Compute data."""
    md, names = pf.metadata, pf.schema_arrow.names
    if "start" not in names or md.num_rows == 0:
        return "start" in names
    index = pf.schema.names.index("start")
    nulls = 0
    for rg in range(md.num_row_groups):
        stats = md.row_group(rg).column(index).statistics
        if stats is None or not stats.has_null_count:
            return True
        nulls += stats.null_count
    return nulls < md.num_rows


class _Collective(GpuvarError):
    """A user error every rank detects identically at the same point: exit 2 with one line, no abort."""


@dataclass
class Share:
    """This rank's rows (its row groups, in file order)."""

    row_groups: list[int]
    offsets: np.ndarray  # local index of each row group's first row, plus the total
    ok: np.ndarray
    bins: np.ndarray | None = None  # per row (-1: no target); the general path
    bin_ids: np.ndarray | None = None  # sorted path: each non-empty bin's id and first row (runs of rows)
    bin_starts: np.ndarray | None = None
    target: np.ndarray | None = None
    features: dict[str, np.ndarray] = field(default_factory=dict)
    linked: dict[str, np.ndarray] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)


class Timer:
    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, phase: str, rank: int) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(now - self._t, 4)
        self._t = now
        if rank == 0:
            log.info("%s: %.3f s", phase, self.seconds[phase])


def _open(path: Path, **kw) -> pq.ParquetFile:
    if not Path(path).is_file():
        raise InputError(path, "no such file")
    try:
        return pq.ParquetFile(path, **kw)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(path, f"not a readable Parquet file ({exc})") from None


def _valid(arr: pa.Array) -> np.ndarray:
    """Validity bitmap as a bool array."""
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=arr.offset + len(arr))[arr.offset :].astype(bool)


def _ints(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 values with nulls as 0, validity mask or None when nothing is null)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if not pa.types.is_integer(col.type):
        col = pc.cast(col, pa.int64(), safe=False)
    if col.null_count == 0:
        return numpy_view(col).astype(np.int64, copy=False), None
    valid = _valid(col)
    return np.where(valid, numpy_view(col), 0).astype(np.int64), valid  # values under nulls are undefined: zero them


def _floats(col) -> np.ndarray:
    """float64 values, NaN for nulls."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    col = pc.cast(col, pa.float64(), safe=False)
    if col.null_count:
        col = pc.fill_null(col, np.nan)
    return numpy_view(col)


def _feature_list(opts: BinOptions, names: list[str], link: bool) -> list[str]:
    """Numeric columns to compute per-bin statistics of (besides the target)."""
    text = opts.features.strip()
    if text == "none" or text == "":
        return []
    if text == "auto":
        return ["duration"] if "duration" in names else []
    wanted = [f.strip() for f in text.split(",") if f.strip()]
    allowed = set(names) | (set(LINKED) if link else set())
    unknown = [f for f in wanted if f not in allowed]
    if unknown:
        raise _Collective(f"--features: unknown column(s) {', '.join(unknown)}")
    return list(dict.fromkeys(wanted))


def _dictionary(col: pa.ChunkedArray) -> pa.DictionaryArray:
    col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col if isinstance(col, pa.DictionaryArray) else pc.dictionary_encode(col)


def _group_codes(table: pa.Table, group: str, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray | None]:
    """Rank-local group code per row (grows `index`), and which rows have a kernel name (None: all)."""
    name = _dictionary(table.column("kernel_name"))
    names = name.dictionary.to_pylist()
    if group == "kernel":
        lut = np.array([index.setdefault(n, len(index)) for n in names] or [0], dtype=np.int32)
        indices = name.indices
        if indices.null_count == 0:  # the indices straight from Arrow's buffer: no int64 copy
            return lut[numpy_view(indices)], None
        idx, valid = _ints(indices)
        return lut[idx], valid
    idx, valid = _ints(name.indices)
    lc = _dictionary(table.column("launch_config"))
    lidx, lvalid = _ints(lc.indices)
    configs = lc.dictionary.to_pylist()
    pair = idx * (len(configs) + 1) + (lidx if lvalid is None else np.where(lvalid, lidx, len(configs)))
    uniq, inverse = np.unique(pair, return_inverse=True)
    lut = []
    for p in uniq.tolist():
        n, c = divmod(p, len(configs) + 1)
        config = configs[c] if c < len(configs) else None
        lut.append(index.setdefault(T.group_key(names[n] if names else "", config, "launch_config"), len(index)))
    return np.asarray(lut, dtype=np.int32)[inverse], valid


class Job:
    def __init__(self, opts: BinOptions, comm):
        self.opts, self.comm = opts, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timer = Timer()
        self.width, self.unit = bin_width(opts.bin_width)
        T.check_choice(opts.target, T.TARGETS, "target")
        T.check_choice(opts.group, T.GROUPS, "group")
        T.check_choice(opts.link, T.LINKS, "link")
        if opts.top_k < 1:
            raise GpuvarError(f"--top-k must be at least 1, got {opts.top_k}")
        if opts.workers_per_rank < 1:
            raise GpuvarError(f"--workers-per-rank must be at least 1, got {opts.workers_per_rank}")
        names = _open(opts.kernels).schema_arrow.names
        if self.unit == "ns" and opts.launch_bin_width and not _has_timeline(_open(opts.kernels)):
            log.info("%s has no kernel start times (Nsight Compute data): binning over launch order, %d launches "
                     "per bin, instead of %s", opts.kernels, opts.launch_bin_width, opts.bin_width)
            self.width, self.unit = bin_width(str(int(opts.launch_bin_width)))
        self.axis = "start" if self.unit == "ns" else "launch_id"
        self.pf = _open(opts.kernels, read_dictionary=[c for c in ("kernel_name", "launch_config") if c in names])
        if opts.target == "memory_stall" and opts.memcpy is None:
            raise GpuvarError("--target memory_stall needs --memcpy MEMCPY.parquet")
        self.do_link = opts.memcpy is not None
        if self.do_link:
            _open(opts.memcpy)
        need = ["kernel_name", "duration", self.axis] + (["launch_config"] if opts.group == "launch_config" else [])
        if self.do_link:
            need += ["start", "device_id"] + (["stream_id"] if opts.link == "stream" else [])
        missing = [c for c in dict.fromkeys(need) if c not in names]
        if missing:
            raise InputError(opts.kernels, f"missing column(s) {', '.join(missing)} (not a canonical kernels file?)")
        self.features = _feature_list(opts, names, self.do_link)
        self.columns = list(dict.fromkeys(need + [f for f in self.features if f in names]))

    # ---- phase 1: read ---------------------------------------------------------------------------------
    def read(self) -> tuple[Share, dict]:
        md = self.pf.metadata
        rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        groups = row_groups_for_rank(rows, self.rank, self.size)
        offsets = np.cumsum([0, *[rows[g] for g in groups]])
        n = int(offsets[-1])
        share = Share(groups, offsets, np.ones(n, bool))
        self.axis_v = np.empty(n, np.int64)
        self.axis_lo, self.axis_hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        self.ordered = True  # axis non-decreasing over the share and never null: the sorted fast path
        self.dur = np.empty(n, np.float64)
        self.codes = np.empty(n, np.int32)
        if self.do_link:
            self.kstart = self.axis_v if self.axis == "start" else np.empty(n, np.int64)
            self.kkey = np.empty(n, np.int64)
        for f in self.features:
            if f not in LINKED:
                share.features[f] = np.empty(n, np.float64)
        index: dict[str, int] = {}
        self.sums, self.counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        for i, g in enumerate(groups):
            a, b = int(offsets[i]), int(offsets[i + 1])
            try:  # one core per rank: Arrow's decode threads would only contend with the other ranks
                t = self.pf.read_row_group(g, columns=self.columns, use_threads=False)
            except (OSError, pa.ArrowException) as exc:
                raise InputError(self.opts.kernels, f"row group {g} unreadable ({exc})") from None
            self._fill(t, share, a, b, index)
        self.index = index
        return share, self._group_totals(index)

    def _group_totals(self, index: dict[str, int]) -> dict[str, tuple[int, int]]:
        return {key: (int(self.sums[code]), int(self.counts[code])) for key, code in index.items()}

    def _add_group_sums(self, codes: np.ndarray, dur: np.ndarray, fdur: np.ndarray, n_codes: int) -> None:
        """Exact integer sum and count of one row group's durations per group code (int64 accumulators).

        float64 bincount is exact while every partial sum stays below 2**53 (durations are whole ns, and a
        row group is ~1 M rows); otherwise the group's int64 durations are summed per code after a sort.
        fdur: the same durations as float64 (the weights bincount wants)."""
        if len(self.sums) < n_codes:
            self.sums = np.concatenate([self.sums, np.zeros(n_codes - len(self.sums), np.int64)])
            self.counts = np.concatenate([self.counts, np.zeros(n_codes - len(self.counts), np.int64)])
        if not len(dur):
            return
        codes = codes.astype(np.intp, copy=False)  # what bincount works on: convert once, not per call
        self.counts[:n_codes] += np.bincount(codes, minlength=n_codes)
        if max(-int(dur.min()), int(dur.max())) * len(dur) < 2**53:
            self.sums[:n_codes] += np.bincount(codes, weights=fdur, minlength=n_codes).astype(np.int64)
            return
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        firsts = np.flatnonzero(np.diff(sorted_codes, prepend=-1))
        self.sums[sorted_codes[firsts]] += np.add.reduceat(dur[order], firsts)

    def _fill(self, t: pa.Table, share: Share, a: int, b: int, index) -> None:
        ok = share.ok[a:b]
        axis, valid = _ints(t.column(self.axis))
        self.axis_v[a:b] = axis
        if valid is None and len(axis):
            if self.ordered and bool((axis[1:] >= axis[:-1]).all()) and (a == 0 or axis[0] >= self.axis_v[a - 1]):
                lo, hi = int(axis[0]), int(axis[-1])
            else:
                self.ordered = False
                lo, hi = int(axis.min()), int(axis.max())
        else:
            self.ordered = self.ordered and not len(axis)
            lo, hi = _masked_min_max(axis, valid if valid is not None else np.ones(len(axis), bool))
        # the timeline spans every kernel, with a target or not
        self.axis_lo, self.axis_hi = min(self.axis_lo, lo), max(self.axis_hi, hi)
        if valid is not None:
            self._drop(share, ok, ~valid, "no start timestamp" if self.axis == "start" else "no launch_id")
        dur, dvalid = _ints(t.column("duration"))
        self.dur[a:b] = dur
        if dvalid is not None:
            self._drop(share, ok, ~dvalid, "no duration")
        codes, nvalid = _group_codes(t, self.opts.group, index)
        self.codes[a:b] = codes
        if nvalid is not None:
            self._drop(share, ok, ~nvalid, "no kernel_name")
        if ok.all():
            self._add_group_sums(codes, dur, self.dur[a:b], len(index))
        else:
            self._add_group_sums(codes[ok], dur[ok], self.dur[a:b][ok], len(index))
        if self.do_link:
            start, svalid = _ints(t.column("start"))
            self.kstart[a:b] = start if svalid is None else np.where(svalid, start, _NULL)
            dev = _floats(t.column("device_id"))
            stream = _floats(t.column("stream_id")) if self.opts.link == "stream" else None
            key = T.link_key(dev, stream, self.opts.link)
            self.kkey[a:b] = key if svalid is None else np.where(svalid, key, T.NO_KEY)
        for f, arr in share.features.items():
            arr[a:b] = _floats(t.column(f))

    @staticmethod
    def _drop(share: Share, ok: np.ndarray, bad: np.ndarray, reason: str) -> None:
        newly = bad & ok
        k = int(newly.sum())
        if k:
            share.reasons[reason] += k
            ok &= ~newly

    # ---- phase 2: means --------------------------------------------------------------------------------
    def means(self, totals: dict) -> np.ndarray:
        merged_s: dict[str, int] = {}
        merged_c: dict[str, int] = {}
        for part in self.comm.allgather(totals):
            for key, (s, c) in part.items():
                merged_s[key] = merged_s.get(key, 0) + s
                merged_c[key] = merged_c.get(key, 0) + c
        means = T.group_means(merged_s, merged_c)
        lut = np.full(max(len(self.index), 1), np.nan)
        for key, code in self.index.items():
            lut[code] = means.get(key, np.nan)
        self.n_groups = len(means)
        return lut

    # ---- phase 3: target -------------------------------------------------------------------------------
    def target(self, share: Share, lut: np.ndarray) -> None:
        tgt = self.dur  # computed in place, chunk by chunk
        if self.do_link:
            self._link(share)
        for a in range(0, len(tgt), _CHUNK):
            sl = slice(a, a + _CHUNK)
            if self.opts.target == "kernel_variability":
                tgt[sl] -= lut[self.codes[sl]]
            else:
                tgt[sl] = np.abs(tgt[sl] - share.linked["linked_copy_duration"][sl])
        if self.opts.target == "memory_stall":
            self._drop(share, share.ok, np.isnan(share.linked["linked_copy_duration"]), T.NO_LINK_REASON[self.opts.link])
        if not share.ok.all():
            tgt[~share.ok] = np.nan
        share.target = tgt

    def _link(self, share: Share) -> None:
        starts = np.where(self.kstart != _NULL, self.kstart, np.iinfo(np.int64).max)
        mine = int(starts.min()) if len(starts) and (self.kstart != _NULL).any() else None
        firsts = self.comm.allgather(mine)
        have = [r for r, v in enumerate(firsts) if v is not None]
        lo = -(2**63) if not have or self.rank <= have[0] else firsts[self.rank]
        later = [firsts[r] for r in have if r > self.rank]
        hi = min(later) if later else 2**63 - 1
        if mine is None:
            lo = hi = 0  # this rank links nothing: reads no copies
        m = self._read_memcpy(lo, hi)
        carry = self._carry(m)
        key = np.concatenate([carry["key"], m["key"]])
        mstart = np.concatenate([carry["start"], m["start"]])
        link = T.link_latest(self.kkey, self.kstart, key, mstart)
        for name, col in (("linked_copy_kind", "copy_kind"), ("linked_copy_bytes", "bytes"),
                          ("linked_copy_duration", "duration")):  # fmt: skip
            values = np.concatenate([carry[col], m[col]])
            out = np.full(len(link), np.nan)
            out[link >= 0] = values[link[link >= 0]]
            share.linked[name] = out
        for f in self.features:
            if f in LINKED:
                share.features[f] = share.linked[f]

    def _read_memcpy(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        path = self.opts.memcpy
        pf = _open(path)
        names = pf.schema_arrow.names
        need = ["start", "device_id"] + (["stream_id"] if self.opts.link == "stream" else [])
        missing = [c for c in need if c not in names] + ([] if {"duration"} & set(names) or "end" in names else ["duration"])
        if missing:
            raise InputError(path, f"missing column(s) {', '.join(missing)} (not a canonical memcpy file?)")
        cols = [c for c in ("start", "end", "duration", "device_id", "stream_id", "bytes", "copy_kind") if c in names]
        parts = []
        si = names.index("start")
        for g in range(pf.metadata.num_row_groups):
            st = pf.metadata.row_group(g).column(si).statistics
            if lo >= hi or (st is not None and st.has_min_max and (st.max < lo or st.min >= hi)):
                continue
            t = pf.read_row_group(g, columns=cols, use_threads=False)
            s, valid = _ints(t.column("start"))
            keep = (s >= lo) & (s < hi)
            parts.append(t.filter(from_numpy(keep if valid is None else keep & valid)))
        t = pa.concat_tables(parts) if parts else pf.schema_arrow.empty_table().select(cols)
        start, _ = _ints(t.column("start"))
        dev = _floats(t.column("device_id"))
        stream = _floats(t.column("stream_id")) if self.opts.link == "stream" else None
        if "duration" in names:
            dur = _floats(t.column("duration"))
        else:
            dur = _floats(pc.subtract(t.column("end"), t.column("start")))
        nanc = np.full(t.num_rows, np.nan)
        return {
            "key": T.link_key(dev, stream, self.opts.link),
            "start": start,
            "duration": dur,
            "bytes": _floats(t.column("bytes")) if "bytes" in names else nanc,
            "copy_kind": _floats(t.column("copy_kind")) if "copy_kind" in names else nanc,
        }

    def _carry(self, m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Last copy per key of all earlier ranks' intervals (later intervals override earlier ones)."""
        order = np.lexsort((m["start"], m["key"]))
        keys = m["key"][order]
        last = order[np.flatnonzero(np.append(keys[1:] != keys[:-1], True))] if len(keys) else order
        last = last[m["key"][last] != T.NO_KEY]
        mine = {c: m[c][last] for c in m}
        merged: dict[int, tuple] = {}
        for r, part in enumerate(self.comm.allgather(mine)):
            if r >= self.rank:
                break
            for i, k in enumerate(part["key"].tolist()):
                merged[k] = tuple(part[c][i] for c in m)
        cols = list(m)
        rows = [merged[k] for k in sorted(merged)]
        return {c: np.array([r[j] for r in rows], dtype=m[c].dtype) for j, c in enumerate(cols)}

    # ---- phase 4: exchange -----------------------------------------------------------------------------
    def to_bins(self, share: Share) -> None:
        ok = share.ok
        axis = self.axis_v
        # bins start at the first kernel of the trace, not the first with a target, so the bins of
        # kernel_variability and memory_stall of one trace are the same time windows
        spans = self.comm.allgather((self.axis_lo, self.axis_hi, self.ordered, len(axis)))
        self.gmin = min(lo for lo, _, _, _ in spans)
        gmax = max(hi for _, hi, _, _ in spans)
        held = [(lo, hi) for lo, hi, _, n in spans if n]
        # sorted file (the canonical layout): every share ordered and shares in rank order
        self.fast = all(o for _, _, o, _ in spans) and all(a[1] <= b[0] for a, b in zip(held, held[1:]))
        if self.gmin > gmax:
            self.n_bins = 0
        else:
            self.n_bins = (gmax - self.gmin) // self.width + 1
            try:
                check_bins(self.n_bins, self.width, self.unit)
            except GpuvarError as exc:
                raise _Collective(str(exc)) from None
        if self.fast:  # bins as (id, first row) runs: no per-row bin array, no exchange beyond boundary bins
            share.bin_ids, share.bin_starts = self._runs(axis)
            return  # the axis and group codes stay: the top-k rows take them instead of decoding them again
        bins = np.full(len(axis), -1, dtype=np.int32 if self.n_bins < 2**31 else np.int64)
        for a in range(0, len(axis), _CHUNK):  # chunked: no full-size temporaries
            sl = slice(a, a + _CHUNK)
            b = (axis[sl] - self.gmin) // self.width
            bins[sl] = np.where(ok[sl], b, -1)
        share.bins = bins
        del self.axis_v, self.codes

    def _runs(self, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(id, index of the first row) of each non-empty bin of a non-decreasing axis: bin edges found by
        binary search (O(bins log rows)) instead of a division per row."""
        n = len(axis)
        if not n:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        b0, b1 = (int(axis[0]) - self.gmin) // self.width, (int(axis[-1]) - self.gmin) // self.width
        if b1 - b0 >= n:  # more bins than rows: a division per row is cheaper
            return bin_starts((axis - self.gmin) // self.width)
        edges = self.gmin + np.arange(b0 + 1, b1 + 1, dtype=np.int64) * self.width
        starts = np.concatenate(([0], np.searchsorted(axis, edges, side="left"))).astype(np.int64)
        nonempty = np.diff(np.append(starts, n)) > 0
        return np.arange(b0, b1 + 1, dtype=np.int64)[nonempty], starts[nonempty]

    def _exchange_runs(self, share: Share) -> list:
        """Sorted file: a bin belongs to the lowest rank holding rows of it, so only the rows of a share's first
        bin can move (to the rank before, whose last bin it continues), appended after the owner's own rows in
        rank order, which is file order. Returns ('runs', ids, starts, columns) segments in bin order."""
        ids, starts, n = share.bin_ids, share.bin_starts, len(share.ok)
        cols = {"__target": share.target, **share.features}
        if not share.ok.all():  # a row without a target is left out of every statistic, like the general path
            cols = {k: v if k == "__target" else np.where(share.ok, v, np.nan) for k, v in cols.items()}
        runs = self.comm.allgather((int(ids[0]), int(ids[-1])) if len(ids) else None)

        def owner(r: int) -> int:  # owner of rank r's first bin
            return min(q for q in range(r + 1) if runs[q] is not None and runs[q][1] >= runs[r][0])

        me = self.rank
        first_end = int(starts[1]) if len(ids) > 1 else n
        send = [None] * self.size
        give = len(ids) > 0 and owner(me) != me
        if give:
            send[owner(me)] = {k: v[:first_end] for k, v in cols.items()}
        got = [part for part in self.comm.alltoall(send) if part is not None]  # arrives in rank order
        lo = 1 if give else 0
        hi = len(ids) - 1 if got else len(ids)
        segments = []
        if hi > lo:
            a, b = int(starts[lo]), (int(starts[hi]) if hi < len(ids) else n)
            segments.append(("runs", ids[lo:hi], starts[lo:hi] - a, {k: v[a:b] for k, v in cols.items()}))
        if got:
            a = int(starts[-1])
            joined = {k: np.concatenate([v[a:], *[p[k] for p in got]]) for k, v in cols.items()}
            segments.append(("runs", ids[-1:], np.zeros(1, np.int64), joined))
        return segments

    def exchange(self, share: Share) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Rows to their bin's owner; returns bin-aligned segments (bins non-decreasing within and across).

        Sorted input (the canonical layout): each destination's rows are one slice, sent straight from the
        share's arrays (no send copy) and the rows a rank keeps are never copied: only the received rows and
        the few kept rows of bins shared with a neighbour are concatenated.
        """
        from mpi4py import MPI

        if self.fast:
            return self._exchange_runs(share)
        idx = np.flatnonzero(share.ok) if not share.ok.all() else None
        bins = share.bins if idx is None else share.bins[idx]
        cols = {"__target": share.target, **share.features}
        cols = {k: (v if idx is None else v[idx]) for k, v in cols.items()}
        if self.size == 1:  # one rank owns every bin: no counts, no exchange
            return [(bins, cols)] if _is_sorted(bins) else [_sorted_segment(bins, cols)]
        local_sorted = _is_sorted(bins)
        if local_sorted:  # counts from bin edges: O(bins log rows) instead of a pass over the rows
            counts = np.diff(np.searchsorted(bins, np.arange(self.n_bins + 1), side="left")).astype(np.int64)
        else:
            counts = np.bincount(bins, minlength=self.n_bins).astype(np.int64)
        total = np.empty_like(counts)
        self.comm.Allreduce(counts, total, op=MPI.SUM)
        del counts
        owners = bin_owners(total, self.size)
        first_bin = np.searchsorted(owners, np.arange(self.size + 1), side="left")  # owners is non-decreasing
        if local_sorted:
            cut = np.searchsorted(bins, first_bin, side="left")
        else:  # not sorted by start: group rows by owner first (costs a copy)
            order = np.argsort(owners[bins], kind="stable")
            bins, cols = bins[order], {k: v[order] for k, v in cols.items()}
            cut = np.searchsorted(owners[bins], np.arange(self.size + 1), side="left")
        send = np.diff(cut).astype(np.int64)
        recv = np.array(self.comm.alltoall(send.tolist()), dtype=np.int64)
        me = self.rank
        send[me] = recv[me] = 0  # kept rows stay where they are
        r_bins = self._alltoallv(bins, cut[:-1], send, recv)
        r_cols = {k: self._alltoallv(v, cut[:-1], send, recv) for k, v in cols.items()}
        n_low = int(recv[:me].sum())
        own = slice(int(cut[me]), int(cut[me + 1]))
        low = (r_bins[:n_low], {k: v[:n_low] for k, v in r_cols.items()})
        own = (bins[own], {k: v[own] for k, v in cols.items()})
        high = (r_bins[n_low:], {k: v[n_low:] for k, v in r_cols.items()})
        return _merge_segments(low, own, high, own_sorted=local_sorted)

    def _alltoallv(self, arr: np.ndarray, sdis: np.ndarray, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
        from mpi4py import MPI

        arr = np.ascontiguousarray(arr)
        typ = MPI._typedict[arr.dtype.char]
        rdis = np.concatenate(([0], np.cumsum(recv)[:-1]))
        out = np.empty(int(recv.sum()), dtype=arr.dtype)
        self.comm.Alltoallv([arr, (send.tolist(), [int(x) for x in sdis]), typ],
                            [out, (recv.tolist(), rdis.tolist()), typ])  # fmt: skip
        return out

    # ---- phase 5: stats --------------------------------------------------------------------------------
    def stats(self, segments) -> dict[str, np.ndarray]:
        """Statistics of every bin of the bin-aligned segments, concatenated in bin order."""
        parts = []
        for seg in segments:
            if isinstance(seg[0], str):  # ("runs", ids, starts, columns) from the sorted path
                if len(seg[1]):
                    parts.append(self._runs_stats(seg[1], seg[2], dict(seg[3])))
            elif len(seg[0]):
                parts.append(self._segment_stats(seg[0], dict(seg[1])))
        if not parts:
            return self._segment_stats(np.zeros(0, np.int64), {"__target": np.zeros(0), **{f: np.zeros(0) for f in self.features}})
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def _segment_stats(self, bins: np.ndarray, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        w = self.opts.workers_per_rank
        return self._with_features(lambda v: bin_stats_parallel(v, bins, w), cols)

    def _runs_stats(self, ids: np.ndarray, starts: np.ndarray, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        w = self.opts.workers_per_rank
        return self._with_features(lambda v: bin_stats_at(v, ids, starts, w), cols)

    @staticmethod
    def _with_features(stats_of, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The target's statistics per bin, then each feature's, aligned to the target's bins."""
        base = stats_of(cols.pop("__target"))
        for f, values in cols.items():
            fs = stats_of(values)
            pos = np.searchsorted(fs["bin"], base["bin"])
            hit = (pos < len(fs["bin"])) & (fs["bin"][np.minimum(pos, max(len(fs["bin"]) - 1, 0))] == base["bin"]) if len(fs["bin"]) else np.zeros(len(base["bin"]), bool)
            for s in STATS:
                col = np.zeros(len(base["bin"]), np.int64) if s == "count" else np.full(len(base["bin"]), np.nan)
                col[hit] = fs[s][pos[hit]]
                base[f"{f}_{s}"] = col
        return base

    def bins_table(self, parts: list[dict]) -> pa.Table:
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        ids = merged.pop("bin").astype(np.int64)
        var = merged["var"]
        order = np.lexsort((ids, np.where(np.isnan(var), np.inf, -var)))
        rank = np.empty(len(ids), np.int64)
        rank[order] = np.arange(1, len(ids) + 1)
        start = self.gmin + ids * self.width
        cols = {"bin": ids, "bin_start": start, "bin_end": start + self.width}
        cols.update(merged)
        cols["variance_rank"] = rank
        cols["in_top_k"] = rank <= self.opts.top_k
        top = rank <= self.opts.top_k
        self.topk = np.sort(ids[top])
        self.sample = random_bins(ids, var, self.opts.sample_bins, self.opts.top_k, self.opts.sample_seed)
        cols["in_random_sample"] = np.isin(ids, self.sample)
        return pa.Table.from_arrays([from_numpy(v) for v in cols.values()], names=list(cols))

    # ---- phase 6: top-k rows ---------------------------------------------------------------------------
    def _topk_hits(self, share: Share, topk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(share row index, bin id) of this share's rows with a target in the top-k bins, in file order."""
        if self.fast:  # each top-k bin is one run of rows
            ids, starts = share.bin_ids, share.bin_starts
            sel = np.flatnonzero(np.isin(ids, topk))
            ends = np.append(starts[1:], len(share.ok))[sel]
            hit = np.concatenate([np.arange(a, b) for a, b in zip(starts[sel].tolist(), ends.tolist())] or [[]])
            hit = hit.astype(np.int64)
            bins = np.repeat(ids[sel], ends - starts[sel])
            if not share.ok.all():
                keep = share.ok[hit]
                hit, bins = hit[keep], bins[keep]
            return hit, bins
        wanted = np.zeros(self.n_bins + 1, bool)  # index -1 (rows without a bin) hits the last, False entry
        wanted[topk] = True
        hit = np.flatnonzero(wanted[share.bins])
        return hit, share.bins[hit].astype(np.int64)

    def topk_rows(self, share: Share, topk: np.ndarray) -> pa.Table | None:
        """The rows of the top-k bins with their target, linked-copy values and bin, on rank 0 (None elsewhere).

        Each rank names the rows of its share (row group, row) and keeps their computed values; the row groups
        to re-read are then spread over all ranks by decode cost (rows up to the last one needed: a column
        chunk decodes from its start), since the top-k bins often sit in a few ranks' shares; rank 0 puts the
        pieces back in file order. Collective: every rank calls it."""
        empty = np.empty(0, np.int64)
        hit, b = self._topk_hits(share, topk) if len(topk) and len(share.ok) else (empty, empty)
        g_of = np.searchsorted(share.offsets, hit, side="right") - 1
        groups = np.asarray(share.row_groups, dtype=np.int64)[g_of] if len(hit) else empty
        local = hit - share.offsets[g_of] if len(hit) else empty
        wanted = {}
        for g in np.unique(groups).tolist():
            wanted[g] = local[groups == g]
        for part in self.comm.allgather(wanted if self.size > 1 else {}):
            wanted.update(part)  # a row group belongs to one share
        if not wanted:
            return None
        schema = self.pf.schema_arrow
        cols = schema.names if self.opts.features.strip() in ("auto", "") else [
            c for c in dict.fromkeys([*ID_COLUMNS, *self.features]) if c in schema.names]  # fmt: skip
        known = self._known_columns(share, hit, cols)  # taken from memory, not decoded again
        todo = [c for c in cols if c not in known]
        mine = _spread({g: int(r[-1]) + 1 for g, r in wanted.items()}, self.size)[self.rank]
        pieces = {}
        if mine and todo:
            strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
            pf = _open(self.opts.kernels, read_dictionary=strings)  # decode strings once per dictionary, not per row
            for g in mine:
                pieces[g] = [_plain_strings(p) for p in _take_rows(pf, g, todo, wanted[g])]
        computed = {self.opts.target: share.target[hit], **{k: v[hit] for k, v in share.linked.items()}, "bin": b}
        parts = self.comm.gather((pieces, known, computed), root=0)
        if self.rank != 0:
            return None
        read = {}
        for p, _, _ in parts:
            read.update(p)
        if todo:
            t = pa.concat_tables([piece for g in sorted(read) for piece in read[g]])
        else:
            t = pa.Table.from_arrays([], names=[])
        for name in cols:  # the known columns back at their place, in the file's type
            if name in known:
                column = pa.concat_arrays([k[name] for _, k, _ in parts])
                typ = schema.field(name).type  # (self.pf reads kernel_name as a dictionary: the value type)
                typ = typ.value_type if pa.types.is_dictionary(typ) else typ
                if column.type != typ:
                    column = column.cast(typ)
                t = t.add_column(cols.index(name), name, column) if t.num_columns else pa.Table.from_arrays(
                    [column], names=[name])
        # only `bin` (which the causal step ignores): a rank column would look like a feature; join bins.parquet
        for name in computed:
            t = t.append_column(name, from_numpy(np.concatenate([c[name] for _, _, c in parts])))
        return t

    def _known_columns(self, share: Share, hit: np.ndarray, cols: list[str]) -> dict[str, pa.Array]:
        """Columns of the hit rows this rank still holds (sorted path): the axis, and kernel_name by code."""
        if not self.fast:
            return {}
        known = {}
        if self.axis in cols:
            known[self.axis] = from_numpy(self.axis_v[hit])
        if self.opts.group == "kernel" and "kernel_name" in cols:
            known["kernel_name"] = strings_from_codes(self.codes[hit], list(self.index))
        return known


def _spread(cost: dict[int, int], size: int) -> list[list[int]]:
    """Row groups per rank, largest cost first to the least-loaded rank (ties: lowest rank); deterministic."""
    load, plan = [0] * size, [[] for _ in range(size)]
    for g in sorted(cost, key=lambda g: (-cost[g], g)):
        r = min(range(size), key=lambda r: (load[r], r))
        load[r] += cost[g]
        plan[r].append(g)
    return [sorted(p) for p in plan]


def _take_rows(pf: pq.ParquetFile, group: int, cols: list[str], rows: np.ndarray, batch: int = 1 << 16) -> list:
    """Rows (sorted indices) of one row group, decoding batch by batch and stopping after the last one."""
    out, first = [], 0
    for rb in pf.iter_batches(batch_size=batch, row_groups=[group], columns=cols, use_threads=False):
        last = first + rb.num_rows
        sel = rows[(rows >= first) & (rows < last)]
        if len(sel):
            out.append(pa.Table.from_batches([rb]).take(from_numpy(sel - first)))
        first = last
        if first > rows[-1]:
            break
    return out


def _masked_min_max(a: np.ndarray, ok: np.ndarray) -> tuple[int, int]:
    """min and max of a[ok], chunk by chunk (extreme sentinels when nothing is ok)."""
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for i in range(0, len(a), _CHUNK):
        c, m = a[i : i + _CHUNK], ok[i : i + _CHUNK]
        if not m.all():
            c = c[m]
        if len(c):
            lo, hi = min(lo, int(c.min())), max(hi, int(c.max()))
    return lo, hi


def _is_sorted(a: np.ndarray, step: int = 1 << 22) -> bool:
    """Non-decreasing? (chunked: no full-size temporary)."""
    for i in range(0, len(a), step):
        c = a[i : i + step + 1]
        if (c[1:] < c[:-1]).any():
            return False
    return True


def _sorted_segment(bins, cols):
    order = np.argsort(bins, kind="stable")
    return bins[order], {k: v[order] for k, v in cols.items()}


def _cat(*segs):
    return np.concatenate([s[0] for s in segs]), {k: np.concatenate([s[1][k] for s in segs]) for k in segs[0][1]}


def _cut(seg, a, b):
    return seg[0][a:b], {k: v[a:b] for k, v in seg[1].items()}


def _merge_segments(low, own, high, own_sorted: bool = False):
    """[received from lower ranks | kept | received from higher ranks] as bin-aligned segments.

    With a sorted file only the first and last kept bins can also hold received rows: those few kept rows are
    joined to the received ones; the rest of the kept rows stay a view. Anything else is sorted as a whole.
    """
    lb, ob, hb = low[0], own[0], high[0]
    if not len(ob) or not (_is_sorted(lb) and (own_sorted or _is_sorted(ob)) and _is_sorted(hb)):
        return [_sorted_segment(*_cat(low, own, high))]
    p = int(np.searchsorted(ob, lb[-1], side="right")) if len(lb) else 0
    q = int(np.searchsorted(ob, hb[0], side="left")) if len(hb) else len(ob)
    ordered = (not len(lb) or not len(ob) or lb[-1] <= ob[0]) and (not len(hb) or not len(ob) or ob[-1] <= hb[0])
    if not ordered or p > q or (len(lb) and len(hb) and lb[-1] > hb[0]):
        return [_sorted_segment(*_cat(low, own, high))]
    return [_cat(low, _cut(own, 0, p)), _cut(own, p, q), _cat(_cut(own, q, len(ob)), high)]


def _plain_strings(t: pa.Table) -> pa.Table:
    """Dictionary columns back to their value type, so every output has the file's own schema."""
    for i, f in enumerate(t.schema):
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, pc.cast(t.column(i), f.type.value_type))
    return t


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def run_job(opts: BinOptions, comm) -> dict | None:
    """Run the whole job on `comm`; returns the bin.json report on rank 0 (None elsewhere)."""
    try:
        job = Job(opts, comm)  # validation only: every rank fails the same way on a bad argument or file
    except GpuvarError as exc:
        raise _Collective(str(exc)) from None
    rank, size, timer = job.rank, job.size, job.timer
    if rank == 0:
        log.info("binning %s: target %s, %s bins of %d %s, %d ranks x %d workers", opts.kernels, opts.target,
                 job.axis, job.width, job.unit, size, opts.workers_per_rank)  # fmt: skip
    share, totals = job.read()
    timer.lap("read", rank)
    _inject_failure(rank)
    lut = job.means(totals)
    timer.lap("means", rank)
    if opts.target == "memory_stall" and job.axis != "start":
        raise _Collective("memory_stall needs kernel start times: give --bin-width with a time unit (e.g. 10ms)")
    job.target(share, lut)
    timer.lap("target", rank)
    job.to_bins(share)
    n_valid = comm.allreduce(int(share.ok.sum()))
    if n_valid == 0 and job.axis == "start" and comm.allreduce(share.reasons.get("no start timestamp", 0)) > 0:
        raise _Collective("no kernel has a start time (Nsight Compute data?): give --bin-width as a number of launches")
    segments = job.exchange(share)
    timer.lap("exchange", rank)
    stats = job.stats(segments)
    del segments
    timer.lap("stats", rank)
    parts = comm.gather(stats, root=0)
    table = job.bins_table(parts) if rank == 0 else None
    topk = comm.bcast(job.topk if rank == 0 else None, root=0)
    timer.lap("rank", rank)
    rows = comm.gather(job.topk_rows(share, topk), root=0)
    timer.lap("topk_rows", rank)
    sample = comm.bcast(job.sample if rank == 0 else None, root=0)
    sample_rows = comm.gather(job.topk_rows(share, sample), root=0)
    timer.lap("sample_rows", rank)
    reasons = comm.gather(dict(share.reasons), root=0)
    n_in = comm.gather(len(share.ok), root=0)
    if rank == 0:
        _write(job, table, [r for r in rows if r is not None], [r for r in sample_rows if r is not None])
        timer.lap("write", rank)
    seconds = comm.gather(timer.seconds, root=0)
    rss = comm.gather(_peak_rss_mb(), root=0)
    if rank != 0:
        return None
    dropped = Counter()
    for r in reasons:
        dropped.update(r)
    report = {
        "kernels": str(opts.kernels), "memcpy": str(opts.memcpy) if opts.memcpy else None,
        "target": opts.target, "group": opts.group, "link": opts.link if job.do_link else None,
        "axis": job.axis, "bin_width": job.width, "bin_unit": job.unit, "timeline_start": job.gmin if job.n_bins else None,
        "rows_in": int(sum(n_in)), "rows_binned": n_valid,
        "rows_without_target": dict(sorted(dropped.items())), "groups": job.n_groups,
        "bins": int(job.n_bins), "non_empty_bins": int(table.num_rows), "top_k": opts.top_k,
        "top_k_bins": [int(x) for x in topk], "top_k_rows": int(sum(r.num_rows for r in rows if r is not None)),
        "random_sample_bins": [int(x) for x in sample], "sample_seed": opts.sample_seed,
        "random_sample_rows": int(sum(r.num_rows for r in sample_rows if r is not None)),
        "stats_features": job.features, "variance": "sample variance (ddof=1)",
        "ranks": size, "workers_per_rank": opts.workers_per_rank,
        "seconds": {p: max(s.get(p, 0.0) for s in seconds) for p in seconds[0]},
        "seconds_per_rank": seconds, "peak_rss_mb_per_rank": rss,
    }  # fmt: skip
    if report["rows_in"] != report["rows_binned"] + sum(dropped.values()):
        raise StageError(f"row accounting broken: {report['rows_in']} in != binned + without target")
    report.update(explain_selection(report))  # why no row has the target; "0 rows linked" warning
    write_json(report, Path(opts.output) / "bin.json")
    return report


def random_bins(ids: np.ndarray, var: np.ndarray, count: int | None, top_k: int, seed: int) -> np.ndarray:
    """Sorted ids of `count` (default top_k; -1: all) bins drawn uniformly, without replacement, among bins whose
    target variance is defined: the comparison sample for selection bias (rank 0 only: same for any rank count)."""
    count = top_k if count is None else count
    pool = np.sort(ids[~np.isnan(var)])
    if count < 0:  # every bin: the analysis on all bins
        return pool
    if count == 0 or not len(pool):
        return np.zeros(0, np.int64)
    pick = np.random.default_rng([int(seed), 0x5EED]).choice(len(pool), size=min(count, len(pool)), replace=False)
    return np.sort(pool[pick])


def _rows_table(job: Job, rows: list[pa.Table]) -> pa.Table:
    if rows:
        return pa.concat_tables(rows).combine_chunks()
    empty = [pa.nulls(0, pa.float64()), pa.nulls(0, pa.int64())]
    return pa.Table.from_arrays(empty, names=[job.opts.target, "bin"])


def _write(job: Job, bins: pa.Table, rows: list[pa.Table], sample_rows: list[pa.Table]) -> None:
    out = Path(job.opts.output)
    meta = {"target": job.opts.target, "group": job.opts.group, "axis": job.axis, "bin_width": job.width,
            "bin_unit": job.unit, "top_k": job.opts.top_k, "source": Path(job.opts.kernels).name}  # fmt: skip
    write_canonical(bins, out / "bins.parquet", meta)
    write_canonical(_rows_table(job, rows), out / "topk_rows.parquet", meta)
    write_canonical(_rows_table(job, sample_rows), out / "sample_rows.parquet", meta | {"selection": "random bins"})


def run_rank(opts: BinOptions) -> int:
    """Entry point on every rank: runs the job, turns a rank's exception into a prompt whole-job abort."""
    # A rank waiting in a collective yields its core instead of spinning (MPICH reads this at MPI_Init; other
    # MPIs ignore it): on a node shared with other work a spinning rank takes the time of the ranks still
    # computing. 20 M rows on this 2-core machine: 1.29 -> 1.16 s mean of 7 runs, a third of the system time.
    os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        run_job(opts, comm)
        return 0
    except _Collective:
        if rank == 0 or size == 1:
            raise
        return 2
    except Exception as exc:  # noqa: BLE001 - any failure must stop every rank
        if size == 1:
            raise
        print(f"gpuvar bin: rank {rank}: error: {exc}", file=sys.stderr, flush=True)
        log.error("rank %d: error: %s", rank, exc, exc_info=not isinstance(exc, GpuvarError))
        sys.stderr.flush()
        time.sleep(0.5)  # let mpiexec/srun forward the message before Abort tears the job's I/O down
        comm.Abort(1)
        return 1
