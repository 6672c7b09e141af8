"""Nsight Compute CSV ingest (long and wide layouts) and the demo ncu writer.

Real files are the ncu 2026.2 long-layout exports under ncu-csv/; the wide `--page raw` layout and the quirks
the real files lack (unit auto-scaling, n/a, details-page names, truncation) are checked on files built here.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import real_file

from gpuvar.demo import synth
from gpuvar.demo.ncu_writer import DRAM_BYTES_PER_NS, IDENTITY_HEADER, STALL_METRIC, write_ncu_demo
from gpuvar.ingest import ingest, load, ncu, ncu_metrics
from gpuvar.ingest.compression import read_head
from gpuvar.ingest.detect import detect

REAL = "ncu-csv/roofline-profiler-rtx5070"
REAL_FILES = ["saxpy.csv", "gemm_naive.csv", "gemm_tiled.csv", "gemm_vectorized.csv", "transpose_naive.csv"]
IDENT = list(IDENTITY_HEADER)
LONG = IDENT + ["Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def csv_text(rows, preamble=("==PROF== Connected to process 1 (/bin/app)",)) -> bytes:
    """A file the way ncu writes it: BOM, CRLF, preamble lines, every field quoted."""
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerows(rows)
    return ("\ufeff" + "".join(p + "\r\n" for p in preamble) + buf.getvalue()).encode()


def long_row(launch, metric, unit, value, section="Command line profiler metrics", kernel="k(float*)"):
    return [
        str(launch),
        "7",
        "app",
        "host",
        kernel,
        "1",
        "13",
        "(128, 1, 1)",
        "(64, 2, 1)",
        "0",
        "9.0",
        section,
        metric,
        unit,
        value,
    ]


def source_ids(path) -> set[str]:
    """Distinct launch IDs in a long-layout file, counted independently of the reader (csv module)."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return {row["ID"] for row in csv.DictReader(lines[start:])}


def kernels_of(path) -> tuple[ncu.ReaderOutput, pd.DataFrame]:
    out, table, _ = load(path)
    return out, table.to_pandas()


# --- real files -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REAL_FILES)
def test_real_file_one_row_per_launch(name):
    path = real_file(f"{REAL}/{name}")
    assert detect(path) is ncu
    out, k = kernels_of(path)
    ids = source_ids(path)
    assert len(k) == len(ids) == out.rows_read["kernels"]
    assert sorted(k["launch_id"].astype(str)) == sorted(ids)
    assert not out.dropped
    metric_names = {row[12] for row in csv.reader(path.read_text(encoding="utf-8-sig").splitlines()[9:])}
    assert metric_names <= set(k.columns)
    assert k["duration"].notna().all() and (k["duration"] > 0).all()
    assert k["start"].isna().all() and k["end"].isna().all()  # ncu has no timeline


def test_saxpy_spot_check():
    out, k = kernels_of(real_file(f"{REAL}/saxpy.csv"))
    row = k.loc[k["launch_id"] == 0].iloc[0]
    assert row["duration"] == 292_928
    assert row["gpu__time_duration.sum"] == 292_928
    assert "saxpy_kernel" in row["kernel_name"]
    assert row["kernel_short_name"] == "saxpy_kernel"
    assert (row["grid_x"], row["grid_y"], row["grid_z"]) == (65536, 1, 1)
    assert (row["block_x"], row["block_y"], row["block_z"]) == (256, 1, 1)
    assert row["dram__bytes_op_read.sum"] == 134_221_568  # "134,221,568" in the file
    assert row["lts__t_sector_hit_rate.pct"] == pytest.approx(33.26)
    assert (row["process_id"], row["stream_id"], row["device_id"]) == (58960, 7, 0)
    assert row["process_name"] == "roofline_profiler.exe" and row["host_name"] == "127.0.0.1"
    assert row["wave_size"] == 32
    units = json.loads(next(n for n in out.notes if n.startswith("metric units")).split(": ", 1)[1])
    assert units["gpu__time_duration.sum"] == "ns" and units["dram__bytes_op_read.sum"] == "byte"


def test_real_file_through_ingest_writes_balanced_report(tmp_path):
    report = ingest(real_file(f"{REAL}/gemm_tiled.csv"), tmp_path / "out")
    assert report["format"] == "ncu-csv"
    assert report["tables"]["kernels"]["balanced"]
    assert pq.read_table(tmp_path / "out" / "kernels.parquet").num_rows == report["tables"]["kernels"]["rows_written"]
    copies = pq.read_table(tmp_path / "out" / "memcpy.parquet")  # declared for every dataset: no rows here
    assert copies.num_rows == 0 and "memcpy" not in report["tables"] and "start" in copies.column_names


def test_renamed_extension_is_detected_by_content(tmp_path):
    path = tmp_path / "profile_output.txt"
    path.write_bytes(real_file(f"{REAL}/saxpy.csv").read_bytes())
    assert detect(path).FORMAT == "ncu-csv"
    assert len(kernels_of(path)[1]) == 1


# --- demo writer ------------------------------------------------------------------------------------------
def test_long_and_wide_demo_give_identical_kernel_tables(tmp_path):
    write_ncu_demo(tmp_path / "long.csv", 500, seed=11, variant=1, layout="long")
    write_ncu_demo(tmp_path / "wide.csv", 500, seed=11, variant=1, layout="wide")
    a, b = kernels_of(tmp_path / "long.csv")[1], kernels_of(tmp_path / "wide.csv")[1]
    assert set(a.columns) == set(b.columns)
    pd.testing.assert_frame_equal(a, b[a.columns])
    assert len(a) == 500 and a["launch_id"].tolist() == list(range(500))


def test_demo_round_trips_synth_values_and_planted_duration(tmp_path):
    write_ncu_demo(tmp_path / "d.csv", 800, seed=5, layout="long")
    _, k = kernels_of(tmp_path / "d.csv")
    truth = next(synth.generate(800, 5)).kernels
    for col in (
        "grid_x",
        "grid_y",
        "block_x",
        "stream_id",
        "registers_per_thread",
        "static_shared_memory",
        "dynamic_shared_memory",
    ):
        np.testing.assert_array_equal(k[col].to_numpy(dtype=np.int64), truth[col], err_msg=col)
    np.testing.assert_array_equal(k[STALL_METRIC], truth["tcp_pending_stall"])
    names, _ = synth.kernel_names()
    assert k["kernel_name"].tolist() == [names[i] for i in truth["kernel_index"]]
    # planted: gpu__time_duration = synth duration + DRAM read time; bytes read grow with grid_x
    dram = k["dram__bytes_read.sum"].to_numpy()
    np.testing.assert_array_equal(k["duration"], truth["duration"] + np.round(dram / DRAM_BYTES_PER_NS))
    for _, group in k[k["grid_y"] == 1].groupby("kernel_short_name"):
        assert group["grid_x"].corr(group["dram__bytes_read.sum"], method="spearman") > 0.8


def test_demo_file_has_real_ncu_quirks_and_is_deterministic(tmp_path):
    info = write_ncu_demo(tmp_path / "a.csv", 300, seed=2, layout="long")
    write_ncu_demo(tmp_path / "b.csv", 300, seed=2, layout="long")
    write_ncu_demo(tmp_path / "c.csv", 300, seed=3, layout="long")
    raw = (tmp_path / "a.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf==PROF==")
    assert raw.split(b"\r\n")[1].startswith(b"==PROF==") and raw.split(b"\r\n")[2].startswith(b'"ID"')
    assert b"\r\n" in raw and b"\n" not in raw.replace(b"\r\n", b"")
    assert b'"(256, 1, 1)"' in raw and b'","1,' in raw  # sizes as tuples, thousands separators
    assert info["csv_rows"] == 300 * 13 and info["kernels"] == 300
    assert raw == (tmp_path / "b.csv").read_bytes()
    assert raw != (tmp_path / "c.csv").read_bytes()
    wide = tmp_path / "w.csv"
    write_ncu_demo(wide, 10, seed=2, layout="wide")
    lines = wide.read_bytes().decode("utf-8-sig").split("\r\n")
    assert lines[0].startswith('"ID"') and lines[1].startswith('"",""') and len(lines) == 10 + 3


# --- quirks the real files do not show ----------------------------------------------------------------
def test_long_layout_units_na_missing_duration_and_bad_ids(tmp_path):
    rows = [
        LONG,
        long_row(0, "gpu__time_duration.sum", "usecond", "12.5"),
        long_row(0, "dram__bytes.sum", "Kbyte", "1,024.50"),
        long_row(0, "device__attribute_display_name", "", "NVIDIA H100 80GB HBM3"),
        long_row(1, "gpu__time_duration.sum", "msecond", "1.20"),
        long_row(1, "dram__bytes.sum", "Mbyte", "2.5"),
        long_row(1, "device__attribute_display_name", "", "NVIDIA H100 80GB HBM3"),
        long_row(2, "gpu__time_duration.sum", "nsecond", "n/a"),
        long_row(2, "dram__bytes.sum", "byte", "n/a"),
        ["NVML samples: 6"],
        LONG,  # a second report appended: its header row is not a launch
        long_row(3, "dram__bytes.sum", "byte", "77"),
    ]
    data = csv_text(rows).replace(b'"NVML', b'==WARNING== late report line\r\n"NVML')
    (tmp_path / "u.csv").write_bytes(data)
    out, k = kernels_of(tmp_path / "u.csv")
    assert k["launch_id"].tolist() == [0, 1, 2, 3]
    assert k["duration"].tolist()[:2] == [12_500, 1_200_000]
    assert k["duration"].isna().tolist() == [False, False, True, True]  # kept, with a null duration
    assert k["dram__bytes.sum"].tolist()[:2] == [1_024_500.0, 2_500_000.0] and np.isnan(k["dram__bytes.sum"][2])
    assert k["device__attribute_display_name"].tolist()[:2] == ["NVIDIA H100 80GB HBM3"] * 2  # text stays text
    assert (k["grid_x"][0], k["grid_y"][0], k["block_x"][0], k["grid_size"][0]) == (64, 2, 128, 128)
    assert out.rows_read["kernels"] == 6
    assert out.dropped["kernels"] == {
        "row has fewer fields than the header": 1,
        "repeated header row (concatenated files)": 1,  # the appended report's header (issue 22 item 5)
    }
    notes = " | ".join(out.notes)
    assert "2 launch(es) have no gpu__time_duration.sum value" in notes
    assert "ignored 1 ==PROF==/==WARNING== report line" in notes
    note = next(n for n in out.notes if n.startswith("metric units"))
    assert json.loads(note.split(": ", 1)[1])["dram__bytes.sum"] == "byte"
    report = ingest(tmp_path / "u.csv", tmp_path / "out")
    assert report["tables"]["kernels"]["balanced"] and report["tables"]["kernels"]["rows_written"] == 4


def test_details_page_names_without_raw_metrics(tmp_path):
    """Default `ncu --csv` (no --metrics) prints human metric names; some recur in several sections."""
    sol, launch = "GPU Speed Of Light Throughput", "Launch Statistics"
    rows = [
        LONG,
        long_row(0, "Duration", "usecond", "3.10", section=sol),
        long_row(0, "Elapsed Cycles", "cycle", "5,432", section=sol),
        long_row(0, "Elapsed Cycles", "cycle", "5,431", section="Occupancy"),
        long_row(0, "Registers Per Thread", "register/thread", "40", section=launch),
        long_row(0, "Static Shared Memory Per Block", "Kbyte/block", "4.10", section=launch),
        long_row(0, "Dynamic Shared Memory Per Block", "byte/block", "0", section=launch),
    ]
    (tmp_path / "d.csv").write_bytes(csv_text(rows))
    _, k = kernels_of(tmp_path / "d.csv")
    row = k.iloc[0]
    assert row["duration"] == 3_100
    assert row["registers_per_thread"] == 40 and row["lds_per_workgroup"] == 4_100
    assert row[f"{sol}: Elapsed Cycles"] == 5_432 and row["Occupancy: Elapsed Cycles"] == 5_431


def test_unknown_columns_are_kept_and_order_does_not_matter(tmp_path):
    """A newer ncu may add per-launch columns or reorder them: parse by name, keep what is unknown."""
    header = ["Metric Value", "Kernel Name", "Launch Type", "ID", "Grid Size", "Metric Name", "Metric Unit"]
    rows = [
        header,
        ["1,234", "k", "graph", "4", "(8, 1, 1)", "gpu__time_duration.sum", "ns"],
        ["99", "k", "graph", "4", "(8, 1, 1)", "smsp__inst_executed.sum", "inst"],
    ]
    (tmp_path / "x.csv").write_bytes(csv_text(rows))
    _, k = kernels_of(tmp_path / "x.csv")
    assert k[["launch_id", "duration", "grid_x", "Launch Type", "smsp__inst_executed.sum"]].iloc[0].tolist() == [
        4,
        1234,
        8,
        "graph",
        99.0,
    ]


def test_wide_layout_without_units_row_and_without_size_columns(tmp_path):
    """Older ncu: no Block/Grid Size columns; launch__*_dim_* metrics give the launch shape."""
    rows = [
        [
            "ID",
            "Kernel Name",
            "Stream",
            "gpu__time_duration.sum",
            "launch__grid_dim_x",
            "launch__grid_dim_y",
            "launch__grid_dim_z",
            "launch__block_dim_x",
            "launch__block_dim_y",
            "launch__block_dim_z",
        ],
        ["0", "kern", "3", "1,500", "10", "2", "1", "64", "1", "1"],
        ["1", "kern", "3", "1,700", "10", "2", "1", "64", "1", "1"],
    ]
    (tmp_path / "w.csv").write_bytes(csv_text(rows, preamble=()))
    out, k = kernels_of(tmp_path / "w.csv")
    assert k["duration"].tolist() == [1_500, 1_700]
    assert k["grid_size"].tolist() == [20, 20] and k["workgroup_size"].tolist() == [64, 64]
    assert any("without a units row" in n for n in out.notes)


def test_latin1_file_is_read_and_noted(tmp_path):
    rows = [
        ["ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"],
        ["0", "k_\xe9t\xe9(float*)", "gpu__time_duration.sum", "usecond", "1.5"],
    ]
    (tmp_path / "l.csv").write_bytes(csv_text(rows, preamble=())[3:].decode().encode("latin-1"))
    out, k = kernels_of(tmp_path / "l.csv")
    assert k["kernel_name"][0] == "k_\xe9t\xe9(float*)" and k["duration"][0] == 1_500
    assert "not valid UTF-8" in out.notes[0]


@pytest.mark.parametrize(
    "unit, expected",
    [
        ("nsecond", ("ns", 1.0)),
        ("usecond", ("ns", 1e3)),
        ("msecond", ("ns", 1e6)),
        ("second", ("ns", 1e9)),
        ("Kbyte", ("byte", 1e3)),
        ("Gbyte/second", ("byte/second", 1e9)),
        ("byte/usecond", ("byte/second", 1e6)),
        ("cycle/nsecond", ("cycle/second", 1e9)),
        ("%", ("%", 1.0)),
        ("", ("", 1.0)),
        ("register/thread", ("register/thread", 1.0)),
        ("%/Kbyte", ("%/byte", 1e3)),  # ncu's auto-scale prefix on a denominator count still multiplies
        ("Kbyte/cycle", ("byte/cycle", 1e3)),
        ("sector/us", ("sector/second", 1e6)),
    ],
)
def test_unit_scale(unit, expected):
    assert ncu_metrics.unit_scale(unit) == expected


def test_sniff_claims_no_other_real_profiler_file(real_data):
    others = [p for p in real_data.rglob("*") if p.is_file() and "ncu-csv" not in p.parts and p.suffix != ".md"]
    assert others
    for path in others:
        assert not ncu.sniff(path, read_head(path)), path


def test_sniff_rejects_other_csvs():
    assert not ncu.sniff(None, b'"Index","KernelName","gpu-id","grd","wgr"\n0,"k",0,64,64\n')
    assert not ncu.sniff(None, b"ID,Name,Value\n1,a,2\n")
    assert not ncu.sniff(None, b"SQLite format 3\x00" + bytes(100))
    assert ncu.sniff(None, b'\xef\xbb\xbfprogram says hi, ID Kernel Name\r\n"ID","Kernel Name","x__y"\r\n')


# --- malformed input: one line on stderr, exit 2 ---------------------------------------------------------
def _truncated_mid_field(tmp_path):
    write_ncu_demo(tmp_path / "full.csv", 20, seed=1)
    raw = (tmp_path / "full.csv").read_bytes()
    return raw[: raw.rindex(b'"byte","') + 10]  # inside the last row's quoted value


MALFORMED = {
    "truncated_quoted": (_truncated_mid_field, "truncated"),
    "truncated_row": (
        lambda t: csv_text([LONG, long_row(0, "gpu__time_duration.sum", "ns", "5")]) + b'"1","7",',
        "truncated: the last row has 3 of 15 fields",
    ),
    "truncated_after_lone_cr": (  # found by the long fuzz run: a byte flip made a CR inside the cut last row
        lambda t: csv_text([LONG, long_row(0, "gpu__time_duration.sum", "ns", "5")]) + b'"1",\r"7",',
        "truncated",
    ),
    "header_only": (lambda t: csv_text([LONG]), "no kernel launches"),
    "no_metric_value": (
        lambda t: csv_text([LONG[:-1], long_row(0, "m", "ns", "5")[:-1]]),
        "lacks required column(s) Metric Value",
    ),
    "too_many_fields": (lambda t: csv_text([LONG, long_row(0, "m", "ns", "5") + ["extra"]]), "malformed CSV"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_ncu_csv_is_one_line_error(run_cli, tmp_path, case):
    make, message = MALFORMED[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(make(tmp_path))
    proc = run_cli("ingest", path, "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: " in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "kernels.parquet").exists()


@pytest.mark.parametrize(
    "content, fmt, message",
    [
        (bytes(range(256)) * 40, "auto", "unrecognised format"),
        (bytes(range(256)) * 40, "ncu-csv", "binary file"),
        (b"", "ncu-csv", "empty file"),
        (b"just,some\ncsv,text\n", "ncu-csv", "not an Nsight Compute CSV"),
    ],
)
def test_wrong_file_type_is_one_line_error(run_cli, tmp_path, content, fmt, message):
    path = tmp_path / "input.csv"
    path.write_bytes(content)
    proc = run_cli("ingest", path, "-o", tmp_path / "out", "--format", fmt)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: {message}" in proc.stderr and "Traceback" not in proc.stderr


def test_read_head_sniff_matches_read(tmp_path):
    """What sniff claims, read can parse: a header past a long program-output preamble (within 64 KiB)."""
    preamble = tuple(f"step {i}: loss=0.{i:04d}, lr=1e-3" for i in range(1500))
    path = tmp_path / "p.csv"
    path.write_bytes(csv_text([LONG, long_row(5, "gpu__time_duration.sum", "ns", "9")], preamble=preamble))
    assert ncu.sniff(path, read_head(path))
    out, k = kernels_of(path)
    assert k["launch_id"].tolist() == [5] and "skipped 1500 preamble line(s)" in out.notes[0]


# --- ncu 2025.3 details page with rule results (issue 22 item 1) ----------------------------------------
RULES = ["Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]


def write_details_2025(path, launches: int, seed: int, end_with: str = "rule") -> bytes:
    """An `ncu --import r.ncu-rep --csv --page details` export as ncu 2025.3 writes it, derived from the classic
    long demo file: the header gains the five rule columns (20 fields), metric rows carry one extra empty field
    (16 fields), and each launch is followed by its rule findings, which fill all 20 fields (empty metric
    fields; descriptions with commas and quotes). end_with='metric' moves the last launch's rules before its
    metrics, so the file ends in a 16-field row. Returns the classic file's bytes for comparison."""
    classic = path.with_name(path.stem + "-classic.csv")
    write_ncu_demo(classic, launches, seed=seed, layout="long")
    data = classic.read_bytes()
    lines = data.decode("utf-8-sig").split("\r\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    out = lines[:start] + [lines[start] + "," + ",".join(f'"{c}"' for c in RULES)]
    by_launch: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line:
            by_launch.setdefault(next(csv.reader([line]))[0], []).append(line + ',""')
    for n, (launch, metric_lines) in enumerate(by_launch.items()):
        fields = next(csv.reader([metric_lines[0][: -len(',""')]]))
        prefix = ",".join(f'"{f}"' for f in fields[: len(IDENT)])
        rules = [
            f'{prefix},"GPU Speed Of Light Throughput","","","","SOLBottleneck","OPT",'
            f'"This kernel exhibits low compute throughput, see the ""Memory Workload Analysis"" section.",'
            f'"global","{12.5 + n % 7:.2f}"',
            f'{prefix},"Occupancy","","","","AchievedOccupancy","INF","Occupancy is fine.","local","0"',
        ]
        last = n == len(by_launch) - 1
        out += rules + metric_lines if (last and end_with == "metric") else metric_lines + rules
    path.write_bytes(("\ufeff" + "\r\n".join(out) + "\r\n").encode())
    return data


@pytest.mark.parametrize("end_with", ["rule", "metric"])
def test_details_2025_rule_columns_read_as_classic_layout(tmp_path, end_with):
    """Before the fix every 16-field metric row was dropped as short, the launches came from rule rows with
    null durations (exit 0, balanced), and a file ending in a metric row was refused as truncated."""
    path = tmp_path / "details.csv"
    write_details_2025(path, 60, seed=4, end_with=end_with)
    lines = path.read_bytes().decode("utf-8-sig").split("\r\n")
    assert len(next(csv.reader([lines[2]]))) == 20 and len(next(csv.reader([lines[3]]))) == 16
    out, k = kernels_of(path)
    _, classic = kernels_of(tmp_path / "details-classic.csv")
    pd.testing.assert_frame_equal(k, classic)  # every launch, metric and duration as in the classic layout
    assert k["duration"].notna().all() and len(k) == 60
    assert "Rule Name" not in k.columns and "SOLBottleneck" not in k.to_numpy().astype(str)
    assert any("120 rule-finding row(s)" in n for n in out.notes)
    raw = ncu.read_raw(path)
    rules = raw.tables["rules"].to_pandas()
    assert len(rules) == 120 and rules["Rule Name"].value_counts().to_dict() == {
        "SOLBottleneck": 60,
        "AchievedOccupancy": 60,
    }
    assert rules["Rule Description"][0].startswith('This kernel exhibits low compute throughput, see the "Memory')
    report = ingest(path, tmp_path / "out")
    kernels = report["tables"]["kernels"]
    assert kernels["balanced"] and kernels["rows_written"] == 60 and kernels["dropped"] == {}


def test_no_launch_with_a_duration_is_one_line_error(run_cli, tmp_path):
    """Null durations for every launch used to be written with exit 0; nothing downstream can use them."""
    path = tmp_path / "nodur.csv"
    path.write_bytes(csv_text([LONG, long_row(0, "dram__bytes.sum", "byte", "5"), long_row(1, "x", "", "1")]))
    proc = run_cli("ingest", path, "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: no duration for any of the 2 launch(es)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "kernels.parquet").exists()


def test_concatenated_ncu_exports_drop_the_repeated_header(tmp_path):
    """`cat a.csv b.csv` of two long exports (each with its ==PROF== preamble and BOM): the second header is
    dropped and counted under the reason every CSV reader uses, both reports' launches are read."""
    write_ncu_demo(tmp_path / "a.csv", 30, seed=1)
    write_ncu_demo(tmp_path / "b.csv", 30, seed=2)
    (tmp_path / "ab.csv").write_bytes((tmp_path / "a.csv").read_bytes() + (tmp_path / "b.csv").read_bytes())
    out, k = kernels_of(tmp_path / "ab.csv")
    assert out.dropped["kernels"] == {"repeated header row (concatenated files)": 1}
    # launch IDs 0..29 twice: both reports' launches (issue 35 item 6: the second's were lost), the second's IDs
    # offset past the first's (tests/test_ncu_exports.py)
    assert len(k) == 60 and k["duration"].notna().all() and k["launch_id"].tolist() == list(range(60))
    assert any("2 exports concatenated" in n for n in out.notes)
    report = ingest(tmp_path / "ab.csv", tmp_path / "out")
    assert report["tables"]["kernels"]["balanced"] and report["tables"]["kernels"]["rows_read"] == 61
