"""Fuzzed rocpd databases and .ncu-rep reports, with the promise of test_fuzz_readers.py: every damaged file
either ingests with balanced row counts or raises a one-line GpuvarError naming the file (no traceback).

Seeds are the real files (read by path, never copied into the repo). rocpd damage: the byte-level and
semantic SQLite mutations of fuzz_cases.py, plus the ways a rocpd database breaks that those do not reach:
a dropped per-process table (its view then dangles), a dropped view, NULLs in NOT NULL columns, and bad
strings (text in integer columns, invalid UTF-8, empty names). .ncu-rep damage is byte-level; the package's
parser log must stay captured rather than reach the user's terminal.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from pathlib import Path

import pytest
from conftest import real_file
from fuzz_cases import SQLITE_MUTATIONS, mutate_sqlite
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_readers import EXAMPLES, SETTINGS, check_case

ROCPD_SEED = "rocpd-sqlite/rocprofsys-transpose-w7800/rocpd-3638851.db"
NCU_REP_SEED = "ncu-rep/cutlass-a100-gemm-splitk/report-s4.ncu-rep"
ROCPD_MUTATIONS = SQLITE_MUTATIONS + ("drop_table", "drop_view", "nulls", "bad_strings")
NCU_REP_MUTATIONS = ("truncate", "flip", "bit_flip", "header", "zero_block", "append_garbage")
BAD_TEXT = ("", "abc", "-1", "1e400", "\ufffd\u2028kernel", "NaN")
_SEEDS: dict[str, bytes] = {}


def _seed(relative: str) -> bytes:
    if relative not in _SEEDS:
        _SEEDS[relative] = real_file(relative).read_bytes()
    return _SEEDS[relative]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _rocpd_edit(con: sqlite3.Connection, mutation: str, rnd: random.Random) -> None:
    tables = [
        r[0]
        for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd_%' ORDER BY name"
        )
    ]
    views = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")]
    if mutation == "drop_view":
        con.execute(f"DROP VIEW {_quoted(rnd.choice(views))}")
        return
    table = rnd.choice(tables)
    if mutation == "drop_table":
        con.execute(f"DROP TABLE {_quoted(table)}")
        return
    columns = [r[1] for r in con.execute(f"PRAGMA table_info({_quoted(table)})")]
    column = _quoted(rnd.choice(columns))
    rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {_quoted(table)} ORDER BY rowid")]
    some = [r for r in rowids if rnd.random() < 0.3] or rowids[:1]
    if mutation == "nulls":  # the schema says NOT NULL: rebuild the table without constraints first
        con.execute("PRAGMA legacy_alter_table = ON")
        con.execute(f"CREATE TABLE fuzz_copy AS SELECT * FROM {_quoted(table)}")
        con.execute(f"DROP TABLE {_quoted(table)}")
        con.execute(f"ALTER TABLE fuzz_copy RENAME TO {_quoted(table)}")
        con.executemany(f"UPDATE {_quoted(table)} SET {column} = NULL WHERE rowid = ?", [(r,) for r in some])
    else:  # bad_strings: text where numbers belong, invalid UTF-8, empty names
        for rowid in some:
            value = rnd.choice(BAD_TEXT + (b"\xff\xfe\x00bad",))
            sql = f"UPDATE {_quoted(table)} SET {column} = " + ("CAST(? AS TEXT)" if isinstance(value, bytes) else "?")
            con.execute(sql + " WHERE rowid = ?", (value, rowid))


def mutate_rocpd(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """fuzz_cases' SQLite mutations, or a rocpd-specific edit made with sqlite3 on a temporary copy (an edit the
    schema refuses leaves the file as it was)."""
    if mutation in SQLITE_MUTATIONS:
        return mutate_sqlite(data, mutation, rnd)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edit.db"
        path.write_bytes(data)
        con = sqlite3.connect(path)
        try:
            _rocpd_edit(con, mutation, rnd)
            con.commit()
        except sqlite3.Error:
            con.rollback()
        finally:
            con.close()
        return path.read_bytes()


def mutate_report(data: bytes, mutation: str, rnd: random.Random) -> bytes:
    """Byte-level damage of an .ncu-rep (a protobuf stream after the NVR magic)."""
    buf = bytearray(data)
    if mutation == "truncate":
        return data[: rnd.randrange(len(data))]
    if mutation == "flip":
        for _ in range(rnd.randint(1, 50)):
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
    elif mutation == "bit_flip":
        for _ in range(rnd.randint(1, 3)):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
    elif mutation == "header":
        for _ in range(rnd.randint(1, 4)):
            buf[rnd.randrange(4, 64)] = rnd.randrange(256)
    elif mutation == "zero_block":
        start = rnd.randrange(len(buf))
        buf[start : start + 4096] = bytes(len(buf[start : start + 4096]))
    else:  # append_garbage
        buf += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4096)))
    return bytes(buf)


@pytest.mark.timeout(max(120, 3 * EXAMPLES))  # a bound per reader, not per case
@SETTINGS
@given(mutation=st.sampled_from(ROCPD_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_rocpd_reader_fuzz(mutation, salt):
    check_case(mutate_rocpd(_seed(ROCPD_SEED), mutation, random.Random(salt)), ".db")


@pytest.mark.long  # ~15 s of .ncu-rep decoding: in `make test`, not `make test-fast`
@pytest.mark.timeout(max(120, 3 * EXAMPLES))
@SETTINGS
@given(mutation=st.sampled_from(NCU_REP_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_ncu_rep_reader_fuzz(capfd, mutation, salt):
    pytest.importorskip("ncu_report", reason="the ncu-report package (extra gpuvar[ncurep]) is not installed")
    check_case(mutate_report(_seed(NCU_REP_SEED), mutation, random.Random(salt)), ".ncu-rep")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "parse message" not in err, err  # the package's parser log stays captured


@pytest.mark.parametrize("mutation", ["drop_table", "drop_view", "nulls", "bad_strings"])
def test_rocpd_specific_mutations_change_the_file(mutation):
    data = _seed(ROCPD_SEED)
    assert any(mutate_rocpd(data, mutation, random.Random(salt)) != data for salt in range(5)), mutation
