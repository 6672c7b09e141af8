"""Many ranks, one dataset: per-rank ingests merged with a rank column, books balanced per file and in total;
config `merge: true`; the workflow plans one ingest job per rank file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO, real_file

from gpuvar.config import validate_config
from gpuvar.demo.kineto_writer import write_kineto_demo
from gpuvar.errors import ConfigError, InputError
from gpuvar.ingest import ingest
from gpuvar.ingest.merge import merge

NSYS = "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite"


@pytest.fixture(scope="module")
def kineto_pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    parts = []
    for rank in (0, 1):
        trace = write_kineto_demo(tmp / f"kineto_rank{rank}.json.gz", 800 + 100 * rank, seed=2, rank=rank, world=2)
        ingest(trace["path"], tmp / f"part{rank}")
        parts.append(tmp / f"part{rank}")
    return tmp, parts


def _ingested(relatives: list[str], folder: Path, stem: str) -> list[Path]:
    """Each real file (relative to the real-data root) ingested into folder/<stem><i>; the ingest folders."""
    parts = []
    for i, relative in enumerate(relatives):
        ingest(real_file(relative), folder / f"{stem}{i}")
        parts.append(folder / f"{stem}{i}")
    return parts


def test_merged_ranks_carry_the_recorded_rank_sorted_by_start(kineto_pair, tmp_path):
    _, parts = kineto_pair
    report = merge(list(reversed(parts)), tmp_path / "merged")  # order does not matter: the files record ranks
    kernels = pq.read_table(tmp_path / "merged" / "kernels.parquet")
    assert kernels.num_rows == 1700 and report["tables"]["kernels"]["rows_read"] == 1700
    counts = dict(zip(*[kernels.column("rank").value_counts().field(f).to_pylist() for f in ("values", "counts")]))
    assert counts == {0: 800, 1: 900}
    start = kernels.column("start").to_numpy()
    assert (start[1:] >= start[:-1]).all()
    assert report["tables"]["kernels"]["balanced"] and report["tables"]["memcpy"]["balanced"]
    assert [p["rank"] for p in report["parts"]] == [1, 0]
    assert report["format"] == "pytorch-kineto" and "distributedInfo.rank" in report["notes"][0]
    assert json.loads((tmp_path / "merged" / "ingest.json").read_text()) == json.loads(json.dumps(report))


def test_files_without_distinct_ranks_take_their_position(tmp_path):
    parts = _ingested([NSYS] * 3, tmp_path, "p")
    report = merge(parts, tmp_path / "merged")
    single = json.loads((tmp_path / "p0" / "ingest.json").read_text())["tables"]["kernels"]["rows_written"]
    kernels = pq.read_table(tmp_path / "merged" / "kernels.parquet")
    assert kernels.num_rows == 3 * single == report["tables"]["kernels"]["rows_written"]
    assert sorted(set(kernels.column("rank").to_pylist())) == [0, 1, 2]
    assert "position" in report["notes"][0]
    assert [p["tables"]["kernels"]["rows_written"] for p in report["parts"]] == [single] * 3


def test_merge_of_a_folder_that_is_not_an_ingest_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a finished ingest"):
        merge([tmp_path / "empty"], tmp_path / "out")


def test_cli_ingest_merge(kineto_pair, tmp_path, run_cli):
    _, parts = kineto_pair
    proc = run_cli("ingest-merge", *parts, "--output", tmp_path / "m")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tables"]["kernels"]["rows_written"] == 1700


def test_config_merge_keeps_a_glob_as_one_dataset(kineto_pair):
    tmp, _ = kineto_pair
    cfg = validate_config(
        {
            "datasets": [
                {"name": "job", "source": "kineto_rank*.json.gz", "merge": True},
                {"name": "solo", "source": "kineto_rank*.json.gz"},
            ]
        },
        tmp,
    )
    job = cfg.datasets[0]
    assert job.merge and job.sources == ["kineto_rank0.json.gz", "kineto_rank1.json.gz"]
    assert [d.name for d in cfg.datasets[1:]] == ["solo_kineto_rank0.json", "solo_kineto_rank1.json"]


def test_config_list_without_merge_is_one_trace_of_several_files(tmp_path):
    # a kernel trace with its counter passes (gpuvar.ingest.counter_passes): one dataset, globs expanded in place
    for name in ("results.csv", "pmc_1.csv", "pmc_2.csv"):
        (tmp_path / name).write_text("x\n")
    cfg = validate_config({"datasets": [{"name": "amd", "source": ["results.csv", "pmc_*.csv"]}]}, tmp_path)
    (amd,) = cfg.datasets
    assert not amd.merge and amd.sources == ["results.csv", "pmc_1.csv", "pmc_2.csv"]
    with pytest.raises(ConfigError, match="at least 1 item"):
        validate_config({"datasets": [{"name": "job", "source": []}]})


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
def test_dry_run_plans_one_ingest_job_per_rank_file(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    ranks = [d for d in cfg["datasets"] if d.get("merge")]
    assert ranks and len(ranks[0]["source"]) == 2
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("snakemake")),
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / "w"),
            "--configfile",
            str(config),
            "-n",
            "--cores",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout + proc.stderr
    jobs = dict(line.split()[:2] for line in text.splitlines() if line.startswith(("ingest_rank ", "merge_ranks ")))
    jobs |= dict(line.split()[:2] for line in text.splitlines() if line.startswith("normalize_rank "))
    assert jobs == {"ingest_rank": "2", "normalize_rank": "2", "merge_ranks": "1"}
    for rank, source in enumerate(ranks[0]["source"]):
        assert f"input: {source}\n    output: results/ingest/{ranks[0]['name']}/ranks/{rank}/raw" in text


def test_merged_rows_keep_the_order_of_the_sort_then_the_writers_sort(tmp_path):
    """The merge takes the rows once, column by column (gpuvar.ingest.merge._merged), in the order the table sorted
    by (start, rank, launch id) and then by write_canonical's stable (start, launch id) had: three copies of one
    export tie on every start, so the rank decides, after the launch id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = _ingested([NSYS] * 3, tmp_path, "p")
    merge(parts, tmp_path / "merged")
    got = pq.read_table(tmp_path / "merged" / "kernels.parquet")
    tables = []
    for i, part in enumerate(parts):
        table = pq.read_table(part / "kernels.parquet")
        tables.append(table.set_column(table.column_names.index("rank"), "rank", pa.array([i] * table.num_rows)))
    whole = pa.concat_tables(tables)
    first = [(c, "ascending", "at_end") for c in ("start", "rank", "launch_id")]
    whole = whole.take(pc.sort_indices(whole, sort_keys=first))
    whole = whole.take(pc.sort_indices(whole, sort_keys=[(c, "ascending", "at_end") for c in ("start", "launch_id")]))
    for column in ("start", "rank", "launch_id", "kernel_name", "end"):
        assert got.column(column).to_pylist() == whole.column(column).to_pylist(), column


GLOO = "pytorch-kineto-trace/h100-2rank-gloo"
NCU = "ncu-csv/roofline-profiler-rtx5070"


def _same_files(a: Path, b: Path) -> None:
    for name in ("kernels.parquet", "memcpy.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    left, right = (json.loads((f / "ingest.json").read_text()) for f in (a, b))
    assert left == right


def _both_ways(parts, tmp_path, whole_again: bool = False, fan_in: int = 16, **both) -> tuple[Path, Path]:
    """Merge `parts` in memory and by the k-way merge; the files must be the same. whole_again: the second merge
    is expected to fall back to the whole-table merge; otherwise it must not."""
    from gpuvar.ingest import merge as merging

    merge(parts, tmp_path / "whole", in_memory=True, **both)
    calls = []
    whole_merge = merging._merged
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(merging, "_merged", lambda *a: calls.append(1) or whole_merge(*a))
        merge(parts, tmp_path / "streamed", fan_in=fan_in, **both)
    assert bool(calls) == whole_again
    _same_files(tmp_path / "whole", tmp_path / "streamed")
    return tmp_path / "whole", tmp_path / "streamed"


@pytest.mark.parametrize("fan_in", [2, 16])
def test_the_k_way_merge_writes_the_whole_table_merges_bytes(kineto_pair, tmp_path, monkeypatch, fan_in):
    """The merge of the ranks holds a few rows of each part (gpuvar.ingest.merge_rows), not every part at once; the
    merged files are the bytes the whole-table merge wrote. Small reads and output chunks cross the parts' and the
    row groups' boundaries, fan_in 2 merges the 4 parts through a level of scratch files, which are removed."""
    from gpuvar.ingest import merge_rows

    monkeypatch.setattr(merge_rows, "READ_BATCH_ROWS", 7)
    monkeypatch.setattr(merge_rows, "KEY_BATCH_ROWS", 5)
    monkeypatch.setattr(merge_rows, "MERGE_ROWS", 333)
    _, parts = kineto_pair
    four = parts + parts  # the same two ranks again: rank = position, rows tie on start across copies
    whole, streamed = _both_ways(four, tmp_path, fan_in=fan_in)
    assert sorted(p.name for p in streamed.iterdir()) == ["ingest.json", "kernels.parquet", "memcpy.parquet"]
    assert pq.read_metadata(streamed / "kernels.parquet").num_rows == sum(
        pq.read_metadata(p / "kernels.parquet").num_rows for p in four
    )


@pytest.mark.parametrize("jobs", [2, 3])
def test_scratch_merges_side_by_side_write_the_same_bytes(kineto_pair, tmp_path, monkeypatch, jobs):
    """`jobs` merges of a scratch level at once (threads, each its own scratch and label files): 8 parts through two
    scratch levels (fan_in 2: 8 -> 4 -> 2) are the whole-table merge's bytes, and no scratch file is left."""
    from gpuvar.ingest import merge_rows

    monkeypatch.setattr(merge_rows, "READ_BATCH_ROWS", 7)
    monkeypatch.setattr(merge_rows, "MERGE_ROWS", 333)
    ran = []
    each = merge_rows._each
    monkeypatch.setattr(merge_rows, "_each", lambda one, count, j: ran.append((count, j)) or each(one, count, j))
    _, parts = kineto_pair
    eight = parts * 4
    _, streamed = _both_ways(eight, tmp_path, fan_in=2, jobs=jobs)
    assert ran == [(4, jobs), (2, jobs)] * 2  # (kernels, then copies)
    assert sorted(p.name for p in streamed.iterdir()) == ["ingest.json", "kernels.parquet", "memcpy.parquet"]


@pytest.mark.parametrize("keys", [3, 8192])
def test_the_k_way_merge_of_real_ranks_sets_the_co_running_columns(tmp_path, monkeypatch, keys):
    """The real gloo pair (both ranks on one H100): the co-running columns are computed over both ranks, over a
    window of the merged rows (gpuvar.ingest.merge_corun; 3 keys read at a time: hundreds of windows), and set on
    the merged rows, the same bytes as the whole-table merge."""
    from gpuvar.ingest import merge_rows

    monkeypatch.setattr(merge_rows, "KEY_BATCH_ROWS", keys)
    parts = _ingested([f"{GLOO}/rank{rank}.pt.trace.json.gz" for rank in (0, 1)], tmp_path, "part")
    _, streamed = _both_ways(parts, tmp_path)
    overlap = pq.read_table(streamed / "kernels.parquet", columns=["ctx_other_process_kernels"]).column(0)
    assert overlap.null_count < len(overlap) and max(overlap.to_pylist()) > 0


def test_the_k_way_merge_of_parts_without_a_timeline_or_with_other_columns(tmp_path):
    """Nsight Compute parts (no start time: merged by launch id) and parts whose columns differ (a counter only one
    part has, a column one lacks, a part without launch ids) merge as the permissive concatenation did."""
    import pyarrow as pa

    parts = _ingested([f"{NCU}/{name}" for name in ("gemm_naive.csv", "saxpy.csv", "gemm_tiled.csv")], tmp_path, "ncu")
    _both_ways(parts, tmp_path / "ncu")
    nsys = _ingested([NSYS] * 3, tmp_path, "nsys")
    path = nsys[1] / "kernels.parquet"
    table = pq.read_table(path)
    table = table.append_column("my_counter", pa.array(range(table.num_rows), pa.int32()))
    pq.write_table(table.drop_columns(["kernel_short_name"]), path)
    path = nsys[2] / "kernels.parquet"  # no launch id: null in the merge, so its rows follow the tying others'
    pq.write_table(pq.read_table(path).drop_columns(["launch_id"]), path)
    _both_ways(nsys, tmp_path / "nsys")
    merged = pq.read_table(tmp_path / "nsys" / "streamed" / "kernels.parquet")
    ranks = merged.column("rank").to_pylist()
    counters = merged.column("my_counter").to_pylist()
    assert all((c is None) == (r != 1) for c, r in zip(counters, ranks))


def test_a_part_out_of_order_is_merged_whole(tmp_path):
    """A part whose rows are not in start order (not written by gpuvar's ingest) cannot be merged a few rows at a
    time; the merge takes it whole and writes the same bytes."""
    parts = _ingested([NSYS] * 2, tmp_path, "p")
    path = parts[0] / "kernels.parquet"
    table = pq.read_table(path)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), path)
    _both_ways(parts, tmp_path, whole_again=True)


def _planted_intervals(part: Path, seed: int) -> None:
    """Rewrite a part's times: short kernels, some running through a large share of the trace, zero-length ones,
    starts tying with other ranks' (a 50 ns grid), a few null ends; one process on device 0."""
    import numpy as np
    import pyarrow as pa

    from gpuvar.canonical_io import write_canonical

    path = part / "kernels.parquet"
    table = pq.read_table(path)
    rng = np.random.default_rng(seed)
    n = table.num_rows
    start = np.sort(rng.integers(0, n * 20, n)) * 50
    length = rng.choice([0, 50, 400, 3000, 200_000, 2_000_000], n, p=[0.05, 0.4, 0.3, 0.2, 0.04, 0.01])
    end = pa.array(start + length, mask=rng.random(n) < 0.01)
    columns = {"start": pa.array(start), "end": end, "device_id": pa.array(np.zeros(n, np.int64))}
    columns["process_id"] = pa.array(np.full(n, 1000 + seed, np.int64))
    for name, values in columns.items():
        table = table.set_column(table.column_names.index(name), name, values)
    write_canonical(table, path, json.loads(table.schema.metadata[b"gpuvar"]))


@pytest.mark.parametrize("fan_in", [2, 16])
def test_the_co_running_window_on_planted_long_and_tied_kernels(kineto_pair, tmp_path, monkeypatch, fan_in):
    """The sliding window of the co-running columns (gpuvar.ingest.merge_corun) on planted times that strain it:
    kernels 40x to 400x the usual length overlapping hundreds of later ones, zero-length kernels, starts tying
    across ranks, null ends; 3 keys read at a time; fan_in 2 reads the last level's ranks back from scratch files.
    The files are the whole-table merge's bytes, and the columns see the other ranks' kernels."""
    import shutil

    from gpuvar.ingest import merge_rows

    monkeypatch.setattr(merge_rows, "KEY_BATCH_ROWS", 3)
    _, pair = kineto_pair
    parts = []
    for i in range(3):
        parts.append(Path(shutil.copytree(pair[i % 2], tmp_path / f"p{i}")))
        _planted_intervals(parts[-1], seed=i)
    _, streamed = _both_ways(parts, tmp_path, fan_in=fan_in, unknown_gpu="shared")
    merged = pq.read_table(streamed / "kernels.parquet", columns=["ctx_other_process_kernels"]).column(0)
    assert max(merged.to_pylist(), key=lambda v: v or 0) > 10


def test_rows_tying_across_ranks_follow_the_rank_not_the_file_order(kineto_pair, tmp_path, monkeypatch):
    """The files given as rank 1 then rank 0 (their recorded ranks), every row tying with the other rank's on
    (start, launch id): the whole-table merge put rank 0's row first, and so does the k-way merge."""
    import shutil

    import numpy as np
    import pyarrow as pa

    from gpuvar.canonical_io import write_canonical
    from gpuvar.ingest import merge_rows

    monkeypatch.setattr(merge_rows, "KEY_BATCH_ROWS", 3)
    _, pair = kineto_pair
    parts = []
    for source in reversed(pair):
        parts.append(Path(shutil.copytree(source, tmp_path / source.name)))
        path = parts[-1] / "kernels.parquet"
        table = pq.read_table(path)
        n = table.num_rows
        for name, values in {"start": np.arange(n) * 100, "launch_id": np.arange(n)}.items():
            table = table.set_column(table.column_names.index(name), name, pa.array(values))
        write_canonical(table, path, json.loads(table.schema.metadata[b"gpuvar"]))
    _, streamed = _both_ways(parts, tmp_path)
    merged = pq.read_table(streamed / "kernels.parquet", columns=["launch_id", "rank"])
    assert merged.column("rank").to_pylist()[:4] == [0, 1, 0, 1]
