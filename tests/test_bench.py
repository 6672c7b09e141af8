"""The ingest and binning benchmarks print one JSON object with the peers measured in the same run and agree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


def ratio_of_rounded(ratio: float, numerator: float, denominator: float, ms: float = 5e-4) -> bool:
    """`ratio` (printed to 0.01) is numerator / denominator, both printed to the millisecond."""
    low = (numerator - ms) / (denominator + ms)
    high = (numerator + ms) / max(denominator - ms, 1e-9)
    return low - 0.005 <= ratio <= high + 0.005


def test_bench_ingest_of_a_capture_with_api_calls_in_pieces(tmp_path, run_cli):
    """--api-calls: the capture with CUDA API calls and NVTX ranges, ingested in pieces (the sweep in call order);
    the references read the host tables' columns too."""
    args = ("bench", "ingest", "--rows", "3000", "--repeat", "1", "--api-calls", "--pieces", "always")
    result = run_cli(*args, "--data-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["trace"] == "capture with API calls" and out["kernel_rows"] == 3000
    assert {"CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"} <= set(out["columns_read"])
    assert out["pieces"]["count"] == 1 and out["scan_s"] is None
    assert out["sqlite_engine_s"] > 0 and out["wall_s"] > 0


def test_bench_ingest_reports_arrow_native_readers_and_the_sqlite_engine(tmp_path, run_cli):
    result = run_cli("bench", "ingest", "--rows", "3000", "--repeat", "1", "--data-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kernel_rows"] == 3000 and out["memcpy_rows"] > 0
    # the references read what gpuvar reads: every column by default, 18 kernel + 8 copy columns without vendor ones
    assert out["columns_read"] == {"CUPTI_ACTIVITY_KIND_KERNEL": 28, "CUPTI_ACTIVITY_KIND_MEMCPY": 20}
    assert out["columns_read_no_vendor_columns"] == {"CUPTI_ACTIVITY_KIND_KERNEL": 18, "CUPTI_ACTIVITY_KIND_MEMCPY": 8}
    readers = ["connectorx", "connectorx_2_partitions"] + (
        ["adbc"] if importlib.util.find_spec("adbc_driver_sqlite") else []
    )
    for suffix in ("", "_no_vendor_columns"):
        times = {r: out[f"{r}_s{suffix}"] for r in readers}
        assert times[out[f"arrow_native_fastest{suffix}"]] == min(times.values())  # (rounded: ties possible)
        assert out[f"arrow_native_s{suffix}"] == min(times.values()) > 0
        assert out[f"sqlite_engine_s{suffix}"] > 0
    # the ratios are of the unrounded times; the times are printed to the ms (at 3,000 rows a few ms each)
    assert ratio_of_rounded(out["ratio_vs_arrow_native"], out["wall_s"], out["arrow_native_s"])
    assert ratio_of_rounded(out["ratio_scan_vs_arrow_native"], out["scan_s"], out["arrow_native_s"])
    assert 0 < out["scan_s"] <= out["read_s"] <= out["wall_s"]
    assert "floor_s" not in out  # no Python cursor loop as a "floor"
    assert (
        out["kernel_columns_written"] > out["kernel_columns_written_no_vendor_columns"] == 50
    )  # canonical (with rank) + launch_op, step, op_occurrence, call_index, call_site, step_threads, 7 op_* input-shape columns + 8 ctx_* columns


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
        "--repeat",
        "1",
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
        assert out["gpuvar_runs_s"] == [out["gpuvar_s"]] and out["polars_runs_s"] == [out["polars_s"]]
        assert out["gpuvar_fixed_s"] < out["gpuvar_s"] and out["sample_bins"] == 0
    if "duckdb" in engines:  # run as often as the others, its fastest run reported
        assert out["duckdb_runs_s"] == [out["duckdb_s"]] and out["duckdb_job_runs_s"] == [out["duckdb_job_s"]]
        assert out["duckdb_same_top_k"] is True  # the whole job: the same top-k bins and rows as gpuvar's
        assert out["duckdb_job_s"] >= out["duckdb_s"]


@pytest.mark.mpi
def test_bench_paper_scale_bins_every_trace_at_once(tmp_path, run_cli):
    result = run_cli(
        "bench",
        "paper-scale",
        "--rows",
        "4000",
        "--ranks",
        "2",
        "--traces",
        "2",
        "--bin-width",
        "1ms",
        "--top-k",
        "3",
        "--data-dir",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = json.loads(result.stdout)
    assert out["bench"] == "paper-scale"
    assert (out["traces"], out["rows_per_trace"], out["ranks_per_trace"], out["total_ranks"]) == (2, 4000, 2, 4)
    assert out["rows_binned"] == [4000, 4000] and all(b > 3 for b in out["bins"])
    assert len(out["trace_wall_s"]) == len(out["phase_s"]) == len(out["peak_rss_mb_per_rank"]) == 2
    assert 0 < max(out["trace_wall_s"]) == out["wall_s"]
    assert all(len(rss) == 2 for rss in out["peak_rss_mb_per_rank"])  # one per rank
    assert out["rows_per_s"] == pytest.approx(8000 / out["wall_s"], rel=0.01)
    assert len(set(out["data"])) == 2 and all(s is not None for s in out["generate_s"])  # two distinct traces
    assert out["paper"] == {"traces": 4, "rows_per_trace": 93_000_000, "bins": 272_000, "ranks": 1024, "wall_s": 80.0}
    again = json.loads(
        run_cli(
            "bench", "paper-scale", "--rows", "4000", "--ranks", "1", "--traces", "2", "--data-dir", tmp_path
        ).stdout
    )
    assert again["generate_s"] == [None, None]  # the traces are reused


def test_bench_paper_scale_to_findings_runs_every_stage_to_the_page(tmp_path, run_cli):
    """--to findings: Nsight Systems traces through ingest, binning, causal graphs and findings to one page; per
    stage its wall time and every process's peak RSS (not timed)."""
    args = ["--rows", "3000", "--ranks", "2", "--traces", "2", "--top-k", "3", "--jobs", "2", "--data-dir", tmp_path]
    result = run_cli("bench", "paper-scale", "--to", "findings", *args)
    assert result.returncode == 0, result.stderr + result.stdout
    out = json.loads(result.stdout)
    assert (out["to"], out["traces"], out["rows_per_trace"]) == ("findings", 2, 3000)
    assert out["launches"] == 6000 and out["page_written"] and all(n > 0 for n in out["findings_per_trace"])
    assert set(out["stages"]) == {"ingest", "binning", "causal", "findings", "page"}
    for name, stage in out["stages"].items():
        assert stage["wall_s"] > 0 and all(rss > 0 for rss in stage["peak_rss_mb"]), name
    assert [len(r) for r in out["stages"]["binning"]["peak_rss_mb_per_rank"]] == [2, 2]
    assert all(p > 0 for p in out["peak_rss_mb_max"].values())
    assert all(Path(p).suffix == ".sqlite" for p in out["data"])
    # the two traces were written at once, each in its own process: the bytes one process writes alone
    assert all(s is not None for s in out["generate_s"])
    from gpuvar.bench.paper_pipeline import nsys_trace

    alone, _ = nsys_trace(tmp_path / "alone", 3000, 0, 1)
    assert Path(out["data"][1]).read_bytes() == alone.read_bytes()


def test_bench_paper_scale_refuses_a_bad_size(tmp_path, run_cli):
    result = run_cli("bench", "paper-scale", "--rows", "0", "--data-dir", tmp_path)
    assert result.returncode != 0 and "--rows must be positive" in result.stderr


def test_the_findings_bench_child_reports_its_own_peak_not_its_parents(tmp_path):
    """A child started by a parent holding 400 MB (as the bench process right after generating a trace) reports
    its own peak, not the parent's: Linux carries ru_maxrss across fork and exec."""
    import subprocess
    import sys

    held = bytearray(400 << 20)
    held[::4096] = b"x" * len(held[::4096])  # every page touched: resident
    code = "from gpuvar.bench.findings import own_peak_rss_kb; print(own_peak_rss_kb())"
    peak_kb = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < peak_kb < 300 << 10
    del held
