"""The launch facts of the host sweep kept in files bucketed by rowid, read back range by range (issue 38).

Why not SQLite tables: the sweep (gpuvar.ingest.nsys_host_sweep) finds the facts in call order, thread after
thread, and the pieces read them in rowid order, so the store must be keyed by rowid. Scratch tables did that, but
every fact went in through `executemany` and came back through `fetchall` as Python tuples: 3 of the 18 s of a
1 M-launch export ingested in pieces. Here each batch of facts is a numpy record array, appended as raw bytes to the
file of its rowid bucket (BUCKET_BITS: 64 Ki rowids a file, about one piece), and a range is read back by reading
its buckets' files, keeping the rows in range and sorting them by rowid. Memory follows the batch and the piece, as
before; the files lie in the scratch folder and go with it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

BUCKET_BITS = 16  # rowids per bucket file: 2**16, about one piece (PieceSettings.rows kernel rows)


class FactFiles:
    """Records of one numpy dtype (its first field `rowid`, int64) in files bucketed by rowid; rowids unique."""

    def __init__(self, folder: Path, name: str, dtype: np.dtype):
        self.folder, self.name, self.dtype = Path(folder), name, np.dtype(dtype)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rows = 0
        self._buckets: set[int] = set()

    def _file(self, bucket: int) -> Path:
        return self.folder / f"{self.name}-{bucket}.bin"

    def add(self, records: np.ndarray) -> None:
        """Append records (any rowid order) to their buckets' files."""
        if not len(records):
            return
        records = np.asarray(records, self.dtype)
        for key, rows in _by_bucket(records["rowid"]):
            with open(self._file(key), "ab") as fh:
                fh.write(records[rows].tobytes())
            self._buckets.add(key)
        self.rows += len(records)

    def columns_between(self, lo: int, hi: int | None) -> dict[str, np.ndarray]:
        """The records with lo <= rowid < hi (hi None: no upper bound) in rowid order, one array per field (each
        gathered once from the files' rows: no record copies)."""
        first, last = lo >> BUCKET_BITS, None if hi is None else (hi - 1) >> BUCKET_BITS
        keys = sorted(k for k in self._buckets if k >= first and (last is None or k <= last))
        parts = [np.fromfile(self._file(k), self.dtype) for k in keys]
        records = (np.concatenate(parts) if len(parts) > 1 else parts[0]) if parts else np.zeros(0, self.dtype)
        rowid = records["rowid"]
        inside = np.flatnonzero(rowid >= lo if hi is None else (rowid >= lo) & (rowid < hi))
        order = inside[np.argsort(rowid[inside], kind="stable")]
        return {name: records[name][order] for name in self.dtype.names}

    def lookup(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(records, found): the record of each of these rowids (any order, maybe scattered over the whole trace:
        read one bucket file at a time), and whether it has one (records of the others are left as they are)."""
        rowids = np.asarray(rowids, np.int64)
        records = np.zeros(len(rowids), self.dtype)
        found = np.zeros(len(rowids), bool)
        for key, rows in _by_bucket(rowids):
            if key not in self._buckets:
                continue
            stored = np.fromfile(self._file(key), self.dtype)
            stored = stored[np.argsort(stored["rowid"], kind="stable")]
            at = np.minimum(np.searchsorted(stored["rowid"], rowids[rows]), len(stored) - 1)
            hit = stored["rowid"][at] == rowids[rows]
            records[rows[hit]] = stored[at[hit]]
            found[rows[hit]] = True
        return records, found

    def buckets(self):
        """Every record in rowid order, a bucket at a time (for the Parquet copy of `gpuvar read`)."""
        for key in sorted(self._buckets):
            records = np.fromfile(self._file(key), self.dtype)
            yield records[np.argsort(records["rowid"], kind="stable")]


def _by_bucket(rowids: np.ndarray):
    """(bucket, the positions of its rowids, in their order) for each bucket these rowids fall in."""
    bucket = rowids >> BUCKET_BITS
    order = np.argsort(bucket, kind="stable")
    cuts = np.flatnonzero(bucket[order][1:] != bucket[order][:-1]) + 1
    for rows in np.split(order, cuts) if len(order) else []:
        yield int(bucket[rows[0]]), rows
