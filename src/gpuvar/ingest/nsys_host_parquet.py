"""The launch facts of a big export with CUDA API calls stored beside its raw tables, for the workflow's two steps.

Why: `gpuvar read` has the export (it runs the sweep of gpuvar.ingest.nsys_host_facts); `gpuvar normalize` has only
the raw Parquet, maybe on another node. So read stores each kernel's and copy's facts in rowid order (the raw
tables' order) with the launch's GPU start, and each step's threads; normalize reads them in order as it takes
the pieces (ParquetFacts), checking every start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuvar.ingest import nsys
from gpuvar.ingest.host_timeline import MISSING
from gpuvar.ingest.nsys_host_facts import COPY_FACTS, HostFacts, Scratch
from gpuvar.ingest.nsys_host_sql import FETCH_ROWS, export_rowid
from gpuvar.ingest.nsys_plan import NotInPieces, Plan, exact_ints, kept_rows
from gpuvar.layout import HOST_COPY_FACTS, HOST_KERNEL_FACTS, HOST_STEP_THREADS


def facts_to_json(facts: HostFacts) -> dict:
    return {
        "op_names": facts.op_names,
        "ordinal": [[code, number] for code, number in sorted(facts.ordinal.items())],
        "multi": sorted(facts.multi),
        "how": facts.how,
        "prefix": facts.prefix,
        "step_base": facts.step_base,
        "shape_columns": list(facts.shape_columns),
    }


def facts_from_json(entry: dict) -> HostFacts:
    return HostFacts(
        op_names=list(entry["op_names"]),
        ordinal={int(code): int(number) for code, number in entry["ordinal"]},
        multi={int(code) for code in entry["multi"]},
        how=entry["how"],
        prefix=entry["prefix"],
        step_base=int(entry["step_base"]),
        shape_columns=tuple(entry["shape_columns"]),
    )


def export_facts(scratch: Scratch, head: nsys.ExportHead, folder: Path) -> dict:
    """The kernels' and copies' facts into Parquet files of `folder` in rowid order (the order of the raw tables
    `gpuvar read` writes), each with the launch's GPU start (to check the alignment); raw.json's host_facts entry."""
    import pyarrow.parquet as pq

    shapes = scratch.facts.shape_columns
    steps, sums, counts = scratch.facts.step_threads
    pq.write_table(
        pa.table({"step": pa.array(steps, pa.int64()), "threads": sums, "launches": counts}),
        folder / HOST_STEP_THREADS,
        compression="zstd",
    )
    kernel_cols = ["rowid", "start", "op", "has_op", "step", "occurrence", "idx", "thread", *shapes]
    stores = {
        HOST_KERNEL_FACTS: (kernel_cols, scratch.kernels, nsys.KERNEL_TABLE),
        HOST_COPY_FACTS: (["rowid", "start", "op", "step"], scratch.copies, nsys.MEMCPY_TABLE),
    }
    for name, (columns, store, table) in stores.items():
        if name == HOST_COPY_FACTS and head.m_cols is None:
            continue
        key = export_rowid(scratch.con, table)
        types = [pa.float64() if c in shapes else pa.int64() for c in columns]
        schema = pa.schema(list(zip(columns, types)))
        with pq.ParquetWriter(folder / name, schema, compression="zstd") as writer:
            for records in store.buckets():
                values = {c: records["index" if c == "idx" else c] for c in columns if c not in ("start", *shapes)}
                values["start"] = _starts(scratch.con, table, key, records["rowid"])
                if name == HOST_KERNEL_FACTS and shapes:
                    values |= scratch.kernel_shapes(records["rowid"])
                writer.write_table(pa.table([pa.array(values[c], t) for c, t in zip(columns, types)], schema=schema))
    files = {"kernels": HOST_KERNEL_FACTS, "copies": HOST_COPY_FACTS, "step_threads": HOST_STEP_THREADS}
    return files | {"summary": facts_to_json(scratch.facts)}


def _starts(con, table: str, key: str, rowids: np.ndarray) -> np.ndarray:
    """The stored GPU start of each of these rows of the export's table (rowids in order, all present)."""
    rows = con.execute(
        f'SELECT {key}, start FROM x."{table}" WHERE {key} >= ? AND {key} <= ?', (int(rowids[0]), int(rowids[-1]))
    ).fetchall()
    have = np.array([r[0] for r in rows], np.int64)
    order = np.argsort(have, kind="stable")
    at = order[np.searchsorted(have[order], rowids)]
    return np.array([rows[i][1] for i in at.tolist()], np.int64)


class ParquetFacts:
    """The facts `gpuvar read` stored beside the raw tables, read in order as `gpuvar normalize` takes the pieces
    (the facts cover the kept rows in rowid order, the raw tables' order)."""

    def __init__(self, folder: Path, entry: dict):
        import pyarrow.parquet as pq

        self.facts = facts_from_json(entry["summary"])
        totals = pq.read_table(Path(folder) / entry["step_threads"])
        threads = totals.column("threads").to_numpy().astype(np.float64)
        self.facts.step_threads = (exact_ints(totals.column("step")), threads, exact_ints(totals.column("launches")))
        kernels = pq.ParquetFile(Path(folder) / entry["kernels"])
        self.kernel_rows = kernels.metadata.num_rows
        self._kernels = _Sequential(kernels)
        copies = Path(folder) / entry["copies"]
        self._copies = _Sequential(pq.ParquetFile(copies)) if copies.exists() else None

    def close(self) -> None:
        pass

    def check(self, plan: Plan) -> None:
        """NotInPieces where the stored facts do not cover the kernels the plan keeps, one for one."""
        kept = sum(p.kept for p in plan.pieces)
        if self.kernel_rows != kept:
            raise NotInPieces(f"`gpuvar read` stored facts of {self.kernel_rows} kernels where the plan keeps {kept}")

    def piece_facts(self, piece, rowids: np.ndarray, starts: np.ndarray) -> tuple[dict, dict]:
        part = self._kernels.take(len(rowids))
        if not np.array_equal(part["start"], starts):
            raise RuntimeError(f"the stored launch facts do not line up with the {len(rowids)} kernels of a piece")
        names = {"op": "op", "has_op": "has_op", "step": "step", "occurrence": "occurrence", "idx": "index"}
        facts = {target: part[source] for source, target in names.items()} | {"thread": part["thread"]}
        return facts, {c: part[c] for c in self.facts.shape_columns}

    def attach(self, chunk: pa.Table) -> pa.Table:
        start, end = chunk.column("start"), chunk.column("end")
        valid = ~(np.asarray(start.is_null()) | np.asarray(end.is_null()))
        kept = kept_rows(exact_ints(start, 0), exact_ints(end, 0), valid)
        part = self._copies.take(int(kept.sum()))
        if not np.array_equal(part["start"], exact_ints(start, 0)[kept]):
            raise RuntimeError("the stored copy facts do not line up with the copies")
        op, step = np.full(len(kept), -1, np.int64), np.full(len(kept), MISSING, np.int64)
        op[kept], step[kept] = part["op"], part["step"]
        return chunk.append_column(COPY_FACTS[0], pa.array(op)).append_column(COPY_FACTS[1], pa.array(step))


class _Sequential:
    """A Parquet file's rows taken in order, n at a time, as numpy columns (nulls: MISSING for integers, NaN)."""

    def __init__(self, file):
        self._batches = file.iter_batches(batch_size=FETCH_ROWS)
        self._buffer: pa.Table = file.schema_arrow.empty_table()

    def take(self, n: int) -> dict[str, np.ndarray]:
        parts, have = [self._buffer.slice(0, 0)], 0
        while have < n:
            if not self._buffer.num_rows:
                batch = next(self._batches, None)
                if batch is None:
                    raise RuntimeError(f"the stored launch facts end {n - have} rows early")
                self._buffer = pa.Table.from_batches([batch])
            part = self._buffer.slice(0, n - have)
            self._buffer = self._buffer.slice(part.num_rows)
            parts.append(part)
            have += part.num_rows
        table = pa.concat_tables(parts)
        out = {}
        for name in table.column_names:
            column = table.column(name)
            if pa.types.is_floating(column.type):
                out[name] = column.to_numpy().astype(np.float64)
            else:
                out[name] = exact_ints(column, MISSING)
        return out
