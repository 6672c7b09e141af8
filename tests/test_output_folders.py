"""An output folder (`-o`) is never a user's folder (issue 35, item 1): every command writes one only where it is
absent, empty, or a previous output of the same command (the marker file names the command); anything else is one
line and exit 2, with the folder and its files as they were. An `-o` equal to or containing an input is refused.

Before: `gpuvar compare a b -o Documents` removed Documents/thesis/t.tex (exit 0), `-o a` removed the baseline's
kernels.parquet, `gpuvar causal a/... -o .` was a ValueError traceback."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpuvar.layout import OUTPUT_MARKER

UNRELATED = "thesis.tex"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The demo (small), both pair runs ingested, the baseline binned, its causal graphs, its findings, a raw read."""
    from gpuvar.cli import main

    root = tmp_path_factory.mktemp("outputs")
    steps = [
        ["demo-data", "-o", root / "demo", "--seed", "1", "--rows", "4000"],
        ["ingest", root / "demo" / "pair_baseline.sqlite", "-o", root / "a"],
        ["ingest", root / "demo" / "pair_candidate.sqlite", "-o", root / "b"],
        ["read", root / "demo" / "pair_baseline.sqlite", "-o", root / "raw"],
        ["bin", root / "a" / "kernels.parquet", "--memcpy", root / "a" / "memcpy.parquet"]
        + ["--target", "kernel_variability", "--top-k", "5", "-o", root / "abin"],
        ["causal", root / "abin" / "topk_rows.parquet", "--target", "kernel_variability", "--bootstrap", "0"]
        + ["-o", root / "acausal"],
        ["findings", root / "a", "-o", root / "afind"],
    ]
    for argv in steps:
        assert main([str(a) for a in argv]) == 0, argv
    return root


def commands(w: Path) -> dict[str, list]:
    """Every command that takes -o, with inputs from `work` and OUT where the output goes."""
    kineto = [w / "demo" / "kineto_rank0.json.gz", w / "demo" / "kineto_rank1.json.gz"]
    return {
        "ingest": ["ingest", w / "demo" / "pair_baseline.sqlite"],
        "read": ["read", w / "demo" / "pair_baseline.sqlite"],
        "normalize": ["normalize", w / "raw"],
        "ingest-merge": ["ingest-merge", w / "a", w / "b"],
        "demo-data": ["demo-data", "--format", "pair", "--rows", "1000"],
        "split-kineto": ["split-kineto", kineto[0]],
        "bin": ["bin", w / "a" / "kernels.parquet", "--memcpy", w / "a" / "memcpy.parquet", "--top-k", "5"],
        "causal": ["causal", w / "abin" / "topk_rows.parquet", "--target", "kernel_variability", "--bootstrap", "0"],
        "causal-checks": ["causal-checks", w / "acausal"],
        "plot": ["plot", "causal", w / "acausal"],
        "findings": ["findings", w / "a"],
        "findings --combine": ["findings", "--combine", w / "afind" / "findings.json"],
        "explain": ["explain", w / "demo" / "pair_baseline.sqlite", "--no-causal"],
        "ranks": ["ranks", "--traces", *kineto],
        "compare": ["compare", w / "a", w / "b", "--bootstrap", "100"],
        "verify": ["verify", w / "afind", w / "b"],
    }


FILE_OUTPUTS = {"causal-checks"}  # -o is a file: a folder there cannot be written, and is left alone


def _commands_taking_output() -> set[str]:
    from gpuvar.cli import SUBCOMMANDS, build_parser

    def takes_output(parser) -> bool:  # its own options, or those of a subcommand (`gpuvar plot causal`)
        return any(
            "-o" in action.option_strings
            or isinstance(action, argparse._SubParsersAction)
            and any(map(takes_output, action.choices.values()))
            for action in parser._actions
        )

    found = set()
    for name in SUBCOMMANDS:
        sub = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
        if takes_output(sub.choices[name]):
            found.add(name)
    return found


def test_the_list_below_covers_every_command_with_an_output():
    assert {k.split()[0] for k in commands(Path("w"))} == _commands_taking_output()


def _one_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("name", list(commands(Path("w"))))
def test_every_command_leaves_a_folder_with_an_unrelated_file_alone(work, tmp_path, run_cli, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / UNRELATED).write_text("work\n")
    proc = run_cli(*commands(work)[name], "-o", out)
    assert proc.returncode == 2, proc.stderr
    assert (out / UNRELATED).read_text() == "work\n"
    if name not in FILE_OUTPUTS:
        line = _one_line(proc)
        assert str(out) in line and "not empty" in line, line
        assert sorted(p.name for p in out.iterdir()) == [UNRELATED]
    assert not [p for p in tmp_path.iterdir() if p.name != "mine"], "no staging folder or lock left"


@pytest.mark.parametrize("name", [n for n in commands(Path("w")) if n not in FILE_OUTPUTS])
def test_every_command_reruns_into_its_own_previous_output(work, tmp_path, run_cli, name):
    """What the workflow and a user rerunning a command rely on; and another command may not take that folder."""
    out = tmp_path / "out"
    for _ in range(2):
        proc = run_cli(*commands(work)[name], "-o", out)
        assert proc.returncode == 0, proc.stderr
        assert json.loads((out / OUTPUT_MARKER).read_text())["command"] == name.split()[0]
    other = "compare" if name != "compare" else "ingest"
    line = _one_line(run_cli(*commands(work)[other], "-o", out))
    assert f"gpuvar {name.split()[0]}" in line, line


def test_an_empty_folder_or_one_holding_only_a_marker_is_taken(work, tmp_path, run_cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(*commands(work)["compare"], "-o", empty).returncode == 0
    only_marker = tmp_path / "marker"
    only_marker.mkdir()
    (only_marker / OUTPUT_MARKER).write_text('{"command": "ingest"}\n')  # left by an ingest killed at its start
    assert run_cli(*commands(work)["compare"], "-o", only_marker).returncode == 0


def test_reproducer_compare_into_documents(work, tmp_path, run_cli):
    documents = tmp_path / "Documents"
    (documents / "thesis").mkdir(parents=True)
    (documents / "thesis" / "t.tex").write_text("work\n")
    line = _one_line(run_cli("compare", work / "a", work / "b", "-o", documents))
    assert str(documents) in line
    assert (documents / "thesis" / "t.tex").read_text() == "work\n"


def test_reproducer_compare_into_its_own_input(work, tmp_path, run_cli):
    import shutil

    a = shutil.copytree(work / "a", tmp_path / "a")
    before = sorted(p.name for p in a.iterdir())
    line = _one_line(run_cli("compare", a, work / "b", "-o", a))
    assert "input" in line and str(a) in line, line
    assert sorted(p.name for p in a.iterdir()) == before


def test_reproducer_causal_into_the_folder_of_its_rows(work, tmp_path, run_cli):
    import shutil

    abin = shutil.copytree(work / "abin", tmp_path / "abin")
    before = sorted(p.name for p in abin.iterdir())
    line = _one_line(run_cli("causal", "topk_rows.parquet", "--target", "kernel_variability", "-o", ".", cwd=abin))
    assert "input" in line, line
    assert sorted(p.name for p in abin.iterdir()) == before


def test_an_output_containing_an_input_is_refused_where_it_is_replaced_whole(work, tmp_path, run_cli):
    """Even a previous output of the same command: replacing it would remove the input inside it."""
    import shutil

    out = tmp_path / "out"
    assert run_cli(*commands(work)["compare"], "-o", out).returncode == 0
    inside = shutil.copytree(work / "a", out / "a")
    line = _one_line(run_cli("compare", inside, work / "b", "-o", out))
    assert "input" in line, line
    assert (inside / "kernels.parquet").is_file()


def test_a_command_that_adds_files_may_write_beside_its_input(work, tmp_path, run_cli):
    """`gpuvar normalize results/ingest/D/raw -o results/ingest/D` (the workflow's layout): the tables go beside the
    raw folder, which stays; the folder holds nothing else, so it counts as empty."""
    import shutil

    out = tmp_path / "D"
    raw = shutil.copytree(work / "raw", out / "raw")
    assert run_cli("normalize", raw, "-o", out).returncode == 0, "first run"
    assert run_cli("normalize", raw, "-o", out).returncode == 0, "rerun"
    assert (raw / "raw.json").is_file() and (out / "kernels.parquet").is_file()
    line = _one_line(run_cli("normalize", raw, "-o", raw))
    assert "input" in line, line


def test_ingest_and_its_two_steps_write_the_same_folder(work, tmp_path, run_cli):
    """`gpuvar ingest` and `gpuvar read` + `gpuvar normalize` make the same canonical tables (the README runs both
    into out/ingest): each may rewrite the other's output."""
    out = tmp_path / "ingest"
    assert run_cli(*commands(work)["ingest"], "-o", out).returncode == 0
    assert run_cli("normalize", work / "raw", "-o", out).returncode == 0
    assert run_cli(*commands(work)["ingest"], "-o", out).returncode == 0


def test_a_file_output_that_is_a_folder_is_refused_before_the_work(tmp_path, monkeypatch):
    """`gpuvar demo-data --format nsys -o FOLDER` writes one file: a folder there is one line before any row is
    generated (it was refused only at the rename, 79 s into a 20 M-launch export), and the folder stays."""
    from gpuvar.demo import nsys_writer
    from gpuvar.errors import StageError

    folder = tmp_path / "d20"
    folder.mkdir()
    (folder / UNRELATED).write_text("mine")
    monkeypatch.setattr(nsys_writer, "_in_start_order", lambda *a, **k: pytest.fail("generated rows first"))
    with pytest.raises(StageError, match="it is a folder"):
        nsys_writer.write_nsys_demo(folder, 1_000, 0, 0)
    assert [p.name for p in folder.iterdir()] == [UNRELATED]
