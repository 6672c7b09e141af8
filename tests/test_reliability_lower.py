"""Issue 35, item 9: the lower defects, one test each (the WAL input is tests/test_sqlite_inputs.py, the extreme
rowids and the WITHOUT ROWID table tests/test_nsys_rowid.py, explain's `--traces` advice
tests/test_explain_output.py, escaping tests/test_text_safety.py)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuvar.errors import ConfigError, InputError
from gpuvar.ingest import ingest

NOT_A_NUMBER = "missing or non-numeric ts/dur"


@pytest.fixture(scope="module")
def kineto_doc(tmp_path_factory) -> dict:
    from gpuvar.demo.kineto_writer import write_kineto_demo

    path = tmp_path_factory.mktemp("kineto") / "k.json"
    write_kineto_demo(path, 200, 1, rank=0, world=1)
    return json.loads(path.read_text())


def _kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


# --- a duplicate source in a merge: true dataset ----------------------------------------------------------------
def test_a_merged_dataset_listing_one_file_twice_is_refused(tmp_path):
    from gpuvar.config import check_sources, validate_config

    (tmp_path / "r0.json").write_text("{}")
    (tmp_path / "r1.json").symlink_to(tmp_path / "r0.json")
    twice = {"datasets": [{"name": "job", "merge": True, "source": ["r0.json", "./r0.json"]}]}
    with pytest.raises(ConfigError, match="twice"):
        validate_config(twice, tmp_path)
    linked = validate_config({"datasets": [{"name": "job", "merge": True, "source": ["r0.json", "r1.json"]}]}, tmp_path)
    with pytest.raises(ConfigError, match="same file as 'r0.json'"):
        check_sources(linked, tmp_path)


# --- dur "5" and ts "5": one rule ---------------------------------------------------------------------------------
def test_a_string_dur_is_not_a_number_as_a_string_ts_is_not(kineto_doc, tmp_path):
    doc = json.loads(json.dumps(kineto_doc))
    kernels = _kernels(doc)
    kernels[0]["dur"] = "5"
    kernels[1]["ts"] = str(kernels[1]["ts"])
    k = ingest(_write(tmp_path, doc), tmp_path / "out")["tables"]["kernels"]
    assert (k["rows_written"], k["dropped"]) == (198, {NOT_A_NUMBER: 2})


# --- fractional grid or register values ---------------------------------------------------------------------------
def test_fractional_launch_configuration_values_are_nulled_and_counted_not_rounded(kineto_doc, tmp_path):
    doc = json.loads(json.dumps(kineto_doc))
    kernels = _kernels(doc)
    kernels[2]["args"]["grid"] = [1.5, 2, 1]
    kernels[3]["args"]["registers per thread"] = 32.5
    report = ingest(_write(tmp_path, doc), tmp_path / "out")
    assert report["tables"]["kernels"]["rows_written"] == 200, "the launches are kept"
    assert (
        "launch configuration values not a whole number: left null (1 grid_x, 1 registers_per_thread)"
        in (report["notes"])
    )
    table = pq.read_table(tmp_path / "out" / "kernels.parquet")
    assert table.column("grid_x").null_count == 1 and table.column("registers_per_thread").null_count == 1


# --- wrong reasons --------------------------------------------------------------------------------------------------
def test_format_nsys_sqlite_on_a_json_file_is_not_called_a_truncated_database(kineto_doc, tmp_path):
    path = _write(tmp_path, kineto_doc)
    with pytest.raises(InputError) as caught:
        ingest(path, tmp_path / "out", fmt="nsys-sqlite")
    assert "not a SQLite database" in str(caught.value) and "truncated" not in str(caught.value)


def test_two_clock_domains_are_named_not_a_wider_bin(tmp_path, run_cli):
    """Two ranks' kernels in one table, one rank's times 30 days off: 'use a wider bin' would put the run in one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpuvar.demo.nsys_writer import write_nsys_demo

    write_nsys_demo(tmp_path / "t.sqlite", 3000, 1, 0)
    ingest(tmp_path / "t.sqlite", tmp_path / "one")
    table = pq.read_table(tmp_path / "one" / "kernels.parquet")
    later = table
    for column in ("start", "end"):
        shifted = pc.add(table.column(column), pa.scalar(30 * 86_400 * 10**9, pa.int64()))
        later = later.set_column(later.column_names.index(column), column, shifted)
    (tmp_path / "two").mkdir()
    pq.write_table(pa.concat_tables([table, later]), tmp_path / "two" / "kernels.parquet")
    proc = run_cli("bin", tmp_path / "two" / "kernels.parquet", "--target", "kernel_variability", "-o", tmp_path / "b")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "two clock domains" in errors[0] and "wider bin" not in errors[0], proc.stderr


# --- read-only outputs name the output ------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["lock", "staging"])
def test_a_read_only_output_folder_is_named_not_its_staging_folder(tmp_path, monkeypatch, where):
    """As root nothing is read-only here, so the file system's refusal is injected where it comes."""
    import tempfile

    from gpuvar import atomic

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    if where == "lock":
        real_open = os.open
        monkeypatch.setattr(
            atomic.os, "open", lambda p, *a, **k: refuse(p) if str(p).endswith(".lock") else real_open(p, *a, **k)
        )
    else:
        monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix="", dir=None: refuse(Path(dir) / f"{prefix}x1y2"))
    target = tmp_path / "results" / "out"
    with pytest.raises(OSError) as caught, atomic.staged_folder(target):
        pass
    assert caught.value.filename == str(target) and ".tmp-" not in str(caught.value), caught.value
