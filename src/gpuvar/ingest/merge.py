"""Combine per-rank ingests (one `gpuvar ingest` output folder per file) into one dataset with a `rank` column.

Multi-GPU jobs write one trace per rank; the workflow ingests each file in its own job and merges them here, so
binning and causal discovery see the whole job and per-rank variability is a feature. The rank of a part is
the one its file records (Kineto distributedInfo.rank, kept by the reader in the `rank` column) when every
part records a distinct one, else the file's position in the list (said in the notes). Rows are sorted by
start time (then rank and launch id); ingest.json accounts per file and in total (rows in = rows out + drops).
The tables are written by a k-way merge of the parts' files that holds a row group, not the job (merge_rows, with
the co-running columns over a sliding window, merge_corun); the whole-table merge (_merged) writes the same bytes
and remains for parts whose rows are not sorted, and as the reference the tests hold the k-way merge to.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar import __version__
from gpuvar.atomic import staged_folder
from gpuvar.canonical_io import canonical_order, write_canonical
from gpuvar.errors import InputError
from gpuvar.ingest.corun import COLUMNS, set_columns
from gpuvar.ingest.gpu_identity import UNKNOWN_GPU_DEFAULT, MergedGpus, Recorded
from gpuvar.ingest.merge_corun import Window, merged_corun_note
from gpuvar.ingest.merge_rows import FAN_IN, part_facts, write_merged
from gpuvar.layout import INGEST_REPORT, MEMCPY_TABLE, table_file
from gpuvar.output import write_json
from gpuvar.schema import empty_memcpy

TABLES = ("kernels", "memcpy")


def _part(folder: Path) -> tuple[dict, int | None]:
    """A finished ingest folder: (its ingest.json, the single rank its kernels record or None). The tables are read
    when they are merged, a few rows at a time (merge_rows)."""
    marker = folder / INGEST_REPORT
    try:
        report = json.loads(marker.read_text())
    except OSError as exc:
        raise InputError(folder, f"not a finished ingest (no readable ingest.json: {exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError(marker, f"not valid JSON ({exc.msg})") from None
    if "kernels" not in report.get("tables", {}):
        raise InputError(folder, "ingest has no kernels table")
    return report, _recorded_rank(_read(folder, "kernels", columns=["rank"]))


def _read(folder: Path, name: str, columns: list[str] | None = None) -> pa.Table:
    """A table of an ingest folder (of `columns` that it has, if given)."""
    path = folder / table_file(name)
    try:
        if columns is not None:
            columns = [c for c in columns if c in pq.read_schema(path).names]
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"cannot read ({exc})") from None


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


def _ordering(combined: pa.Table, corun=None) -> tuple:
    """(final, second, arrays, notes) of the merged rows: final, the rows' positions in `combined` (the parts
    concatenated; None: as they are) sorted by (start, rank, launch id) and then by write_canonical's stable
    (start, launch id); second, that second sort alone; the co-running columns (corun: a function of the light
    columns in the first sort's order, returning (arrays, notes)) in that order. Only the key and light columns
    of `combined` are read."""
    keys = [(c, "ascending", "at_end") for c in ("start", "rank", "launch_id") if c in combined.column_names]
    order = pc.sort_indices(combined.select([k for k, _, _ in keys]), sort_keys=keys) if combined.num_rows else None

    def in_order(names: list[str]) -> pa.Table:
        light = combined.select(names)
        return light.take(order) if order is not None else light

    arrays, notes = corun(in_order, combined.column_names) if corun is not None else ({}, [])
    second = canonical_order(in_order([c for c in ("start", "launch_id") if c in combined.column_names]))
    final = order if second is None else second if order is None else order.take(second)
    return final, second, arrays, notes


def _merged(pieces: list[pa.Table], corun=None) -> tuple[pa.Table, list[str]]:
    """The parts as one table, in memory, in _ordering's rows, the co-running columns set. Built a column at a
    time, each column of the parts let go once it is taken (the peak is about the parts once). `pieces` is
    emptied. The k-way merge (_streamed) writes the same bytes holding a few rows of each part; this is the
    reference it is tested against, and what merges parts whose rows are not in merged order within themselves."""
    combined = pa.concat_tables(pieces, promote_options="permissive")
    pieces.clear()
    final, second, arrays, notes = _ordering(combined, corun)
    schema, columns = combined.schema, []
    for name in combined.column_names:
        column = combined.column(name)
        combined = combined.drop_columns([name])  # (the parts' buffers of this column go with it)
        columns.append(column.take(final) if final is not None else column)
        del column
    table = pa.Table.from_arrays(columns, schema=schema)
    del columns
    if arrays:
        table = set_columns(table, {n: v.take(second) if second is not None else v for n, v in arrays.items()})
    return table, notes


def _streamed(held: list[tuple[Path, int]], path: Path, meta: dict, fan_in: int, corun: tuple | None, jobs: int = 1):
    """Write the merged table of `held` ((file, rank)) to `path` by a k-way merge of the files (merge_rows), the
    co-running columns (corun: (reports, ranks, unknown_gpu) for the kernels) over a sliding window (merge_corun);
    (rows, columns, notes, held: the most rows held at once, of every column and of the co-running keys), or None
    where a part's rows are not sorted by (start, launch id) (nothing written)."""
    facts = [part_facts(file) for file, _ in held]
    if not all(f.in_order for f in facts):
        return None
    schema = pa.unify_schemas(
        [_with_rank_field(pq.read_schema(file)) for file, _ in held], promote_options="permissive"
    )
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".merge-scratch-") as scratch:
        window = _window(facts, schema, *corun, Path(scratch)) if corun else None
        try:
            rows = sum(f.rows for f in facts)
            most = write_merged(held, schema, rows, path, meta, Path(scratch), window, fan_in, jobs)
        finally:
            if window is not None:
                window.close()
    if window is None:
        return rows, len(schema), [], {"rows": most, "corun_keys": 0}
    width = len(schema) + sum(n not in schema.names for n in COLUMNS)
    return rows, width, window.notes(), {"rows": most, "corun_keys": window.held_max}


def _window(facts: list, schema: pa.Schema, reports: list[dict], ranks: list[int], unknown_gpu: str, scratch: Path):
    """The co-running columns' Window for the merged kernels, None where _corun would set none (no timeline, or
    fewer than two processes: a process is a (rank, process id) pair, a null process id a value of its own)."""
    if not {"start", "end", "device_id"} <= set(schema.names) or not any(f.timed for f in facts):
        return None
    if len({(rank, pid) for f, rank in zip(facts, ranks) for pid in f.processes}) < 2:
        return None
    combos = sorted((p, d) for p, f in enumerate(facts) for d in f.devices if d >= 0)
    gpus = MergedGpus([Recorded.from_report(r) for r in reports], combos, ranks, unknown_gpu)
    return Window(gpus, ranks, scratch)


def _with_rank_field(schema: pa.Schema) -> pa.Schema:
    if "rank" in schema.names:
        return schema.set(schema.get_field_index("rank"), pa.field("rank", pa.int64()))
    return schema.append(pa.field("rank", pa.int64()))


def _corun(in_order, available: list[str], reports: list[dict], ranks: list[int], unknown_gpu: str):
    """(arrays, notes): the co-running columns of the merged kernels (when they hold two or more processes) and
    the notes; in_order(names) gives those of the `available` columns sorted as _merged sorts them first."""
    import pandas as pd

    from gpuvar.ingest.context import group_codes
    from gpuvar.ingest.corun import corun_columns
    from gpuvar.ingest.gpu_identity import merged_gpus

    names = [c for c in ("start", "end", "device_id", "rank", "process_id") if c in available]
    frame = in_order(names).to_pandas()
    if not {"start", "end", "device_id"} <= set(names) or not frame["start"].notna().any():
        return {}, []  # no timeline (Nsight Compute): nothing ran "at the same time"
    pid = frame["process_id"] if "process_id" in frame.columns else pd.Series(np.full(len(frame), np.nan))
    process = group_codes(frame["rank"], pid)  # a process: (rank, process id), a null process id a value of its own
    if len(np.unique(process)) < 2:
        return {}, []
    position = {rank: i for i, rank in enumerate(ranks)}
    part = frame["rank"].map(position).to_numpy(dtype=np.int64)
    recorded = [Recorded.from_report(r) for r in reports]
    gpu, notes = merged_gpus(recorded, part, frame["device_id"], ranks, unknown_gpu, process=pid)
    columns = corun_columns(frame, gpu, process)
    # the parts' own columns (null, or one trace's processes) are replaced: these see every process
    arrays = {n: pa.array(columns[n], type=pa.float64(), from_pandas=True) for n in COLUMNS}
    count = columns[COLUMNS[0]]
    known = ~np.isnan(count)
    notes.append(merged_corun_note(int((count[known] > 0).sum()), len(count), int((~known).sum())))
    return arrays, notes


def merge(
    parts: list[str | Path],
    output: str | Path,
    unknown_gpu: str = UNKNOWN_GPU_DEFAULT,
    in_memory: bool = False,
    fan_in: int = FAN_IN,
    stats: dict | None = None,
    jobs: int = 1,
) -> dict:
    """Merge ingest folders `parts` (in rank/file order) into `output`; returns the merged ingest.json.

    unknown_gpu: whether ranks that record the same device index and no GPU UUID or host share a GPU
    ("auto", "shared", "separate": gpuvar.ingest.gpu_identity). The tables are written by a k-way merge of the
    parts' files, `fan_in` open at once (merge_rows); in_memory: by the whole-table merge instead (the same bytes,
    every part held at once: the reference the tests hold the k-way merge to). stats: a dict given the most rows
    each table's merge held at once (not in ingest.json, which is the same bytes either way). jobs: the scratch
    level's merges (more than `fan_in` parts) run this many at a time (merge_rows.write_merged); the same bytes."""
    output = Path(output)
    if not parts:
        raise InputError(output, "nothing to merge: no ingest folders given")
    loaded = [(Path(p), *_part(Path(p))) for p in parts]  # (folder, report, recorded rank)
    recorded = [rank for _, _, rank in loaded]
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
        reports = [r for _, r, _ in loaded]
        folders = [f for f, _, _ in loaded]
        for name in TABLES:
            held = [(f / table_file(name), rank) for f, r, rank in zip(folders, reports, ranks) if name in r["tables"]]
            if not held:  # no file had copies: the table is written all the same, with no rows
                write_canonical(empty_memcpy(), dest / MEMCPY_TABLE, meta)
                continue
            corun = (
                (lambda in_order, names: _corun(in_order, names, reports, ranks, unknown_gpu))
                if name == "kernels"
                else None
            )
            try:
                inputs = (reports, ranks, unknown_gpu) if name == "kernels" else None
                done = None if in_memory else _streamed(held, dest / table_file(name), meta, fan_in, inputs, jobs)
                if done is None:
                    pieces = [_with_rank(_read(file.parent, name), rank) for file, rank in held]
                    table, corun_notes = _merged(pieces, corun)
                    write_canonical(table, dest / table_file(name), meta, in_order=True)
                    whole = {"rows": table.num_rows, "corun_keys": table.num_rows, "whole_table": True}
                    done = table.num_rows, table.num_columns, corun_notes, whole
                    table = None  # (the merged kernels need not sit beside the copies)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InputError(output, f"cannot merge the {name} tables: {exc}") from None
            written, width, corun_notes, most = done
            if stats is not None:
                stats[name] = {
                    "rows_held": most["rows"],
                    "corun_keys_held": most["corun_keys"],
                    "whole_table": most.get("whole_table", False),
                }
            notes.extend(corun_notes)
            dropped = Counter()
            rows_read = 0
            for report in reports:
                part = report.get("tables", {}).get(name)
                if part:
                    rows_read += part["rows_read"]
                    dropped.update(part.get("dropped", {}))
            balanced = rows_read == written + sum(dropped.values())
            summary["tables"][name] = {
                "rows_read": rows_read,
                "rows_written": written,
                "dropped": dict(sorted(dropped.items())),
                "balanced": balanced,
                "columns": width,
            }
            if not balanced:
                raise InputError(output, f"accounting error merging {name}: rows read {rows_read} != written + dropped")
        write_json(summary, dest / INGEST_REPORT)
    return summary
