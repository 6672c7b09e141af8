"""The two ingest stages of the Nsight Compute readers (issue 16 item 7): read_raw keeps the file as read (ncu's
names, text as printed, every row), normalize does the pivot, units, canonical names and drops, and a raw read
that went through Parquet normalizes to exactly what the one-step read gives."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from conftest import REPO, real_file

from gpuvar.demo.ncu_writer import write_ncu_demo
from gpuvar.errors import InputError
from gpuvar.ingest import ncu, ncu_rep
from gpuvar.ingest.raw import roundtrip

RECORDED = REPO / "tests" / "data" / "recorded" / "h100-torch-ncu"
REAL_CSV = [
    f"ncu-csv/roofline-profiler-rtx5070/{n}.csv"
    for n in ("gemm_naive", "gemm_tiled", "gemm_vectorized", "saxpy", "transpose_naive")
]
REAL_REP = [f"ncu-rep/cutlass-a100-gemm-splitk/{n}.ncu-rep" for n in ("report-s4", "report-s8", "report-s8-persist")]
HAVE_NCU_REPORT = importlib.util.find_spec("ncu_report") is not None
CANONICAL = ("launch_id", "kernel_name", "duration", "grid_x", "block_x", "registers_per_thread")


def assert_same_output(got, want) -> None:
    pd.testing.assert_frame_equal(got.kernels, want.kernels)
    assert got.memcpy is None and want.memcpy is None
    assert got.rows_read == want.rows_read
    assert {t: dict(c) for t, c in got.dropped.items()} == {t: dict(c) for t, c in want.dropped.items()}
    assert got.notes == want.notes


def split_equals_read(module, path: Path, folder: Path) -> None:
    """normalize(roundtrip(read_raw(path))) is read(path): the workflow's two steps give the one-step result."""
    assert_same_output(module.normalize(roundtrip(module.read_raw(path), folder)), module.read(path))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ncu-demo")
    files = {}
    for layout in ("long", "wide"):
        files[layout] = folder / f"{layout}.csv"
        write_ncu_demo(files[layout], 200, 1, layout=layout)
    return files


# --- CSV: the raw tables --------------------------------------------------------------------------------
def test_long_layout_raw_is_one_text_row_per_metric_under_ncu_names(demo):
    raw = ncu.read_raw(demo["long"])
    assert raw.format == "ncu-csv" and raw.info["layout"] == "long" and set(raw.tables) == {"metrics"}
    table = raw.tables["metrics"]
    for name in ("ID", "Kernel Name", "Grid Size", "Section Name", "Metric Name", "Metric Unit", "Metric Value"):
        assert name in table.column_names
    assert not set(CANONICAL) & set(table.column_names)
    assert all(pa.types.is_string(field.type) for field in table.schema)  # nothing parsed yet
    metrics = len(set(table.column("Metric Name").to_pylist()))
    assert table.num_rows == 200 * metrics  # not pivoted: one row per (launch, metric) as in the file
    assert raw.rows_read == {"kernels": 200}  # launches, as the canonical table counts them
    sizes = table.column("Grid Size").to_pylist()
    assert all(s.startswith("(") for s in sizes)  # "(x, y, z)" text, split into grid_x.. only by normalize
    values = table.column("Metric Value").to_pylist()
    assert any("," in v for v in values)  # thousands separators kept as printed


def test_wide_layout_raw_keeps_values_unscaled_and_the_units_row_as_its_own_table(tmp_path):
    source = tmp_path / "raw.csv"
    head = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum"]
    rows = [head, ["", "", "usecond", "Kbyte"], ["0", "k(int)", "1.5", "2"], ["1", "k(int)", "2", "3"]]
    source.write_text("\n".join(",".join(f'"{v}"' for v in row) for row in rows) + "\n")
    raw = ncu.read_raw(source)
    assert raw.info == {"layout": "wide", "units_row": True}
    launches, units = raw.tables["launches"], raw.tables["units"]
    assert launches.column_names == head and launches.num_rows == 2  # the units row is not a launch
    assert launches.column("gpu__time_duration.sum").to_pylist() == ["1.5", "2"]
    assert (
        dict(zip(units.column("column").to_pylist(), units.column("unit").to_pylist()))["dram__bytes_read.sum"]
        == "Kbyte"
    )
    kernels = ncu.normalize(raw).kernels  # normalize converts: usecond -> ns, Kbyte -> byte
    assert kernels["duration"].tolist() == [1500, 2000]
    assert kernels["dram__bytes_read.sum"].tolist() == [2000.0, 3000.0]


def test_wide_layout_without_units_row_has_no_units_table(tmp_path):
    source = tmp_path / "raw.csv"
    source.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","10"\n')
    raw = ncu.read_raw(source)
    assert set(raw.tables) == {"launches"} and raw.info["units_row"] is False
    assert any("without a units row" in note for note in raw.notes)
    assert ncu.normalize(raw).kernels["duration"].tolist() == [10]


def test_raw_keeps_rows_normalize_drops_and_normalize_counts_them(tmp_path):
    """A row whose ID is not a launch number is in the raw table; normalize drops it and counts it, and rows
    read = rows written + dropped. A repeated header (concatenated exports) is dropped and counted at read, as
    every CSV reader does (issue 22 item 5)."""
    source = tmp_path / "cat.csv"
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    lines = [
        header,
        '"0","k","gpu__time_duration.sum","ns","100"',
        '"total","k","gpu__time_duration.sum","ns","107"',
        header,
        '"1","k","gpu__time_duration.sum","ns","7"',
    ]
    source.write_text("\n".join(lines) + "\n")
    raw = ncu.read_raw(source)
    assert raw.tables["metrics"].num_rows == 3
    assert raw.dropped == {"kernels": {"repeated header row (concatenated files)": 1}}
    out = ncu.normalize(roundtrip(raw, tmp_path / "raw"))
    assert len(out.kernels) == 2 and out.kernels["duration"].tolist() == [100, 7]
    assert dict(out.dropped["kernels"]) == {
        "row ID is not a launch number": 1,
        "repeated header row (concatenated files)": 1,
    }
    assert out.rows_read["kernels"] == len(out.kernels) + 2


def test_rows_the_parse_cannot_keep_are_counted_at_read(tmp_path):
    source = tmp_path / "short.csv"
    lines = ['"ID","Kernel Name","gpu__time_duration.sum"', '"0","k","10"', "program output", '"1","k","20"']
    source.write_text("\n".join(lines) + "\n")
    raw = ncu.read_raw(source)
    assert raw.dropped == {"kernels": {"row has fewer fields than the header": 1}}
    out = ncu.normalize(raw)
    assert len(out.kernels) == 2 and out.rows_read["kernels"] == 3


def test_a_file_without_launches_fails_at_read_not_at_normalize(tmp_path):
    source = tmp_path / "empty.csv"
    source.write_text('"ID","Kernel Name","Metric Name","Metric Value"\n"x","k","m","1"\n')
    with pytest.raises(InputError, match="no kernel launches"):
        ncu.read_raw(source)


def test_a_raw_read_missing_its_table_is_a_one_line_error(demo):
    raw = ncu.read_raw(demo["wide"])
    del raw.tables["launches"]
    with pytest.raises(InputError, match="lacks its 'launches' table"):
        ncu.normalize(raw)


# --- CSV: the two stages give the one-step result -----------------------------------------------------------
@pytest.mark.parametrize("layout", ["long", "wide"])
def test_demo_csv_split_equals_read(demo, layout, tmp_path):
    split_equals_read(ncu, demo[layout], tmp_path)


@pytest.mark.parametrize("name", ["details.csv", "raw.csv"])
def test_recorded_h100_csv_split_equals_read(name, tmp_path):
    split_equals_read(ncu, RECORDED / name, tmp_path)


@pytest.mark.parametrize("name", REAL_CSV)
def test_real_csv_split_equals_read(name, tmp_path):
    split_equals_read(ncu, real_file(name), tmp_path)


def test_quirky_csv_split_equals_read(tmp_path):
    """Preamble, ==PROF== lines after the header, repeated header names, latin-1 and n/a values: every note the
    read makes survives the raw stage."""
    source = tmp_path / "quirks.csv"
    lines = [
        "==PROF== Connected to process 1",
        "hello from the program",
        '"ID","Kernel Name","Metric Name","Metric Name","Metric Unit","Metric Value"',
        '"0","k\xe9","gpu__time_duration.sum","x","usecond","1.5"',
        "==PROF== Disconnected from process 1",
        '"0","k\xe9","launch__registers_per_thread","y","register/thread","n/a"',
        '"1","k\xe9","gpu__time_duration.sum","x","msecond","2"',
    ]
    source.write_bytes(("\r\n".join(lines) + "\r\n").encode("latin-1"))
    raw = ncu.read_raw(source)
    assert "Metric Name (2)" in raw.tables["metrics"].column_names
    assert len(raw.notes) == 4  # preamble, ==PROF== line, latin-1, repeated header names
    split_equals_read(ncu, source, tmp_path / "raw")


# --- .ncu-rep -----------------------------------------------------------------------------------------------
def fake_launches() -> dict:
    """What ncu_rep_worker returns for a report of three launch records, one unreadable."""
    big = 2**63 + 5  # a 64-bit counter past int64
    return {
        "total": 3,
        "ids": [0, 2],
        "names": ["k0", "k2"],
        "workloads": [0, 1],
        "damaged_metrics": 1,
        "values": {
            "gpu__time_duration.sum": [10.0, 12.5],
            "launch__grid_dim_x": [4, 8],
            "launch__grid_dim_y": [1, 1],
            "launch__grid_dim_z": [1, 1],
            "big__counter": [big, None],
            "mixed__metric": [3, 0.5],
            "text__metric": ["on", 7],
        },
        "units": {
            "gpu__time_duration.sum": ["usecond", "usecond"],
            "launch__grid_dim_x": ["", ""],
            "launch__grid_dim_y": ["", ""],
            "launch__grid_dim_z": ["", ""],
            "big__counter": ["", None],  # the second launch does not hold the metric
            "mixed__metric": ["Kbyte", "Kbyte"],
            "text__metric": ["", ""],
        },
    }


def test_report_raw_keeps_the_package_values_and_units(tmp_path, monkeypatch):
    source = tmp_path / "fake.ncu-rep"
    source.write_bytes(ncu_rep.MAGIC + b"\0" * 64)
    monkeypatch.setattr(ncu_rep, "_worker", lambda path: (fake_launches(), "bad record 1"))
    raw = roundtrip(ncu_rep.read_raw(source), tmp_path / "raw")
    assert raw.rows_read == {"kernels": 3}
    assert raw.dropped == {"kernels": {"launch record unreadable (damaged report)": 1}}
    assert raw.tables["launches"].column("ID").to_pylist() == [0, 2]
    metrics, units = raw.tables["metrics"], raw.tables["units"]
    assert metrics.column_names == list(fake_launches()["values"])  # ncu's names, report order
    assert metrics.column("big__counter").to_pylist() == [2**63 + 5, None]  # exact, not a float
    assert metrics.column("launch__grid_dim_x").type == pa.int64()
    assert metrics.column("gpu__time_duration.sum").to_pylist() == [10.0, 12.5]  # not scaled to ns yet
    assert metrics.column("text__metric").to_pylist() == ["on", "7"]
    assert units.column("big__counter").to_pylist() == ["", None]
    out = ncu_rep.normalize(raw)
    assert out.kernels["launch_id"].tolist() == [0, 2] and out.kernels["duration"].tolist() == [10000, 12500]
    assert out.kernels["grid_x"].tolist() == [4, 8] and out.kernels["mixed__metric"].tolist() == [3000.0, 500.0]
    assert out.rows_read["kernels"] == len(out.kernels) + 1
    assert out.notes[0] == "the report parser logged damage: bad record 1"


@pytest.mark.skipif(not HAVE_NCU_REPORT, reason="the ncu-report package (extra gpuvar[ncurep]) is not installed")
@pytest.mark.parametrize("name", REAL_REP)
def test_real_report_raw_names_and_split_equals_read(name, tmp_path):
    path = real_file(name)
    raw = ncu_rep.read_raw(path)
    metrics = raw.tables["metrics"]
    assert {"gpu__time_duration.sum", "launch__grid_dim_x", "launch__registers_per_thread"} <= set(metrics.column_names)
    assert not set(CANONICAL) & set(metrics.column_names)
    assert raw.tables["units"].column("gpu__time_duration.sum").to_pylist() == ["ns"] * metrics.num_rows
    split_equals_read(ncu_rep, path, tmp_path)
