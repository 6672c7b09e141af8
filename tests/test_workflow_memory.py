"""gpuvar.workflow.memory: merge_ranks asks Slurm for the memory the k-way merge holds (a row group of the widest
table), neither the whole job nor a constant."""

from __future__ import annotations

import json

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
    from pathlib import Path

    import yaml

    profile = yaml.safe_load((Path(__file__).parents[1] / "profiles" / "slurm" / "config.yaml").read_text())
    assert int(profile["default-resources"]["mem_mb"]) == FLOOR_MB
