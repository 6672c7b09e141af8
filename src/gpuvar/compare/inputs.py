"""Read one run's outputs for a comparison: canonical kernels (ingest), binning results, causal folders.

Why a module of its own: every reader here turns a missing or malformed file into a one-line InputError naming
it, so `gpuvar compare` never shows a traceback for a wrong path, and the statistics modules work on plain
frames and dicts they can be tested with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.kernel_names import ARROW
from gpuvar.layout import (
    BIN_REPORT,
    BINS_TABLE,
    CAUSAL_BOOTSTRAP_EDGES,
    CAUSAL_CONTRIBUTIONS,
    CAUSAL_EDGES,
    CAUSAL_SUMMARY,
    INGEST_REPORT,
    KERNELS_TABLE,
    MEMCPY_TABLE,
)

KEYS = ("kernel_name", "kernel_short_name", "launch_config", "launch_op", "call_site")
MIN_STEPS = 10  # fewer recorded steps than this: resample time blocks instead
MAX_BLOCKS, BLOCK_LAUNCHES = 100, 20  # time blocks: at most 100, of at least 20 launches each


@dataclass
class Kernels:
    """Per launch (kernels, then copies and memsets): comparison key, duration (ns, float64), resampling unit,
    launching op and kind; `dropped` counts rows left out, by reason; `units` says how units were formed."""

    path: Path
    frame: pd.DataFrame  # columns: key, duration, unit, op, kind, work (grid blocks / bytes), config
    rows_in: int
    dropped: dict[str, int] = field(default_factory=dict)
    units: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)  # the ingest.json beside the tables ({} when absent)
    devices: pd.DataFrame | None = None  # distinct (rank, device_id) pairs that ran kernels


@dataclass
class Bins:
    """One binning run: per-bin variance of the target and the top-k bins it kept."""

    path: Path
    target: str
    width: float
    unit: str
    top_k: int
    top_k_bins: list[int]
    frame: pd.DataFrame  # columns: bin, bin_start, count, var


@dataclass
class CausalGroup:
    group: str
    slug: str
    edges: pd.DataFrame  # from, to, coefficient, sign
    shares: dict[str, float] | None  # feature -> variance_share; None when the outputs predate the column
    signs: dict[str, int]  # feature -> sign of its total effect
    probability: dict[tuple[str, str], float] | None = None  # bootstrap edge probability; None: no bootstrap run


@dataclass
class Causal:
    path: Path
    target: str
    groups: dict[str, CausalGroup]  # by group name, only groups analysed (status ok)
    skipped: list[str]


def kernels_file(path: str | Path) -> Path:
    """An ingest folder (holding kernels.parquet) or the kernels.parquet file itself."""
    path = Path(path)
    return path / KERNELS_TABLE if path.is_dir() else path


def comparison_key(frame: pd.DataFrame, key: str) -> pd.Series:
    """The label kernels are matched by across runs: the kernel name, its short name, name + launch
    configuration, or the launching op / call site + name (so `aten::gelu`'s elementwise kernel is not pooled
    with every other op's)."""
    if key == "launch_config":
        return frame["kernel_name"].astype(str) + " [" + frame["launch_config"].astype(str) + "]"
    if key in ("launch_op", "call_site"):
        prefix = frame[key].astype(object).where(frame[key].notna(), "?").astype(str)
        return prefix + ARROW + frame["kernel_name"].astype(str)
    return frame[key].astype(str)


def _columns_needed(key: str) -> list[str]:
    need = ["kernel_name", "duration"]
    if key != "kernel_name":
        need.append(key)
    return need


def _read_table(file: Path, need: list[str], optional: tuple[str, ...], what: str) -> pd.DataFrame:
    """`need` (an InputError names the missing ones) and whichever of `optional` the file has."""
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(file).names
        missing = [c for c in need if c not in names]
        if missing:
            raise InputError(file, f"not a canonical {what} table: column(s) {', '.join(missing)} missing")
        return pd.read_parquet(file, columns=need + [c for c in optional if c in names and c not in need])
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
        raise InputError(file, f"cannot read {what}: {type(exc).__name__}: {exc}") from exc


def _positive(values: pd.Series) -> np.ndarray:
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _copies(file: Path, dropped: dict[str, int]) -> tuple[pd.DataFrame, int]:
    """Copies and memsets of memcpy.parquet keyed by kind (`[memcpy DtoD]`, `[memset]`), like kernels."""
    if not file.is_file():
        return pd.DataFrame(), 0
    frame = _read_table(file, ["duration"], ("copy_kind_name", "name", "start", "step", "launch_op", "bytes"), "copies")
    rows = len(frame)
    duration = _positive(frame["duration"])
    bad = ~np.isfinite(duration) | (duration <= 0)
    if bad.any():
        dropped["copy_no_positive_duration"] = int(bad.sum())
    frame = frame[~bad]
    kind_name = frame.get("copy_kind_name", pd.Series(None, index=frame.index, dtype=object)).astype(object)
    name = frame.get("name", pd.Series("", index=frame.index, dtype=object)).astype(object).fillna("")
    memset = kind_name.fillna("").str.lower().eq("memset") | name.str.contains("memset", case=False)
    kind = np.where(memset, "memset", "copy")
    key = np.where(memset, "[memset]", "[memcpy " + kind_name.fillna("?").astype(str) + "]")
    out = pd.DataFrame({"key": key, "duration": duration[~bad], "kind": kind})
    _when_and_what(out, frame, work="bytes")
    out["config"] = out["work"].map(lambda b: f"{b:.0f} B" if np.isfinite(b) else None)
    return out, rows


def _when_and_what(out: pd.DataFrame, frame: pd.DataFrame, work: str) -> None:
    """Add start, step, launching op and work per launch (`work`: grid_size, bytes) from `frame`'s columns,
    NaN / None where the table lacks them."""
    for c in ("start", "step"):
        out[c] = _positive(frame[c]) if c in frame.columns else np.nan
    out["op"] = frame["launch_op"].to_numpy() if "launch_op" in frame.columns else None
    out["work"] = _positive(frame[work]) if work in frame.columns else np.nan


def resampling_units(start: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, dict]:
    """Units of dependence in one run for the cluster bootstrap: its recorded steps (Kineto ProfilerStep /
    synchronize-delimited iterations, nsys NVTX), when it has at least MIN_STEPS; else contiguous time blocks of
    equal launch count (at most MAX_BLOCKS, of at least BLOCK_LAUNCHES). Launches outside any step fall in the
    time block around them."""
    n = len(start)
    order = np.argsort(np.where(np.isfinite(start), start, np.inf), kind="stable")
    blocks = np.empty(n, dtype=np.int64)
    n_blocks = max(1, min(MAX_BLOCKS, n // BLOCK_LAUNCHES))
    blocks[order] = np.arange(n) * n_blocks // max(n, 1)
    has_step = np.isfinite(step)
    steps = np.unique(step[has_step])
    if len(steps) >= MIN_STEPS:
        unit = np.where(has_step, step, -1 - blocks).astype(np.int64)
        return unit, {"unit": "step", "count": int(len(np.unique(unit))), "steps": int(len(steps))}
    return blocks, {"unit": "time block", "count": int(len(np.unique(blocks)))}


def read_kernels(path: str | Path, key: str = "kernel_name") -> Kernels:
    """Key, duration, resampling unit, launching op and kind of every launch and copy; rows without a name or a
    finite positive duration are dropped and counted (rows in = rows kept + dropped)."""
    if key not in KEYS:
        raise InputError(path, f"unknown comparison key {key!r} (allowed: {', '.join(KEYS)})")
    file = kernels_file(path)
    if not file.is_file():
        raise InputError(file, "file not found (expected an ingest folder or its kernels.parquet)")
    optional = ("start", "step", "launch_op", "device_id", "rank", "launch_config", "grid_size")
    frame = _read_table(file, _columns_needed(key), optional, "kernels")
    rows_in = len(frame)
    duration = _positive(frame["duration"])
    no_name = frame["kernel_name" if key in ("launch_config", "launch_op", "call_site") else key].isna().to_numpy()
    bad_duration = ~np.isfinite(duration) | (duration <= 0)
    dropped = {}
    if no_name.any():
        dropped["no_kernel_name"] = int(no_name.sum())
    if (bad_duration & ~no_name).any():
        dropped["no_positive_duration"] = int((bad_duration & ~no_name).sum())
    keep = ~(no_name | bad_duration)
    if not keep.any():
        raise InputError(file, f"no kernel launch with a name and a positive duration to compare ({rows_in} rows)")
    kept = frame[keep]
    out = pd.DataFrame({"key": comparison_key(kept, key).to_numpy(), "duration": duration[keep], "kind": "kernel"})
    _when_and_what(out, kept, work="grid_size")
    out["config"] = kept["launch_config"].to_numpy() if "launch_config" in kept.columns else None
    copies, copy_rows = _copies(file.with_name(MEMCPY_TABLE), dropped)
    if len(copies):
        out = pd.concat([out, copies], ignore_index=True)
    unit, units = resampling_units(out["start"].to_numpy(np.float64), out["step"].to_numpy(np.float64))
    out = out.assign(unit=unit)[["key", "duration", "unit", "op", "kind", "work", "config"]]
    report = _optional_json(file.with_name(INGEST_REPORT))
    devices = kept[[c for c in ("rank", "device_id") if c in kept.columns]].drop_duplicates()
    return Kernels(file, out, rows_in + copy_rows, dropped, units, report, devices)


def _optional_json(path: Path) -> dict:
    """ingest.json when present and readable; a comparison of bare kernels.parquet files works without it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _json(path: Path) -> dict:
    if not path.is_file():
        raise InputError(path, "file not found")
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON ({exc})") from exc


def read_bins(folder: str | Path) -> Bins:
    """bins.parquet and bin.json of one `gpuvar bin` run (its output folder)."""
    folder = Path(folder)
    meta = _json(folder / BIN_REPORT)
    file = folder / BINS_TABLE
    if not file.is_file():
        raise InputError(file, "file not found")
    try:
        frame = pd.read_parquet(file, columns=["bin", "bin_start", "count", "var"])
    except Exception as exc:  # noqa: BLE001
        raise InputError(file, f"cannot read bins: {type(exc).__name__}: {exc}") from exc
    try:
        return Bins(
            folder,
            str(meta["target"]),
            float(meta["bin_width"]),
            str(meta["bin_unit"]),
            int(meta["top_k"]),
            [int(b) for b in meta["top_k_bins"]],
            frame,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(folder / BIN_REPORT, f"not a gpuvar bin.json (missing or bad {exc})") from exc


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(path, "file not found")
    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001
        raise InputError(path, f"cannot read CSV: {type(exc).__name__}: {exc}") from exc
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(path, f"column(s) {', '.join(missing)} missing")
    return frame


def read_causal(folder: str | Path) -> Causal:
    """summary.json of one `gpuvar causal` run and, per analysed group, its edges and variance shares.

    contributions.csv carries `variance_share` (the fraction of the target's variance a feature accounts
    for) since the causal stage's variance decomposition; older outputs lack it, and then shares are None
    (reported as null) rather than an error.
    """
    folder = Path(folder)
    summary = _json(folder / CAUSAL_SUMMARY)
    if "target" not in summary or not isinstance(summary.get("groups"), list):
        raise InputError(folder / CAUSAL_SUMMARY, "not a gpuvar causal summary (no target or groups)")
    groups, skipped = {}, []
    for g in summary["groups"]:
        if g.get("status") != "ok":
            skipped.append(str(g.get("group")))
            continue
        sub = folder / str(g["slug"])
        edges = _read_csv(sub / CAUSAL_EDGES, ("from", "to", "coefficient", "sign"))
        contrib = _read_csv(sub / CAUSAL_CONTRIBUTIONS, ("feature", "sign"))
        shares = None
        if "variance_share" in contrib.columns:
            values = pd.to_numeric(contrib["variance_share"], errors="coerce")
            shares = {str(f): (float(v) if np.isfinite(v) else None) for f, v in zip(contrib["feature"], values)}
        signs = {str(f): int(s) for f, s in zip(contrib["feature"], contrib["sign"])}
        probability = None
        if (sub / CAUSAL_BOOTSTRAP_EDGES).is_file():
            boot = _read_csv(sub / CAUSAL_BOOTSTRAP_EDGES, ("from", "to", "probability"))
            probability = {(str(a), str(b)): float(p) for a, b, p in zip(boot["from"], boot["to"], boot["probability"])}
        groups[str(g["group"])] = CausalGroup(str(g["group"]), str(g["slug"]), edges, shares, signs, probability)
    return Causal(folder, str(summary["target"]), groups, skipped)
