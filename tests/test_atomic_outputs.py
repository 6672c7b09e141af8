"""CLI outputs are all or nothing: a step that fails while writing (disk full, here injected at a fixed point)
leaves neither partial files nor temporary folders, and its one-line error names the output path."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuvar.atomic import staged_folder, staged_stem
from gpuvar.layout import OUTPUT_MARKER

# Runs the gpuvar CLI with one function replaced by a disk that fills up: the N-th call raises ENOSPC.
_DISK_FULL = """
import errno, importlib, os, sys
owner_name, attr, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
parts = owner_name.split(".")
for cut in range(len(parts), 0, -1):  # a module, or a class inside one (pandas.DataFrame)
    try:
        module = importlib.import_module(".".join(parts[:cut]))
        break
    except ModuleNotFoundError:
        continue
for part in parts[cut:]:
    module = getattr(module, part)
original, calls = getattr(module, attr), []
def full(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return original(*args, **kwargs)
setattr(module, attr, full)
from gpuvar.cli import main
sys.exit(main(sys.argv[4:]))
"""


def _disk_full(target: str, nth: int, *argv) -> subprocess.CompletedProcess:
    module, attr = target.rsplit(".", 1)
    return subprocess.run(
        [sys.executable, "-c", _DISK_FULL, module, attr, str(nth), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line_naming(proc, path: Path) -> None:
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if " error: " in line]  # besides INFO log lines
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    assert str(path) in errors[0] and "No space left on device" in errors[0], proc.stderr
    assert ".tmp-" not in proc.stderr, proc.stderr


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.ingest import ingest

    tmp = tmp_path_factory.mktemp("atomic")
    write_nsys_demo(tmp / "t.sqlite", 3000, 1, 0)
    ingest(tmp / "t.sqlite", tmp / "ingest")
    return tmp / "ingest"


@pytest.fixture(scope="module")
def binned(ingested, tmp_path_factory) -> Path:
    from gpuvar.cli import main

    out = tmp_path_factory.mktemp("bin") / "bin"
    assert (
        main(
            [
                "bin",
                str(ingested / "kernels.parquet"),
                "--memcpy",
                str(ingested / "memcpy.parquet"),
                "--bin-width",
                "2ms",
                "--top-k",
                "4",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.mark.timeout(120)
def test_bin_disk_full_on_the_report_leaves_no_tables(ingested, tmp_path):
    out = tmp_path / "bin"
    proc = _disk_full(
        "gpuvar.binning.job.write_json",
        1,
        "bin",
        ingested / "kernels.parquet",
        "--memcpy",
        ingested / "memcpy.parquet",
        "--bin-width",
        "2ms",
        "-o",
        out,
    )
    _one_line_naming(proc, out)
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())  # no bins.parquet without bin.json
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(120)
def test_bin_disk_full_on_a_table_names_the_output(ingested, tmp_path):
    out = tmp_path / "bin"
    # the disk fills on the 2nd table (topk_rows.parquet), after bins.parquet was written
    proc = _disk_full(
        "pyarrow.parquet.write_table", 2, "bin", ingested / "kernels.parquet", "--bin-width", "2ms", "-o", out
    )
    _one_line_naming(proc, out / "topk_rows.parquet")
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(120)
def test_causal_disk_full_mid_group_leaves_the_previous_result(binned, tmp_path, run_cli):
    out = tmp_path / "causal"
    args = [
        "causal",
        binned / "topk_rows.parquet",
        "--target",
        "kernel_variability",
        "--bootstrap",
        "0",
        "--min-rows",
        "5",
        "-o",
        out,
    ]
    assert run_cli(*args).returncode == 0
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    proc = _disk_full("pandas.DataFrame.to_csv", 3, *args)
    _one_line_naming(proc, out)
    after = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert after == before  # no 0-byte contributions.csv: the complete earlier result is untouched
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(120)
def test_plot_disk_full_leaves_no_figure_and_no_tmp_file(binned, tmp_path):
    stem = tmp_path / "figs" / "parallel"
    proc = _disk_full(
        "matplotlib.figure.Figure.savefig",
        2,
        "plot",
        "parallel",
        binned / "topk_rows.parquet",
        "--target",
        "kernel_variability",
        "--features",
        "grid_x,block_x",
        "-o",
        stem,
    )
    _one_line_naming(proc, stem.parent)
    assert sorted(p.name for p in stem.parent.iterdir()) == []  # not the SVG of the two formats, no .tmp-<pid>


def test_causal_of_empty_rows_is_a_recorded_skip(tmp_path, run_cli):
    """No row has the target (e.g. no kernel linked to a copy): a skip with bin.json's reason, exit 0."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tmp_path / "bin" / "topk_rows.parquet"
    rows.parent.mkdir()
    pq.write_table(pa.table({"memory_stall": pa.array([], pa.float64()), "bin": pa.array([], pa.int64())}), rows)
    (rows.parent / "bin.json").write_text(json.dumps({"empty_selection": "no kernel linked to a copy (7 of 7)"}))
    proc = run_cli("causal", rows, "--target", "memory_stall", "-o", tmp_path / "causal")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "causal" / "summary.json").read_text())
    assert summary["n_ok"] == 0 and summary["n_skipped"] == 1
    assert summary["skip_reason"] == "no rows: no kernel linked to a copy (7 of 7)"
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "causal").glob("*/causal.json")]
    assert record["status"] == "skipped" and record["rows_in"] == record["rows_used"] == 0
    plot = run_cli("plot", "causal", tmp_path / "causal", "-o", tmp_path / "graphs", "--formats", "svg")
    assert plot.returncode == 0, plot.stderr
    assert "no kernel linked to a copy" in (tmp_path / "graphs" / "index.csv").read_text()


def test_staged_folder_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out"
    (target / "stale_group").mkdir(parents=True)
    with pytest.raises(RuntimeError), staged_folder(target) as tmp:
        (tmp / "new").write_text("half")
        raise RuntimeError("failed mid-way")
    assert sorted(p.name for p in target.iterdir()) == ["stale_group"]  # untouched
    with staged_folder(target) as tmp:
        (tmp / "new").write_text("done")
    assert sorted(p.name for p in target.iterdir()) == ["new"]  # no stale entry survives
    assert _leftovers(tmp_path) == []


def test_staged_merge_moves_the_marker_last_and_stem_keeps_neighbours(tmp_path):
    target = tmp_path / "bin"
    target.mkdir()
    (target / "bin.json").write_text("old")
    (target / "unrelated.txt").write_text("keep")
    with pytest.raises(OSError), staged_folder(target, replace=False, last=("bin.json",)) as tmp:
        (tmp / "bins.parquet").write_text("new")
        raise OSError(28, "No space left on device", str(tmp / "bin.json"))
    assert (target / "bin.json").read_text() == "old" and not (target / "bins.parquet").exists()
    with staged_folder(target, replace=False, last=("bin.json",)) as tmp:
        (tmp / "bins.parquet").write_text("new")
        (tmp / "bin.json").write_text("new")
    assert {p.name: p.read_text() for p in target.iterdir()} == {
        "bin.json": "new",
        "bins.parquet": "new",
        "unrelated.txt": "keep",
    }
    with staged_stem(tmp_path / "figs" / "timeline") as stem:
        Path(f"{stem}.svg").write_text("svg")
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["timeline.svg"]


@pytest.mark.timeout(120)
def test_ingest_merge_disk_full_on_the_second_table_leaves_nothing(ingested, tmp_path):
    """Issue 22 item 8: kernels.parquet used to stay behind when memcpy.parquet (or ingest.json) could not be
    written. A previous merged result (and the per-rank ingests inside the output folder, the workflow's layout)
    stays as it was."""
    import shutil

    out = tmp_path / "merged"
    parts = [shutil.copytree(ingested, out / "ranks" / str(k)) for k in range(2)]
    # the k-way merge writes each table a row group at a time (ParquetWriter.write_table): kernels, then memcpy
    for nth, failing in ((2, "memcpy.parquet"), (3, "ingest.json")):
        target = (
            "pyarrow.parquet.ParquetWriter.write_table" if failing.endswith(".parquet") else "pathlib.Path.write_text"
        )
        proc = _disk_full(target, nth if failing.endswith(".parquet") else 1, "ingest-merge", *parts, "-o", out)
        _one_line_naming(proc, out)
        assert sorted(p.name for p in out.iterdir()) == ["ranks"], failing
        assert _leftovers(tmp_path) == []
    from gpuvar.cli import main

    assert main(["ingest-merge", *map(str, parts), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        OUTPUT_MARKER,
        "ingest.json",
        "kernels.parquet",
        "memcpy.parquet",
        "ranks",
    ]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o027], ids=["022", "002", "027"])
def test_staged_outputs_have_the_umask_mode_not_0700(tmp_path, umask):
    """Issue 22 item 8: a staged output folder kept mkdtemp's 0700, so group members could not read results."""
    old = os.umask(umask)
    try:
        with staged_folder(tmp_path / "whole") as tmp:
            (tmp / "group").mkdir()
        with staged_folder(tmp_path / "merged", replace=False) as tmp:
            (tmp / "group").mkdir()
        with staged_stem(tmp_path / "figs" / "timeline") as stem:
            Path(f"{stem}.svg").write_text("svg")
    finally:
        os.umask(old)
    for path in (tmp_path / "whole", tmp_path / "whole" / "group", tmp_path / "merged", tmp_path / "merged" / "group"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask, path
    assert stat.S_IMODE((tmp_path / "figs" / "timeline.svg").stat().st_mode) == 0o666 & ~umask


def test_compare_disk_full_on_its_page_leaves_the_previous_result(ingested, tmp_path, run_cli):
    """compare writes through the staging folder like every command: a failure after compare.json (here on
    compare.md) leaves the earlier complete comparison, not a new compare.json beside an old page."""
    out = tmp_path / "cmp"
    args = ["compare", ingested, ingested, "--names", "a,b", "--bootstrap", "100", "--formats", "png", "-o", out]
    assert run_cli(*args).returncode == 0, "the first comparison runs"
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert {"compare.json", "compare.md"} <= {str(p) for p, _ in before}
    proc = _disk_full("gpuvar.output.write_text", 2, *[a if a != "a,b" else "c,d" for a in args])
    _one_line_naming(proc, out)
    after = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert after == before
    assert _leftovers(tmp_path) == []
