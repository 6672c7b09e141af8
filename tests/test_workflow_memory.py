"""gpuvar.workflow.memory: the ingest jobs ask Slurm for what their trace holds in memory, merge_ranks for what the
k-way merge holds (a row group of the widest table); neither the whole job nor a constant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuvar.workflow.memory import FLOOR_MB, merge_mb, rows_in_reports


def _report(path, kernels: int, memcpy: int = 0, columns: int = 54):
    tables = {
        "kernels": {"rows_written": kernels, "rows_read": kernels, "columns": columns},
        "memcpy": {"rows_written": memcpy, "columns": 27},
    }
    path.write_text(json.dumps({"tables": tables}))
    return path


def test_a_256_rank_job_asks_for_a_plain_jobs_memory(tmp_path):
    """256 Kineto ranks of 100 k launches: measured ~1.7 GB peak for the merge (docs/performance.md), under the
    profile's 4 GB; the whole-table merge needed ~28 GB."""
    reports = [_report(tmp_path / f"r{k}.json", 100_000, 2_000) for k in range(256)]
    assert rows_in_reports(reports) == 256 * 102_000
    assert merge_mb(reports) == FLOOR_MB


def test_wide_tables_ask_for_their_row_group(tmp_path):
    """Counter tables of thousands of columns: the row group the merge writes is what it holds, whatever the
    number of ranks."""
    few = merge_mb([_report(tmp_path / f"a{k}.json", 200_000, columns=3_000) for k in range(2)])
    many = merge_mb([_report(tmp_path / f"b{k}.json", 200_000, columns=3_000) for k in range(64)])
    assert few == many and 40_000 < few < 50_000  # 327,680 rows x 3,000 columns x 48 bytes
    assert merge_mb([_report(tmp_path / "c.json", 1_000, columns=3_000)]) == FLOOR_MB


def test_small_jobs_and_reports_not_written_yet_ask_for_the_floor(tmp_path):
    assert merge_mb([_report(tmp_path / "a.json", 5_000)]) == FLOOR_MB
    assert merge_mb([tmp_path / "missing.json"]) == FLOOR_MB  # a dry run before the ranks are ingested
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "odd.json").write_text(json.dumps({"tables": {"kernels": {"rows_written": "many"}}}))
    assert rows_in_reports([tmp_path / "bad.json", tmp_path / "odd.json"]) == 0


def test_the_floor_is_the_slurm_profiles_default():

    import yaml

    profile = yaml.safe_load((Path(__file__).parents[1] / "profiles" / "slurm" / "config.yaml").read_text())
    assert int(profile["default-resources"]["mem_mb"]) == FLOOR_MB


# --- the ingest jobs: what the trace holds in memory -------------------------------------------------------------

KINETO_HEAD = b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"'


def _kineto(path, size: int):
    """A Kineto trace of `size` bytes as far as its size and head go (sparse: nothing is written past the head)."""
    with open(path, "wb") as fh:
        fh.write(KINETO_HEAD)
        fh.truncate(size)
    return path


def test_a_kineto_trace_asks_for_what_it_holds_and_twice_on_the_retry(tmp_path):
    """Kineto traces are ingested whole (~1.2-1.6 bytes per byte of JSON, measured): a 3 GiB trace killed the job
    that asked for the constant 4 GB; a small one still asks for the floor."""
    from gpuvar.ingest.footprint import BASE_BYTES
    from gpuvar.workflow.memory import ingest_mb

    big = _kineto(tmp_path / "big.pt.trace.json", 3 * 2**30)
    assert ingest_mb(str(big)) == (BASE_BYTES >> 20) + int(1.5 * 3 * 1024)
    assert ingest_mb([big], attempt=2) == 2 * ingest_mb([big])
    assert ingest_mb(_kineto(tmp_path / "small.json", 2**20)) == FLOOR_MB
    assert ingest_mb(tmp_path / "not-there.json") == FLOOR_MB  # the demo's traces, before they are written


def test_a_gzip_trace_counts_its_recorded_size_past_4_gib(tmp_path):
    import gzip

    from gpuvar.ingest.footprint import uncompressed_size

    text = KINETO_HEAD + b"}]}" * 10_000
    small = tmp_path / "t.json.gz"
    small.write_bytes(gzip.compress(text))
    assert uncompressed_size(small) == len(text)
    # gzip records the size modulo 4 GiB: a 400 MB file recording 1 GiB was 5 GiB of JSON (ratios are 8-15x)
    wrapped = tmp_path / "w.json.gz"
    with open(wrapped, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00")
        fh.truncate(400 * 2**20 - 4)
        fh.seek(0, 2)
        fh.write((2**30).to_bytes(4, "little"))
    assert uncompressed_size(wrapped) == 2**30 + 2**32


def _export(path, kernel_rows: int, copy_rows: int):
    """A small real Nsight Systems export whose kernel and copy tables' rowids span the given rows: what the
    estimate reads (two b-tree lookups per table), not the rows themselves."""
    import sqlite3

    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.ingest import nsys

    write_nsys_demo(path, rows=200, seed=0)
    con = sqlite3.connect(path)
    for table, span in ((nsys.KERNEL_TABLE, kernel_rows), (nsys.MEMCPY_TABLE, copy_rows)):
        columns = ", ".join(f'"{r[1]}"' for r in con.execute(f'PRAGMA table_info("{table}")'))
        con.execute(f'INSERT INTO "{table}" (rowid, {columns}) SELECT {span}, {columns} FROM "{table}" LIMIT 1')
    con.commit()
    con.close()
    return path


def test_an_nsys_export_asks_for_its_rows_in_memory_and_the_floor_in_pieces(tmp_path):
    """Below the pieces threshold (2 M kernel rows) an export is held whole (1.5-1.8 GB per million kernels,
    measured): 1.9 M kernels and copies need more than the floor. Above it, pieces hold ~1 GB whatever the size."""
    from gpuvar.ingest.footprint import BASE_BYTES, NSYS_BYTES_PER_COPY, NSYS_BYTES_PER_KERNEL
    from gpuvar.workflow.memory import ingest_mb

    near = _export(tmp_path / "near.sqlite", 1_900_000, 1_900_000)
    expected = -(-(BASE_BYTES + 1_900_000 * (NSYS_BYTES_PER_KERNEL + NSYS_BYTES_PER_COPY)) // 2**20)
    assert ingest_mb(near) == expected > FLOOR_MB
    assert ingest_mb(_export(tmp_path / "pieces.sqlite", 3_000_000, 3_000_000)) == FLOOR_MB


@pytest.mark.snakemake
@pytest.mark.timeout(300)
def test_the_ingest_rules_ask_slurm_for_their_traces_memory(tmp_path):
    """Read where Slurm reads it: the resources a dry run gives each ingest job. A big trace's read and normalize
    jobs ask for its estimate; in a merged dataset each rank's jobs ask for their own file's."""
    import re

    import yaml
    from workflow_runs import run_workflow

    from gpuvar.ingest.footprint import BASE_BYTES

    big = _kineto(tmp_path / "big.pt.trace.json", 3 * 2**30)
    small = _kineto(tmp_path / "small.pt.trace.json", 2**20)
    config = tmp_path / "c.yaml"
    datasets = [{"name": "one", "source": str(big)}, {"name": "job", "merge": True, "source": [str(small), str(big)]}]
    config.write_text(yaml.safe_dump({"demo": {"enabled": False}, "datasets": datasets}))
    proc = run_workflow(
        tmp_path / "run", config, "-n", "results/ingest/one/ingest.json", "results/ingest/job/ingest.json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = {}
    for block in (proc.stdout + proc.stderr).split("rule ")[1:]:
        rule = block.split(":", 1)[0]
        wildcards = re.search(r"wildcards: (.*)", block).group(1)
        asked[(rule, wildcards)] = int(re.search(r"mem_mb=(\d+)", block).group(1))
    need = (BASE_BYTES >> 20) + int(1.5 * 3 * 1024)
    assert asked[("ingest_trace", "dataset=one")] == asked[("normalize_columns", "dataset=one")] == need
    assert asked[("ingest_rank", "dataset=job, rank=1")] == asked[("normalize_rank", "dataset=job, rank=1")] == need
    assert asked[("ingest_rank", "dataset=job, rank=0")] == FLOOR_MB


@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_a_slurm_jobs_memory_limit_is_what_is_available(tmp_path, kind):
    """Inside a Slurm job (or a container) the cgroup's limit, not the machine's free memory, is what an ingest
    may take: limit less usage, in either cgroup version; no limit is no figure."""
    from gpuvar.ingest.footprint import _cgroup_left

    listing = tmp_path / "cgroup"
    listing.write_text("0::/slurm/job_7\n" if kind == "v2" else "9:pids:/x\n4:memory:/slurm/job_7\n")
    limit, usage = (
        ("memory.max", "memory.current") if kind == "v2" else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    )
    folder = tmp_path / "fs" / "slurm" / "job_7"
    folder.mkdir(parents=True)
    (folder / limit).write_text(f"{4 << 30}\n")
    (folder / usage).write_text(f"{1 << 30}\n")
    files = {kind: (str(tmp_path / "fs"), limit, usage)}
    assert _cgroup_left(listing, files) == 3 << 30
    (folder / limit).write_text("max\n" if kind == "v2" else "9223372036854771712\n")
    assert _cgroup_left(listing, files) is None


def test_ingest_says_before_it_starts_when_the_trace_may_not_fit(tmp_path, monkeypatch, capsys):
    """Else the kernel may stop the process with no message at all."""
    from gpuvar.cli import main
    from gpuvar.ingest import footprint

    big = tmp_path / "big.pt.trace.json"
    with open(big, "wb") as fh:  # 3 GiB as far as its size goes; malformed after its head, so the ingest stops there
        fh.write(KINETO_HEAD + b", ]] not JSON")
        fh.truncate(3 * 2**30)
    monkeypatch.setattr(footprint, "available_bytes", lambda: 2 << 30)
    main(["ingest", str(big), "-o", str(tmp_path / "out")])  # (its error follows)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"gpuvar ingest: warning: {big}: ingesting it takes about 4.8 GB of memory"), first
    assert "2.0 GB is available" in first
    monkeypatch.setattr(footprint, "available_bytes", lambda: 64 << 30)
    main(["ingest", str(big), "-o", str(tmp_path / "out")])
    assert "warning" not in capsys.readouterr().err
