"""Nsight Systems reports (`.nsys-rep`, older `.qdrep`): exported to SQLite with `nsys`, then read by the nsys reader.

The report format is proprietary and undocumented, so detection is by elimination: no content sniffer claimed the
file (it is not SQLite, JSON, CSV or a compressed copy of one) and its name ends in .nsys-rep or .qdrep. This is
the one reader that uses the file name, and only as the last resort.

Where `nsys` is on PATH the report is exported once (`nsys export --type sqlite --output X.sqlite X.nsys-rep`,
run as an argument list, no shell) into a cache file beside the ingest output (`<output>/<report name>.sqlite`)
and reused on rerun while it is newer than the report. Without `nsys` the error gives the exact command to run.
read_raw is the export plus the nsys reader's read_raw (the cache folder is ReadOptions.cache_dir; raw.info
names the export), normalize is the nsys reader's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuvar.errors import InputError
from gpuvar.ingest import nsys
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.compression import SQLITE_MAGIC
from gpuvar.ingest.raw import RawTrace, ReadOptions
from gpuvar.output import replacing

FORMAT = "nsys-rep"
SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_TIMEOUT_S = 3600


def sniff(path: Path, head: bytes) -> bool:
    """A report file name (.nsys-rep / .qdrep) whose content no other reader claimed (this reader is tried last)."""
    path = Path(path)
    return not path.is_dir() and path.name.lower().endswith(SUFFIXES) and not head.startswith(SQLITE_MAGIC)


def export_command(report: Path, sqlite: Path) -> list[str]:
    return ["nsys", "export", "--type", "sqlite", "--output", str(sqlite), str(report)]


def _manual_command(report: Path) -> str:
    stem = report.name
    for suffix in SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    target = report.with_name(stem + ".sqlite")
    return " ".join(export_command(report, target))


def cache_path(report: Path, cache_dir: Path) -> Path:
    return Path(cache_dir) / (Path(report).name + ".sqlite")


def _fresh(cache: Path, report: Path) -> bool:
    try:
        if cache.stat().st_mtime < report.stat().st_mtime:
            return False
        with open(cache, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def export(report: Path, cache: Path) -> tuple[Path, bool]:
    """The SQLite export of `report` at `cache`, made with nsys unless a fresh one is there; (path, reused)."""
    report, cache = Path(report), Path(cache)
    if _fresh(cache, report):
        return cache, True
    exe = shutil.which("nsys")
    if exe is None:
        raise InputError(
            report,
            f"Nsight Systems report and nsys is not on PATH: export it to SQLite first with "
            f"`{_manual_command(report)}` and ingest the .sqlite file",
        )
    with replacing(cache, suffix=".sqlite") as partial:
        cmd = [exe, *export_command(report, partial)[1:]]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(report, f"nsys export failed to run ({exc})") from None
        if proc.returncode != 0 or not partial.exists():
            detail = (proc.stderr or proc.stdout or "").strip().splitlines()
            last = detail[-1] if detail else "no output"
            raise InputError(report, f"nsys export failed (exit {proc.returncode}): {last}")
    return cache, False


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """Export (or reuse the cached export in options.cache_dir; a temporary one without it) and read the tables
    with the nsys SQLite reader."""
    path = Path(path)
    if options.cache_dir is None:
        with tempfile.TemporaryDirectory(prefix="gpuvar-nsys-rep-") as tmp:
            return _read_export(path, *export(path, cache_path(path, Path(tmp))), options)
    return _read_export(path, *export(path, cache_path(path, Path(options.cache_dir))), options)


def _read_export(report: Path, sqlite: Path, reused: bool, options: ReadOptions) -> RawTrace:
    raw = nsys.read_raw(sqlite, options)
    raw.format = FORMAT
    raw.source = str(report)
    raw.info.update(export=str(sqlite), export_reused=reused)
    raw.notes.insert(
        0,
        f"Nsight Systems report exported with `nsys export --type sqlite` to {sqlite}"
        + (" (cached export reused)" if reused else ""),
    )
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """The nsys SQLite reader's normalize (the output keeps this reader's format)."""
    return nsys.normalize(raw)


def read_cached(path: Path, cache_dir: Path | None) -> ReaderOutput:
    """read_raw then normalize, the export cached in cache_dir (the current driver's entry point)."""
    return normalize(read_raw(path, ReadOptions(cache_dir=cache_dir)))


def read(path: Path) -> ReaderOutput:
    """Read a report through a temporary export (`gpuvar ingest` passes its output folder as the cache)."""
    return read_cached(path, None)
