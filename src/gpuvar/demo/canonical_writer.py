"""Write a synthetic trace straight to canonical Parquet (no profiler format in between).

Benchmarks need 100 M-row traces; going through an nsys SQLite would measure SQLite, not gpuvar. Chunks are
converted to Arrow without pandas (dictionary-encoded names, vectorised launch-config keys) and written by
one ParquetWriter with the same layout as `canonical_io.write_canonical`, so the binning job sees exactly
what `gpuvar ingest` produces.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar.canonical_io import DELTA_COLUMNS, METADATA_KEY, ROW_GROUP_ROWS
from gpuvar.demo import synth
from gpuvar.errors import GpuvarError
from gpuvar.layout import KERNELS_TABLE, MEMCPY_TABLE
from gpuvar.output import replacing
from gpuvar.schema import LAUNCH_CONFIG_PARTS, canonical_columns, launch_config_codes

COPY_KIND_NAMES = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


def _string_column(codes: np.ndarray, labels: list[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(labels, pa.string())).cast(pa.string())


def _launch_config(k: dict[str, np.ndarray]) -> pa.Array:
    codes, labels = launch_config_codes([k[p] for p in LAUNCH_CONFIG_PARTS])
    return _string_column(codes, labels)


def kernels_table(chunk: synth.DemoChunk) -> pa.Table:
    """Canonical kernel columns (same order and types as ingest output) for one chunk."""
    k = dict(chunk.kernels)
    n = len(k["start"])
    names, shorts = synth.kernel_names()
    k["grid_size"] = k["grid_x"] * k["grid_y"] * k["grid_z"]
    k["workgroup_size"] = k["block_x"] * k["block_y"] * k["block_z"]
    k["lds_per_workgroup"] = k["static_shared_memory"] + k["dynamic_shared_memory"]
    k["wave_size"] = np.full(n, 32, dtype=np.int64)
    columns, fields = [], []
    for c in canonical_columns("kernels"):
        if c.column == "kernel_name":
            arr = _string_column(k["kernel_index"], names)
        elif c.column == "kernel_short_name":
            arr = _string_column(k["kernel_index"], shorts)
        elif c.column in ("launch_config", "call_site"):  # no steps in the synthetic data: call site = config
            arr = _launch_config(k)
        elif c.column in k:
            arr = pa.array(k[c.column], pa.int64())
        else:
            arr = pa.nulls(n, pa.string() if c.type == "string" else pa.int64())
        columns.append(arr)
        fields.append(pa.field(c.column, arr.type))
    columns.append(pa.array(k["tcp_pending_stall"], pa.int64()))
    fields.append(pa.field("tcp_pending_stall", pa.int64()))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def memcpy_table(chunk: synth.DemoChunk) -> pa.Table:
    """Canonical memcpy columns for one chunk, sorted by start like ingest output."""
    m = chunk.memcpy
    order = np.argsort(m["start"], kind="stable")
    n = len(order)
    kinds = sorted(COPY_KIND_NAMES)
    columns, fields = [], []
    for c in canonical_columns("memcpy"):
        if c.column == "copy_kind_name":
            codes = np.searchsorted(kinds, m["copy_kind"][order])
            arr = _string_column(codes, [COPY_KIND_NAMES[x] for x in kinds])
        elif c.column in m:
            arr = pa.array(m[c.column][order], pa.int64())
        else:
            arr = pa.nulls(n, pa.string() if c.type == "string" else pa.int64())
        columns.append(arr)
        fields.append(pa.field(c.column, arr.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _chunk_tables(job):
    """Tables of one chunk generated at t0 = 0, plus its time span (the next chunk's offset)."""
    seed, variant, index, first, count = job
    chunk, span = synth.make_chunk(seed, index, first, count, 0, variant)
    return kernels_table(chunk), memcpy_table(chunk), span


def _shift(table: pa.Table, offset: int) -> pa.Table:
    for name in ("start", "end"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.add(table.column(name), pa.scalar(offset, pa.int64())))
    return table


def _writer(path: Path, schema: pa.Schema, meta: dict) -> pq.ParquetWriter:
    schema = schema.with_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True).encode()})
    delta = [c for c in DELTA_COLUMNS if c in schema.names]
    return pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        use_dictionary=[c for c in schema.names if c not in delta],
        column_encoding={c: "DELTA_BINARY_PACKED" for c in delta},
    )


CHUNK_ROWS = 1 << 20  # rows generated per chunk: each chunk's draws are seeded by its index, so this fixes the data


def write_canonical_demo(
    outdir, rows: int, seed: int, variant: int = 0, workers: int | None = None, chunk_rows: int = CHUNK_ROWS
) -> dict:
    """Write outdir/kernels.parquet and outdir/memcpy.parquet for `rows` synthetic launches; returns counts.

    Chunks of `chunk_rows` (the data depends on it; the row groups written are ROW_GROUP_ROWS, the canonical
    layout) are generated by `workers` processes and shifted onto one timeline in order. A copy can start up to
    MAX_COPY_LEAD_NS before its kernel, so copies that late in a chunk are held back and merged with the next
    chunk's: memcpy.parquet is sorted by start like ingest output.
    """
    if rows <= 0:
        raise GpuvarError(f"--rows must be positive, got {rows}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    workers = workers or min(2, os.cpu_count() or 1)
    jobs = [(seed, variant, i, first, count) for i, first, count in synth.chunk_bounds(rows, chunk_rows)]
    meta = {"source": f"gpuvar demo-data seed={seed} variant={variant} rows={rows}", "format": "canonical-demo"}
    kw = mw = held = None
    offset, n_k, n_m = 1_000_000_000, 0, 0
    with replacing(outdir / KERNELS_TABLE) as tmp_k, replacing(outdir / MEMCPY_TABLE) as tmp_m:
        with ProcessPoolExecutor(workers) if workers > 1 else _InProcess() as pool:
            for kt, mt, span in pool.map(_chunk_tables, jobs):
                kt, mt = _shift(kt, offset), _shift(mt, offset)
                offset += span
                if kw is None:
                    kw, mw = _writer(tmp_k, kt.schema, meta), _writer(tmp_m, mt.schema, meta)
                kw.write_table(kt, row_group_size=ROW_GROUP_ROWS)
                n_k += kt.num_rows
                if held is not None:
                    mt = pa.concat_tables([held, mt])
                    mt = mt.take(pc.sort_indices(mt, [("start", "ascending")]))
                safe = pc.less(mt.column("start"), pa.scalar(offset - synth.MAX_COPY_LEAD_NS, pa.int64()))
                cut = int(pc.sum(safe).as_py() or 0)  # sorted: the safe rows are a prefix
                mw.write_table(mt.slice(0, cut), row_group_size=ROW_GROUP_ROWS)
                held = mt.slice(cut)
                n_m += cut
        if kw is None:
            raise GpuvarError("no rows generated")
        mw.write_table(held, row_group_size=ROW_GROUP_ROWS)
        n_m += held.num_rows
        kw.close()
        mw.close()
    return {"kernels": n_k, "memcpy": n_m, "path": str(outdir)}


class _InProcess:
    """Same interface as an executor, for workers=1 (no process start-up cost)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return map(fn, items)
