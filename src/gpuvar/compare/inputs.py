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

from gpuvar.artifacts import BIN_REPORT, BINS_TABLE, CAUSAL_SUMMARY, KERNELS_TABLE
from gpuvar.errors import InputError

KEYS = ("kernel_name", "kernel_short_name", "launch_config")


@dataclass
class Kernels:
    """Durations (ns, float64) per launch with their comparison key; `dropped` counts rows left out, by reason."""

    path: Path
    frame: pd.DataFrame  # columns: key, duration
    rows_in: int
    dropped: dict[str, int] = field(default_factory=dict)


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
    """The label kernels are matched by across runs: the kernel name, or name + launch configuration."""
    if key == "launch_config":
        return frame["kernel_name"].astype(str) + " [" + frame["launch_config"].astype(str) + "]"
    return frame[key].astype(str)


def read_kernels(path: str | Path, key: str = "kernel_name") -> Kernels:
    """Key and duration of every launch; launches without a name or a finite positive duration are dropped
    and counted (rows in = rows kept + dropped)."""
    if key not in KEYS:
        raise InputError(path, f"unknown comparison key {key!r} (allowed: {', '.join(KEYS)})")
    file = kernels_file(path)
    if not file.is_file():
        raise InputError(file, "file not found (expected an ingest folder or its kernels.parquet)")
    need = ["kernel_name", "duration"] + (["launch_config"] if key == "launch_config" else [])
    need = list(dict.fromkeys(need + ([key] if key != "launch_config" else [])))
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(file).names
        missing = [c for c in need if c not in names]
        if missing:
            raise InputError(file, f"not a canonical kernels table: column(s) {', '.join(missing)} missing")
        frame = pd.read_parquet(file, columns=need)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
        raise InputError(file, f"cannot read kernels: {type(exc).__name__}: {exc}") from exc
    rows_in = len(frame)
    duration = pd.to_numeric(frame["duration"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    no_name = frame[key if key != "launch_config" else "kernel_name"].isna().to_numpy()
    bad_duration = ~np.isfinite(duration) | (duration <= 0)
    dropped = {}
    if no_name.any():
        dropped["no_kernel_name"] = int(no_name.sum())
    if (bad_duration & ~no_name).any():
        dropped["no_positive_duration"] = int((bad_duration & ~no_name).sum())
    keep = ~(no_name | bad_duration)
    if not keep.any():
        raise InputError(file, f"no kernel launch with a name and a positive duration to compare ({rows_in} rows)")
    out = pd.DataFrame({"key": comparison_key(frame[keep], key).to_numpy(), "duration": duration[keep]})
    return Kernels(file, out, rows_in, dropped)


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
        edges = _read_csv(sub / "edges.csv", ("from", "to", "coefficient", "sign"))
        contrib = _read_csv(sub / "contributions.csv", ("feature", "sign"))
        shares = None
        if "variance_share" in contrib.columns:
            values = pd.to_numeric(contrib["variance_share"], errors="coerce")
            shares = {str(f): (float(v) if np.isfinite(v) else None) for f, v in zip(contrib["feature"], values)}
        signs = {str(f): int(s) for f, s in zip(contrib["feature"], contrib["sign"])}
        probability = None
        if (sub / "bootstrap_edges.csv").is_file():
            boot = _read_csv(sub / "bootstrap_edges.csv", ("from", "to", "probability"))
            probability = {(str(a), str(b)): float(p) for a, b, p in zip(boot["from"], boot["to"], boot["probability"])}
        groups[str(g["group"])] = CausalGroup(str(g["group"]), str(g["slug"]), edges, shares, signs, probability)
    return Causal(folder, str(summary["target"]), groups, skipped)
