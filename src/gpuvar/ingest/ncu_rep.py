"""Nsight Compute binary report (`.ncu-rep`), read offline through NVIDIA's `ncu-report` package.

No Nsight Compute install is needed: the PyPI package `ncu-report` (extra `gpuvar[ncurep]`) loads the report.
Every launch (an "action" of every range, in report order) becomes one row with every metric it holds, and
the rows are built exactly as the ncu CSV reader builds them (`ncu.identity` / `ncu.launch_table`), so a
metric gives the same column, unit and canonical mapping from a `.ncu-rep` as from `ncu --csv` of it:
  * launch_id = the launch's position in the report (what ncu prints as ID); kernel_name = the demangled
    name (ncu's default `--print-kernel-base demangled`), else the function name.
  * the CSV identity columns are rebuilt from launch metrics: Context = launch__context_id, Stream =
    launch__stream_id, Device = launch__device_id, CC = compute capability major.minor, Grid Size / Block
    Size = launch__grid_dim_* / launch__block_dim_*.
  * metric values are converted to base units with ncu.unit_scale (the report already stores base units:
    ns, byte, ...); a metric with instance values only (no aggregate value) is null, as ncu's CSV leaves it
    without `--print-metric-instances`; a metric holding text keeps its text.
  * process id / name and host name are not exposed by the package: those columns are null (noted).
A damaged report does not raise in the package: its parser logs to stderr and returns launches without a
name or metrics, or no ranges at all. Those log lines are captured (not printed), unreadable launches are
dropped and counted, and a report with no readable launch is a one-line InputError.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.ingest import ncu
from gpuvar.ingest.base import ReaderOutput

FORMAT = "ncu-rep"
MAGIC = b"NVR\x00"
INSTALL_HINT = "reading .ncu-rep files needs the ncu-report package: pip install 'gpuvar[ncurep]' (or ncu-report)"
_DIMS = ("Grid Size", "launch__grid_dim_"), ("Block Size", "launch__block_dim_")
_IDENTITY_METRICS = {"Context": "launch__context_id", "Stream": "launch__stream_id", "Device": "launch__device_id"}
_CC = ("device__attribute_compute_capability_major", "device__attribute_compute_capability_minor")
_WORKLOAD = {0: "kernel", 1: "range", 2: "graph", 3: "cmdlist", 4: "subgrid schedule"}


def sniff(path: Path, head: bytes) -> bool:
    """The .ncu-rep magic bytes `NVR\\0` at the start of the file."""
    return head.startswith(MAGIC)


def _package(path: Path):
    try:
        import ncu_report
    except ImportError:
        raise InputError(path, INSTALL_HINT) from None
    return ncu_report


@contextlib.contextmanager
def _captured_stderr():
    """Redirect file descriptor 2 to a temporary file while the package parses (its C++ parser logs damage
    there); yields a list that receives the captured lines once the block ends."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines += [l.strip() for l in tmp.read(1 << 20).decode("utf-8", "replace").splitlines() if l.strip()]


def _parser_message(lines: list[str]) -> str:
    """The first damage report of the package's parser, shortened ('' when it logged none)."""
    found = [l for l in lines if "parse" in l.lower() or "error" in l.lower()]
    if not found:
        return ""
    text = found[0].split("] ", 1)[-1]
    return text if len(found) == 1 else f"{text} (and {len(found) - 1} more parser message(s))"


def _launch(action) -> dict | None:
    """One action as {'name', 'workload', 'metrics': {name: (value, unit)}}; None when the record is damaged
    (no name, no metrics). Only package calls happen here; any exception they raise means damage too."""
    names = list(action.metric_names())
    name = action.name(action.NameBase_DEMANGLED) or action.name()
    if not name and not names:
        return None
    metrics = {}
    for metric_name in names:
        metric = action.metric_by_name(metric_name)
        if metric is None:
            continue
        value = metric.value() if metric.has_value() else None
        metrics[metric_name] = (value, metric.unit() or "")
    return {"name": name, "workload": action.workload_type(), "metrics": metrics}


def _read_report(path: Path, package) -> tuple[list[dict | None], list[str]]:
    """Every action of every range, in report order (None for a damaged one), and the parser's log lines."""
    launches: list[dict | None] = []
    with _captured_stderr() as log:
        try:
            report = package.load_report(str(path))
            for r in range(report.num_ranges()):
                rng = report.range_by_idx(r)
                for a in range(rng.num_actions()):
                    try:
                        launches.append(_launch(rng.action_by_idx(a)))
                    except Exception:  # noqa: BLE001 - a damaged record makes the SWIG layer raise anything
                        launches.append(None)
        except Exception as exc:  # noqa: BLE001 - the package's own errors (missing file, unreadable report)
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(path, f"cannot read Nsight Compute report ({message})") from None
    return launches, log


def _int_text(value) -> str:
    """A launch metric as ncu prints it in an identity column: 7.0 -> '7'; absent -> ''."""
    if value is None or isinstance(value, str):
        return value or ""
    number = float(value)
    return str(int(number)) if np.isfinite(number) and number == int(number) else str(value)


def _identity_text(launches: list[dict]) -> pd.DataFrame:
    """The ncu CSV identity columns (text) of each launch, rebuilt from its launch metrics."""
    rows = []
    for launch in launches:
        m = launch["metrics"]

        def get(name):
            return m.get(name, (None, ""))[0]

        row = {"Kernel Name": launch["name"] or ""}
        row.update({column: _int_text(get(metric)) for column, metric in _IDENTITY_METRICS.items()})
        major, minor = (_int_text(get(name)) for name in _CC)
        row["CC"] = f"{major}.{minor}" if major and minor else ""
        for column, prefix in _DIMS:
            xyz = [_int_text(get(prefix + axis)) for axis in "xyz"]
            row[column] = f"({', '.join(xyz)})" if all(xyz) else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=["Kernel Name", *_IDENTITY_METRICS, "CC", "Grid Size", "Block Size"])


def _metric_columns(launches: list[dict], out: ReaderOutput) -> tuple[dict, dict[str, str]]:
    """One column per metric name (first-seen order) in base units, and each column's base unit."""
    order = list(dict.fromkeys(name for launch in launches for name in launch["metrics"]))
    scales: dict[str, tuple[str, float]] = {}
    columns, units = {}, {}
    for name in order:
        cells = [launch["metrics"].get(name, (None, "")) for launch in launches]
        for _, unit in cells:
            if unit not in scales:
                scales[unit] = ncu.unit_scale(unit)
        present = [(v, u) for v, u in cells if v is not None]
        if any(isinstance(v, str) for v, _ in present):
            columns[name] = np.array([None if v is None else str(v) for v, _ in cells], dtype=object)
        else:
            values = np.array([np.nan if v is None else float(v) for v, _ in cells], dtype=np.float64)
            columns[name] = values * np.array([scales[u][1] for _, u in cells])
        held = [launch["metrics"][name][1] for launch in launches if name in launch["metrics"]]
        units[name] = ncu.column_unit(name, [scales[u][0] for u in held], out)  # known even without a value
    return columns, units


def read(path: Path) -> ReaderOutput:
    """One row per launch of an .ncu-rep, every metric a column, canonical names as the ncu CSV reader."""
    path = Path(path)
    package = _package(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(MAGIC))
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror})") from None
    if head != MAGIC:
        raise InputError(path, "not an Nsight Compute report (no NVR magic bytes at the start)")
    launches, log = _read_report(path, package)
    parser = _parser_message(log)
    out = ReaderOutput(format=FORMAT, kernels=None)
    out.rows_read["kernels"] = len(launches)
    ids = np.array([i for i, launch in enumerate(launches) if launch is not None], dtype=np.int64)
    readable = [launch for launch in launches if launch is not None]
    if not readable:
        what = f"{len(launches)} launch record(s), none readable" if launches else "no kernel launches"
        damage = f"; the report is damaged ({parser})" if parser else " (empty, truncated or damaged report?)"
        raise InputError(path, f"{what}{damage}")
    out.drop("kernels", "launch record unreadable (damaged report)", len(launches) - len(readable))
    if parser:
        out.notes.append(f"the report parser logged damage: {parser}")
    kinds = pd.Series([_WORKLOAD.get(launch["workload"], str(launch["workload"])) for launch in readable])
    if (kinds != "kernel").any():
        out.notes.append(f"profiled workloads by type: {kinds.value_counts().to_dict()} (all kept as rows)")
    ident = ncu.identity(_identity_text(readable), ids, [], out)
    columns, units = _metric_columns(readable, out)
    out.notes.append(f"{len(readable)} launches, {len(columns)} metrics; process id/name and host name are not "
                     "in the ncu-report package's view of the report (left null)")
    out.kernels = ncu.launch_table(ident, columns, units, out)
    return out
