"""The binning job: statistics equal pandas, row accounting, link rule end to end, timeline-less data,
byte-identical outputs for any rank count, a failing rank stops the job promptly, bad input is one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from gpuvar.binning.cli import workflow_arguments
from gpuvar.binning.partition import bin_owners, bin_width, row_groups_for_rank
from gpuvar.binning.stats import bin_stats, bin_stats_at, bin_stats_parallel
from gpuvar.canonical_io import write_canonical
from gpuvar.config import read_yaml_mapping, validate_config
from gpuvar.errors import GpuvarError
from gpuvar.schema import finalize_kernels, finalize_memcpy

MPIEXEC = Path(sys.executable).with_name("mpiexec")
GPUVAR = [sys.executable, "-m", "gpuvar.cli"]
STATS = ["count", "min", "max", "mean", "var", "std", "q25", "median", "q75"]


def pandas_reference(values, bins) -> pd.DataFrame:
    g = pd.Series(values).groupby(np.asarray(bins))
    ref = g.agg(["count", "min", "max", "mean", "var", "std"])
    for name, q in (("q25", 0.25), ("median", 0.5), ("q75", 0.75)):
        ref[name] = g.quantile(q)
    return ref


def assert_close(got: pd.DataFrame, ref: pd.DataFrame, scale=None):
    """Equal to 1e-9 relative (scale: per-bin magnitude of the values, for means near zero)."""
    assert list(got.index) == list(ref.index)
    np.testing.assert_array_equal(got["count"], ref["count"])
    np.testing.assert_array_equal(got["min"], ref["min"])
    np.testing.assert_array_equal(got["max"], ref["max"])
    for s in ("mean", "var", "std", "q25", "median", "q75"):
        a, b = got[s].to_numpy(float), ref[s].to_numpy(float)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        tol = 1e-9 * np.maximum(np.abs(b), 0 if scale is None else scale)
        ok = np.isnan(b) | (np.abs(a - b) <= tol)
        assert ok.all(), (s, a[~ok][:5], b[~ok][:5])


def test_bin_stats_equal_pandas():
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 40, size=300)
    counts[:5] = 1  # single-row bins: var/std NaN like pandas
    bins = np.repeat(np.sort(rng.choice(10_000, size=300, replace=False)), counts)
    values = 1e9 + rng.exponential(1e4, size=len(bins))  # large offset: a one-pass variance would fail
    got = pd.DataFrame(bin_stats(values, bins)).set_index("bin")
    assert_close(got, pandas_reference(values, bins))


def test_bin_stats_split_over_workers_is_identical():
    rng = np.random.default_rng(4)
    bins = np.sort(rng.integers(0, 500, size=20_000))
    values = rng.normal(size=len(bins))
    one = bin_stats(values, bins)
    three = bin_stats_parallel(values, bins, 3)
    for k in one:
        np.testing.assert_array_equal(one[k], three[k])


def test_bin_stats_on_runs_equal_bin_stats():
    """The sorted path's statistics from (bin id, first row) runs: identical to bin_stats, split or not,
    with NaN rows (rows without a target) left out the same way."""
    rng = np.random.default_rng(5)
    bins = np.sort(rng.choice(3000, size=60_000))
    values = 1e6 + rng.normal(size=len(bins)) * 1e3
    values[rng.random(len(bins)) < 0.01] = np.nan
    ids, starts = np.unique(bins, return_index=True)
    for vals, workers in ((values, 1), (values, 3), (np.nan_to_num(values), 1), (np.nan_to_num(values), 4)):
        ref, got = bin_stats(vals, bins), bin_stats_at(vals, ids, starts, workers)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_partition_balances_rows():
    assert [row_groups_for_rank([10, 10, 10, 10], r, 2) for r in range(2)] == [[0, 1], [2, 3]]
    assert sum((row_groups_for_rank([5, 5, 5], r, 3) for r in range(3)), []) == [0, 1, 2]
    owners = bin_owners(np.array([5, 0, 5, 5, 5]), 2)
    np.testing.assert_array_equal(owners, [0, 0, 0, 1, 1])


@pytest.mark.parametrize(
    "text, expected", [("10ms", (10_000_000, "ns")), ("1.5us", (1500, "ns")), ("250", (250, "launches"))]
)
def test_bin_width_units(text, expected):
    assert bin_width(text) == expected


@pytest.mark.parametrize("text", ["abc", "0", "-5ms", "10 parsecs", "0.5ns", "2.5"])
def test_bad_bin_width_is_an_error(text):
    with pytest.raises(GpuvarError, match="bin-width"):
        bin_width(text)


# ---------------------------------------------------------------- end to end on small canonical files


def run_bin(*args, ranks=None, env=None, timeout=60):
    """`gpuvar bin ARGS` under `mpiexec -n ranks` (a subprocess), or in this process when ranks is None."""
    if ranks is None:
        return _in_process(["bin", *map(str, args)])
    cmd = [str(MPIEXEC), "-n", str(ranks)] + GPUVAR + ["bin", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _in_process(argv) -> subprocess.CompletedProcess:
    """Run the CLI here (one MPI rank, no mpiexec): what a user gets without MPI, minus 2 s of start-up."""
    import contextlib
    import io

    from gpuvar.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as refused:  # argparse refusing an option value (usage + one line, exit 2)
            code = refused.code
    return subprocess.CompletedProcess(argv, code, "", err.getvalue())


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A 40 000-row demo trace in 4 096-row groups, so every rank of 3 reads several row groups."""
    from gpuvar.demo.canonical_writer import write_canonical_demo

    out = tmp_path_factory.mktemp("demo")
    write_canonical_demo(out, 40_000, seed=5, workers=1, chunk_rows=4096)
    return out


def test_bins_equal_pandas_and_rows_are_accounted(demo, tmp_path):
    proc = run_bin(demo / "kernels.parquet", "--bin-width", "2ms", "--top-k", "3", "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bin.json").read_text())
    k = pq.read_table(demo / "kernels.parquet", columns=["kernel_name", "start", "duration"]).to_pandas()
    k["kv"] = k["duration"] - k.groupby("kernel_name")["duration"].transform("mean")
    k["bin"] = (k["start"] - k["start"].min()) // 2_000_000
    ref = pandas_reference(k["kv"].to_numpy(), k["bin"].to_numpy())
    bins = pq.read_table(tmp_path / "bins.parquet").to_pandas().set_index("bin")
    scale = np.maximum(ref["min"].abs(), ref["max"].abs()).to_numpy()
    assert_close(bins[STATS], ref, scale)
    assert report["rows_in"] == report["rows_binned"] == len(k) and report["rows_without_target"] == {}
    assert report["non_empty_bins"] == len(ref)
    top = bins.sort_values("variance_rank").head(3)
    assert top["var"].is_monotonic_decreasing and sorted(top.index) == report["top_k_bins"]
    assert (bins.loc[~bins["in_top_k"], "var"].dropna() <= top["var"].min()).all()
    rows = pq.read_table(tmp_path / "topk_rows.parquet").to_pandas()
    assert sorted(rows["bin"].unique()) == sorted(top.index)
    assert len(rows) == int(top["count"].sum()) and "grid_x" in rows and "kernel_variability" in rows
    assert "variance_rank" not in rows  # would look like a feature to the causal step


def test_phases_run_alone_and_leave_their_inputs_as_they_were(demo):
    """Each phase is a function of frozen inputs (here on a one-rank communicator, no mpiexec): the scan's exact
    group totals and spans, each batch's target as a new column (the durations read are unchanged), the agreed
    timeline; a phase output cannot be edited."""
    import dataclasses

    from mpi4py import MPI

    from gpuvar.binning.link import make_links
    from gpuvar.binning.plan import BinOptions, make_plan
    from gpuvar.binning.read import batches, link_columns, open_kernels, scan_share
    from gpuvar.binning.target import compute_target, group_means
    from gpuvar.binning.timeline import make_timeline

    comm = MPI.COMM_SELF
    plan = make_plan(BinOptions(demo / "kernels.parquet", memcpy=demo / "memcpy.parquet", bin_width="2ms"))
    scan = scan_share(plan, 0, 1)
    k = pq.read_table(demo / "kernels.parquet", columns=["kernel_name", "start", "duration"]).to_pandas()
    sums = k.groupby("kernel_name")["duration"].agg(["sum", "count"])
    assert scan.totals == {name: (int(row["sum"]), int(row["count"])) for name, row in sums.iterrows()}
    assert scan.rows == len(k) and scan.reasons == {} and scan.ordered and scan.starts_ordered
    assert (scan.axis_lo, scan.axis_hi) == (k["start"].min(), k["start"].max()) == (scan.start_lo, scan.start_hi)
    means = group_means(comm, scan)
    index = dict(scan.index)
    lut, stream = means.lut(index), make_links(plan, comm, scan).stream()
    columns = [*plan.columns, *link_columns(plan)]
    values = []
    for b in batches(plan, open_kernels(plan), scan.row_groups, index, columns, features=True):
        duration, ok = b.duration.copy(), b.ok.copy()
        target = compute_target(plan, b, lut, stream.link(b.kstart, b.kkey))
        assert not np.shares_memory(target.values, b.duration)
        np.testing.assert_array_equal(b.duration, duration)
        np.testing.assert_array_equal(b.ok, ok)
        assert set(target.linked) == {"linked_copy_kind", "linked_copy_bytes", "linked_copy_duration"}
        values.append(target.values)
    assert index == scan.index  # the second pass met no new group
    expected = k["duration"] - k.groupby("kernel_name")["duration"].transform("mean")
    np.testing.assert_allclose(np.concatenate(values), expected.to_numpy(), rtol=0, atol=1e-6)
    timeline = make_timeline(plan, comm, scan)
    assert timeline.fast and timeline.gmin == k["start"].min() and timeline.runs == ((0, timeline.n_bins - 1),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scan.rows = 0


@pytest.mark.mpi
@pytest.mark.parametrize(
    "extra",
    [
        ["--target", "memory_stall", "--link", "stream", "--features", "grid_x,duration,linked_copy_kind"],
        pytest.param(["--group", "launch_config", "--features", "grid_x,duration"], marks=pytest.mark.slow),
    ],
)
def test_outputs_are_byte_identical_for_1_2_3_ranks(demo, tmp_path, extra):
    args = [demo / "kernels.parquet", "--memcpy", demo / "memcpy.parquet", "--bin-width", "1ms", "--top-k", "4", *extra]
    reports = []
    for r in (None, 2, 3):  # None: this process, one rank, no mpiexec
        proc = run_bin(*args, "--output", tmp_path / f"r{r or 1}", ranks=r)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads((tmp_path / f"r{r or 1}" / "bin.json").read_text()))
    for name in ("bins.parquet", "topk_rows.parquet"):
        first = (tmp_path / "r1" / name).read_bytes()
        assert all((tmp_path / f"r{r}" / name).read_bytes() == first for r in (2, 3)), name
    run_specific = ("ranks", "seconds", "seconds_per_rank", "startup_s_per_rank", "peak_rss_mb_per_rank")
    run_specific += ("rows_in_per_rank", "rows_held_per_rank")  # each rank's share, and what it held
    same = [{k: v for k, v in rep.items() if k not in run_specific} for rep in reports]
    assert same[0] == same[1] == same[2]
    assert [rep["ranks"] for rep in reports] == [1, 2, 3] and len(reports[2]["peak_rss_mb_per_rank"]) == 3
    assert [sum(rep["rows_in_per_rank"]) for rep in reports] == [rep["rows_in"] for rep in reports]


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["one_bin_over_all_ranks", "rows_without_target"])
def test_sorted_path_edge_cases_are_byte_identical_for_1_and_3_ranks(demo, tmp_path, case):
    """The sorted fast path (bins as runs of rows, only a share's first bin moves): a bin held by every rank,
    and rows without a duration or kernel name inside the runs, give the same bytes for any rank count."""
    kernels = demo / "kernels.parquet"
    args = ["--bin-width", "1s", "--top-k", "1", "--features", "grid_x,duration"]
    if case == "rows_without_target":
        import pyarrow as pa
        import pyarrow.compute as pc

        t = pq.read_table(kernels)
        rng = np.random.default_rng(1)
        for col, frac in (("duration", 0.01), ("kernel_name", 0.005)):
            hole = pa.array(rng.random(t.num_rows) < frac)
            column = t.column(col).combine_chunks()
            holed = pc.if_else(hole, pa.nulls(t.num_rows, column.type), column)
            t = t.set_column(t.column_names.index(col), col, holed)
        kernels = tmp_path / "holes.parquet"
        write_canonical(t, kernels, row_group_rows=4096)
        args = [
            "--memcpy",
            demo / "memcpy.parquet",
            "--target",
            "memory_stall",
            "--bin-width",
            "2ms",
            "--top-k",
            "3",
            "--features",
            "grid_x,duration,linked_copy_bytes",
        ]
    for r in (None, 3):
        proc = run_bin(kernels, *args, "--output", tmp_path / f"r{r or 1}", ranks=r)
        assert proc.returncode == 0, proc.stderr
    for name in ("bins.parquet", "topk_rows.parquet"):
        assert (tmp_path / "r1" / name).read_bytes() == (tmp_path / "r3" / name).read_bytes(), name
    report = json.loads((tmp_path / "r3" / "bin.json").read_text())
    if case == "rows_without_target":
        assert report["rows_without_target"]["no duration"] > 0 and report["rows_without_target"]["no kernel_name"] > 0
    else:
        assert report["non_empty_bins"] == 1 and report["top_k_rows"] == report["rows_binned"]


# `gpuvar bin` under mpiexec with one phase function of the job replaced, on one rank, by one that runs the phase
# and then fails: `raise` raises a StageError, `kill` dies by SIGKILL without a word (as the OOM killer would).
# The fault comes from the test: the job itself has no failure hook.
_FAULT_AFTER_PHASE = """
import os, signal, sys
import gpuvar.binning.job as job
from gpuvar.cli import main
from gpuvar.errors import StageError
phase, victim, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
original = getattr(job, phase)
def failing(*args, **kwargs):
    out = original(*args, **kwargs)
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    if rank == victim:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise StageError(f"fault injected after {phase} on rank {rank}")
    return out
setattr(job, phase, failing)
sys.exit(main(sys.argv[4:]))
"""


def run_bin_with_fault(phase: str, victim: int, how: str, *args, ranks: int, timeout=60):
    cmd = [
        str(MPIEXEC),
        "-n",
        str(ranks),
        sys.executable,
        "-c",
        _FAULT_AFTER_PHASE,
        phase,
        str(victim),
        how,
        "bin",
        *map(str, args),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.mpi
@pytest.mark.parametrize("phase,victim", [("scan_share", 1), ("share_statistics", 2), ("gather_rows", 1)])
def test_a_failing_rank_stops_the_job_promptly(demo, tmp_path, phase, victim):
    """A rank raising mid-way (the others wait in the next collective): the job exits non-zero within seconds,
    with one error line naming the rank, and leaves no output."""
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = run_bin_with_fault(
        phase, victim, "raise", demo / "kernels.parquet", "--bin-width", "2ms", "--output", out, ranks=3
    )
    assert proc.returncode != 0
    # one error, from the failing rank (lines of several ranks may interleave in mpiexec's stderr)
    assert proc.stderr.count(f"gpuvar bin: rank {victim}: error: fault injected after {phase}") == 1, proc.stderr
    assert proc.stderr.count("gpuvar bin: ") == 1, proc.stderr
    assert len(error_lines(proc.stderr)) == 1, proc.stderr  # nor MPICH's "Abort(1) on node ..." nor a traceback
    assert time.monotonic() - t0 < 30
    assert not out.exists() or not any(out.iterdir()), "no output may be left looking complete"


@pytest.mark.mpi
def test_a_killed_rank_stops_the_job_promptly(demo, tmp_path):
    """A rank killed outright (OOM killer, node failure) says nothing; mpiexec must still end the job, and the
    same command run again completes, clearing what the aborted run left behind."""
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = run_bin_with_fault("scan_share", 2, "kill", demo / "kernels.parquet", "--output", out, ranks=3)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30
    assert not out.exists() or not any(out.iterdir()), "no output may be left looking complete"
    rerun = run_bin(demo / "kernels.parquet", "--output", out, ranks=3)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "the aborted run's staging folder is removed"
    assert (out / "bin.json").exists()


def error_lines(stderr: str) -> list[str]:
    """What the user reads besides the INFO log of the job's progress. Ranks share mpiexec's stderr, so a log
    record may land in the middle of another rank's line: records are cut out wherever they start."""
    without_log = re.sub(r"\d\d:\d\d:\d\d INFO gpuvar\.[\w.]+: [^\n]*\n?", "", stderr)
    return [line for line in without_log.splitlines() if line.strip()]


def run_bin_patched(prelude: str, *args, ranks: int, timeout=120):
    """`gpuvar bin ARGS` under mpiexec, with `prelude` (Python) run first on every rank to plant a fault; the
    timeout only guards against a hang (a hung job fails the test instead of stalling the suite)."""
    script = f"import sys\n{prelude}\nfrom gpuvar.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-c", script, "bin", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.mpi
def test_unwritable_output_ends_every_rank_with_one_line(demo, tmp_path):
    """Issue 22 item 2: rank 0 cannot create its staging folder (a file where the output's parent should be);
    rank 1 used to wait forever in the job's first collective."""
    (tmp_path / "afile").write_text("")
    proc = run_bin_patched("", demo / "kernels.parquet", "--output", tmp_path / "afile" / "bin", ranks=2)
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [f"gpuvar bin: error: {tmp_path / 'afile'}: File exists"], proc.stderr


@pytest.mark.mpi
def test_bin_json_says_which_rank_was_slow_to_start(demo, tmp_path):
    """startup_s_per_rank: rank 1 planted to take 1 s more before MPI starts (as on a shared file system that
    serves imports slowly) shows it in its own `before_mpi`, and rank 0, which started at once, waited for it in
    `mpi_init`; each rank's start-up fits in the run's wall time."""
    prelude = "import os, time\ntime.sleep(1.0 if os.environ.get('PMI_RANK') == '1' else 0.0)"
    t0 = time.monotonic()
    proc = run_bin_patched(prelude, demo / "kernels.parquet", "--output", tmp_path / "out", ranks=2)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads((tmp_path / "out" / "bin.json").read_text())["startup_s_per_rank"]
    assert second["before_mpi"] >= 1.0 and first["before_mpi"] < second["before_mpi"] - 0.5, (first, second)
    assert first["mpi_init"] >= 0.5 and second["mpi_init"] < first["mpi_init"], (first, second)
    assert all(0 < r["before_mpi"] + r["mpi_init"] < wall for r in (first, second)), (first, second, wall)


@pytest.mark.mpi
def test_a_rank_failing_before_the_job_ends_every_rank(demo, tmp_path):
    """A rank that cannot read an input (a node without the file system) fails every rank, rank 0 naming it."""
    prelude = """
import gpuvar.binning.cli as cli
from mpi4py import MPI
from gpuvar.errors import InputError
original = cli._copies
def failing(path):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise InputError(path, "cannot read file (Stale file handle)")
    return original(path)
cli._copies = failing
"""
    memcpy = demo / "memcpy.parquet"
    out = tmp_path / "out"
    proc = run_bin_patched(prelude, demo / "kernels.parquet", "--memcpy", memcpy, "--output", out, ranks=2)
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [f"gpuvar bin: error: rank 1: {memcpy}: cannot read file (Stale file handle)"], (
        proc.stderr
    )
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_disk_full_under_mpi_is_one_line_and_leaves_nothing(demo, tmp_path):
    """Issue 22 item 9: rank 0's writer hits ENOSPC; the user reads one line naming the real output (not the
    staging folder), every rank ends, and neither output nor staging folder is left."""
    prelude = """
import errno, os
import pyarrow.parquet as pq
def full(table, where, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))
pq.write_table = full
"""
    out = tmp_path / "out"
    proc = run_bin_patched(prelude, demo / "kernels.parquet", "--output", out, ranks=2)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert lines == [f"gpuvar bin: error: cannot write {out / 'bins.parquet'}: No space left on device"], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no output and no staging folder"


def _tiny_files(tmp_path: Path):
    """Stream 1: copies at t=0 (dur 10) and t=100 (dur 40); stream 2: no copy before its first kernel."""
    kernels = pd.DataFrame(
        {
            "kernel_name": ["k", "k", "k", "k", "k"],
            "device_id": [0, 0, 0, 0, 0],
            "stream_id": [1, 1, 2, 2, 1],
            "start": [50, 150, 20, 300, 5_000_050],
            "end": [80, 250, 45, 330, 5_000_150],
        }
    )
    memcpy = pd.DataFrame(
        {
            "device_id": [0, 0, 0],
            "stream_id": [1, 1, 2],
            "start": [0, 100, 200],
            "end": [10, 140, 205],
            "bytes": [64, 128, 256],
            "copy_kind": [1, 8, 2],
        }
    )
    write_canonical(finalize_kernels(kernels), tmp_path / "k.parquet", row_group_rows=2)
    write_canonical(finalize_memcpy(memcpy), tmp_path / "m.parquet", row_group_rows=2)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [None, 2])
def test_memory_stall_link_rule_end_to_end(tmp_path, ranks):
    _tiny_files(tmp_path)
    proc = run_bin(
        tmp_path / "k.parquet",
        "--memcpy",
        tmp_path / "m.parquet",
        "--target",
        "memory_stall",
        "--bin-width",
        "1ms",
        "--top-k",
        "5",
        "--output",
        tmp_path / "o",
        ranks=ranks,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "bin.json").read_text())
    assert report["rows_without_target"] == {"no earlier memcpy on the same device and stream": 1}
    assert report["rows_in"] == 5 and report["rows_binned"] == 4
    rows = pq.read_table(tmp_path / "o" / "topk_rows.parquet").to_pandas().set_index("start")
    # 50: copy@0 (10) -> |30-10|; 150: copy@100 (40) -> |100-40|; 300: copy@200 (5) -> |30-5|; 5000050: copy@100
    assert rows["memory_stall"].to_dict() == {50: 20.0, 150: 60.0, 300: 25.0, 5_000_050: 60.0}
    assert rows["linked_copy_kind"].to_dict() == {50: 1.0, 150: 8.0, 300: 2.0, 5_000_050: 8.0}
    assert rows["linked_copy_bytes"][150] == 128


def test_timeline_less_data_is_binned_by_launch_order(tmp_path):
    n = 95
    durations = 1000 + (np.arange(n) % 7) * 10
    kernels = pd.DataFrame({"kernel_name": ["a", "b"] * 47 + ["a"], "launch_id": np.arange(n), "duration": durations})
    write_canonical(finalize_kernels(kernels), tmp_path / "k.parquet", row_group_rows=16)
    proc = run_bin(tmp_path / "k.parquet", "--bin-width", "10", "--top-k", "2", "--output", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "bin.json").read_text())
    assert report["axis"] == "launch_id" and report["bin_unit"] == "launches" and report["bins"] == 10
    bins = pq.read_table(tmp_path / "o" / "bins.parquet").to_pandas()
    assert bins["count"].tolist() == [10] * 9 + [5] and bins["bin_start"].tolist()[:2] == [0, 10]
    # a time width on data without start times bins by --launch-bin-width launches (binning.launch_bin_width,
    # default 50), as the workflow does, and says so
    proc = run_bin(tmp_path / "k.parquet", "--bin-width", "10ms", "--output", tmp_path / "o2")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o2" / "bin.json").read_text())
    assert report["bin_unit"] == "launches" and report["bins"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bin-width", "ten"], "--bin-width"),
        (["--target", "speed"], "invalid choice: 'speed'"),
        (["--target", "memory_stall"], "needs --memcpy"),
        (["--features", "nope"], "unknown column(s) nope"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(demo, tmp_path, args, message):
    proc = run_bin(demo / "kernels.parquet", "--output", tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_missing_column_names_the_file(tmp_path):
    write_canonical(finalize_memcpy(pd.DataFrame({"start": [1], "end": [2]})), tmp_path / "m.parquet")
    proc = run_bin(tmp_path / "m.parquet", "--output", tmp_path / "o")
    assert proc.returncode == 2 and "m.parquet: missing column(s) kernel_name" in proc.stderr


@pytest.mark.mpi
def test_unsorted_file_gives_the_same_bins(demo, tmp_path):
    """A file not sorted by start (not written by gpuvar) takes the sort-and-exchange path: same statistics."""
    t = pq.read_table(demo / "kernels.parquet", columns=["kernel_name", "start", "duration"])
    shuffled = t.take(np.random.default_rng(0).permutation(t.num_rows))
    pq.write_table(shuffled, tmp_path / "shuffled.parquet", row_group_size=5000)
    args = ["--bin-width", "1ms", "--features", "none"]
    assert run_bin(demo / "kernels.parquet", *args, "--output", tmp_path / "a").returncode == 0
    proc = run_bin(tmp_path / "shuffled.parquet", *args, "--output", tmp_path / "b", ranks=2)
    assert proc.returncode == 0, proc.stderr
    a = pq.read_table(tmp_path / "a" / "bins.parquet").to_pandas().set_index("bin")
    b = pq.read_table(tmp_path / "b" / "bins.parquet").to_pandas().set_index("bin")
    assert_close(b[STATS], a[STATS], np.maximum(a["min"].abs(), a["max"].abs()).to_numpy())


def test_a_rank_does_not_import_pandas_or_pydantic(tmp_path):
    """A rank's start-up is part of every run's fixed cost: pandas (0.2-0.4 s) must not be imported by the job,
    including on the paths that fill nulls (a copy without a kind, linked to a kernel), nor pydantic and the
    config models (~0.13 s) to parse the options the workflow gives (gpuvar.options' field table), nor
    pyarrow.compute (~0.045 s: the job calls Arrow's functions by name, gpuvar.binning.columns.arrow)."""
    _tiny_files(tmp_path)
    memcpy = pd.DataFrame(
        {"device_id": [0, 0], "stream_id": [1, 1], "start": [0, 100], "end": [10, 140], "copy_kind": [1.0, None]}
    )
    write_canonical(finalize_memcpy(memcpy), tmp_path / "m.parquet", row_group_rows=2)
    args = [str(tmp_path / "k.parquet"), "--memcpy", str(tmp_path / "m.parquet")]
    # every option as the workflow's rule passes it, from the demo config
    cfg = validate_config(read_yaml_mapping(REPO / "config" / "config.yaml"), base=REPO)
    workflow = workflow_arguments(cfg, "memory_stall")
    workflow[workflow.index("--bin-width") + 1] = "1ms"
    code = (
        "import sys; from gpuvar.cli import main; "
        f"rc = main(['bin', *{args!r}, *{workflow!r}, '--output', {str(tmp_path / 'o')!r}]); "
        "print(sorted(m for m in ('pandas', 'pydantic', 'yaml', 'pyarrow.compute') if m in sys.modules)); "
        "sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    linked = pq.read_table(tmp_path / "o" / "topk_rows.parquet").column("linked_copy_kind").to_pylist()
    assert any(v is None or v != v for v in linked)  # the null kind was read (the path that imported pandas)
