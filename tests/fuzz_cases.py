"""Shared seed files and mutations for the reader fuzz tests: small valid inputs, then ways users break them."""

from __future__ import annotations

import random
import sqlite3
import tempfile
from pathlib import Path

MUTATIONS = (
    "flip",
    "truncate",
    "truncate_newline",
    "truncate_header",
    "truncate_quoted",
    "crlf_mix",
    "drop_header_col",
    "rename_header_col",
    "extra_col",
    "header_only",
    "bad_values",
    "unicode_name",
    "shuffle_cols",
    "shuffle_rows",
    "duplicate_rows",
)
# byte-level damage, then semantic edits made with sqlite3 (empty tables, missing StringIds rows, shuffled or
# duplicated timestamps)
SQLITE_MUTATIONS = ("truncate", "flip", "after_header", "empty_table", "drop_rows", "shuffle_column", "duplicate_rows")
BAD_VALUES = ("nan", "inf", "-1", "99999999999999999999999", "-inf", "", "1e400", "abc")


# Readers without a demo writer are fuzzed from real files (read by path, never copied into the repo).
REAL_SEEDS = {
    "omniperf": "omniperf-pmc-perf/omniperf-multikernel-mi200/pmc_perf.csv",
    "rocprofv3": "rocprofv3-csv/rocprofiler-sdk-docs-vectorops-newer/kernel_trace.csv",
    "rocprofv3_counters": "rocprofv3-csv/rocprofiler-sdk-docs-vectorops-newer/counter_collection.csv",
    "rocprof_db": "rocprof-v1-csv/llamacpp-rdna4-r9700/results.db",
}


def seed_bytes(kind: str, tmp: Path) -> tuple[bytes, str]:
    """A small valid file of a demo-written `kind` (nsys|ncu_long|ncu_wide|rocprof) as bytes, and its suffix."""
    from gpuvar.demo.ncu_writer import write_ncu_demo
    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.demo.rocprof_writer import write_rocprof_demo

    if kind == "nsys":
        path = tmp / "seed.sqlite"
        write_nsys_demo(path, 200, 1, 0)
    elif kind.startswith("ncu"):
        path = tmp / "seed.csv"
        write_ncu_demo(path, 20, 1, 0, layout=kind.split("_")[1])
    else:
        path = tmp / "seed_rocprof.csv"
        write_rocprof_demo(path, 200, 1, 0)
    return path.read_bytes(), path.suffix


def _split_csv_line(line: str) -> list[str]:
    import csv

    return next(csv.reader([line]))


def _join(fields: list[str]) -> str:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def mutate_text(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """Apply one named mutation to CSV bytes; deterministic for a given Random."""
    text = data.decode("utf-8", "replace")
    lines = text.splitlines()
    head_idx = next((i for i, line in enumerate(lines) if line.count(",") >= 3), 0)
    if mutation == "flip":
        buf = bytearray(data)
        for _ in range(rnd.randint(1, 20)):
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        return bytes(buf)
    if mutation == "truncate":
        return data[: rnd.randrange(len(data))]
    if mutation == "truncate_header":  # inside the header line (or the ncu preamble before it)
        end = len("\n".join(lines[: head_idx + 1]).encode())
        return data[: rnd.randrange(max(end, 1))]
    if mutation == "truncate_quoted":  # right inside a quoted field: an unterminated quote at end of file
        quotes = [i + 1 for i, b in enumerate(data) if b == 34]
        return data[: rnd.choice(quotes[1::2] or [len(data) // 2])] if quotes else data[: len(data) // 2]
    if mutation == "truncate_newline":
        cuts = [i + 1 for i, b in enumerate(data) if b == 10]
        return data[: rnd.choice(cuts)] if cuts else data[:1]
    if mutation == "crlf_mix":
        return "".join(line + rnd.choice(["\n", "\r\n", "\r"]) for line in lines).encode()
    if mutation == "header_only":
        return ("\n".join(lines[: head_idx + 1]) + "\n").encode()
    header = _split_csv_line(lines[head_idx])
    col = rnd.randrange(len(header))
    rows = [_split_csv_line(line) for line in lines[head_idx + 1 :] if line]
    if mutation == "drop_header_col":
        header.pop(col)
        rows = [r[:col] + r[col + 1 :] for r in rows]
    elif mutation == "rename_header_col":
        header[col] = header[col] + "_renamed"
    elif mutation == "extra_col":
        header.append("ExtraColumn")
        rows = [r + [str(rnd.random())] for r in rows]
    elif mutation == "bad_values":
        for r in rows[: rnd.randint(1, max(1, len(rows)))]:
            if r:
                r[rnd.randrange(len(r))] = rnd.choice(BAD_VALUES)
    elif mutation == "unicode_name":
        for r in rows:
            if r:
                r[rnd.randrange(len(r))] = 'kérnel, "ünï" <τ>\u2028'
    elif mutation == "shuffle_rows":  # timestamps out of order
        rnd.shuffle(rows)
    elif mutation == "duplicate_rows":  # repeated launches: duplicate timestamps and IDs
        rows = rows + [list(r) for r in rnd.sample(rows, rnd.randint(1, len(rows)))] if rows else rows
    elif mutation == "shuffle_cols":
        order = list(range(len(header)))
        rnd.shuffle(order)
        header = [header[i] for i in order]
        rows = [[r[i] if i < len(r) else "" for i in order] for r in rows]
    out = lines[:head_idx] + [_join(header)] + [_join(r) for r in rows]
    return ("\n".join(out) + "\n").encode()


def mutate_sqlite(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """Byte-level damage, or a semantic edit of one random table, of a SQLite file."""
    if mutation in ("empty_table", "drop_rows", "shuffle_column", "duplicate_rows"):
        return _edit_sqlite(data, mutation, rnd)
    if mutation == "truncate":
        return data[: rnd.randrange(len(data))]
    buf = bytearray(data)
    start = 100 if mutation == "after_header" else 0
    for _ in range(rnd.randint(1, 50)):
        buf[rnd.randrange(start, len(buf))] = rnd.randrange(256)
    return bytes(buf)


def _edit_sqlite(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """Semantic edit with sqlite3 on a temporary copy; an edit the schema refuses leaves the file as it was."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edit.sqlite"
        path.write_bytes(data)
        con = sqlite3.connect(path)
        try:
            tables = [
                r[0]
                for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
            table = rnd.choice(tables)
            quoted = '"' + table.replace('"', '""') + '"'
            rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {quoted} ORDER BY rowid")]
            some = [(r,) for r in rowids if rnd.random() < 0.3]  # SQLite's random() is not seedable
            if mutation == "empty_table":
                con.execute(f"DELETE FROM {quoted}")
            elif mutation == "drop_rows":
                con.executemany(f"DELETE FROM {quoted} WHERE rowid = ?", some)
            elif mutation == "duplicate_rows":
                columns = ", ".join(
                    '"' + r[1].replace('"', '""') + '"' for r in con.execute(f"PRAGMA table_info({quoted})")
                )
                con.executemany(
                    f"INSERT INTO {quoted} ({columns}) SELECT {columns} FROM {quoted} WHERE rowid = ?", some
                )
            else:  # shuffle one column's values among the rows: non-monotonic times, mismatched IDs
                columns = [r[1] for r in con.execute(f"PRAGMA table_info({quoted})")]
                column = '"' + rnd.choice(columns).replace('"', '""') + '"'
                rows = con.execute(f"SELECT rowid, {column} FROM {quoted}").fetchall()
                values = [v for _, v in rows]
                rnd.shuffle(values)
                con.executemany(
                    f"UPDATE {quoted} SET {column} = ? WHERE rowid = ?",
                    [(v, rowid) for (rowid, _), v in zip(rows, values)],
                )
            con.commit()
        except sqlite3.Error:
            con.rollback()
        finally:
            con.close()
        return path.read_bytes()
