"""`gpuvar bench scale`: a planted multi-rank job through ingest, the merge, binning, the rank analysis and
findings, rank by rank; the planted truth is recovered and, but for the merge of a job smaller than one row group,
no process holds every launch (not timed)."""

from __future__ import annotations

import gzip
import json

import numpy as np

from gpuvar.demo.planted_scale import SIZE_RANGE, STRAGGLER_SIZE_RANGE, arrivals, layout, trace_name, write_scale_job


def test_scale_bench_recovers_the_planted_truth_and_no_process_holds_every_launch(tmp_path, run_cli):
    result = run_cli(
        "bench", "scale", "--ranks", "8", "--launches-per-rank", "5000", "--workers", "2", "--data-dir", tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["launches"] == 8 * 5000 and out["launches_per_rank"] == 5000
    truth = out["truth"]
    assert truth["straggler_found"] and truth["straggler_named"] == truth["straggler"]
    # the size cause: on every rank the add kernels (grid) and the GEMMs (step threads) are explained by size
    assert truth["ranks_analysed"] == 8
    assert truth["ranks_with_size_driver_explained"] == {"aten::add": 8, "aten::mm": 8}
    # the call sites across ranks: the straggler (more data per step) runs every GEMM call site shown slowest
    assert truth["gemm_sites_shown"] >= 5 and truth["gemm_sites_slowest_on_straggler"] == truth["gemm_sites_shown"]
    assert truth["sites_finding_names_straggler"]
    assert set(out["stages"]) == {"ingest", "merge", "binning", "ranks", "findings"}
    # the merge of the ranks (one process, a k-way merge of their files) holds a run of rows and up to a row group
    # (262,144 rows) being written: this whole job of 40,000 launches; at 256 x 100 k it held 0.3 M rows of 25.6 M
    (merge,) = out["stages"]["merge"]["processes"]
    assert merge["ranks"] == 8 and merge["balanced"] and merge["rows_read"] == 40000 == merge["rows_held"]
    assert 0 < merge["corun_keys_held"] <= 40000
    for name, stage in out["stages"].items():
        assert stage["wall_s"] > 0 and stage["launches_per_s"] > 0, name
        if name == "merge":
            continue
        assert len(stage["processes"]) == 2, name
        for process in stage["processes"]:  # every process says what it held, and none held every launch
            assert 0 < process["rows_held"] < out["launches"], (name, process)
            assert process["peak_rss_mb"] > 0
    # a rank's stage process holds one rank at a time; a binning rank reads its half of the rows and holds, at
    # most, those of one round of bins (here, with every row in one round: its own and what it receives)
    assert all(p["rows_held"] == 5000 for s in ("ingest", "ranks", "findings") for p in out["stages"][s]["processes"])
    binning = out["stages"]["binning"]["processes"]
    assert [p["rows_read"] for p in binning] == [20000, 20000]
    assert all(5000 <= p["rows_held"] < 40000 for p in binning), binning
    held = max(p["rows_held"] for n, s in out["stages"].items() if n != "merge" for p in s["processes"])
    assert out["rows_held_max"] == 40000 and held < 40000
    assert out["one_process_held_all"] is True  # the merge's row group, at this size (above)


def test_planted_scale_job_is_seeded_and_its_straggler_is_last_most_often(tmp_path):
    a = write_scale_job(tmp_path / "a", 4, 2000, seed=3)
    b = write_scale_job(tmp_path / "b", 4, 2000, seed=3)
    for r in range(4):
        assert (tmp_path / "a" / trace_name(r)).read_bytes() == (tmp_path / "b" / trace_name(r)).read_bytes()
    assert a == b and a["launches_per_rank"] == 2000
    # the arrivals the writer planted: the straggler's work exceeds the others' in most steps
    steps, blocks = layout(2000)
    work = arrivals(4, steps, blocks, 3)
    last = np.argmax(work, axis=0)
    assert np.bincount(last, minlength=4).argmax() == a["straggler"]
    assert a["straggler_last_steps"] == int((last == a["straggler"]).sum()) > steps / 2
    # the trace itself: one NCCL kernel per step, ProfilerStep ranges, the straggler's add grids above the others'
    events = json.loads(gzip.open(tmp_path / "a" / trace_name(a["straggler"])).read())["traceEvents"]
    nccl = [e for e in events if e["cat"] == "kernel" and e["name"].startswith("ncclDevKernel")]
    assert len(nccl) == steps == len([e for e in events if e["name"].startswith("ProfilerStep#")])
    grids = {e["args"]["grid"][0] for e in events if e["name"] == "elementwise_add_kernel"}
    assert min(grids) >= 4 * 256 * STRAGGLER_SIZE_RANGE[0] and max(grids) <= 4 * 256 * STRAGGLER_SIZE_RANGE[1]
    other = json.loads(gzip.open(tmp_path / "a" / trace_name((a["straggler"] + 1) % 4)).read())["traceEvents"]
    assert max(e["args"]["grid"][0] for e in other if e["name"] == "elementwise_add_kernel") <= 4 * 256 * SIZE_RANGE[1]
