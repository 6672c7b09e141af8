"""The one way gpuvar writes a file: under a temporary name beside it, renamed over it once complete.

Why: a reader (the next rule, a user's browser, a rerun after Ctrl-C) sees the old file or the new one, never a
part; an interrupted write leaves no complete-looking file and no temporary behind. Every file writer of the
package goes through `replacing` (JSON, text, figure data, canonical Parquet, figures, the demo's profiler
files); whole output folders are staged and swapped by gpuvar.atomic, which uses the same rename. A failed write
is one StageError line naming the file, not an OSError traceback. tests/test_layout.py checks that no other
module renames a file into place.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from gpuvar.errors import StageError


def make_parent(path: Path) -> None:
    """The folder a file goes into, created; a failure is one StageError line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StageError(f"cannot create output directory {path.parent}: {exc.strerror or exc}") from exc


@contextmanager
def replacing(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield the temporary path to write; on success it replaces `path`, on any failure it is removed.
    `suffix` ends the temporary name, for a tool that insists on its extension (nsys export: .sqlite)."""
    path = Path(path)
    if path.is_dir():  # said before the work, not after it (a 20 M-launch demo export took 79 s to be refused)
        raise StageError(f"cannot write {path}: it is a folder (name a file)")
    make_parent(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise StageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def json_ready(obj, float_value=float):
    """JSON-ready, recursively: numpy scalars to Python, NaN/inf to null (strict JSON has neither), Paths to
    text, keys to text; each finite float through `float_value` (causal: 12 significant digits)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v, float_value) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v, float_value) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return float_value(obj) if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_text(text: str, path: str | Path) -> None:
    """`text` as UTF-8."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(obj, path: str | Path, float_value=float) -> None:
    """The one JSON writer of every stage: strict JSON (json_ready), sorted keys, trailing newline."""
    write_text(json.dumps(json_ready(obj, float_value), indent=2, sort_keys=True, allow_nan=False) + "\n", path)


def write_csv(frame, path: str | Path) -> Path:
    """A table (the data behind a figure, a comparison's rows) with a stable float format, so reruns diff cleanly."""
    with replacing(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.10g")
    return Path(path)
