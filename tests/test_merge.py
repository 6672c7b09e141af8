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
    parts = []
    for i in range(3):
        ingest(real_file(NSYS), tmp_path / f"p{i}")
        parts.append(tmp_path / f"p{i}")
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

    parts = []
    for i in range(3):
        ingest(real_file(NSYS), tmp_path / f"p{i}")
        parts.append(tmp_path / f"p{i}")
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
