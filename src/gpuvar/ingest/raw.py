"""The raw stage of ingest: a profiler file's tables as read, before any column is renamed.

Ingest is two steps so that a change to the column mapping (Table 1, the canonical schema) reruns only the
cheap Parquet step, never the slow read of a 10 GB SQLite export:

  read_raw(path, options) -> RawTrace   the vendor tables with the vendor's column names (what the file holds,
                                        after decoding: no renaming, no unit conversion, no row filter)
  normalize(raw) -> ReaderOutput        Table 1 and the canonical names, derived columns, documented drops

Every reader module implements both; `read(path)` is `normalize(read_raw(path))`. A RawTrace is stored as
`raw/<table>.parquet` plus `raw/raw.json` (RAW_MANIFEST: format, source, accounting, reader facts), which is
what `gpuvar read` writes and `gpuvar normalize` reads.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar.errors import InputError
from gpuvar.layout import RAW_MANIFEST, table_file
from gpuvar.output import write_json

_TABLE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True)
class ReadOptions:
    """What a reader may be asked at read time (not a mapping choice: those belong to normalize)."""

    keep_vendor_columns: bool = True  # Nsight Systems: also read the columns the canonical schema does not use
    cache_dir: Path | None = None  # where a reader that converts its input first (nsys-rep) keeps the result


@dataclass
class RawTrace:
    """A profiler file as read: named Arrow tables with the file's own column names, plus the accounting.

    rows_read: data rows of the source per canonical table ('kernels', 'memcpy'), counted at read.
    dropped: rows the read itself could not keep (a truncated last record), by table and reason.
    info: small JSON-serialisable facts normalize needs (export version, layout, column order, options).
    """

    format: str
    source: str
    tables: dict[str, pa.Table]
    rows_read: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def drop(self, table: str, reason: str, count: int) -> None:
        if count:
            counts = self.dropped.setdefault(table, {})
            counts[reason] = counts.get(reason, 0) + int(count)

    def start_output(self, kernels, memcpy=None):
        """A ReaderOutput carrying this read's accounting and notes, for normalize to complete."""
        from gpuvar.ingest.base import ReaderOutput

        out = ReaderOutput(self.format, kernels, memcpy, rows_read=dict(self.rows_read), notes=list(self.notes))
        out.dropped = {t: Counter(c) for t, c in self.dropped.items()}
        return out


def write_raw(raw: RawTrace, folder: str | Path) -> None:
    """Store `raw` as folder/<table>.parquet and folder/raw.json (written last: it marks a complete read)."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, table in raw.tables.items():
        if not set(name) <= _TABLE_NAME_CHARS:
            raise ValueError(f"raw table name {name!r} must be lower-case letters, digits and '_'")
        pq.write_table(table, folder / table_file(name), compression="zstd")
    write_manifest(raw, {name: (t.num_rows, t.num_columns) for name, t in raw.tables.items()}, folder)


def write_manifest(raw: RawTrace, shapes: dict[str, tuple[int, int]], folder: Path, extra: dict | None = None) -> None:
    """raw.json: the read's facts and its tables' (rows, columns), in the order they were read; extra: more keys
    (host_facts: the launch facts of a big Nsight Systems export, gpuvar.ingest.nsys_host_facts)."""
    from gpuvar import __version__

    manifest = {
        "gpuvar_version": __version__,
        "format": raw.format,
        "source": raw.source,
        "tables": {name: {"rows": rows, "columns": columns} for name, (rows, columns) in shapes.items()},
        "rows_read": raw.rows_read,
        "dropped": raw.dropped,
        "notes": raw.notes,
        "info": raw.info,
    } | (extra or {})
    write_json(manifest, folder / RAW_MANIFEST)


def load_raw(folder: str | Path) -> RawTrace:
    """Read back what write_raw stored; InputError naming the folder when it is not a complete raw read."""
    folder = Path(folder)
    manifest_path = folder / RAW_MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise InputError(folder, f"no {RAW_MANIFEST}: not the output of `gpuvar read` (or the read did not finish)")
    except (OSError, ValueError) as exc:
        raise InputError(manifest_path, f"unreadable raw manifest ({exc})") from None
    tables = {}
    for name in manifest.get("tables", {}):
        path = folder / table_file(name)
        try:
            tables[name] = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(path, f"raw table unreadable ({exc})") from None
    return RawTrace(
        format=manifest["format"],
        source=manifest["source"],
        tables=tables,
        rows_read={k: int(v) for k, v in manifest.get("rows_read", {}).items()},
        dropped=manifest.get("dropped", {}),
        notes=list(manifest.get("notes", [])),
        info=manifest.get("info", {}),
    )


def roundtrip(raw: RawTrace, folder: str | Path) -> RawTrace:
    """write_raw then load_raw: what normalize sees in the workflow (tests use it to check a reader's split)."""
    write_raw(raw, folder)
    return load_raw(folder)
