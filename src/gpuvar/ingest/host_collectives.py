"""A trace's host collective ops, kept at ingest beside the canonical tables (host_collectives.parquet).

Why: the rank analysis of a Kineto job takes its collectives from the host side (gloo:/nccl: ranges), because
only the host sees a rank waiting inside a host collective (gpuvar.ranks.load). The canonical tables hold device
activity only, so the rank analysis used to read every rank's original trace a second time after its ingest: at
256 ranks of 100 k launches, 140 s of a 390 s `gpuvar explain`, for a few thousand rows per rank. The ingest
already holds the host ops, so it keeps the collectives (a few rows per step) and the rank analysis reads them
with the rank's canonical tables.

A collective is a host op of the communication backend, most specific first (COLLECTIVE_TIERS): the first tier a
trace has is used for the whole trace. The file holds start and end in ns (Kineto's ts and dur are decimal µs)
and the op's name; the rank is the one its kernels record (gpuvar.ranks.load), so the file does not repeat it.
An op without a time (its ts or dur not a number) is left out, and a note of ingest.json counts it.
A trace with host ops but no collective among them gets an empty file: the rank analysis then says so, as it does
from the trace. ingest.json records the rows kept (`host_collectives`); a folder without that key (ingested before,
or a format without host ops) has none, and the rank analysis reads the trace as it used to.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.layout import HOST_COLLECTIVES_TABLE, INGEST_REPORT

# host collective ops, most specific first: the first tier a trace has is used for that trace
COLLECTIVE_TIERS = (("gloo:", "nccl:", "mpi:", "ucc:"), ("c10d::",), ("record_param_comms",))
REPORT_KEY = "host_collectives"  # ingest.json: rows kept in HOST_COLLECTIVES_TABLE
NONE_FOUND = "no collective op (gloo:/nccl:/c10d::/record_param_comms) among the host ops"


def collective_ops(cpu_ops) -> tuple[pd.DataFrame, int]:
    """(the collectives among a raw `cpu_ops` table (name, ts in decimal µs, dur in µs) as ns intervals: start,
    end, name; the collective ops left out for want of a time). No rows where none of the tiers is among the ops.
    An op whose ts or dur the reader could not read as a number (null: a list, an object) has no interval, so it is
    left out and counted. The names are matched in Arrow: a trace has a million host ops and a few thousand
    collectives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = cpu_ops if isinstance(cpu_ops, pa.Table) else pa.Table.from_pandas(cpu_ops, preserve_index=False)
    names = pc.cast(table.column("name"), pa.string())
    hit = table.slice(0, 0)
    for tier in COLLECTIVE_TIERS:
        mask = pc.fill_null(_starts_with_any(names, tier), False)
        if pc.any(mask).as_py():
            hit = table.filter(mask)
            break
    ops = hit.select(["name", "ts", "dur"]).to_pandas()
    ts = [_number(t) for t in ops["ts"]]
    dur = [_number(d) for d in ops["dur"]]
    timed = np.array([t is not None and d is not None for t, d in zip(ts, dur)], dtype=bool)
    start = np.array([int(round(t * 1000)) for t, ok in zip(ts, timed) if ok], dtype=np.int64)
    end = start + np.rint(np.array([d for d, ok in zip(dur, timed) if ok], dtype=np.float64) * 1000).astype(np.int64)
    names_kept = ops["name"].astype(str).to_numpy(dtype=object)[timed]
    return pd.DataFrame({"start": start, "end": end, "name": names_kept}), int((~timed).sum())


def _number(value) -> float | None:
    """A recorded ts or dur as a float (Kineto writes decimal µs, as text or number); None where there is none."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(number) else number


def _starts_with_any(names, prefixes: tuple[str, ...]):
    import pyarrow.compute as pc

    mask = pc.starts_with(names, prefixes[0])
    for prefix in prefixes[1:]:
        mask = pc.or_(mask, pc.starts_with(names, prefix))
    return mask


def write(collectives: pd.DataFrame, folder: Path) -> int:
    """Write the collectives into an ingest folder (before its ingest.json); returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuvar.output import replacing

    table = pa.table(
        {
            "start": pa.array(collectives["start"].to_numpy(np.int64), pa.int64()),
            "end": pa.array(collectives["end"].to_numpy(np.int64), pa.int64()),
            "name": pa.array(collectives["name"].tolist(), pa.string()),
        }
    )
    with replacing(Path(folder) / HOST_COLLECTIVES_TABLE) as tmp:
        pq.write_table(table, tmp)
    return table.num_rows


def kept_report(folder: Path) -> dict | None:
    """An ingest folder's ingest.json when the folder keeps its trace's host collectives (the report says so and
    the file is there), else None."""
    try:
        report = json.loads((Path(folder) / INGEST_REPORT).read_text())
    except (OSError, ValueError):
        return None
    kept = isinstance(report, dict) and REPORT_KEY in report and (Path(folder) / HOST_COLLECTIVES_TABLE).is_file()
    return report if kept else None


def read(folder: Path) -> pd.DataFrame:
    """The host collectives an ingest folder keeps (start, end, name)."""
    frame = pd.read_parquet(Path(folder) / HOST_COLLECTIVES_TABLE)
    frame["name"] = frame["name"].astype(object)
    return frame
