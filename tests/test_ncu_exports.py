"""Nsight Compute details exports: every launch of concatenated exports, and the 2025 page re-saved by a tool that
fills every field (issue 35, item 6).

Before: two exports concatenated (launch IDs restart at 0) kept 300 of 600 launches with exit 0, rows_read 300
and the loss only in a note; the ncu 2025.3 details page re-saved with all 20 fields on every row (pandas, a
spreadsheet) was refused as "no data rows", every metric row taken for a rule finding."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd
import pytest
from test_ingest_ncu import kernels_of, write_details_2025

from gpuvar.demo.ncu_writer import write_ncu_demo
from gpuvar.ingest import ingest

LAUNCHES = 300


def _concatenated(tmp_path: Path, kind: str) -> tuple[Path, list[Path]]:
    parts = []
    for seed in (1, 2):
        part = tmp_path / f"part{seed}.csv"
        if kind == "details-2025":
            write_details_2025(part, LAUNCHES, seed=seed)
        else:
            write_ncu_demo(part, LAUNCHES, seed=seed if kind == "two runs" else 1, layout="long")
        parts.append(part)
    both = tmp_path / "both.csv"
    both.write_bytes(parts[0].read_bytes() + parts[1].read_bytes())
    return both, parts


@pytest.mark.parametrize("kind", ["two runs", "one run twice", "details-2025"])
def test_reproducer_two_exports_concatenated_keep_every_launch(tmp_path, kind):
    both, parts = _concatenated(tmp_path, kind)
    out, k = kernels_of(both)
    firsts = [kernels_of(p)[1] for p in parts]
    assert len(k) == 2 * LAUNCHES, out.notes
    assert sorted(k["duration"]) == sorted(pd.concat([f["duration"] for f in firsts]))
    assert k["launch_id"].is_unique and k["launch_id"].is_monotonic_increasing
    assert list(k["kernel_name"]) == list(firsts[0]["kernel_name"]) + list(firsts[1]["kernel_name"])
    assert any("2 exports" in n for n in out.notes), out.notes
    report = ingest(both, tmp_path / "out")["tables"]["kernels"]
    assert report["balanced"] and report["rows_written"] == 2 * LAUNCHES
    assert report["rows_read"] == 2 * LAUNCHES + 1 and report["dropped"] == {
        "repeated header row (concatenated files)": 1
    }


def _resaved(path: Path, target: Path) -> None:
    """The file as pandas or a spreadsheet writes it back: the header, then every row with all header fields (the
    profiler's ==PROF== lines are not CSV rows: gone)."""
    text = path.read_bytes().decode("utf-8-sig")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("==")]
    width = len(rows[0])
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows(r + [""] * (width - len(r)) for r in rows if r)
    target.write_text(buffer.getvalue(), encoding="utf-8")


def test_reproducer_details_2025_resaved_with_every_field(tmp_path):
    original = tmp_path / "details.csv"
    write_details_2025(original, 60, seed=4)
    resaved = tmp_path / "resaved.csv"
    _resaved(original, resaved)
    assert {len(r) for r in csv.reader(io.StringIO(resaved.read_text()))} == {20}
    out, k = kernels_of(resaved)
    _, expected = kernels_of(original)
    pd.testing.assert_frame_equal(k, expected)
    assert any("120 rule-finding row(s)" in n for n in out.notes), out.notes


def test_a_row_with_every_field_and_no_rule_name_is_a_metric_row(tmp_path):
    """In the file as ncu writes it, one metric row padded to 20 fields (an edit in a spreadsheet): kept as a metric."""
    original = tmp_path / "details.csv"
    write_details_2025(original, 20, seed=4)
    lines = original.read_bytes().decode("utf-8-sig").split("\r\n")
    at = next(i for i, line in enumerate(lines) if '"gpu__time_duration.sum"' in line)
    lines[at] += ',"","","",""'
    edited = tmp_path / "edited.csv"
    edited.write_bytes(("\ufeff" + "\r\n".join(lines)).encode())
    _, k = kernels_of(edited)
    _, expected = kernels_of(original)
    pd.testing.assert_frame_equal(k, expected)
