"""gpuvar.workflow.memory: merge_ranks asks Slurm for the memory the merge holds (every rank's rows), not 4 GB."""

from __future__ import annotations

import json

from gpuvar.workflow.memory import FLOOR_MB, MERGE_BYTES_PER_ROW, merge_mb, rows_in_reports


def _report(path, kernels: int, memcpy: int = 0):
    tables = {"kernels": {"rows_written": kernels, "rows_read": kernels}, "memcpy": {"rows_written": memcpy}}
    path.write_text(json.dumps({"tables": tables}))
    return path


def test_a_256_rank_job_asks_for_what_its_merge_holds(tmp_path):
    reports = [_report(tmp_path / f"r{k}.json", 100_000, 2_000) for k in range(256)]
    assert rows_in_reports(reports) == 256 * 102_000
    mb = merge_mb(reports)
    assert mb * 2**20 >= 256 * 102_000 * MERGE_BYTES_PER_ROW and 30_000 < mb < 40_000  # measured ~1.06 KB a row


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
