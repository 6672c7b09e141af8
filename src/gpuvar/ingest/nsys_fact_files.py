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
        bucket = records["rowid"] >> BUCKET_BITS
        order = np.argsort(bucket, kind="stable")
        bucket = bucket[order]
        cuts = np.flatnonzero(bucket[1:] != bucket[:-1]) + 1
        for first, end in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)]):
            key = int(bucket[first])
            with open(self._file(key), "ab") as fh:
                fh.write(records[order[first:end]].tobytes())
            self._buckets.add(key)
        self.rows += len(records)

    def between(self, lo: int, hi: int | None) -> np.ndarray:
        """The records with lo <= rowid < hi (hi None: no upper bound), in rowid order."""
        keys = sorted(
            k for k in self._buckets if k >= lo >> BUCKET_BITS and (hi is None or k <= (hi - 1) >> BUCKET_BITS)
        )
        parts = [np.fromfile(self._file(k), self.dtype) for k in keys]
        records = np.concatenate(parts) if parts else np.zeros(0, self.dtype)
        rowid = records["rowid"]
        keep = rowid >= lo if hi is None else (rowid >= lo) & (rowid < hi)
        records = records[keep]
        return records[np.argsort(records["rowid"], kind="stable")]

    def buckets(self):
        """Every record in rowid order, a bucket at a time (for the Parquet copy of `gpuvar read`)."""
        for key in sorted(self._buckets):
            records = np.fromfile(self._file(key), self.dtype)
            yield records[np.argsort(records["rowid"], kind="stable")]
