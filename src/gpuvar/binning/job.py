"""The MPI binning job: targets, fixed-width bins on the global timeline, per-bin statistics, top-k bins.

Phases (each rank; collectives named):
 1. read     - this rank's contiguous, row-balanced share of Parquet row groups, only the needed columns,
               one row group at a time into preallocated arrays; per-group exact integer duration sums.
 2. means    - allgather of {group key: (sum, count)} (Python ints, merged in sorted key order): exact, so the
               means are identical for any rank count.
 3. target   - kernel_variability in place; memory_stall links each kernel to a copy read by interval:
               rank r reads the memcpy rows with start in [first start of r, first start of r+1) and gets the
               last copy per link key of all earlier intervals from an allgather (the "carry").
 4. exchange - allreduce min/max of the axis (start, or launch_id for timeline-less Nsight Compute data);
               bin = (axis - global min) // width; allreduce of per-bin counts; bins go to ranks in contiguous
               ranges balanced by rows; rows move to their bin's owner with Alltoallv on numpy buffers.
 5. stats    - the owner computes every statistic of its bins (gpuvar.binning.stats), optionally on a thread
               pool (--workers-per-rank); rank 0 gathers them, ranks bins by the target's variance.
 6. top-k    - rank 0 broadcasts the top-k bin ids; each rank re-reads only the row groups holding top-k rows
               of its share (all columns) and rank 0 gathers and writes them.
Determinism: the rows of a bin reach its owner in file order whatever the rank count and floating sums are
done by that owner only, so bins.parquet and topk_rows.parquet are byte-identical for any number of ranks.
Memory bound per rank: its share as bin id (int32) + target (float64) = 12 bytes/row, plus while reading the
axis and duration (16 bytes/row) and group code (4), plus the received rows of the bins it owns (12 bytes/row,
about one share) during the statistics; feature columns asked for add 8 bytes/row each, twice.
Worker pool: numpy's sorts/partitions release the GIL, so threads scale the statistics phase on a many-core
node where a few ranks per node each own many bins (fewer ranks = fewer exchanges and smaller collectives).
On a 2-core machine with 2 ranks there is no spare core, so keep --workers-per-rank 1 there.
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
from gpuvar.binning.stats import STATS, bin_stats_parallel
from gpuvar.canonical_io import write_canonical, write_json
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
    bins: np.ndarray | None = None
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


def _ints(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with nulls as 0, validity mask)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if not pa.types.is_integer(col.type):
        col = pc.cast(col, pa.int64(), safe=False)
    if col.null_count == 0:
        return col.to_numpy().astype(np.int64, copy=False), np.ones(len(col), bool)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    width = col.type.bit_width // 8
    raw = np.frombuffer(col.buffers()[1], dtype=f"<i{width}", count=col.offset + len(col))[col.offset :]
    return np.where(valid, raw, 0).astype(np.int64), valid  # values under nulls are undefined: zero them


def _floats(col) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False)


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


def _group_codes(table: pa.Table, group: str, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Rank-local group code per row (grows `index`), and which rows have a kernel name."""
    name = table.column("kernel_name").combine_chunks()
    if not isinstance(name, pa.DictionaryArray):
        name = pc.dictionary_encode(name)
    idx, valid = _ints(name.indices)
    names = name.dictionary.to_pylist()
    if group == "kernel":
        lut = np.array([index.setdefault(n, len(index)) for n in names] or [0], dtype=np.int32)
        return lut[idx], valid
    lc = table.column("launch_config").combine_chunks()
    if not isinstance(lc, pa.DictionaryArray):
        lc = pc.dictionary_encode(lc)
    lidx, lvalid = _ints(lc.indices)
    configs = lc.dictionary.to_pylist()
    pair = idx * (len(configs) + 1) + np.where(lvalid, lidx, len(configs))
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
        self.dur = np.empty(n, np.float64)
        self.codes = np.empty(n, np.int32)
        if self.do_link:
            self.kstart = self.axis_v if self.axis == "start" else np.empty(n, np.int64)
            self.kkey = np.empty(n, np.int64)
        for f in self.features:
            if f not in LINKED:
                share.features[f] = np.empty(n, np.float64)
        index: dict[str, int] = {}
        sums: list[int] = []
        counts: list[int] = []
        for i, g in enumerate(groups):
            a, b = int(offsets[i]), int(offsets[i + 1])
            try:
                t = self.pf.read_row_group(g, columns=self.columns)
            except (OSError, pa.ArrowException) as exc:
                raise InputError(self.opts.kernels, f"row group {g} unreadable ({exc})") from None
            self._fill(t, share, a, b, index, sums, counts)
        totals = {}
        for key, code in index.items():
            totals[key] = (sums[code], counts[code])
        self.index = index
        return share, totals

    def _fill(self, t: pa.Table, share: Share, a: int, b: int, index, sums, counts) -> None:
        ok = share.ok[a:b]
        axis, valid = _ints(t.column(self.axis))
        self.axis_v[a:b] = axis
        lo, hi = _masked_min_max(axis, valid)  # the timeline spans every kernel, with a target or not
        self.axis_lo, self.axis_hi = min(self.axis_lo, lo), max(self.axis_hi, hi)
        self._drop(share, ok, ~valid, "no start timestamp" if self.axis == "start" else "no launch_id")
        dur, dvalid = _ints(t.column("duration"))
        self.dur[a:b] = dur
        self._drop(share, ok, ~dvalid, "no duration")
        codes, nvalid = _group_codes(t, self.opts.group, index)
        self.codes[a:b] = codes
        self._drop(share, ok, ~nvalid, "no kernel_name")
        while len(sums) < len(index):
            sums.append(0)
            counts.append(0)
        s, c = T.group_sums(codes, dur, len(index)) if ok.all() else T.group_sums(codes[ok], dur[ok], len(index))
        for code in np.flatnonzero(c).tolist():
            sums[code] += s[code]
            counts[code] += c[code]
        if self.do_link:
            start, svalid = _ints(t.column("start"))
            self.kstart[a:b] = np.where(svalid, start, _NULL)
            dev = _floats(t.column("device_id"))
            stream = _floats(t.column("stream_id")) if self.opts.link == "stream" else None
            self.kkey[a:b] = np.where(svalid, T.link_key(dev, stream, self.opts.link), T.NO_KEY)
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
        del self.codes

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
            t = pf.read_row_group(g, columns=cols)
            s = t.column("start")
            keep = pc.and_(pc.greater_equal(s, lo), pc.less(s, hi))
            parts.append(t.filter(pc.fill_null(keep, False)))
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
        from mpi4py import MPI

        ok = share.ok
        axis = self.axis_v
        # bins start at the first kernel of the trace, not the first with a target, so the bins of
        # kernel_variability and memory_stall of one trace are the same time windows
        self.gmin = self.comm.allreduce(self.axis_lo, op=MPI.MIN)
        gmax = self.comm.allreduce(self.axis_hi, op=MPI.MAX)
        if self.gmin > gmax:
            self.n_bins = 0
        else:
            self.n_bins = (gmax - self.gmin) // self.width + 1
            try:
                check_bins(self.n_bins, self.width, self.unit)
            except GpuvarError as exc:
                raise _Collective(str(exc)) from None
        bins = np.full(len(axis), -1, dtype=np.int32 if self.n_bins < 2**31 else np.int64)
        for a in range(0, len(axis), _CHUNK):  # chunked: no full-size temporaries
            sl = slice(a, a + _CHUNK)
            b = (axis[sl] - self.gmin) // self.width
            bins[sl] = np.where(ok[sl], b, -1)
        share.bins = bins
        del self.axis_v

    def exchange(self, share: Share) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Rows to their bin's owner; returns bin-aligned segments (bins non-decreasing within and across).

        Sorted input (the canonical layout): each destination's rows are one slice, sent straight from the
        share's arrays (no send copy) and the rows a rank keeps are never copied: only the received rows and
        the few kept rows of bins shared with a neighbour are concatenated.
        """
        from mpi4py import MPI

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
        parts = [self._segment_stats(b, dict(c)) for b, c in segments if len(b)]
        if not parts:
            return self._segment_stats(np.zeros(0, np.int64), {"__target": np.zeros(0), **{f: np.zeros(0) for f in self.features}})
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def _segment_stats(self, bins: np.ndarray, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        w = self.opts.workers_per_rank
        base = bin_stats_parallel(cols.pop("__target"), bins, w)
        for f, values in cols.items():
            fs = bin_stats_parallel(values, bins, w)
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
        return pa.table(cols)

    # ---- phase 6: top-k rows ---------------------------------------------------------------------------
    def topk_rows(self, share: Share, topk: np.ndarray) -> pa.Table | None:
        if not len(topk) or not len(share.bins):
            return None
        wanted = np.zeros(self.n_bins + 1, bool)  # index -1 (rows without a bin) hits the last, False entry
        wanted[topk] = True
        hit = np.flatnonzero(wanted[share.bins])
        if not len(hit):
            return None
        names = self.pf.schema_arrow.names
        cols = names if self.opts.features.strip() in ("auto", "") else [
            c for c in dict.fromkeys([*ID_COLUMNS, *self.features]) if c in names]  # fmt: skip
        strings = [f.name for f in self.pf.schema_arrow if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        pf = _open(self.opts.kernels, read_dictionary=strings)  # decode strings once per dictionary, not per row
        pieces = []
        g_of = np.searchsorted(share.offsets, hit, side="right") - 1
        for gi in np.unique(g_of).tolist():
            pieces.extend(_take_rows(pf, share.row_groups[gi], cols, hit[g_of == gi] - share.offsets[gi]))
        t = pa.concat_tables([_plain_strings(p) for p in pieces])
        b = share.bins[hit].astype(np.int64)
        t = t.append_column(self.opts.target, pa.array(share.target[hit]))
        for name, values in share.linked.items():
            t = t.append_column(name, pa.array(values[hit]))
        # only `bin` (which the causal step ignores): a rank column would look like a feature; join bins.parquet
        return t.append_column("bin", pa.array(b))


def _take_rows(pf: pq.ParquetFile, group: int, cols: list[str], rows: np.ndarray, batch: int = 1 << 16) -> list:
    """Rows (sorted indices) of one row group, decoding batch by batch and stopping after the last one."""
    out, first = [], 0
    for rb in pf.iter_batches(batch_size=batch, row_groups=[group], columns=cols, use_threads=True):
        last = first + rb.num_rows
        sel = rows[(rows >= first) & (rows < last)]
        if len(sel):
            out.append(pa.Table.from_batches([rb]).take(pa.array(sel - first)))
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
    return pa.table({job.opts.target: pa.array([], pa.float64()), "bin": pa.array([], pa.int64())})


def _write(job: Job, bins: pa.Table, rows: list[pa.Table], sample_rows: list[pa.Table]) -> None:
    out = Path(job.opts.output)
    meta = {"target": job.opts.target, "group": job.opts.group, "axis": job.axis, "bin_width": job.width,
            "bin_unit": job.unit, "top_k": job.opts.top_k, "source": Path(job.opts.kernels).name}  # fmt: skip
    write_canonical(bins, out / "bins.parquet", meta)
    write_canonical(_rows_table(job, rows), out / "topk_rows.parquet", meta)
    write_canonical(_rows_table(job, sample_rows), out / "sample_rows.parquet", meta | {"selection": "random bins"})


def run_rank(opts: BinOptions) -> int:
    """Entry point on every rank: runs the job, turns a rank's exception into a prompt whole-job abort."""
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
