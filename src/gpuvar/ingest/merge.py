"""Combine per-rank ingests (one `gpuvar ingest` output folder per file) into one dataset with a `rank` column.

Multi-GPU jobs write one trace per rank; the workflow ingests each file in its own job and merges them here, so
binning and causal discovery see the whole job and per-rank variability is a feature. The rank of a part is
the one its file records (Kineto distributedInfo.rank, kept by the reader in the `rank` column) when every
part records a distinct one, else the file's position in the list (said in the notes). Rows are sorted by
start time (then rank and launch id); ingest.json accounts per file and in total (rows in = rows out + drops).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar import __version__
from gpuvar.atomic import staged_folder
from gpuvar.canonical_io import write_canonical
from gpuvar.errors import InputError
from gpuvar.ingest.gpu_identity import UNKNOWN_GPU_DEFAULT
from gpuvar.layout import INGEST_REPORT, MEMCPY_TABLE, table_file
from gpuvar.output import write_json
from gpuvar.schema import empty_memcpy

TABLES = ("kernels", "memcpy")


def _part(folder: Path) -> tuple[dict, dict[str, pa.Table]]:
    """A finished ingest folder: (its ingest.json, {table name: Arrow table})."""
    marker = folder / INGEST_REPORT
    try:
        report = json.loads(marker.read_text())
    except OSError as exc:
        raise InputError(folder, f"not a finished ingest (no readable ingest.json: {exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError(marker, f"not valid JSON ({exc.msg})") from None
    tables = {}
    for name in TABLES:
        if name in report.get("tables", {}):
            try:
                tables[name] = pq.read_table(folder / table_file(name))
            except (OSError, pa.ArrowInvalid) as exc:
                raise InputError(folder / table_file(name), f"cannot read ({exc})") from None
    if "kernels" not in tables:
        raise InputError(folder, "ingest has no kernels table")
    return report, tables


def _recorded_rank(table: pa.Table) -> int | None:
    """The single rank a part's file recorded, or None."""
    if "rank" not in table.column_names or table.num_rows == 0:
        return None
    col = table.column("rank")
    if col.null_count:
        return None
    values = pc.unique(col).to_pylist()
    return int(values[0]) if len(values) == 1 else None


def _with_rank(table: pa.Table, rank: int) -> pa.Table:
    column = pa.array([rank] * table.num_rows, type=pa.int64())
    if "rank" in table.column_names:
        return table.set_column(table.column_names.index("rank"), "rank", column)
    return table.append_column("rank", column)


def _sorted(table: pa.Table) -> pa.Table:
    keys = [(c, "ascending", "at_end") for c in ("start", "rank", "launch_id") if c in table.column_names]
    return table.take(pc.sort_indices(table, sort_keys=keys)) if table.num_rows else table


def _with_corun(table: pa.Table, reports: list[dict], ranks: list[int], unknown_gpu: str) -> tuple[pa.Table, list]:
    """The merged kernels with the co-running columns (when they hold two or more processes) and the notes."""
    import numpy as np
    import pandas as pd

    from gpuvar.ingest.context import group_codes
    from gpuvar.ingest.corun import COLUMNS, corun_columns, set_columns
    from gpuvar.ingest.gpu_identity import Recorded, merged_gpus

    names = [c for c in ("start", "end", "device_id", "rank", "process_id") if c in table.column_names]
    frame = table.select(names).to_pandas()
    if not {"start", "end", "device_id"} <= set(names) or not frame["start"].notna().any():
        return table, []  # no timeline (Nsight Compute): nothing ran "at the same time"
    pid = frame["process_id"] if "process_id" in frame.columns else pd.Series(np.full(len(frame), np.nan))
    process = group_codes(frame["rank"], pid)  # a process: (rank, process id), a null process id a value of its own
    if len(np.unique(process)) < 2:
        return table, []
    position = {rank: i for i, rank in enumerate(ranks)}
    part = frame["rank"].map(position).to_numpy(dtype=np.int64)
    recorded = [Recorded.from_report(r) for r in reports]
    gpu, notes = merged_gpus(recorded, part, frame["device_id"], ranks, unknown_gpu, process=pid)
    columns = corun_columns(frame, gpu, process)
    # the parts' own columns (null, or one trace's processes) are replaced: these see every process
    table = set_columns(table, {n: pa.array(columns[n], type=pa.float64(), from_pandas=True) for n in COLUMNS})
    count = columns[COLUMNS[0]]
    known = ~np.isnan(count)
    notes.append(
        f"co-running: {int((count[known] > 0).sum())} of {len(count)} launches overlap kernels of another process "
        f"on their GPU (ctx_other_process_kernels > 0); {int((~known).sum())} have no known physical GPU or "
        "timeline (NaN)"
    )
    return table, notes


def merge(parts: list[str | Path], output: str | Path, unknown_gpu: str = UNKNOWN_GPU_DEFAULT) -> dict:
    """Merge ingest folders `parts` (in rank/file order) into `output`; returns the merged ingest.json.

    unknown_gpu: whether ranks that record the same device index and no GPU UUID or host share a GPU
    ("auto", "shared", "separate": gpuvar.ingest.gpu_identity)."""
    output = Path(output)
    if not parts:
        raise InputError(output, "nothing to merge: no ingest folders given")
    loaded = [(Path(p), *_part(Path(p))) for p in parts]
    recorded = [_recorded_rank(tables["kernels"]) for _, _, tables in loaded]
    from_file = None not in recorded and len(set(recorded)) == len(recorded)
    ranks = recorded if from_file else list(range(len(loaded)))
    notes = [
        f"{len(loaded)} files merged; rank = "
        + (
            "the rank each file records (Kineto distributedInfo.rank)"
            if from_file
            else "the file's position in the dataset's source list"
            + (
                " (the files' recorded ranks are missing or not distinct)"
                if any(r is not None for r in recorded)
                else ""
            )
        )
    ]
    summary = {
        "gpuvar_version": __version__,
        "merged": True,
        "source": [],
        "format": None,
        "parts": [],
        "tables": {},
        "notes": notes,
    }
    # written into a staging folder beside `output`: the tables and ingest.json (last) move into place together,
    # or, on any failure (a table that cannot merge, disk full), none does and a previous result stays whole;
    # other entries of `output` (the per-rank ingests under ranks/) are left alone
    with staged_folder(output, replace=False, last=(INGEST_REPORT,)) as dest:
        formats = []
        for (folder, report, _), rank in zip(loaded, ranks):
            summary["source"].append(report.get("source", str(folder)))
            formats.append(report.get("format"))
            summary["parts"].append(
                {
                    "folder": str(folder),
                    "source": report.get("source"),
                    "format": report.get("format"),
                    "rank": rank,
                    "tables": report.get("tables", {}),
                    "notes": report.get("notes", []),
                }
            )
            for device in report.get("devices", []) if isinstance(report.get("devices"), list) else []:
                summary.setdefault("devices", []).append(
                    {**device, "rank": rank} if isinstance(device, dict) else device
                )
        summary["format"] = (
            formats[0] if len(set(formats)) == 1 else "mixed: " + ", ".join(sorted(set(map(str, formats))))
        )
        meta = {"source": summary["source"], "format": summary["format"], "merged": True}
        for name in TABLES:
            pieces = [_with_rank(tables[name], rank) for (_, _, tables), rank in zip(loaded, ranks) if name in tables]
            if not pieces:  # no file had copies: the table is written all the same, with no rows
                write_canonical(empty_memcpy(), dest / MEMCPY_TABLE, meta)
                continue
            try:
                table = _sorted(pa.concat_tables(pieces, promote_options="permissive"))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InputError(output, f"cannot merge the {name} tables: {exc}") from None
            if name == "kernels":
                table, corun_notes = _with_corun(table, [r for _, r, _ in loaded], ranks, unknown_gpu)
                notes.extend(corun_notes)
            write_canonical(table, dest / table_file(name), meta)
            dropped = Counter()
            rows_read = 0
            for (_, report, _), _rank in zip(loaded, ranks):
                part = report.get("tables", {}).get(name)
                if part:
                    rows_read += part["rows_read"]
                    dropped.update(part.get("dropped", {}))
            balanced = rows_read == table.num_rows + sum(dropped.values())
            summary["tables"][name] = {
                "rows_read": rows_read,
                "rows_written": table.num_rows,
                "dropped": dict(sorted(dropped.items())),
                "balanced": balanced,
                "columns": table.num_columns,
            }
            if not balanced:
                raise InputError(output, f"accounting error merging {name}: rows read {rows_read} != written + dropped")
        write_json(summary, dest / INGEST_REPORT)
    return summary
