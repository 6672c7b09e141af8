"""What a reader returns, and small parsing helpers every reader shares."""

from __future__ import annotations

import re
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest import compression
from gpuvar.schema import int_column


@dataclass
class ReaderOutput:
    """A reader's result: canonical-named frames (extra source columns kept) plus the row accounting.

    rows_read counts data rows in the source per table; dropped[table][reason] counts rows a documented
    filter removed. The driver checks rows_read == rows written + dropped for every table.
    """

    format: str
    kernels: pd.DataFrame
    memcpy: pd.DataFrame | None = None
    rows_read: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, Counter] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)  # GPUs as recorded: id, name, sm_count, clock_hz, uuid, bus
    host: str | None = None  # the profiled machine, where the file records it (gpuvar.ingest.gpu_identity)
    gpu_renumbered: list[int] = field(default_factory=list)  # processes whose CUDA device ids are not the GPU ids
    counter_passes: list[dict] = field(default_factory=list)  # counter passes joined to the trace (counter_passes)
    # the host collective ops (start, end, name) of a format whose reader keeps the host ops (Kineto), found at
    # normalize for the rank analysis (gpuvar.ingest.host_collectives); None: the format has no host ops
    host_collectives: pd.DataFrame | None = None

    def drop(self, table: str, reason: str, count: int) -> None:
        if count:
            self.dropped.setdefault(table, Counter())[reason] += int(count)


def read_csv_bytes(path: Path) -> bytes:
    """A text profiler file's whole content for a CSV reader: decompressed and UTF-16 transcoded (see
    compression), UTF-8 BOM dropped; an empty, blank or binary file is a one-line InputError.

    Bytes, not text: Arrow parses UTF-8 directly, which avoids a Python string of a file that can hold millions
    of rows. Every CSV reader reads through here, so they all reject the same files with the same message."""
    raw = compression.read_bytes(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if not raw or raw.isspace():
        raise InputError(path, "empty file")
    if b"\x00" in raw[:4096]:
        raise InputError(path, "binary file, not a CSV")
    return raw


REPEATED_HEADER = "repeated header row (concatenated files)"


def drop_repeated_headers(data: bytes, start: int = 0) -> tuple[bytes, int]:
    """`data` without the copies of its header line (the line at `start`) that follow it, and how many there
    were: `cat a/results.csv b/results.csv` repeats the header mid-file, where a reader would take it for a
    kernel named `KernelName` with null times. Only whole lines equal to the header (a second file's BOM and
    CRLF tolerated) are removed; the caller counts them as drops with reason REPEATED_HEADER. No copy of
    the data unless a repeat exists."""
    end = data.find(b"\n", start)
    if end < 0:
        return data, 0
    header = data[start:end].rstrip(b"\r")
    if not header.strip() or data.find(header, end) < 0:
        return data, 0
    pattern = re.compile(rb"(?m)^(?:\xef\xbb\xbf)?" + re.escape(header) + rb"\r?(?:\n|\Z)")
    rest, count = pattern.subn(b"", data[end + 1 :])
    return (data[: end + 1] + rest, count) if count else (data, 0)


def unique_names(names: list[str], template: str = "{name}.{n}", first: int = 1) -> list[str]:
    """Header names with repeats made unique, so no column is silently overwritten or unaddressable.

    The k-th repeat of `name` becomes `template` with n = first + k - 1: pandas' 'x.1', 'x.2' by default (AMD
    CSVs), 'x (2)', 'x (3)' with template '{name} ({n})', first=2 (ncu CSVs). A generated name that the header
    already holds is skipped ('x', 'x', 'x.1' -> 'x', 'x.2', 'x.1'), so the result never repeats."""
    taken = set(names)
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name not in seen:
            seen[name] = first - 1
            out.append(name)
            continue
        while True:
            seen[name] += 1
            candidate = template.format(name=name, n=seen[name])
            if candidate not in taken:
                break
        taken.add(candidate)
        out.append(candidate)
    return out


def csv_block_size(body, lines: int = 8) -> int:
    """Arrow CSV block size that holds whole rows of `body`: Arrow fails on a header or row longer than a block
    (1 MiB by default; a 100,000-counter header is ~2 MiB), so 4x the longest of the first lines, at least 1 MiB.
    Rows of one profiler CSV have similar lengths, so the first lines are a fair sample."""
    longest, start = 0, 0
    for _ in range(lines):
        end = _find_newline(body, start)
        if end < 0:
            longest = max(longest, len(body) - start)
            break
        longest, start = max(longest, end + 1 - start), end + 1
    return max(1 << 20, 4 * longest)


def _find_newline(body, start: int) -> int:
    if isinstance(body, bytes | bytearray):
        return body.find(b"\n", start)
    step = 1 << 20  # a memoryview or buffer: search chunk by chunk without copying the whole body
    for chunk_start in range(start, len(body), step):
        found = bytes(body[chunk_start : chunk_start + step]).find(b"\n")
        if found >= 0:
            return chunk_start + found
    return -1


def require_columns(path: Path, columns, required, what: str = "CSV") -> None:
    """InputError naming the missing columns, if any."""
    missing = [c for c in required if c not in columns]
    if missing:
        raise InputError(path, f"{what} lacks required column(s) {', '.join(missing)}")


def to_number(series: pd.Series) -> pd.Series:
    """Numbers as profilers print them: '53,261,312', ' 12 ', 'n/a' -> float (NaN when not a number)."""
    if series.dtype.kind in "iufb":
        return series
    cleaned = series.astype(str).str.replace(",", "", regex=False).str.strip()
    return pd.to_numeric(cleaned, errors="coerce")


def to_int(series: pd.Series) -> pd.Series:
    """Profiler numbers as nullable Int64, rounded; NaN, inf and values beyond int64 become null, never a crash."""
    return int_column(to_number(series))


def is_utf8(body) -> bool:
    """Validate UTF-8 in Arrow (one zero-copy binary value cast to string) without building a Python string.

    Readers check before parsing: Arrow's invalid-row callback cannot decode a non-UTF-8 row, so such a row
    would be lost from the accounting."""
    buffer = pa.py_buffer(body)
    offsets = pa.py_buffer(np.array([0, buffer.size], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, buffer]).cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def connect_sqlite_readonly(path: Path, **kwargs) -> sqlite3.Connection:
    """Read-only SQLite connection (a file URI, so spaces and '#' in the path are safe and nothing is created).

    Text that is not valid UTF-8 (a damaged page, a name written by another tool) decodes with U+FFFD
    instead of raising in the middle of a query."""
    con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, **kwargs)
    con.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return con


_SAFE_URI_PATH = re.compile(r"^[A-Za-z0-9/_.\-]+$")


def in_wal_mode(path: Path) -> bool:
    """The SQLite file is in WAL mode (header bytes 18-19, the file format versions, are 2). connectorx opens a
    database read-write, and the last connection to a WAL database to close checkpoints the WAL into it and
    removes the -wal and -shm files: a reader must not. Such a file is read by the read-only sqlite3 path."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and 2 in header[18:20]


@contextmanager
def connectorx_uri(path: Path) -> Iterator[str]:
    """A `sqlite://` URI connectorx reads `path` through, valid inside the block.

    connectorx takes a URI and does not decode it the same way everywhere (a path with a space silently opened a
    new empty database next to it, partitioned queries too), so it is given a symlink with a plain name: any path
    works. A WAL-mode database is refused (ValueError): connectorx would write it (checkpoint on close)."""
    if in_wal_mode(path):
        raise ValueError("a WAL-mode database: connectorx would write it (checkpoint on close)")
    with tempfile.TemporaryDirectory(prefix="gpuvar-sqlite-") as tmp:
        link = Path(tmp) / "source.db"
        link.symlink_to(Path(path).resolve())
        if not _SAFE_URI_PATH.match(str(link)):
            raise ValueError(f"temporary path {link} is not URI-safe")
        yield f"sqlite://{link}"


def select_arrow(path: Path, sql: str) -> pa.Table:
    """A query on a SQLite file as Arrow through connectorx (Rust, no Python object per cell: ~20x faster than
    sqlite3 rows at a million rows). Raises whatever connectorx raises where it cannot read the file or a value
    is not of its column's declared type: callers fall back to sqlite3 then."""
    import connectorx as cx

    with connectorx_uri(path) as uri:
        return cx.read_sql(uri, sql, return_type="arrow")
