"""Arrow columns to numpy for the binning job, without pandas (Array.to_numpy and pa.array(ndarray) would import
it): numbers cross between numpy and Arrow through the buffers. Arrow's compute functions are called by name
(`arrow`), not through pyarrow.compute, whose import wraps every function (~300, with docstrings): ~0.045 s of
each rank's start-up, which no rank needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar import targets as T
from gpuvar.canonical_io import numpy_view
from gpuvar.errors import InputError


def arrow(name: str, *args, options=None):
    """Arrow compute function `name` on `args` (pyarrow.compute.call_function, without importing pyarrow.compute)."""
    from pyarrow._compute import call_function

    return call_function(name, list(args), options)


def cast(values, to: pa.DataType, safe: bool = True):
    """pyarrow.compute.cast(values, to, safe=safe)."""
    from pyarrow._compute import CastOptions

    return arrow("cast", values, options=CastOptions.safe(to) if safe else CastOptions.unsafe(to))


def open_parquet(path, **kw):
    """The file as a ParquetFile, or a one-line InputError naming it; a list of files as one (ParquetFiles)."""
    if isinstance(path, list | tuple):
        return ParquetFiles(path, **kw) if len(path) > 1 else open_parquet(path[0], **kw)
    if not Path(path).is_file():
        raise InputError(path, "no such file")
    try:
        return pq.ParquetFile(path, **kw)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(path, f"not a readable Parquet file ({exc})") from None


class ParquetFiles:
    """Several Parquet files of one schema read as one table: their row groups numbered one after the other in
    the order given. A multi-rank job's per-rank kernels tables are binned this way (`gpuvar bin
    rank0/kernels.parquet rank1/kernels.parquet ...`) without merging them into one file first. Only what the
    binning job uses of a ParquetFile: metadata (row counts, statistics), schemas, read_row_group, iter_batches.
    A file is opened when one of its row groups is read (the last one stays open), so a job of thousands of ranks
    does not hold thousands of open files."""

    def __init__(self, paths, **kw):
        self.paths = [Path(p) for p in paths]
        self._kw = kw
        first = open_parquet(self.paths[0], **kw)
        self.schema_arrow, self.schema = first.schema_arrow, first.schema
        self._open = (0, first)
        plain = first.schema.to_arrow_schema()
        metas = [first.metadata]
        for path in self.paths[1:]:
            if not path.is_file():
                raise InputError(path, "no such file")
            try:
                md = pq.read_metadata(path)
            except (OSError, pa.ArrowException) as exc:
                raise InputError(path, f"not a readable Parquet file ({exc})") from None
            other = md.schema.to_arrow_schema()
            if not other.equals(plain, check_metadata=False):
                diff = sorted(set(map(str, other)) ^ set(map(str, plain)))
                raise InputError(path, f"its columns differ from {self.paths[0]}'s ({', '.join(diff[:3])})")
            metas.append(md)
        self._where = [(i, g) for i, md in enumerate(metas) for g in range(md.num_row_groups)]
        self.metadata = _Metadata(metas, self._where)

    def _file(self, i: int) -> pq.ParquetFile:
        if self._open[0] != i:
            self._open = (i, open_parquet(self.paths[i], **self._kw))
        return self._open[1]

    def read_row_group(self, g: int, **kw) -> pa.Table:
        i, local = self._where[g]
        try:
            return self._file(i).read_row_group(local, **kw)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(self.paths[i], f"row group {local} unreadable ({exc})") from None

    def iter_batches(self, batch_size: int, row_groups: list[int], **kw):
        for g in row_groups:
            i, local = self._where[g]
            yield from self._file(i).iter_batches(batch_size=batch_size, row_groups=[local], **kw)


class _Metadata:
    """ParquetFiles' metadata: row groups across the files."""

    def __init__(self, metas, where):
        self._metas, self._where = metas, where
        self.num_row_groups = len(where)
        self.num_rows = sum(md.num_rows for md in metas)

    def row_group(self, g: int):
        i, local = self._where[g]
        return self._metas[i].row_group(local)


def _valid(arr: pa.Array) -> np.ndarray:
    """Validity bitmap as a bool array."""
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=arr.offset + len(arr))[arr.offset :].astype(bool)


def ints(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 values with nulls as 0, validity mask or None when nothing is null)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if not pa.types.is_integer(col.type):
        col = cast(col, pa.int64(), safe=False)
    if col.null_count == 0:
        return numpy_view(col).astype(np.int64, copy=False), None
    valid = _valid(col)
    return np.where(valid, numpy_view(col), 0).astype(np.int64), valid  # values under nulls are undefined: zero them


def floats(col) -> np.ndarray:
    """float64 values, NaN for nulls."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    col = cast(col, pa.float64(), safe=False)
    if col.null_count:  # (not pc.fill_null: its NaN scalar imports pandas, 0.2-0.4 s of every rank's start-up)
        return np.where(_valid(col), numpy_view(col), np.nan)
    return numpy_view(col)


def _dictionary(col: pa.ChunkedArray) -> pa.DictionaryArray:
    col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col if isinstance(col, pa.DictionaryArray) else arrow("dictionary_encode", col)


def group_codes(table: pa.Table, group: str, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray | None]:
    """Rank-local group code per row (grows `index`, group key -> code), and which rows have a kernel name
    (None: all)."""
    name = _dictionary(table.column("kernel_name"))
    names = name.dictionary.to_pylist()
    if group == "kernel":
        lut = np.array([index.setdefault(n, len(index)) for n in names] or [0], dtype=np.int32)
        indices = name.indices
        if indices.null_count == 0:  # the indices straight from Arrow's buffer: no int64 copy
            return lut[numpy_view(indices)], None
        idx, valid = ints(indices)
        return lut[idx], valid
    idx, valid = ints(name.indices)
    lc = _dictionary(table.column(T.GROUP_COLUMN[group]))
    lidx, lvalid = ints(lc.indices)
    configs = lc.dictionary.to_pylist()
    pair = idx * (len(configs) + 1) + (lidx if lvalid is None else np.where(lvalid, lidx, len(configs)))
    uniq, inverse = np.unique(pair, return_inverse=True)
    lut = []
    for p in uniq.tolist():
        n, c = divmod(p, len(configs) + 1)
        config = configs[c] if c < len(configs) else None
        lut.append(index.setdefault(T.group_key(names[n] if names else "", config, "launch_config"), len(index)))
    return np.asarray(lut, dtype=np.int32)[inverse], valid


def plain_strings(t: pa.Table) -> pa.Table:
    """Dictionary columns back to their value type, so every output has the file's own schema."""
    for i, f in enumerate(t.schema):
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, cast(t.column(i), f.type.value_type))
    return t
