"""`gpuvar bin` in bounded memory (issue 38): every pass reads a rank's share a batch at a time, the general path
keeps its rows in a spill and computes the bins by rounds, and the top-k rows come from a third pass over only the
row groups that hold them; the sorted path's bins pass takes what the scan kept of a batch, up to a byte limit, and
reads the rest again. With the batch, round, spill-read and row-pass sizes forced tiny, the outputs are the
bytes of the default run (one batch per row group here), on the sorted path (with the copy link streamed beside
the kernels), the general path (a shuffled file, several files), and with copies out of start order (the link
from held copies); and each rank reports holding about a batch and a bin (`rows_held_per_rank`), not its share.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuvar.binning import kept, read, rows, running, spill

MPIEXEC = Path(sys.executable).with_name("mpiexec")
SMALL = {(read, "BATCH_ROWS"): 300, (spill, "ROUND_ROWS"): 2000, (spill, "READ_ROWS"): 250, (rows, "TAKE_ROWS"): 128}
SMALL[kept, "HOLD_BYTES"] = 0  # the scan keeps no row for the bins pass: it reads the share again (the default
# runs keep every row: the two paths give the same bytes)
TABLES = ("bins.parquet", "topk_rows.parquet", "sample_rows.parquet")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 40 000-row demo trace in 4 096-row groups, the same rows shuffled, in four rank files, and its copies
    shuffled."""
    from gpuvar.demo.canonical_writer import write_canonical_demo

    root = tmp_path_factory.mktemp("bounded")
    write_canonical_demo(root, 40_000, seed=5, workers=1, chunk_rows=4096)
    table = pq.read_table(root / "kernels.parquet")
    rng = np.random.default_rng(0)
    pq.write_table(table.take(rng.permutation(table.num_rows)), root / "shuffled.parquet", row_group_size=5000)
    frame = table.to_pandas()
    for r in range(4):  # each rank's rows in start order, the ranks interleaved on one timeline
        frame.iloc[r::4].assign(rank=r).to_parquet(root / f"rank{r}.parquet", index=False, row_group_size=1024)
    copies = pq.read_table(root / "memcpy.parquet")
    pq.write_table(copies.take(rng.permutation(copies.num_rows)), root / "copies_shuffled.parquet", row_group_size=3000)
    return root


CASES = {
    "sorted, copies streamed": (
        ["kernels.parquet", "--memcpy", "memcpy.parquet", "--target", "memory_stall"],
        ["--features", "grid_x,duration,linked_copy_bytes", "--bin-width", "1ms"],
    ),
    "general path, shuffled file": (["shuffled.parquet"], ["--features", "grid_x,duration", "--bin-width", "1ms"]),
    "general path, four files": ([f"rank{r}.parquet" for r in range(4)], ["--bin-width", "1ms"]),
    "copies out of start order": (
        ["kernels.parquet", "--memcpy", "copies_shuffled.parquet"],
        ["--features", "auto", "--bin-width", "2ms"],
    ),
}


def _args(root: Path, case: str, out: Path) -> list[str]:
    files, options = CASES[case]
    named = [str(root / f) if f.endswith(".parquet") else f for f in files]
    return ["bin", *named, *options, "--top-k", "4", "--sample-bins", "3", "--output", str(out)]


def _in_process(argv: list[str]) -> None:
    from gpuvar.cli import main

    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    assert code == 0, err.getvalue()


def _largest_bin(root: Path, case: str, width: int) -> int:
    """Rows (with a target or not) of the trace's fullest bin."""
    files = [root / f for f in CASES[case][0] if f.endswith(".parquet") and "memcpy" not in f and "copies" not in f]
    start = pd.concat([pd.read_parquet(f, columns=["start"]) for f in files])["start"]
    return int(((start - start.min()) // width).value_counts().max())


@pytest.mark.parametrize("case", list(CASES))
def test_tiny_batches_give_the_same_bytes_and_hold_a_batch_and_a_bin(data, tmp_path, monkeypatch, case):
    _in_process(_args(data, case, tmp_path / "default"))
    for (module, name), value in SMALL.items():
        monkeypatch.setattr(module, name, value)
    spilled = []
    to_files = spill.Spill._to_files
    monkeypatch.setattr(spill.Spill, "_to_files", lambda self: spilled.append(1) or to_files(self))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    _in_process(_args(data, case, tmp_path / "small"))
    for name in TABLES:
        assert (tmp_path / "small" / name).read_bytes() == (tmp_path / "default" / name).read_bytes(), name
    report = json.loads((tmp_path / "small" / "bin.json").read_text())
    default = json.loads((tmp_path / "default" / "bin.json").read_text())
    assert report["top_k_rows"] > 0 and report["random_sample_rows"] > 0
    held, rows_in = report["rows_held_per_rank"][0], report["rows_in"]
    assert default["rows_held_per_rank"][0] >= 4096  # a whole row group at once by default
    largest = _largest_bin(data, case, report["bin_width"])
    if case.startswith("general"):  # a batch and a round (the spill's rows in memory), or one whole bin
        assert spilled and held <= max(SMALL[read, "BATCH_ROWS"] + SMALL[spill, "ROUND_ROWS"], largest), held
    else:  # a batch, the bin still being read and the finished bins waiting for their statistics, or a batch of
        # copies and those of a batch's time span (all of them when the copies are out of start order)
        assert not spilled
        bound = (running.STATS_BATCHES + 2) * SMALL[read, "BATCH_ROWS"] + largest
        assert held <= (bound if "streamed" in case else rows_in), (held, bound)
    if "out of start order" in case:  # the copies met out of order: the link from the copies held, not streamed
        assert held >= pq.read_metadata(data / "memcpy.parquet").num_rows // 2, held
    else:
        assert held < rows_in / 10, held
    assert list(scratch.iterdir()) == [], "the spill files are removed"


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["sorted, copies streamed", "general path, four files"])
def test_tiny_batches_under_mpi_give_the_same_bytes(data, tmp_path, case):
    """Two and three ranks with tiny batches and rounds: the bins given to the rank before (sorted path), the
    rounds exchanged by Alltoallv (general path), the row groups of the top-k rows spread over the ranks."""
    _in_process(_args(data, case, tmp_path / "one"))
    prelude = "import gpuvar.binning.read as read, gpuvar.binning.spill as spill, gpuvar.binning.rows as rows\n"
    prelude += "import gpuvar.binning.kept as kept\n"
    prelude += "".join(f"{m.__name__.rsplit('.', 1)[1]}.{n} = {v}\n" for (m, n), v in SMALL.items())
    script = f"import sys\n{prelude}from gpuvar.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    for ranks in (2, 3):
        out = tmp_path / f"r{ranks}"
        cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-c", script, *_args(data, case, out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ.copy())
        assert proc.returncode == 0, proc.stderr
        for name in TABLES:
            assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), (ranks, name)
        report = json.loads((out / "bin.json").read_text())
        assert len(report["rows_held_per_rank"]) == ranks
        assert max(report["rows_held_per_rank"]) < min(report["rows_in_per_rank"]) / 2, report["rows_held_per_rank"]


@pytest.mark.parametrize("limit", ["some row groups", "none: no statistics", "none: a timestamp axis"])
def test_rows_kept_for_the_bins_pass_give_the_same_bytes_and_stay_below_the_limit(data, tmp_path, monkeypatch, limit):
    """The sorted path's bins pass reads kept row groups from memory and the others from the file: the bytes of a
    run that reads every row group again, and of one that keeps them all. A kept row group is whole, and the
    bytes kept stay below HOLD_BYTES. Without the axis statistics, or with a timestamp axis (no timeline origin
    before the scan), nothing is kept."""
    args = ["bin", "--features", "auto", "--bin-width", "1ms", "--top-k", "4", "--sample-bins", "3"]
    source = data / "kernels.parquet"
    if limit.startswith("none"):
        source = tmp_path / "unkept.parquet"
        table = pq.read_table(data / "kernels.parquet")
        if "timestamp" in limit:  # (its statistics are datetimes: no origin, whatever the values)
            start = table.schema.get_field_index("start")
            table = table.set_column(start, "start", table.column("start").cast(pa.timestamp("ns")))
        pq.write_table(table, source, row_group_size=4096, write_statistics="timestamp" in limit)
    monkeypatch.setattr(kept, "HOLD_BYTES", 0)
    _in_process([*args, str(source), "--output", str(tmp_path / "reread")])
    monkeypatch.undo()
    _in_process([*args, str(source), "--output", str(tmp_path / "all")])
    per_group = 4096 * 6  # a 4096-row group kept: ~5 bytes a row and its bin runs
    seen = []
    real = kept.Kept.pass_batches

    def spy(self, *a, **kw):
        for b, runs in real(self, *a, **kw):
            seen.append((b.group, runs is not None, self.nbytes))
            yield b, runs

    monkeypatch.setattr(kept.Kept, "pass_batches", spy)
    monkeypatch.setattr(kept, "HOLD_BYTES", 3 * per_group)
    _in_process([*args, str(source), "--output", str(tmp_path / "some")])
    for name in TABLES:
        reread = (tmp_path / "reread" / name).read_bytes()
        assert (tmp_path / "all" / name).read_bytes() == reread, name
        assert (tmp_path / "some" / name).read_bytes() == reread, name
    by_group = {}
    for group, from_memory, _ in seen:
        by_group.setdefault(group, set()).add(from_memory)
    if limit.startswith("none"):
        assert seen == []  # nothing kept: the pass read the file as before
        return
    assert all(len(ways) == 1 for ways in by_group.values()), by_group  # a row group is kept whole or not at all
    from_memory = [g for g, ways in by_group.items() if True in ways]
    assert 0 < len(from_memory) < len(by_group), by_group
    assert from_memory == sorted(by_group)[: len(from_memory)]  # the first row groups, until the limit
    assert max(n for _, _, n in seen) <= 3 * per_group
