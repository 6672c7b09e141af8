"""rocpd SQLite databases (rocprofv3 --output-format rocpd, rocprof-sys): kernels and copies.

Real files under rocpd-sqlite/: a rocprof-sys database of 1004 dispatches and 48 copies, and a rocprofv3
database that traced HIP API calls only (empty dispatch table). Expected values are computed here with plain
sqlite3 queries on the source, independently of the reader.
"""

from __future__ import annotations

import shutil
import sqlite3

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import real_file

from gpuvar.errors import InputError
from gpuvar.ingest import ingest, load, rocpd
from gpuvar.ingest.compression import read_head
from gpuvar.ingest.detect import detect

SYS = "rocpd-sqlite/rocprofsys-transpose-w7800/rocpd-3638851.db"
HIPTRACE = "rocpd-sqlite/rocprofv3-transpose-w7800-hiptrace/1423019_results.db"


def query(path, sql):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def editable_copy(tmp_path, sql: str = "", name: str = "edited.db"):
    """A writable copy of the rocprof-sys database with `sql` applied."""
    target = tmp_path / name
    shutil.copyfile(real_file(SYS), target)
    target.chmod(0o644)
    if sql:
        con = sqlite3.connect(target)
        con.executescript(sql)
        con.commit()
        con.close()
    return target


def suffix(path) -> str:
    return query(path, "SELECT value FROM rocpd_metadata WHERE tag = 'uuid'")[0][0]


@pytest.fixture(scope="module")
def sys_db(tmp_path_factory):
    path = real_file(SYS)
    out = tmp_path_factory.mktemp("rocpd")
    report = ingest(path, out)
    return path, report, by_launch(out / "kernels.parquet"), by_launch(out / "memcpy.parquet")


def by_launch(parquet) -> pd.DataFrame:
    """A written table (sorted by start) back in launch order."""
    return pd.read_parquet(parquet).sort_values("launch_id", kind="stable").reset_index(drop=True)


# --- real files -------------------------------------------------------------------------------------------
def test_every_dispatch_and_copy_is_ingested(sys_db):
    path, report, kernels, memcpy = sys_db
    assert report["format"] == "rocpd-sqlite"
    ((n_dispatch,),) = query(path, "SELECT COUNT(*) FROM rocpd_kernel_dispatch")
    ((n_copy,),) = query(path, "SELECT COUNT(*) FROM rocpd_memory_copy")
    assert (n_dispatch, n_copy) == (1004, 48)
    for table, n in (("kernels", n_dispatch), ("memcpy", n_copy)):
        t = report["tables"][table]
        assert t["rows_read"] == t["rows_written"] == n and not t["dropped"] and t["balanced"]
    assert len(kernels) == n_dispatch and len(memcpy) == n_copy


def test_kernel_columns_match_the_source(sys_db):
    path, _, kernels, _ = sys_db
    rows = query(
        path,
        """
        SELECT K.dispatch_id, S.display_name, A.absolute_index, K.stream_id, K.queue_id, P.pid, T.tid,
               E.stack_id, K.start, K."end", (K.grid_size_x + K.workgroup_size_x - 1) / K.workgroup_size_x,
               K.grid_size_y / K.workgroup_size_y, K.workgroup_size_x, K.workgroup_size_y, K.group_segment_size,
               K.private_segment_size, S.arch_vgpr_count, S.accum_vgpr_count, S.sgpr_count, K.grid_size_x
        FROM rocpd_kernel_dispatch K JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id
        JOIN rocpd_info_agent A ON A.id = K.agent_id JOIN rocpd_info_process P ON P.id = K.pid
        JOIN rocpd_info_thread T ON T.id = K.tid JOIN rocpd_event E ON E.id = K.event_id ORDER BY K.dispatch_id""",
    )
    expected = pd.DataFrame(
        rows,
        columns=[
            "launch_id",
            "name",
            "device_id",
            "stream_id",
            "Queue_Id",
            "process_id",
            "Thread_Id",
            "correlation_id",
            "start",
            "end",
            "grid_x",
            "grid_y",
            "block_x",
            "block_y",
            "lds_per_workgroup",
            "scratch_per_workitem",
            "arch_vgpr",
            "accum_vgpr",
            "sgpr",
            "Grid_Size_X",
        ],
    )
    for column in expected.columns.drop("name"):
        assert kernels[column].tolist() == expected[column].tolist(), column
    assert kernels["duration"].tolist() == (expected["end"] - expected["start"]).tolist()
    assert kernels["registers_per_thread"].tolist() == expected["arch_vgpr"].tolist()
    # display names lose the ' [clone .kd]' / '.kd' descriptor suffix, as in the rocprofv3 CSV reader
    assert (
        kernels["kernel_name"].tolist()
        == expected["name"].str.replace(r"\s*(\[clone \.kd\]|\.kd)$", "", regex=True).tolist()
    )


def test_spot_values(sys_db):
    _, _, kernels, _ = sys_db
    counts = kernels["kernel_name"].value_counts()
    assert counts.to_dict() == {"transpose_a(int*, int*, int, int)": 1000, "__amd_rocclr_fillBufferAligned": 4}
    first = kernels.iloc[0]
    assert first["kernel_name"] == "__amd_rocclr_fillBufferAligned" and first["launch_id"] == 1
    assert (first["grid_x"], first["block_x"], first["grid_size"], first["workgroup_size"]) == (35, 256, 35, 256)
    assert (first["start"], first["duration"], first["correlation_id"]) == (189882741223262, 3923964, 7)
    assert (first["arch_vgpr"], first["accum_vgpr"], first["sgpr"]) == (16, 0, 128)
    transpose = kernels[kernels["kernel_short_name"] == "transpose_a"]
    assert set(transpose["launch_config"]) == {"g310x310x1 b32x32x1 r8 s4096"}
    assert set(transpose["Grid_Size_X"]) == {9920} and set(transpose["lds_per_workgroup"]) == {4096}
    assert set(kernels["device_id"]) == {1} and set(kernels["stream_id"]) == {1, 2}
    assert set(kernels["process_id"]) == {3638851} and kernels["wave_size"].isna().all()  # rocprof-sys: no HSA props


def test_memory_copies(sys_db):
    path, _, _, memcpy = sys_db
    rows = query(
        path,
        """SELECT S.string, M.size, M.start, M."end", M.stream_id FROM rocpd_memory_copy M
                          JOIN rocpd_string S ON S.id = M.name_id ORDER BY M.id""",
    )
    assert memcpy["Direction"].tolist() == [r[0] for r in rows]
    assert memcpy["bytes"].tolist() == [r[1] for r in rows]
    assert memcpy["duration"].tolist() == [r[3] - r[2] for r in rows]
    assert memcpy["stream_id"].tolist() == [r[4] for r in rows]
    by_kind = memcpy.groupby("copy_kind_name")["bytes"].agg(["count", "sum"])
    assert by_kind.loc["HtoD"].tolist() == [24, 787251200] and by_kind.loc["DtoH"].tolist() == [24, 787251200]
    assert set(memcpy.loc[memcpy["copy_kind_name"] == "HtoD", "copy_kind"]) == {1}
    assert set(memcpy.loc[memcpy["copy_kind_name"] == "DtoH", "copy_kind"]) == {2}
    assert set(memcpy.loc[memcpy["copy_kind"] == 1, "device_id"]) == {1}  # the GPU end (absolute index 1)
    assert memcpy["launch_id"].tolist() == list(range(48))


def test_same_canonical_columns_as_the_rocprofv3_csv_reader(sys_db):
    _, v3_kernels, v3_memcpy = load(real_file("rocprofv3-csv/rocprofiler-sdk-docs-vectorops-newer"))
    _, _, kernels, memcpy = sys_db
    shared = ["Kind", "Queue_Id", "Thread_Id", "Kernel_Id", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
    canonical = v3_kernels.schema.names[: v3_kernels.schema.names.index("launch_config") + 1]
    assert list(kernels.columns[: len(canonical)]) == canonical
    assert set(shared) <= set(kernels.columns) and set(shared) <= set(v3_kernels.schema.names)
    assert set(v3_memcpy.schema.names) <= set(memcpy.columns)


def test_api_trace_only_database_is_a_clear_one_line_error(run_cli, tmp_path):
    path = real_file(HIPTRACE)
    ((n,),) = query(path, "SELECT COUNT(*) FROM rocpd_kernel_dispatch")
    ((apis,),) = query(path, "SELECT COUNT(*) FROM rocpd_region")
    assert n == 0
    with pytest.raises(InputError) as err:
        load(path)
    assert str(err.value) == (
        f"{path}: rocpd database has no kernel dispatches (rocpd_kernel_dispatch is empty; "
        f"{apis} traced API call(s) only? profile with rocprofv3 --kernel-trace)"
    )
    result = run_cli("ingest", path, "-o", tmp_path / "out")
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert str(path) in result.stderr and "no kernel dispatches" in result.stderr


# --- detection ----------------------------------------------------------------------------------------------
def test_detected_by_content_before_rocprof_v1_db(tmp_path):
    for relative in (SYS, HIPTRACE):
        path = real_file(relative)
        assert detect(path).FORMAT == "rocpd-sqlite"
    renamed = tmp_path / "results.db"
    shutil.copyfile(real_file(SYS), renamed)
    assert detect(renamed).FORMAT == "rocpd-sqlite"
    assert detect(real_file("rocprof-v1-csv/llamacpp-rdna4-r9700/results.db")).FORMAT == "rocprof-db"


def test_sniff_claims_no_other_real_profiler_file(real_data):
    others = [p for p in real_data.rglob("*") if p.is_file() and "rocpd-sqlite" not in p.parts and p.suffix != ".md"]
    assert others
    assert not [p for p in others if rocpd.sniff(p, read_head(p))]


# --- damage and edits ---------------------------------------------------------------------------------------
def test_truncated_database_is_a_one_line_error(tmp_path):
    data = real_file(SYS).read_bytes()
    for cut in (100, 4096, len(data) // 2):
        path = tmp_path / f"cut{cut}.db"
        path.write_bytes(data[:cut])
        with pytest.raises(InputError) as err:
            load(path)
        message = str(err.value)
        assert message.startswith(str(path)) and "\n" not in message


def test_missing_dispatch_table_is_a_one_line_error(tmp_path):
    path = editable_copy(tmp_path, "")
    con = sqlite3.connect(path)
    con.execute(f"DROP TABLE rocpd_kernel_dispatch{suffix(path)}")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="damaged rocpd database: a view refers to a missing table") as err:
        load(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
    path2 = editable_copy(tmp_path, "DROP VIEW rocpd_kernel_dispatch;", name="noview.db")
    with pytest.raises(InputError, match="no rocpd_kernel_dispatch table or view"):
        load(path2)


def test_missing_symbol_keeps_the_dispatch_with_a_placeholder_name(tmp_path):
    path = editable_copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"DELETE FROM rocpd_info_kernel_symbol{suffix(path)} WHERE id = 2")
    con.commit()
    con.close()
    out, kernels, _ = load(path)
    names = kernels.column("kernel_name").to_pylist()
    assert names.count("<unknown kernel_id 2>") == 4 and len(names) == 1004
    assert any("4 dispatch(es) name a kernel_id missing" in n for n in out.notes)


def test_nulls_and_unknown_strings(tmp_path):
    path = editable_copy(tmp_path)
    uuid = suffix(path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE rocpd_memory_copy{uuid} SET name_id = 9999 WHERE id <= 3")
    con.execute(f"UPDATE rocpd_kernel_dispatch{uuid} SET grid_size_x = 'abc' WHERE id = 5")
    con.commit()
    con.close()
    report = ingest(path, tmp_path / "out")
    assert all(t["balanced"] for t in report["tables"].values())
    memcpy = by_launch(tmp_path / "out" / "memcpy.parquet")
    assert memcpy["copy_kind"].isna().sum() == 3
    kernels = by_launch(tmp_path / "out" / "kernels.parquet").set_index("launch_id")
    ((bad,),) = query(path, "SELECT dispatch_id FROM rocpd_kernel_dispatch WHERE id = 5")
    assert pd.isna(kernels.loc[bad, "grid_x"]) and kernels["grid_x"].isna().sum() == 1
    assert any("name_id is missing from rocpd_string" in n for n in report["notes"])


def test_wave_size_from_the_agents_hsa_properties(tmp_path):
    path = editable_copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE rocpd_info_agent{suffix(path)} SET extdata = '{{\"wave_front_size\": 32}}' WHERE type = 'GPU'")
    con.commit()
    con.close()
    kernels = load(path)[1].to_pandas()
    assert set(kernels["wave_size"]) == {32}


def test_not_a_rocpd_database_with_explicit_format(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not a rocpd database"):
        load(path, "rocpd-sqlite")
    assert not rocpd.sniff(path, read_head(path))


def merged_copy(tmp_path):
    """Two processes in one database, as `rocpd merge` writes it: a second set of suffixed tables with its own
    guid, and views that UNION both. The second process's names and agent indexes are made distinguishable."""
    path = editable_copy(tmp_path, name="merged.db")
    con = sqlite3.connect(path)
    uuid, other = suffix(path), "_second"
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd%'")]
    for table in tables:
        base = table[: -len(uuid)]
        con.execute(f'CREATE TABLE "{base}{other}" AS SELECT * FROM "{table}"')
        if "guid" in [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]:  # rocpd_metadata has none
            con.execute(f"UPDATE \"{base}{other}\" SET guid = 'second-guid'")
        con.execute(f'DROP VIEW IF EXISTS "{base}"')
        con.execute(f'CREATE VIEW "{base}" AS SELECT * FROM "{table}" UNION ALL SELECT * FROM "{base}{other}"')
    con.execute(f"UPDATE rocpd_info_kernel_symbol{other} SET display_name = 'p2::' || display_name")
    con.execute(f"UPDATE rocpd_info_agent{other} SET absolute_index = absolute_index + 10")
    con.execute(f"UPDATE rocpd_info_process{other} SET pid = 4242")
    con.commit()
    con.close()
    return path


def test_merged_database_keeps_processes_apart(tmp_path):
    path = merged_copy(tmp_path)
    ((n,),) = query(path, "SELECT COUNT(*) FROM rocpd_kernel_dispatch")
    assert n == 2008
    report = ingest(path, tmp_path / "out")
    assert report["tables"]["kernels"]["rows_written"] == 2008 and report["tables"]["memcpy"]["rows_written"] == 96
    kernels = pd.read_parquet(tmp_path / "out" / "kernels.parquet")
    second = kernels["kernel_name"].str.startswith("p2::")
    assert second.sum() == 1004
    assert set(kernels.loc[second, "device_id"]) == {11} and set(kernels.loc[~second, "device_id"]) == {1}
    assert set(kernels.loc[second, "process_id"]) == {4242} and set(kernels.loc[~second, "process_id"]) == {3638851}
    memcpy = pd.read_parquet(tmp_path / "out" / "memcpy.parquet")
    assert sorted(memcpy["process_id"].value_counts().tolist()) == [48, 48]


def test_bad_timestamps_are_dropped_and_counted(tmp_path):
    """An inf, NaN-as-text or beyond-int64 start/end in the database (SQLite stores any type in any column) was
    kept and made every time column float64. Now: dropped with a counted reason, times stay int64."""
    from gpuvar.ingest.amd_common import BAD_TIMESTAMP

    path = editable_copy(tmp_path)
    uuid = suffix(path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE rocpd_kernel_dispatch{uuid} SET start = 9e999 WHERE id = 2")  # REAL inf
    con.execute(f"UPDATE rocpd_kernel_dispatch{uuid} SET end = 'nan' WHERE id = 3")
    con.execute(f"UPDATE rocpd_kernel_dispatch{uuid} SET end = 99999999999999999999 WHERE id = 4")  # REAL 1e20
    con.execute(f"UPDATE rocpd_memory_copy{uuid} SET start = 'inf' WHERE id = 1")
    con.commit()
    con.close()
    ((n_kernels,),) = query(path, "SELECT COUNT(*) FROM rocpd_kernel_dispatch")
    ((n_copies,),) = query(path, "SELECT COUNT(*) FROM rocpd_memory_copy")
    report = ingest(path, tmp_path / "out")
    kernels, copies = report["tables"]["kernels"], report["tables"]["memcpy"]
    assert kernels["dropped"] == {BAD_TIMESTAMP: 3} and kernels["rows_written"] == n_kernels - 3
    assert copies["dropped"] == {BAD_TIMESTAMP: 1} and copies["rows_written"] == n_copies - 1
    table = pq.read_table(tmp_path / "out" / "kernels.parquet")
    assert all(table.schema.field(c).type == pa.int64() for c in ("start", "end", "duration"))
    expected = query(path, "SELECT end - start FROM rocpd_kernel_dispatch WHERE id NOT IN (2, 3, 4) ORDER BY start")
    assert sorted(table.column("duration").to_pylist()) == sorted(d for (d,) in expected)
