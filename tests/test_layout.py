"""One layout, one writer (issue 39): every output file name is spelled in gpuvar/layout.py only, and only
gpuvar/output.py (files) and gpuvar/atomic.py (folders) move a finished file into place.

Why a test: a name spelled twice drifts (the writer renames a file, the reader or the rule still asks for the old
one, and the run fails late or reads nothing); a second temp-and-rename writer skips the cleanup or the one-line
error of the first. The checks read the source (AST for Python, quoted strings for the rule files), so they hold
for code no test runs.
"""

from __future__ import annotations

import ast
import re

import pytest
from conftest import REPO

import gpuvar.layout as layout

SRC = REPO / "src" / "gpuvar"
OUTPUT_SUFFIX = re.compile(r"\.(parquet|json|csv|tsv|md|html|graphml|png|svg)$")

# Names that are not gpuvar's outputs: the files a profiler writes (read by the readers, written by the demo's
# generators of planted profiler files), the truth files beside a recording, and the package's own data files.
NOT_OUTPUTS = {
    "results.csv": "rocprof v1 kernel trace (input)",
    "kernel_trace.csv": "rocprofv3 kernel trace (input)",
    "pmc_perf.csv": "Omniperf counters (input)",
    "sysinfo.csv": "Omniperf system info (input)",
    "pass1.csv": "a rocprof counter pass written by the planted generator (input)",
    "pass2.csv": "a rocprof counter pass written by the planted generator (input)",
    "truth.csv": "a recording's designed cause (input, GUIDE §8)",
    "truth.json": "a planted generator's truth (input to the tests)",
    "canonical_schema.csv": "package data",
    "table1.csv": "package data",
    "data/feature_roles.csv": "package data",
    "options.json": "package data (written by python -m gpuvar.options)",
    "polars-stats.parquet": "the binning bench's scratch file of the polars reference",
}


def output_names() -> set[str]:
    """Every file name gpuvar.layout defines: its string constants (and tuples of them) that end like a file."""
    names = set()
    for value in vars(layout).values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, str) and OUTPUT_SUFFIX.search(item) and "/" not in item and "{" not in item:
                names.add(item)
            if isinstance(item, str) and item.endswith(".gz"):
                names.add(item)
    return names


def _strings(tree: ast.AST):
    """Every string constant with its line, the literal parts of f-strings included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def spelled_names(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each string that spells an output file name, or any name ending like an output that is
    not in NOT_OUTPUTS (a new output spelled where it is used)."""
    found = []
    for line, text in _strings(ast.parse(source)):
        if " " in text or len(text) > 80:
            continue  # a message or a docstring, not a path
        base = text.rsplit("/", 1)[-1]
        if base in names or (OUTPUT_SUFFIX.search(text) and base not in NOT_OUTPUTS and text not in NOT_OUTPUTS):
            if not text.startswith((".", "*", "{")):  # a suffix test (".csv"), a glob or a report pattern
                found.append((line, text))
    return found


def test_layout_defines_the_stage_files():
    names = output_names()
    assert {"kernels.parquet", "bin.json", "edges.csv", "findings.json", "compare.md", "ranks.json"} <= names
    assert len(names) >= 35


def test_no_module_outside_layout_spells_an_output_file_name():
    names = output_names()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "layout.py":
            continue
        found += [f"{path.relative_to(REPO)}:{line}: {text!r}" for line, text in spelled_names(path.read_text(), names)]
    assert not found, "spell these through gpuvar.layout:\n" + "\n".join(found)


def test_no_rule_spells_an_output_file_name():
    """The rules name outputs through `files` (gpuvar.layout); logs and benchmarks are Snakemake's own."""
    names = output_names()
    found = []
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for text in re.findall(r"\"([^\"]*)\"", code):
                base = text.rsplit("/", 1)[-1]
                if text.startswith(("logs/", "benchmarks/", "../report/")) or text.startswith("{"):
                    continue
                if base in names or OUTPUT_SUFFIX.search(text):
                    found.append(f"{path.name}:{number}: {text}")
    assert not found, found


@pytest.mark.parametrize(
    "snippet",
    ['path = folder / "kernels.parquet"\n', 'name = f"{stem}/edges.csv"\n', 'x = out / "new_table.csv"\n'],
)
def test_the_check_catches_a_name_spelled_in_place(snippet):
    """The check is not vacuous: a known name, one inside an f-string, and a new output name are each caught."""
    assert spelled_names(snippet, output_names())


def _renames(source: str) -> list[int]:
    """Lines that move a file into place: os.replace / os.rename / shutil.move, or <tmp>.replace(path)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in {
            ("os", "replace"),
            ("os", "rename"),
            ("shutil", "move"),
        }:
            lines.append(node.lineno)
        elif node.func.attr in ("replace", "rename") and isinstance(owner, ast.Name) and "tmp" in owner.id:
            lines.append(node.lineno)
    return lines


def test_only_the_writers_move_files_into_place():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("output.py", "atomic.py"):
            continue
        found += [f"{path.relative_to(REPO)}:{line}" for line in _renames(path.read_text())]
    assert not found, "write through gpuvar.output.replacing:\n" + "\n".join(found)
    assert _renames("import os\nos.replace(tmp, path)\n") and _renames("tmp.replace(path)\n")


def test_replacing_leaves_the_old_file_and_no_temporary_when_the_write_fails(tmp_path):
    from gpuvar.output import replacing

    target = tmp_path / "table.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]
    with replacing(target) as tmp:
        tmp.write_text("new\n")
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]
