"""What a reader returns, and small parsing helpers every reader shares."""

from __future__ import annotations

import io
import sqlite3
from collections import Counter
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

    def drop(self, table: str, reason: str, count: int) -> None:
        if count:
            self.dropped.setdefault(table, Counter())[reason] += int(count)


def read_head(path: Path, size: int = 65536) -> bytes:
    """First (decompressed: see compression) bytes of a file, for content sniffing."""
    return compression.read_head(path, size)


def decode_text(path: Path) -> str:
    """Whole file as text (decompressed, UTF-16 transcoded: see compression): UTF-8 (BOM stripped), falling back
    to latin-1; CRLF/CR normalised to LF."""
    raw = compression.read_bytes(path)
    if b"\x00" in raw[:4096]:
        raise InputError(path, "binary file, not a CSV")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


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


def read_csv_text(path: Path, text: str, **kwargs) -> pd.DataFrame:
    """pandas CSV parse of already-decoded text; a parser failure becomes a one-line InputError."""
    try:
        return pd.read_csv(io.StringIO(text), **kwargs)
    except pd.errors.EmptyDataError:
        raise InputError(path, "empty CSV (no header)") from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise InputError(path, f"malformed CSV: {str(exc).splitlines()[0]}") from None


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
