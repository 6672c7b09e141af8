"""Nsight Compute binary reports (.ncu-rep) read through the ncu-report package.

Real files: three CUTLASS split-k GEMM reports (A100, `--set full`, 1220 metrics per launch) under ncu-rep/.
Launch counts and metric values are taken from the package directly in each test, independently of the reader.
No real .ncu-rep has an ncu CSV export of the same run beside it, and no Nsight Compute binary is here to make
one, so the CSV side of the agreement test is a `--page raw` wide CSV written from the package's own metric
values (name, unit, value), the way `ncu --import R --csv --page raw` lays it out; where the recorded H100 run
also keeps its report (tests/data/recorded/h100-torch-ncu/report.ncu-rep) the real pair is compared too.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import REPO, real_file

from gpuvar.errors import InputError
from gpuvar.ingest import ingest, load, ncu, ncu_rep
from gpuvar.ingest.detect import detect

ncu_report = pytest.importorskip("ncu_report", reason="the ncu-report package (extra gpuvar[ncurep]) is not installed")

REAL = "ncu-rep/cutlass-a100-gemm-splitk"
FILES = ["report-s4.ncu-rep", "report-s8.ncu-rep", "report-s8-persist.ncu-rep"]
# PROVENANCE.md: (launch position, short name, gpu__time_duration.sum ns, grid blocks, block threads, registers)
SPOT = {
    "report-s4.ncu-rep": [(0, "Kernel", 10400, 12, 128, 204), (1, "ReferenceGemm_kernel", 322592, 576, 256, 47)],
    "report-s8.ncu-rep": [(0, "Kernel", 8512, 36, 128, 108), (1, "ReferenceGemm_kernel", 324096, 576, 256, 40)],
    "report-s8-persist.ncu-rep": [(0, "Kernel", 8416, 36, 128, 108), (1, "ReferenceGemm_kernel", 324320, 576, 256, 40)],
}
RECORDED_REP = REPO / "tests" / "data" / "recorded" / "h200-torch-ncu-rep"


def package_launches(path) -> list:
    """Every action of every range, straight from the package."""
    report = ncu_report.load_report(str(path))
    return [
        report.range_by_idx(r).action_by_idx(a)
        for r in range(report.num_ranges())
        for a in range(report.range_by_idx(r).num_actions())
    ]


def kernels_of(path) -> tuple[object, pd.DataFrame]:
    out, table, _ = load(path)
    return out, table.to_pandas()


# --- real files -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FILES)
def test_every_launch_with_every_metric(name, tmp_path):
    path = real_file(f"{REAL}/{name}")
    launches = package_launches(path)
    report = ingest(path, tmp_path)
    assert report["format"] == "ncu-rep"
    table = report["tables"]["kernels"]
    assert table["rows_read"] == table["rows_written"] == len(launches) == 2 and not table["dropped"]
    kernels = pd.read_parquet(tmp_path / "kernels.parquet")
    assert kernels["launch_id"].tolist() == list(range(len(launches)))
    for row, action in enumerate(launches):
        names = list(action.metric_names())
        assert len(names) == 1220 and set(names) <= set(kernels.columns)
        for metric in names:
            m = action.metric_by_name(metric)
            got = kernels.at[row, metric]
            if not m.has_value():
                assert got is None or pd.isna(got), metric
            elif isinstance(m.value(), str):
                assert got == m.value(), metric
            else:  # the report stores base units (ns, byte, ...): no scaling applies
                assert math.isclose(float(got), float(m.value()), rel_tol=1e-12), metric


@pytest.mark.parametrize("name", FILES)
def test_spot_values_per_canonical_column(name):
    out, kernels = kernels_of(real_file(f"{REAL}/{name}"))
    for row, short, duration, grid, block, registers in SPOT[name]:
        k = kernels.iloc[row]
        assert k["kernel_short_name"] == short
        assert k["duration"] == duration
        assert k["grid_size"] == grid and k["grid_x"] * k["grid_y"] * k["grid_z"] == grid
        assert k["workgroup_size"] == block and k["block_x"] * k["block_y"] * k["block_z"] == block
        assert k["registers_per_thread"] == registers
        assert k["lds_per_workgroup"] == k["static_shared_memory"] + k["dynamic_shared_memory"]
        assert k["launch_config"] == (
            f"g{k['grid_x']}x{k['grid_y']}x{k['grid_z']} "
            f"b{k['block_x']}x{k['block_y']}x{k['block_z']} "
            f"r{registers} s{k['lds_per_workgroup']}"
        )
    assert kernels["device_id"].tolist() == [0, 0] and kernels["wave_size"].tolist() == [32, 32]
    assert kernels["cc"].tolist() == [8.0, 8.0]
    assert kernels["kernel_name"].iloc[1].startswith("ReferenceGemm_kernel(int, int, int, signed char")
    assert kernels["kernel_name"].iloc[0].startswith("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<")
    assert kernels[["start", "end", "process_id"]].isna().all().all()  # ncu has no timeline; no process info
    assert kernels["device__attribute_display_name"].tolist() == ["NVIDIA A100 80GB PCIe"] * 2
    assert any("process id/name and host name" in note for note in out.notes)


def test_s4_launch_configuration_and_streams():
    _, kernels = kernels_of(real_file(f"{REAL}/report-s4.ncu-rep"))
    cutlass, reference = kernels.iloc[0], kernels.iloc[1]
    assert (cutlass["grid_x"], cutlass["grid_y"], cutlass["grid_z"]) == (3, 4, 1)
    assert (reference["block_x"], reference["block_y"], reference["block_z"]) == (16, 16, 1)
    assert cutlass["dynamic_shared_memory"] == 43008 and cutlass["static_shared_memory"] == 0
    assert kernels["stream_id"].tolist() == [7, 7] and kernels["context"].tolist() == [1, 1]


# --- agreement with the ncu CSV reader ----------------------------------------------------------------------
def _number_text(value) -> str:
    return str(int(value)) if float(value) == int(value) else repr(float(value))


def raw_page_csv(path) -> bytes:
    """`ncu --csv --page raw` of the report, built from the package's metric values: identity columns, one
    column per metric, a units row with an empty ID, every field quoted, CRLF."""
    launches = package_launches(path)
    metrics = list(dict.fromkeys(m for a in launches for m in a.metric_names()))
    units = {}
    for action in launches:
        for metric in action.metric_names():
            units.setdefault(metric, action.metric_by_name(metric).unit())
    ident = ["ID", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC"]
    rows = [ident + metrics, [""] * len(ident) + [units[m] for m in metrics]]
    for i, a in enumerate(launches):

        def val(name):
            m = a.metric_by_name(name)
            if m is None or not m.has_value():
                return ""
            v = m.value()
            return v if isinstance(v, str) else _number_text(v)

        dims = {d: "(" + ", ".join(val(f"launch__{d}_dim_{x}") for x in "xyz") + ")" for d in ("block", "grid")}
        cc = f"{val('device__attribute_compute_capability_major')}.{val('device__attribute_compute_capability_minor')}"
        rows.append(
            [
                str(i),
                a.name(a.NameBase_DEMANGLED),
                val("launch__context_id"),
                val("launch__stream_id"),
                dims["block"],
                dims["grid"],
                val("launch__device_id"),
                cc,
            ]
            + [val(m) for m in metrics]
        )
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\r\n").writerows(rows)
    return buf.getvalue().encode()


def assert_same_tables(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for column in a.columns:
        x, y = a[column], b[column]
        if x.dtype.kind in "fiu" and y.dtype.kind in "fiu":
            np.testing.assert_allclose(x.to_numpy(float), y.to_numpy(float), rtol=1e-12, equal_nan=True, err_msg=column)
        else:
            assert (
                x.astype(object).where(x.notna(), None).tolist() == y.astype(object).where(y.notna(), None).tolist()
            ), column


@pytest.mark.parametrize("name", FILES)
def test_report_and_its_raw_csv_export_agree_column_by_column(name, tmp_path):
    path = real_file(f"{REAL}/{name}")
    exported = tmp_path / "raw.csv"
    exported.write_bytes(raw_page_csv(path))
    rep_out, rep = kernels_of(path)
    csv_out, from_csv = kernels_of(exported)
    assert csv_out.format == "ncu-csv" and rep_out.format == "ncu-rep"
    # every metric, the canonical columns (rank among them), context, cc, and the derived call-site and context
    # columns (launch_op, step, call_index, call_site; ctx_*)
    assert len(rep.columns) == 1220 + 31 + 21
    assert_same_tables(rep, from_csv)
    unit_note = [n for n in rep_out.notes if n.startswith("metric units")]
    assert unit_note == [n for n in csv_out.notes if n.startswith("metric units")]


def test_recorded_report_agrees_with_its_real_csv_export(tmp_path):
    """A run recorded on an H200 (tools/record_ncu/record.sh: one `ncu -o`, then `ncu --import --csv --page raw` of
    the same report; PROVENANCE.md): both readers give the same launches, shapes, resources, streams and durations.
    The kernel names are the one recorded difference: the API demangles in full (`at::native::reduce_kernel<(int)512,
    ...`) where the CLI's CSV prints templated names shorter (`at::reduce_kernel<512, ...`), 39 of the 46 launches;
    their short names agree, and so do the full names without namespace qualifiers and literal casts."""
    import lzma
    import re

    report = tmp_path / "report.ncu-rep"
    report.write_bytes(lzma.decompress((RECORDED_REP / "report.ncu-rep.xz").read_bytes()))  # 54 MB, xz: 2.4 MB
    _, rep = kernels_of(report)
    _, raw = kernels_of(RECORDED_REP / "raw.csv")
    assert len(rep) == len(raw) == 46
    for column in (
        "launch_id",
        "kernel_short_name",
        "grid_x",
        "grid_y",
        "block_x",
        "registers_per_thread",
        "lds_per_workgroup",
        "device_id",
        "stream_id",
        "duration",
    ):
        assert rep[column].tolist() == raw[column].tolist(), column

    def plain(name: str) -> str:
        name = re.sub(r"\((?:unsigned )?(?:int|long|bool|char|short)\)", "", name)
        return re.sub(r"\b[A-Za-z_]\w*::|<unnamed>::", "", name)

    assert [plain(n) for n in rep["kernel_name"]] == [plain(n) for n in raw["kernel_name"]]
    assert (rep["kernel_name"] != raw["kernel_name"]).sum() == 39


# --- detection and damage -----------------------------------------------------------------------------------
def test_detected_by_content_not_name(tmp_path):
    renamed = tmp_path / "profile.bin"
    renamed.write_bytes(real_file(f"{REAL}/report-s4.ncu-rep").read_bytes())
    assert detect(renamed).FORMAT == "ncu-rep"
    assert kernels_of(renamed)[1]["kernel_short_name"].tolist() == ["Kernel", "ReferenceGemm_kernel"]


@pytest.mark.parametrize("cut", [4, 1000, 900_000])
def test_truncated_report_is_a_one_line_error_with_clean_stderr(tmp_path, capfd, cut):
    damaged = tmp_path / "cut.ncu-rep"
    damaged.write_bytes(real_file(f"{REAL}/report-s4.ncu-rep").read_bytes()[:cut])
    with pytest.raises(InputError) as err:
        load(damaged)
    message = str(err.value)
    assert message.startswith(str(damaged)) and "\n" not in message
    assert "no kernel launches" in message or "none readable" in message
    assert capfd.readouterr().err == ""  # the package's parser log is captured, not printed


def test_damaged_launch_record_is_dropped_and_counted(tmp_path):
    data = bytearray(real_file(f"{REAL}/report-s4.ncu-rep").read_bytes())
    damaged = tmp_path / "flipped.ncu-rep"
    for seed in range(200):  # find flips that damage one launch record but not the other
        rnd = np.random.default_rng(seed)
        trial = bytearray(data)
        for pos in rnd.integers(64, len(trial), 3):
            trial[pos] ^= 0xFF
        damaged.write_bytes(bytes(trial))
        try:  # through the reader: the package may abort on damage, and only the reader isolates it
            report = ingest(damaged, tmp_path / "out")
        except InputError:
            continue
        if report["tables"]["kernels"]["rows_written"] == 1:
            break
    else:
        pytest.skip("no single-record damage found in 200 trials")
    table = report["tables"]["kernels"]
    assert table["rows_read"] == 2 and table["balanced"]
    assert table["dropped"] == {"launch record unreadable (damaged report)": 1}


def test_package_crash_is_a_one_line_error(tmp_path, monkeypatch):
    """The package aborts the interpreter on some damaged reports (found by fuzzing): the reader survives."""
    from gpuvar.ingest import ncu_rep

    crashing = tmp_path / "worker.py"
    crashing.write_text(
        'import os, sys\nsys.stderr.write("E0000 message_lite.cc:195] Can\'t parse message\\n")\n'
        "sys.stderr.flush()\nos.abort()\n"
    )
    monkeypatch.setattr(ncu_rep, "WORKER", crashing)
    with pytest.raises(InputError) as err:
        load(real_file(f"{REAL}/report-s4.ncu-rep"))
    message = str(err.value)
    assert "\n" not in message and "crashed reading the report (signal SIGABRT)" in message
    assert "Can't parse message" in message


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)
    with pytest.raises(InputError, match=r"pip install 'gpuvar\[ncurep\]'"):
        load(real_file(f"{REAL}/report-s4.ncu-rep"))


def test_magic_only_file_and_explicit_format_on_a_csv(tmp_path):
    magic = tmp_path / "magic.ncu-rep"
    magic.write_bytes(b"NVR\x00")
    with pytest.raises(InputError, match="no kernel launches"):
        load(magic)
    text = tmp_path / "not.ncu-rep"
    text.write_text("ID,Kernel Name\n0,k\n")
    with pytest.raises(InputError, match="not an Nsight Compute report"):
        load(text, "ncu-rep")


# --- .ncu-rep and CSV agreement (issue 22 item 11) --------------------------------------------------------
def test_real_h100_csv_occupancy_per_shared_mem_in_the_reports_unit():
    """The real H100 raw export prints derived__pct_occupancy_per_shared_mem_size as 2.234 '%/Kbyte'; the
    .ncu-rep of that run holds 2234 (in '%/byte', as other report readers list it). The CSV reader divided by
    1000 (0.002234, 10^6 from the report); now both give 2234 %/byte. Byte-per-block sizes are unchanged."""
    out, k = kernels_of(real_file("ncu-csv/h100-random-sizes-full/full_raw.csv.gz"))
    assert k["derived__pct_occupancy_per_shared_mem_size"].tolist()[:3] == [2234.0, 2234.0, 1591.0]
    assert k["launch__shared_mem_per_block"].tolist()[:2] == [1024.0, 1024.0]  # '1.024' Kbyte/block
    units = json.loads(next(n for n in out.notes if n.startswith("metric units")).split(": ", 1)[1])
    assert units["derived__pct_occupancy_per_shared_mem_size"] == "%/byte"


def test_empty_text_metric_is_null_as_in_the_csv():
    """launch__kernel_name: the report gives '' where ncu's CSV prints an empty field (read as null)."""
    values = pa.table({"launch__kernel_name": pa.array(["", "k", None], pa.string())})
    units = pa.table({"launch__kernel_name": pa.array(["", "", None], pa.string())})
    columns, _ = ncu_rep._metric_columns(values, units, ncu.ReaderOutput("ncu-rep", pd.DataFrame()))
    assert columns["launch__kernel_name"].tolist() == [None, "k", None]
