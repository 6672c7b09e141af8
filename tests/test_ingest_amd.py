"""AMD readers (rocprof v1 CSV / results.db, Omniperf pmc_perf.csv, rocprofv3) and the demo rocprof writer.

Real files are read by path from the shared real-data tree (skipped when absent); malformed inputs go
through the CLI so the user-facing contract (exit 2, one line naming the file, no traceback) is checked.
"""

from __future__ import annotations

import csv
import functools
import json
import sqlite3

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import real_file

from gpuvar.demo import synth
from gpuvar.demo.rocprof_writer import write_rocprof_demo
from gpuvar.errors import InputError
from gpuvar.ingest import amd_common, ingest, load
from gpuvar.ingest.amd_common import clean_kernel_names
from gpuvar.ingest.detect import detect
from gpuvar.ingest.omniperf import duplicate_columns

ROCPROF = "rocprof-v1-csv"
LAPLACE1 = f"{ROCPROF}/hpct-laplacian-kernel1-mi250x"
LLAMA = f"{ROCPROF}/llamacpp-rdna4-r9700"
PERPASS = f"{ROCPROF}/omniperf2022-mixbench-mi100-perpass"
OMNI = "omniperf-pmc-perf"
OMNI_FOLDERS = [
    "omniperf2022-mixbench-mi100",
    "omniperf2022-mixbench-mi200",
    "omniperf-vcopy-mi300x",
    "omniperf-multikernel-mi200",
]
V3 = "rocprofv3-csv/rocprofiler-sdk-docs-vectorops-newer"
TABLE1_OMNI = [
    "grid_size",
    "workgroup_size",
    "lds_per_workgroup",
    "scratch_per_workitem",
    "arch_vgpr",
    "accum_vgpr",
    "sgpr",
    "wave_size",
    "sq_waves",
    "tcc_hit",
    "tcc_miss",
    "tcp_pending_stall",
    "ta_buf_read",
    "td_load",
]


def data_rows(path) -> int:
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


@functools.lru_cache(maxsize=None)
def _load(path, fmt):
    return load(path, fmt)  # Arrow tables are immutable: safe to share between tests


def kernels_of(path, fmt="auto"):
    out, kernels, memcpy = _load(path, fmt)
    return out, kernels.to_pandas(), (memcpy.to_pandas() if memcpy is not None else None)


# ------------------------------------------------------------------------------------------- detection
@pytest.mark.parametrize(
    "relative, expected",
    [
        (f"{LAPLACE1}/results.csv", "rocprof-csv"),
        (f"{LAPLACE1}/data_movement.csv", "rocprof-csv"),
        (f"{LLAMA}/results.csv", "rocprof-csv"),
        (f"{LLAMA}/results.db", "rocprof-db"),
        (f"{PERPASS}/SQ_LEVEL_WAVES.csv", "rocprof-csv"),
        (f"{OMNI}/omniperf2022-mixbench-mi100", "omniperf-pmc-perf"),
        (f"{OMNI}/omniperf2022-mixbench-mi100/pmc_perf.csv", "omniperf-pmc-perf"),
        (f"{OMNI}/omniperf2022-mixbench-mi100/timestamps.csv", "rocprof-csv"),
        (f"{OMNI}/omniperf-vcopy-mi300x/pmc_perf.csv", "omniperf-pmc-perf"),
        (f"{OMNI}/omniperf-multikernel-mi200/timestamps.csv", "omniperf-pmc-perf"),
        (V3, "rocprofv3-csv"),
        (f"{V3}/kernel_trace.csv", "rocprofv3-csv"),
        (f"{V3}/counter_collection.csv", "rocprofv3-csv"),
        (f"{V3}/memory_copy_trace.csv", "rocprofv3-csv"),
    ],
)
def test_every_real_amd_file_lands_on_its_reader(relative, expected):
    assert detect(real_file(relative)).FORMAT == expected


def test_stats_summary_is_not_mistaken_for_a_trace():
    with pytest.raises(InputError, match="unrecognised format"):
        detect(real_file(f"{LAPLACE1}/results.stats.csv"))


# ------------------------------------------------------------------------------------------- rocprof v1
@pytest.mark.parametrize("dataset", [LAPLACE1, f"{ROCPROF}/hpct-laplacian-kernel3-mi250x", LLAMA])
def test_results_csv_keeps_every_dispatch_with_exact_durations(dataset):
    path = real_file(f"{dataset}/results.csv")
    raw = pd.read_csv(path)
    out, k, _ = kernels_of(path)
    assert len(k) == data_rows(path) == out.rows_read["kernels"]
    assert (k["duration"].to_numpy() == (raw["EndNs"] - raw["BeginNs"]).to_numpy()).all()
    assert (k["grid_size"].to_numpy() == (raw["grd"] // raw["wgr"]).to_numpy()).all()
    assert (k["workgroup_size"].to_numpy() == raw["wgr"].to_numpy()).all()
    assert {"DispatchNs", "CompleteNs", "sig", "obj", "grid_work_items"} <= set(k.columns)


def test_laplacian_spot_check():
    _, k, _ = kernels_of(real_file(f"{LAPLACE1}/results.csv"))
    row = k[k["launch_id"] == 1].iloc[0]
    assert row["kernel_name"] == "laplacian_kernel"
    assert row["start"] == 2001401021036510 and row["duration"] == 2647539
    assert (row["grid_x"], row["block_x"], row["grid_size"]) == (524288, 256, 524288)
    assert (row["registers_per_thread"], row["sgpr"], row["wave_size"], row["device_id"]) == (24, 32, 64, 8)
    assert (k["kernel_name"] == "laplacian_kernel").sum() == 1001


def test_kd_suffix_stripped_but_commas_in_names_kept():
    out, k, _ = kernels_of(real_file(f"{LLAMA}/results.csv"))
    assert not k["kernel_name"].str.contains(r"\.kd", regex=True).any()
    mmq = "void mul_mat_q<(ggml_type)2, 128, false>(char const*, int const*, int const*, int const*, float*, float*"
    assert (k["kernel_name"].str.startswith(mmq)).sum() == 442
    assert (k["kernel_short_name"] == "mul_mat_q").sum() == 442
    assert k["wave_size"].eq(32).all()  # RDNA4 wave32, read from the file
    assert any("kernel-descriptor suffix" in n for n in out.notes)


def test_counter_pass_without_timestamps_is_ingested():
    path = real_file(f"{LAPLACE1}/data_movement.csv")
    out, k, _ = kernels_of(path)
    assert len(k) == data_rows(path)
    assert k["start"].isna().all() and k["duration"].isna().all()
    assert k.loc[0, "WRITE_SIZE"] == pytest.approx(1044480.0)
    assert k["FETCH_SIZE"].dtype.kind == "f"
    assert any("no kernel timestamps" in n for n in out.notes)


def test_rocm4_counter_pass_layout():
    path = real_file(f"{PERPASS}/SQ_LEVEL_WAVES.csv")
    raw = pd.read_csv(path)
    out, k, _ = kernels_of(path)
    assert len(k) == len(raw) == 167
    assert (k["arch_vgpr"].to_numpy() == raw["vgpr"].to_numpy()).all()
    assert k["wave_size"].eq(64).all() and any("wave_size = 64" in n for n in out.notes)
    assert (k["sq_waves"].to_numpy() == raw["SQ_WAVES"].to_numpy()).all()  # Table 1 rename
    assert "SQ_WAVE_CYCLES" in k.columns and "fbar" in k.columns  # other counters/columns kept
    assert (k["duration"].to_numpy() == (raw["EndNs"] - raw["BeginNs"]).to_numpy()).all()


def test_results_db_matches_results_csv():
    db = real_file(f"{LLAMA}/results.db")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        n = con.execute("SELECT COUNT(*) FROM KERN").fetchone()[0]
    out, from_db, _ = load(db)
    _, from_csv, _ = load(real_file(f"{LLAMA}/results.csv"))
    assert out.format == "rocprof-db"
    assert from_db.num_rows == n == 1963
    assert from_db.equals(from_csv)


def test_quoted_and_unquoted_headers_read_the_same(tmp_path):
    lines = real_file(f"{LAPLACE1}/results.csv").read_text().splitlines()
    unquoted = tmp_path / "unquoted.csv"
    unquoted.write_text("\n".join([lines[0].replace('"', "")] + lines[1:30]) + "\n")
    quoted = tmp_path / "quoted.csv"
    quoted.write_text("\n".join(lines[:30]) + "\n")
    assert load(unquoted)[1].equals(load(quoted)[1])


def test_short_row_mid_file_is_dropped_and_counted(tmp_path):
    lines = real_file(f"{LAPLACE1}/results.csv").read_text().splitlines()
    path = tmp_path / "results.csv"
    path.write_text("\n".join(lines[:10] + ['9,"cut",8,0'] + lines[10:20]) + "\n")
    report = ingest(path, tmp_path / "out")
    table = report["tables"]["kernels"]
    assert table["rows_read"] == 20 and table["rows_written"] == 19
    assert sum(table["dropped"].values()) == 1 and table["balanced"]


# --------------------------------------------------------------------------------------------- Omniperf
@pytest.mark.parametrize("folder", OMNI_FOLDERS)
def test_omniperf_folders_have_table1_names(folder):
    path = real_file(f"{OMNI}/{folder}")
    raw = pd.read_csv(path / "pmc_perf.csv")
    out, k, _ = kernels_of(path)
    assert len(k) == len(raw)
    assert set(TABLE1_OMNI) <= set(k.columns)
    grid = raw["Grid_Size"] if "Grid_Size" in raw else raw["grd"]
    wg = raw["Workgroup_Size"] if "Workgroup_Size" in raw else raw["wgr"]
    assert (k["grid_size"].to_numpy() == np.ceil(grid / wg).to_numpy()).all()
    assert (k["tcp_pending_stall"].to_numpy() == raw["TCP_PENDING_STALL_CYCLES_sum"].to_numpy()).all()
    assert "TCC_HIT[0]" in k.columns  # per-channel counters kept as-is
    assert not {c.lower() for c in k.columns} & {"grid_size_1", "kernel_name_1"}
    assert len({c.lower() for c in k.columns}) == k.shape[1]  # no case-insensitive clashes (DuckDB)
    assert any(n.startswith("sysinfo.csv: GPU ") for n in out.notes)


def test_omniperf_per_pass_duplicates():
    out, k, _ = kernels_of(real_file(f"{OMNI}/omniperf-multikernel-mi200"))
    assert not any(c.startswith("wave_size_") for c in k.columns)  # identical to wave_size: dropped
    assert "GRBM_COUNT_pass12" in k.columns  # re-collected in pass 12 with other values: kept, renamed
    assert (k["GRBM_COUNT_pass12"] != k["GRBM_COUNT"]).any()
    assert {"SQC_DCACHE_REQ_READ_1", "SQC_DCACHE_REQ_READ_16", "SQ_WAVES_LT_64"} <= set(k.columns)  # genuine
    assert any("per-pass duplicate column(s) identical to their base, dropped" in n for n in out.notes)


def test_duplicate_rule_needs_the_base_and_the_pass_block():
    header = [
        "Dispatch_ID",
        "wave_size",
        "obj",
        "GRBM_COUNT",
        "SQC_DCACHE_REQ_READ",
        "SQC_DCACHE_REQ_READ_8",
        "wave_size_1",
        "obj_1",
        "GRBM_COUNT_1",
        "SQ_WAVES_LT_16",
        "wave_size_2",
        "SQC_DCACHE_REQ_READ_1",
    ]
    dups = duplicate_columns(header)
    assert dups == {
        "wave_size_1": ("wave_size", 1),
        "obj_1": ("obj", 1),
        "GRBM_COUNT_1": ("GRBM_COUNT", 1),
        "wave_size_2": ("wave_size", 2),
    }


def test_mi300x_rounded_timestamps_give_null_durations():
    out, k, _ = kernels_of(real_file(f"{OMNI}/omniperf-vcopy-mi300x"))
    assert k["duration"].isna().all() and k["start"].notna().all()
    assert any("precision is lost" in n for n in out.notes)
    assert (k["grid_size"] == 4096).all() and (k["correlation_id"] == 0).all()
    assert (k["kernel_name"] == "vecCopy(double*, double*, double*, int, int)").all()


# -------------------------------------------------------------------------------------------- rocprofv3
def test_rocprofv3_folder_joins_counters_and_reads_copies():
    out, k, m = kernels_of(real_file(V3))
    assert len(k) == 8 and out.rows_read == {"kernels": 8, "memcpy": 4}
    k = k.set_index("launch_id")
    assert (k.loc[1:4, "sq_waves"] == 16384).all() and k.loc[5:8, "sq_waves"].isna().all()
    assert (k["grid_x"] == 16).all() and (k["grid_y"] == 1024).all() and (k["block_x"] == 64).all()
    assert (k["arch_vgpr"].loc[[4, 8]] == 12).all()  # static VGPR count joined by kernel name
    assert k.loc[1, "duration"] == 2414192765369494 - 2414192765353337
    assert (k["stream_id"].loc[[1, 5]] == [1, 2]).all()
    assert len(m) == 4 and (m["copy_kind"] == 1).all() and (m["copy_kind_name"] == "HtoD").all()
    assert m["bytes"].isna().all() and (m["device_id"] == 2).all()


def test_rocprofv3_counter_collection_alone_is_the_kernel_table():
    out, k, m = kernels_of(real_file(f"{V3}/counter_collection.csv"))
    assert m is None and len(k) == 4 and out.rows_read["kernels"] == 4
    assert (k["device_id"] == 1).all()  # "Agent 1"
    assert (k["grid_size"] == 16384).all() and (k["sq_waves"] == 16384).all()
    assert k["start"].notna().all()


# a rocprofv3 *_kernel_trace.csv header (also used by test_raw_amd.py)
KERNEL_TRACE_HEADER = [
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Dispatch_Id",
    "Kernel_Name",
    "Start_Timestamp",
    "End_Timestamp",
    "Workgroup_Size_X",
    "Workgroup_Size_Y",
    "Workgroup_Size_Z",
    "Grid_Size_X",
    "Grid_Size_Y",
    "Grid_Size_Z",
]
# a rocprofv3 *_memory_copy_trace.csv header (also used by test_raw_amd.py)
MEMORY_COPY_TRACE_HEADER = [
    "Kind",
    "Direction",
    "Stream_Id",
    "Source_Agent_Id",
    "Destination_Agent_Id",
    "Start_Timestamp",
    "End_Timestamp",
]


def _write(path, header, rows):
    path.write_text("\n".join([",".join(header)] + [",".join(map(str, r)) for r in rows]) + "\n")


def test_rocprofv3_processes_are_joined_separately(tmp_path):
    cc = ["Dispatch_Id", "Agent_Id", "Kernel_Name", "Counter_Name", "Counter_Value"]
    host = tmp_path / "host"
    host.mkdir()
    _write(
        host / "123_kernel_trace.csv",
        KERNEL_TRACE_HEADER,
        [["KERNEL_DISPATCH", 2, 0, 1, "k", 100, 200, 64, 1, 1, 640, 1, 1]],
    )
    _write(
        host / "456_kernel_trace.csv",
        KERNEL_TRACE_HEADER,
        [["KERNEL_DISPATCH", 2, 0, 1, "k", 300, 450, 64, 1, 1, 100, 1, 1]],
    )
    _write(
        host / "123_counter_collection.csv",
        cc,
        [[1, "Agent 2", "k", "SQ_WAVES", 5], [1, "Agent 2", "k", "SQ_WAVES", 7]],
    )
    _write(
        host / "123_memory_copy_trace.csv",
        MEMORY_COPY_TRACE_HEADER,
        [["MEMORY_COPY", "MEMORY_COPY_DEVICE_TO_HOST", 0, 2, 0, 10, 20]],
    )
    out, k, m = kernels_of(tmp_path)
    k = k.set_index("process_id")
    assert k.loc[123, "sq_waves"] == 12 and pd.isna(k.loc[456, "sq_waves"])  # summed instances, own process
    assert (k.loc[123, "grid_x"], k.loc[456, "grid_x"]) == (10, 2)  # ceil(100 / 64)
    assert m.loc[0, "copy_kind"] == 2 and m.loc[0, "device_id"] == 2 and m.loc[0, "process_id"] == 123


# -------------------------------------------------------------------------------------------- malformed
def test_kernel_name_cleaning():
    names = pd.Series(['"a.kd"', "f(int) [clone .kd]", "g(int) (.kd)", "plain", None, "h.kdx"])
    cleaned, changed = clean_kernel_names(names)
    assert cleaned.tolist() == ["a", "f(int)", "g(int)", "plain", None, "h.kdx"]
    assert changed == 3


@pytest.fixture(scope="module")
def malformed(tmp_path_factory):
    lines = real_file(f"{LAPLACE1}/results.csv").read_bytes().splitlines(keepends=True)
    d = tmp_path_factory.mktemp("malformed")
    files = {
        "truncated.csv": b"".join(lines[:6]) + lines[6][:40],
        "header_only.csv": lines[0],
        "no_kernelname.csv": lines[0].replace(b'"KernelName"', b'"Name"') + b"".join(lines[1:5]),
        "binary.csv": b"SQLite format 3\x00" + bytes(range(256)) * 4,
        "empty.csv": b"",
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d


@pytest.mark.parametrize(
    "name, fmt, message",
    [
        ("truncated.csv", "auto", "truncated: the last row has"),
        ("header_only.csv", "auto", "no data rows (header only)"),
        ("no_kernelname.csv", "rocprof-csv", "lacks required column KernelName"),
        ("binary.csv", "rocprof-csv", "binary file"),
        ("empty.csv", "auto", "empty file"),
    ],
)
def test_malformed_input_is_one_line_error(run_cli, malformed, tmp_path, name, fmt, message):
    result = run_cli("ingest", malformed / name, "-o", tmp_path / "out", "--format", fmt)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert name in result.stderr and message in result.stderr
    assert not (tmp_path / "out" / "kernels.parquet").exists()


def test_truncated_results_db_is_an_input_error(tmp_path):
    bad = tmp_path / "results.db"
    bad.write_bytes(real_file(f"{LLAMA}/results.db").read_bytes()[:4096])
    with pytest.raises(InputError, match="results.db"):
        load(bad, "rocprof-db")


# ------------------------------------------------------------------------------------------ demo writer
def test_demo_rocprof_round_trip_keeps_the_planted_structure(tmp_path):
    rows, seed = 3000, 11
    info = write_rocprof_demo(tmp_path / "amd.csv", rows, seed, variant=1)
    assert info["kernels"] == rows and detect(tmp_path / "amd.csv").FORMAT == "rocprof-csv"
    report = ingest(tmp_path / "amd.csv", tmp_path / "out")
    assert report["tables"]["kernels"]["rows_written"] == rows and report["tables"]["kernels"]["balanced"]
    k = pd.read_parquet(tmp_path / "out" / "kernels.parquet").sort_values("launch_id").reset_index(drop=True)
    truth = next(synth.generate(rows, seed, variant=1))
    assert (k["grid_size"].to_numpy() == truth.kernels["grid_x"]).all()
    assert (k["duration"].to_numpy() == truth.kernels["duration"]).all()
    assert (k["tcp_pending_stall"].to_numpy() == truth.kernels["tcp_pending_stall"]).all()
    names, shorts = synth.kernel_names()
    assert (k["kernel_short_name"].to_numpy() == np.array(shorts)[truth.kernels["kernel_index"]]).all()
    assert (k["tcc_hit"] + k["tcc_miss"] == k["tcc_read"] + k["tcc_write"]).all()
    assert np.corrcoef(k["grid_size"], k["tcp_pending_stall"])[0, 1] > 0.8
    counters = k[["sq_waves", "sq_cycles", "sq_insts_valu", "ta_buf_read", "td_load", "tcc_read"]]
    assert (counters.nunique() > 1).all() and (counters >= 0).all().all()
    assert k["ta_buf_read"].ne(k["td_load"]).any()  # noisy, not copies of each other


def test_demo_rocprof_is_deterministic(tmp_path):
    write_rocprof_demo(tmp_path / "a.csv", 500, 5)
    write_rocprof_demo(tmp_path / "b.csv", 500, 5)
    write_rocprof_demo(tmp_path / "c.csv", 500, 6)
    a, b, c = ((tmp_path / f"{x}.csv").read_bytes() for x in "abc")
    assert a == b and a != c
    assert not list(tmp_path.glob(".*tmp*"))  # atomic write leaves no temp file
    header = a.split(b"\n", 1)[0].decode()
    assert header.startswith('"Index","KernelName","gpu-id"') and header.endswith('"EndNs","CompleteNs"')
    assert json.dumps(write_rocprof_demo(tmp_path / "d.csv", 10, 0))  # JSON-serialisable summary


def test_counter_turning_decimal_after_the_first_block_still_parses(tmp_path):
    # pyarrow infers column types from the first ~1 MB block; a later decimal must not fail the file
    n = 40_000
    body = "".join(f'{i},"k",0,0,{i},1,1,256,256,0,0,8,0,16,64,0x0,0x1,{i if i < n - 1 else 2.5}\n' for i in range(n))
    path = tmp_path / "pass.csv"
    path.write_text(
        "Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,"
        "sgpr,wave_size,sig,obj,SQ_WAVES\n" + body
    )
    assert path.stat().st_size > 2**21
    _, k, _ = kernels_of(path)
    assert len(k) == n and k["sq_waves"].iloc[-1] == 2.5 and k["sq_waves"].iloc[10] == 10
    assert k["obj"].iloc[0] == "0x1"


def test_latin1_and_crlf_with_bom(tmp_path):
    header = "Index,KernelName,gpu-id,queue-id,pid,grd,wgr,BeginNs,EndNs"
    rows = ['0,"k\xe9rnel(int, int) [clone .kd]",1,0,7,512,256,100,250', '1,"plain",1,0,7,256,256,300,310']
    path = tmp_path / "latin1.csv"
    path.write_bytes("\r\n".join([header, *rows]).encode("latin-1") + b"\r\n")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([header, *rows]).encode("utf-8") + b"\r\n")
    for p in (path, bom):
        _, k, _ = kernels_of(p)
        assert k["kernel_name"].tolist() == ["k\xe9rnel(int, int)", "plain"]
        assert k["duration"].tolist() == [150, 10] and k["grid_size"].tolist() == [2, 1]


# --- one bad timestamp (issue 22 item 3) -----------------------------------------------------------------
EPOCH_NS = 1_732_000_000_123_456_789  # an epoch-scale clock: > 2^53, float64 cannot hold its low digits
BAD_TIMES = ["nan", "inf", "99999999999999999999"]  # nan, infinite, beyond int64


def _epoch_rows(n):
    """(begin, end) pairs with odd durations that a float64 round trip would change."""
    return [(EPOCH_NS + 7_919 * i, EPOCH_NS + 7_919 * i + 1_001 + 3 * i) for i in range(n)]


def test_rocprof_csv_bad_timestamps_dropped_and_durations_exact(tmp_path):
    """Before: one 'nan'/'inf'/20-digit BeginNs made the column float64, 1,019 of 1,023 durations were wrong and
    the bad rows were kept uncounted. Now those rows are dropped (counted) and every other duration is exact."""
    times = _epoch_rows(1_020)
    header = ["Index", "KernelName", "gpu-id", "queue-id", "pid", "grd", "wgr", "BeginNs", "EndNs"]
    rows = [[i, "k", 0, 0, 7, 256, 64, b, e] for i, (b, e) in enumerate(times)]
    for j, bad in enumerate(BAD_TIMES):
        rows.insert(100 * (j + 1), [9_000 + j, "k", 0, 0, 7, 256, 64, bad, EPOCH_NS])
    _write(tmp_path / "results.csv", header, rows)
    out, table, _ = load(tmp_path / "results.csv")
    k = table.to_pandas()
    assert out.dropped["kernels"] == {amd_common.BAD_TIMESTAMP: 3}
    assert [table.schema.field(c).type for c in ("start", "end", "duration")] == [pa.int64()] * 3
    assert k["start"].tolist() == [b for b, _ in times] and k["duration"].tolist() == [e - b for b, e in times]
    report = ingest(tmp_path / "results.csv", tmp_path / "out")
    assert report["tables"]["kernels"]["balanced"] and report["tables"]["kernels"]["rows_read"] == 1_023


def test_rocprofv3_csv_bad_timestamps_in_kernels_and_copies(tmp_path):
    times = _epoch_rows(40)
    kernels = [["KERNEL_DISPATCH", 2, 0, i, "k", b, e, 64, 1, 1, 640, 1, 1] for i, (b, e) in enumerate(times)]
    kernels[5][6], kernels[9][5] = "inf", "NaN"
    _write(tmp_path / "1_kernel_trace.csv", KERNEL_TRACE_HEADER, kernels)
    copies = [["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", 0, 0, 2, b, e] for b, e in times[:10]]
    copies[3][5] = "-99999999999999999999"
    _write(tmp_path / "1_memory_copy_trace.csv", MEMORY_COPY_TRACE_HEADER, copies)
    out, k, m = load(tmp_path)
    assert out.dropped == {"kernels": {amd_common.BAD_TIMESTAMP: 2}, "memcpy": {amd_common.BAD_TIMESTAMP: 1}}
    good = [t for i, t in enumerate(times) if i not in (5, 9)]
    assert k.column("duration").to_pylist() == [e - b for b, e in good]
    assert m.column("start").to_pylist() == [b for i, (b, _) in enumerate(times[:10]) if i != 3]
    assert m.schema.field("start").type == pa.int64() and k.schema.field("end").type == pa.int64()


def test_float_time_column_is_an_internal_error_naming_the_reader():
    """The schema check after normalize: a reader that leaves float64 times fails loudly, whatever the reader."""
    from gpuvar.errors import GpuvarError
    from gpuvar.ingest.sanity import require_int64_times

    good = pa.table({"start": pa.array([1], pa.int64()), "duration": pa.array([2], pa.int64())})
    require_int64_times("rocprof", kernels=good, memcpy=None)
    bad = pa.table({"start": pa.array([1.0]), "duration": pa.array([2], pa.int64())})
    with pytest.raises(GpuvarError, match=r"internal error in the rocpd reader: memcpy start is double, not int64"):
        require_int64_times("rocpd", kernels=good, memcpy=bad)


# --- concatenated exports (issue 22 item 5) --------------------------------------------------------------
REPEATED = "repeated header row (concatenated files)"


def test_concatenated_rocprof_results_drop_the_repeated_header(tmp_path):
    """`cat a/results.csv b/results.csv`: the second header used to become a kernel named `KernelName` with
    null times, kept. Now it is dropped and counted; a second file's BOM and CRLF do not hide it."""
    header = ["Index", "KernelName", "gpu-id", "queue-id", "pid", "grd", "wgr", "BeginNs", "EndNs"]
    _write(tmp_path / "a.csv", header, [[i, "ka", 0, 0, 7, 256, 64, 100 * i, 100 * i + 50] for i in range(5)])
    _write(tmp_path / "b.csv", header, [[i, "kb", 0, 0, 7, 256, 64, 900 + i, 950 + i] for i in range(4)])
    b = b"\xef\xbb\xbf" + (tmp_path / "b.csv").read_bytes().replace(b"\n", b"\r\n")
    (tmp_path / "results.csv").write_bytes((tmp_path / "a.csv").read_bytes() + b)
    out, k, _ = kernels_of(tmp_path / "results.csv")
    assert out.dropped["kernels"] == {REPEATED: 1}
    assert k["kernel_name"].tolist() == ["ka"] * 5 + ["kb"] * 4 and "KernelName" not in set(k["kernel_name"])
    assert k["duration"].tolist() == [50] * 9
    report = ingest(tmp_path / "results.csv", tmp_path / "out")
    assert report["tables"]["kernels"]["balanced"] and report["tables"]["kernels"]["rows_read"] == 10


def test_concatenated_rocprofv3_and_omniperf_csvs_drop_the_repeated_header(tmp_path):
    rows = [["KERNEL_DISPATCH", 2, 0, i, "k", 100 * i, 100 * i + 40, 64, 1, 1, 640, 1, 1] for i in range(3)]
    _write(tmp_path / "one.csv", KERNEL_TRACE_HEADER, rows)
    text = (tmp_path / "one.csv").read_bytes()
    (tmp_path / "one.csv").unlink()
    (tmp_path / "1_kernel_trace.csv").write_bytes(text * 3)
    out, k, _ = load(tmp_path)
    assert out.dropped["kernels"] == {REPEATED: 2} and k.num_rows == 9
    omni = tmp_path / "omni"
    omni.mkdir()
    source = real_file(f"{OMNI}/omniperf-vcopy-mi300x/pmc_perf.csv").read_bytes()
    (omni / "pmc_perf.csv").write_bytes(source + source)
    single = data_rows(real_file(f"{OMNI}/omniperf-vcopy-mi300x/pmc_perf.csv"))
    out, k, _ = load(omni / "pmc_perf.csv")
    assert out.dropped["kernels"] == {REPEATED: 1} and k.num_rows == 2 * single


@pytest.mark.parametrize("rows_fit", [True, False])
def test_a_wide_omniperf_file_prints_no_library_warning(tmp_path, run_cli, rows_fit):
    """A pmc_perf.csv with a thousand counters: its ingest prints one JSON line (or, when every row is dropped,
    one error line) and no pandas warning. Deleting the workgroup column from the wide frame split it into a
    block per column, and each later insert printed a PerformanceWarning (found by the reader fuzz test)."""
    counters = [f"SQ_COUNTER_{i}" for i in range(1000)]
    header = ["Dispatch_ID", "Kernel_Name", "GPU_ID", "Grid_Size", "Workgroup_Size", "Arch_VGPR", *counters]
    lines = [",".join(header)]
    for i in range(7):
        values = [str(i), "kernel_a", "0", "4096", "256", "32", *(str(i * 3 + j % 5) for j in range(len(counters)))]
        lines.append(",".join(values if rows_fit else values[:-1]))  # a short row is dropped, counted
    path = tmp_path / "pmc_perf.csv"
    path.write_text("\n".join(lines) + "\n")
    proc = run_cli("ingest", path, "-o", tmp_path / "out", "--format", "omniperf-pmc-perf")
    assert "Warning" not in proc.stderr, proc.stderr
    if rows_fit:
        assert proc.returncode == 0 and json.loads(proc.stdout)["tables"]["kernels"]["rows_written"] == 7
    else:
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
