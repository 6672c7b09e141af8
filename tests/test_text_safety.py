"""Names from a trace (kernels, launching ops, files) cannot inject Markdown structure into a page or escape
sequences into a terminal (issue 35, item 9). One module does it (gpuvar.text_safety), for every page and console
line outside the findings page (whose writer calls the same functions).

Before: a launching op named `aten::mm\\n# INJECTED` put a heading into ranks.md, `\\x1b[2J` reached the terminal
through an error line, and compare.md escaped `|` alone (a backtick or a newline in a kernel name broke its table)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from gpuvar.text_safety import md_code, md_text, plain

EVIL = "aten::mm\n# INJECTED `x` | *y* <b>\x1b[2J\x9b1m\u202eevil\u2028line\r"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_plain_is_one_printable_line_that_keeps_the_name_readable():
    text = plain(EVIL)
    assert "\n" not in text and not CONTROL.search(text)
    assert text.startswith("aten::mm\\n# INJECTED") and "\\x1b[2J" in text and "\\u202e" in text
    assert plain("void gemm<float, 128>(float const*) | ok") == "void gemm<float, 128>(float const*) | ok"


def test_md_code_is_one_code_span_in_a_table_cell():
    span = md_code("a`b``c|d\ne")
    assert span.startswith("```") and span.endswith("```") and "\n" not in span
    assert "\\|" in span and "|" not in span.replace("\\|", "")


def test_md_text_cannot_start_a_heading_list_link_or_tag():
    assert md_text("# h [l](u) <b> *e* _u_ `c` |p| &lt;") == r"\# h \[l\](u) \<b\> \*e\* \_u\_ \`c\` \|p\| \&lt;"


def _planted_with_op(tmp_path, op: str):
    from gpuvar.ranks.planted import write_planted

    folders, _ = write_planted(tmp_path / "job", steps=30, seed=3)
    for folder in folders:
        kernels = pd.read_parquet(folder / "kernels.parquet")
        kernels["launch_op"] = kernels["launch_op"].replace("aten::mm", op)
        kernels.to_parquet(folder / "kernels.parquet", index=False)
    return folders


def _structure(page: str) -> list[str]:
    return [line for line in page.splitlines() if re.match(r"\s*(#|<|\|)", line)]


def test_reproducer_ranks_page_with_an_op_name_that_injects(tmp_path):
    from gpuvar.cli import main

    folders = _planted_with_op(tmp_path, EVIL)
    clean = _planted_with_op(tmp_path / "clean", "aten::mm")
    assert main(["ranks", *map(str, folders), "-o", str(tmp_path / "out")]) == 0
    assert main(["ranks", *map(str, clean), "-o", str(tmp_path / "clean_out")]) == 0
    page = (tmp_path / "out" / "ranks.md").read_text()
    assert not CONTROL.search(page) and "\n# INJECTED" not in page
    assert len(_structure(page)) == len(_structure((tmp_path / "clean_out" / "ranks.md").read_text()))
    assert "INJECTED" in page, "the name is still shown"


def test_reproducer_compare_page_with_a_kernel_name_that_injects(tmp_path):
    from gpuvar.compare.page import render

    row = {
        "label": EVIL,
        "verdict": "slower",
        "ratio": 1.1,
        "ci_low": 1.05,
        "ci_high": 1.15,
        "delta_total_ns": 1e6,
        "delta_count_ns": 0,
        "hint": "a hint",
    }
    side = {"name": "base\n# x", "total_ns": 1e9, "environment": {"resampling": {"unit": "step"}}}
    summary = dict.fromkeys(("slower", "faster", "negligible", "unchanged", "untested", "added", "removed"), 0)
    record = {
        "baseline": side,
        "candidate": dict(side, name="cand"),
        "summary": {**summary, "total_time_ratio": 1.1, "delta_total_ns": 1e8},
        "warnings": [f"kernel {EVIL} only in one run"],
        "options": {"min_effect": 0.02},
        "kernels": [row],
    }
    page = render(record)
    assert not CONTROL.search(page)
    assert [line for line in page.splitlines() if line.startswith("#")] == [page.splitlines()[0]]
    table = [line for line in page.splitlines() if line.startswith("| 1 |")]
    assert len(table) == 1 and len(re.findall(r"(?<!\\)\|", table[0])) == 8, table  # 7 cells: 8 unescaped |


@pytest.mark.parametrize("name", ["bad\x1b[2Jname.json", "two\nlines.json"])
def test_an_error_line_naming_a_hostile_file_is_one_printable_line(tmp_path, run_cli, name):
    proc = run_cli("ingest", tmp_path / name, "-o", tmp_path / "out")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert not CONTROL.search(lines[0])
