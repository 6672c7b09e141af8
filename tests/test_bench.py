"""The ingest and binning benchmarks print one JSON object with the peers measured in the same run and agree."""

from __future__ import annotations

import importlib.util
import json

import pytest


def test_bench_ingest_reports_the_sqlite_floor(tmp_path, run_cli):
    result = run_cli("bench", "ingest", "--rows", "3000", "--data-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kernel_rows"] == 3000 and out["memcpy_rows"] > 0
    # the floor scans the columns gpuvar needs: 18 kernel + 8 copy columns of the 2024.6 layout
    assert out["floor_columns"] == {"CUPTI_ACTIVITY_KIND_KERNEL": 18, "CUPTI_ACTIVITY_KIND_MEMCPY": 8}
    assert out["floor_s"] == min(out["floor_fetchall_s"], out["floor_cursor_loop_s"]) > 0
    assert out["ratio_vs_floor"] == pytest.approx(out["wall_s"] / out["floor_s"], rel=0.1)
    assert (
        out["kernel_columns_written"] > out["kernel_columns_written_no_vendor_columns"] == 39
    )  # canonical (with rank) + launch_op, step, call_index, call_site + 6 ctx_* columns
    assert out["connectorx_s"] > 0 and out["sqlite_engine_s"] > 0


@pytest.mark.mpi
def test_bench_binning_polars_agrees_with_gpuvar(tmp_path, run_cli):
    engines = ["gpuvar"] + [e for e in ("polars", "duckdb") if importlib.util.find_spec(e)]
    if len(engines) == 1:
        pytest.skip("neither polars nor duckdb installed (pip install -e '.[bench]')")
    result = run_cli(
        "bench",
        "binning",
        "--rows",
        "20000",
        "--ranks",
        "2",
        "--bin-width",
        "1ms",
        "--top-k",
        "5",
        "--data-dir",
        tmp_path,
        "--engines",
        ",".join(engines),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = json.loads(result.stdout)
    assert out["agree"] is True and out["bins"] > 5
    assert 0 < out["machine_2proc_speedup"] < 3  # the ceiling of a 1 -> 2 rank speedup at that moment
    assert set(out["max_rel_diff"]) == {
        f"{a}_vs_{b}" for i, a in enumerate(sorted(engines)) for b in sorted(engines)[i + 1 :]
    }
    if "polars" in engines:
        assert out["polars_same_top_k"] is True and out["polars_threads"] == 2
        assert out["gpuvar_over_polars"] == pytest.approx(out["gpuvar_s"] / out["polars_s"], rel=0.05)
