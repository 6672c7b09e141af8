"""Nsight Compute binary report (`.ncu-rep`), read offline through NVIDIA's `ncu-report` package.

No Nsight Compute install is needed: the PyPI package `ncu-report` (extra `gpuvar[ncurep]`) loads the report.
Every launch (an "action" of every range, in report order) becomes one row with every metric it holds, and
the rows are built exactly as the ncu CSV reader builds them (`ncu_metrics.identity` /
`ncu_metrics.launch_table`), so a metric gives the same column, unit and canonical mapping from a `.ncu-rep` as
from `ncu --csv` of it:
  * launch_id = the launch's position in the report (what ncu prints as ID); kernel_name = the demangled
    name (ncu's default `--print-kernel-base demangled`), else the function name.
  * the CSV identity columns are rebuilt from launch metrics: Context = launch__context_id, Stream =
    launch__stream_id, Device = launch__device_id, CC = compute capability major.minor, Grid Size / Block
    Size = launch__grid_dim_* / launch__block_dim_*.
  * metric values are converted to base units with ncu_metrics.unit_scale (the report already stores base
    units: ns, byte, ...); a metric with instance values only (no aggregate value) is null, as ncu's CSV leaves it
    without `--print-metric-instances`; a metric holding text keeps its text.
  * process id / name and host name are not exposed by the package: those columns are null (noted).
The package runs in a child process (ncu_rep_worker.py): on a damaged report its native parser logs to stderr
and returns launches without a name or metrics, or no ranges at all, and on some damage it aborts the whole
interpreter. The child's stderr is captured (its first parser message goes into the notes or the error), a
crash is a one-line InputError, unreadable launches are dropped and counted, and a report with no readable
launch is a one-line InputError.
Two stages (gpuvar.ingest.raw): read_raw runs the package and keeps what it returned (raw tables `launches`,
`metrics` under ncu's metric names with the package's values, `units`); normalize does the rest.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar.errors import InputError
from gpuvar.ingest import ncu_metrics
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.compression import read_raw_head
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "ncu-rep"
MAGIC = b"NVR\x00"
INSTALL_HINT = "reading .ncu-rep files needs the ncu-report package: pip install 'gpuvar[ncurep]' (or ncu-report)"
_DIMS = ("Grid Size", "launch__grid_dim_"), ("Block Size", "launch__block_dim_")
_IDENTITY_METRICS = {"Context": "launch__context_id", "Stream": "launch__stream_id", "Device": "launch__device_id"}
_CC = ("device__attribute_compute_capability_major", "device__attribute_compute_capability_minor")
_WORKLOAD = {0: "kernel", 1: "range", 2: "graph", 3: "cmdlist", 4: "subgrid schedule"}
WORKER = Path(__file__).with_name("ncu_rep_worker.py")
TIMEOUT_ENV = "GPUVAR_NCU_REP_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 3600.0


def sniff(path: Path, head: bytes) -> bool:
    """The .ncu-rep magic bytes `NVR\\0` at the start of the file."""
    return head.startswith(MAGIC)


def _worker(path: Path) -> tuple[dict, str]:
    """The report's launches, read by ncu_rep_worker.py in a child process, and the parser's first damage
    message ('' if none). A crash or an exception of the package is a one-line InputError."""
    if importlib.util.find_spec("ncu_report") is None:
        raise InputError(path, INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="gpuvar-ncu-rep-") as tmp:
        output = Path(tmp) / "launches.pickle"
        command = [sys.executable, str(WORKER), str(path), str(output)]
        timeout = _timeout()
        try:
            proc = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise InputError(
                path,
                f"the ncu-report package did not finish reading the report in {timeout:g} s "
                f"(set {TIMEOUT_ENV} to wait longer)",
            ) from None
        log = proc.stderr.decode("utf-8", "replace").splitlines()
        parser = _parser_message(log)
        if proc.returncode != 0 or not output.exists():
            how = (
                f"signal {_signal_name(-proc.returncode)}"
                if proc.returncode < 0
                else f"exit status {proc.returncode}: {_last_line(log)}"
            )
            damage = f"; the report is damaged ({parser})" if parser else "; the report is damaged or truncated"
            raise InputError(path, f"the ncu-report package crashed reading the report ({how}){damage}")
        with open(output, "rb") as fh:
            result = pickle.load(fh)  # written by our own child process, in our own temporary folder
    if result.get("missing_package"):
        raise InputError(path, INSTALL_HINT)
    if "error" in result:
        raise InputError(path, f"cannot read Nsight Compute report ({result['error']})")
    return result["launches"], parser


def _timeout() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _last_line(lines: list[str]) -> str:
    return next((line.strip() for line in reversed(lines) if line.strip()), "no message")[:200]


def _parser_message(lines: list[str]) -> str:
    """The first damage report of the package's parser, shortened ('' when it logged none)."""
    found = [line.strip() for line in lines if "parse" in line.lower() or "error" in line.lower()]
    if not found:
        return ""
    text = found[0].split("] ", 1)[-1]
    return text if len(found) == 1 else f"{text} (and {len(found) - 1} more parser message(s))"


def _int_text(value) -> str:
    """A launch metric as ncu prints it in an identity column: 7.0 -> '7'; absent -> ''."""
    if value is None or isinstance(value, str):
        return value or ""
    number = float(value)
    return str(int(number)) if np.isfinite(number) and number == int(number) else str(value)


def _identity_text(names: list, metrics: pa.Table) -> pd.DataFrame:
    """The ncu CSV identity columns (text) of each launch, rebuilt from its launch metrics."""
    n = len(names)

    def column(metric):
        cells = metrics.column(metric).to_pylist() if metric in metrics.column_names else [None] * n
        return [_int_text(v) for v in cells]

    frame = pd.DataFrame({"Kernel Name": [name or "" for name in names]})
    for name, metric in _IDENTITY_METRICS.items():
        frame[name] = column(metric)
    frame["CC"] = [f"{major}.{minor}" if major and minor else "" for major, minor in zip(*map(column, _CC))]
    for name, prefix in _DIMS:
        axes = zip(*(column(prefix + axis) for axis in "xyz"))
        frame[name] = [f"({', '.join(xyz)})" if all(xyz) else "" for xyz in axes]
    return frame


def _value_array(cells: list) -> pa.Array:
    """One metric's values as the package returned them: text if any value is text, else integers when all are
    (int64, or uint64 for counters past 2^63), else float64; None (no value, or the launch lacks it) is null."""
    if any(isinstance(v, str) for v in cells):
        return pa.array([None if v is None else str(v) for v in cells], pa.string())
    if all(v is None or type(v) is int for v in cells):
        for kind in (pa.int64(), pa.uint64()):
            try:
                return pa.array(cells, kind)
            except (OverflowError, pa.ArrowException):
                pass
    return pa.array([None if v is None else float(v) for v in cells], pa.float64())


def _metric_tables(launches: dict) -> tuple[pa.Table, pa.Table]:
    """(values, units): one column per metric name in report order, one row per readable launch; a unit is
    null where the launch does not hold the metric."""
    names = list(launches["values"])
    values = pa.Table.from_arrays([_value_array(launches["values"][m]) for m in names], names=names)
    units = pa.Table.from_arrays([pa.array(launches["units"][m], pa.string()) for m in names], names=names)
    return values, units


def _metric_columns(values: pa.Table, units: pa.Table, out: ReaderOutput) -> tuple[dict, dict[str, str]]:
    """One column per metric name (report order) in base units, and each column's base unit."""
    scales: dict[str, tuple[str, float]] = {}
    columns, unit_names = {}, {}
    for name in values.column_names:
        unit_of = units.column(name).to_pylist()
        for unit in set(unit_of):
            if unit is not None and unit not in scales:
                scales[unit] = ncu_metrics.unit_scale(unit)
        cells = values.column(name)
        if pa.types.is_string(cells.type) or pa.types.is_large_string(cells.type):  # '' is null, as in ncu's CSV
            columns[name] = np.array([v or None for v in cells.to_pylist()], dtype=object)
        else:
            numbers = pc.fill_null(pc.cast(cells, pa.float64(), safe=False), np.nan).to_numpy(zero_copy_only=False)
            columns[name] = numbers * np.array([1.0 if u is None else scales[u][1] for u in unit_of])
        unit_names[name] = ncu_metrics.column_unit(name, [scales[u][0] for u in unit_of if u is not None], out)
    return columns, unit_names


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The report's launches as the ncu-report package returns them, under ncu's metric names.

    Tables, one row per readable launch in report order: `launches` (ID = position in the report, Kernel Name,
    workload type), `metrics` (one column per metric, values as returned: no unit conversion) and `units` (the
    same columns: each value's unit). Unreadable launch records are dropped and counted."""
    path = Path(path)
    if read_raw_head(path, len(MAGIC)) != MAGIC:
        raise InputError(path, "not an Nsight Compute report (no NVR magic bytes at the start)")
    launches, parser = _worker(path)
    raw = RawTrace(format=FORMAT, source=str(path), tables={})
    total, readable = launches["total"], len(launches["ids"])
    raw.rows_read["kernels"] = total
    if not readable:
        what = f"{total} launch record(s), none readable" if total else "no kernel launches"
        damage = f"; the report is damaged ({parser})" if parser else " (empty, truncated or damaged report?)"
        raise InputError(path, f"{what}{damage}")
    raw.drop("kernels", "launch record unreadable (damaged report)", total - readable)
    if parser:
        raw.notes.append(f"the report parser logged damage: {parser}")
    if launches["damaged_metrics"]:
        raw.notes.append(f"{launches['damaged_metrics']} metric value(s) unreadable in the damaged report were skipped")
    values, units = _metric_tables(launches)
    raw.tables = {
        "launches": pa.table(
            {
                "ID": pa.array(launches["ids"], pa.int64()),
                "Kernel Name": pa.array(launches["names"], pa.string()),
                "Workload Type": pa.array(launches["workloads"], pa.int64()),
            }
        ),
        "metrics": values,
        "units": units,
    }
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """One row per launch, every metric a column in base units, canonical names as the ncu CSV reader."""
    out = raw.start_output(None)
    launches, values, units = (ncu_metrics.raw_table(raw, name) for name in ("launches", "metrics", "units"))
    kinds = pd.Series([_WORKLOAD.get(w, str(w)) for w in launches.column("Workload Type").to_pylist()])
    if (kinds != "kernel").any():
        out.notes.append(f"profiled workloads by type: {kinds.value_counts().to_dict()} (all kept as rows)")
    names = launches.column("Kernel Name").to_pylist()
    ids = launches.column("ID").to_numpy().astype(np.int64)
    ident = ncu_metrics.identity(_identity_text(names, values), ids, [], out)
    columns, unit_names = _metric_columns(values, units, out)
    out.notes.append(
        f"{len(names)} launches, {len(columns)} metrics; process id/name and host name are not "
        "in the ncu-report package's view of the report (left null)"
    )
    out.kernels = ncu_metrics.launch_table(ident, columns, unit_names, out)
    ncu_metrics.require_durations(raw.source, out.kernels)
    return out


def read(path: Path) -> ReaderOutput:
    """One row per launch of an .ncu-rep, every metric a column, canonical names as the ncu CSV reader."""
    return normalize(read_raw(path))
