"""`gpuvar ranks`: the late rank per step, waiting in collectives, and what makes the late rank late."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from gpuvar.cli import main
from gpuvar.layout import OUTPUT_MARKER
from gpuvar.ranks.analyze import analyze
from gpuvar.ranks.load import from_ingest
from gpuvar.ranks.planted import write_merged, write_planted

GLOO = Path("/work/shared/data/real/pytorch-kineto-trace/h100-2rank-gloo")
TRACES = [GLOO / "rank0.pt.trace.json.gz", GLOO / "rank1.pt.trace.json.gz"]


def _independent(path: Path) -> tuple[np.ndarray, float, float]:
    """From the raw JSON alone: gloo:all_reduce starts, their summed duration and the rank's profiled span (µs)."""
    events = json.load(gzip.open(path))["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"]
    gloo = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "gloo:all_reduce")
    span = max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)
    return np.array([g[0] for g in gloo]), float(sum(g[1] for g in gloo)), span


@pytest.mark.skipif(not GLOO.is_dir(), reason="real gloo traces not available")
def test_real_gloo_pair_names_rank1_and_matches_the_raw_json(tmp_path):
    out = tmp_path / "out"
    assert main(["ranks", "--traces", *map(str, TRACES), "-o", str(out)]) == 0
    record = json.loads((out / "ranks.json").read_text())
    assert record["straggler"] == 1
    (a0, w0, span0), (a1, _, _) = _independent(TRACES[0]), _independent(TRACES[1])
    raw_last1 = float((a1 > a0).mean())
    raw_wait0 = w0 / span0
    got = record["per_rank"]
    assert abs(got["1"]["last_share"] - raw_last1) <= 0.05
    assert abs(got["0"]["wait_share"] - raw_wait0) <= 0.05
    assert abs(got["1"]["last_share"] - 87 / 150) <= 0.05  # PROVENANCE: rank 1 late in 87 of 150 steps
    assert abs(got["0"]["wait_share"] - 0.26) <= 0.05  # PROVENANCE: ~245 ms, ~26 % of rank 0's time
    assert abs(got["0"]["wait_ns"] / 1e6 - 245) <= 10
    assert record["findings"][0].startswith("rank 1 is last in 58 % of steps (87 of 150)")
    for name in ("steps.csv", "ranks.md", "timeline.png", "skew.png"):
        assert (out / name).stat().st_size > 0
    page = (out / "ranks.md").read_text()  # the split's heading reads as a sentence, in the table's unit
    assert "What rank 1's time to the collective (step start to arrival) is made of, step by step" in page
    assert "ns; the first step" not in page


def test_planted_straggler_its_waits_and_its_driver_are_found(tmp_path):
    folders, truth = write_planted(tmp_path / "job", steps=60, seed=3)
    result = analyze(from_ingest(folders))
    s = result.summary
    assert s["straggler"] == 1
    last = result.steps[result.steps["last"] == 1].sort_values("step")["rank"].to_numpy()
    assert last.tolist() == truth["last"]
    assert {int(r): p["wait_ns"] for r, p in s["per_rank"].items()} == truth["wait_ns"]
    parts = {p["part"]: p for p in s["driver"]["parts"]}
    assert s["driver"]["parts"][0]["part"] == "aten::mm" and parts["aten::mm"]["share_of_variance"] > 0.8
    assert parts["host gaps"]["share_of_variance"] < 0.1
    assert sum(p["share_of_variance"] for p in s["driver"]["parts"]) == pytest.approx(1.0, abs=0.01)
    assert s["driver"]["size_check"]["verdict"] == "explained"  # the GEMM time follows the rank's rows


def test_planted_host_cause_is_named_as_host_gaps_not_gpu_work(tmp_path):
    """The same job where rank 1's host, not its GEMMs, varies: the split must say so (it can fail both ways)."""
    folders, _ = write_planted(tmp_path / "job", steps=60, seed=3, cause="host")
    s = analyze(from_ingest(folders)).summary
    assert s["straggler"] == 1
    assert s["driver"]["parts"][0]["part"] == "host gaps" and s["driver"]["parts"][0]["share_of_variance"] > 0.8
    assert "host gaps" in s["driver"]["parts"][0]["part"]


@pytest.mark.skipif(not GLOO.is_dir(), reason="real gloo traces not available")
def test_real_gloo_lateness_is_rank1_s_gpu_work_not_its_host_gaps():
    """Rank 1's rows vary per step (the designed cause) on a GPU it shares with rank 0. Its time to the collective
    splits into its GEMMs first, then the GPU's time on rank 0's kernels; one 17 ms host stall (step 5) is listed
    apart instead of carrying the variance (it made host gaps 'R² 0.62' before)."""
    from gpuvar.ranks.load import from_traces

    s = analyze(from_traces([str(t) for t in TRACES])).summary
    parts = s["driver"]["parts"]
    assert parts[0]["part"] == "aten::mm" and parts[0]["share_of_variance"] > 0.5
    assert parts[1]["part"] == "other processes' kernels on its GPU"
    gaps = next(p for p in parts if p["part"] == "host gaps")
    assert gaps["share_of_variance"] < parts[0]["share_of_variance"] / 3
    assert [x["step"] for x in s["driver"]["host_stalls"]] == [5]
    assert s["driver"]["same_gpu_as_other_ranks"] is True


def test_planted_nccl_job_waits_inside_the_collective_kernels(tmp_path):
    """Ranks that meet in a device-side NCCL all-reduce (no host copies): arrival is the kernel's start, the wait
    is the kernel time beyond the shortest rank's (the shared transfer is not waiting)."""
    folders, truth = write_planted(tmp_path / "job", steps=50, seed=4, collective="nccl")
    data = from_ingest(folders)
    assert data.collective_source == "NCCL kernels"
    s = analyze(data).summary
    assert s["straggler"] == 1 and s["per_rank"]["1"]["last_steps"] == truth["last"].count(1)
    assert {int(r): p["wait_ns"] for r, p in s["per_rank"].items()} == truth["wait_ns"]
    assert s["driver"]["parts"][0]["part"] == "aten::mm"


def test_planted_job_merged_into_one_folder_gives_the_same_answer(tmp_path):
    folders, truth = write_planted(tmp_path / "job", steps=40, seed=5)
    merged = write_merged(folders, tmp_path / "merged")
    s = analyze(from_ingest([merged])).summary
    assert s["per_rank"]["1"]["last_steps"] == truth["last"].count(1)


def test_one_rank_says_nothing_to_compare(tmp_path, capsys):
    folders, _ = write_planted(tmp_path / "job", steps=30)
    out = tmp_path / "out"
    assert main(["ranks", str(folders[0]), "-o", str(out)]) == 0
    assert json.loads((out / "ranks.json").read_text())["result"] == "one rank: nothing to compare"
    assert "nothing to compare" in (out / "ranks.md").read_text()


def test_bad_input_is_one_line_error(tmp_path, capsys):
    assert main(["ranks", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no kernels.parquet" in err and str(tmp_path) in err
    with pytest.raises(SystemExit) as missing:  # argparse: no input at all
        main(["ranks", "-o", str(tmp_path / "out")])
    assert missing.value.code == 2 and "required: INPUT" in capsys.readouterr().err


def test_outputs_are_byte_identical_on_rerun(tmp_path):
    folders, _ = write_planted(tmp_path / "job", steps=40, seed=1)
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["ranks", *map(str, folders), "-o", str(a)]) == 0
    assert main(["ranks", *map(str, folders), "-o", str(b)]) == 0
    names = sorted(p.name for p in a.iterdir())
    assert names == [
        OUTPUT_MARKER,
        "call_sites.csv",
        "ranks.html",
        "ranks.json",
        "ranks.md",
        "skew.png",
        "steps.csv",
        "timeline.png",
    ]
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_ingest_without_host_round_trips_says_lateness_cannot_be_compared(tmp_path):
    import pandas as pd

    folders, _ = write_planted(tmp_path / "job", steps=30)
    for f in folders:  # keep the DtoH copies only: no collective is visible from the device
        m = pd.read_parquet(f / "memcpy.parquet")
        m[m["copy_kind_name"] == "DtoH"].to_parquet(f / "memcpy.parquet", index=False)
    result = analyze(from_ingest(folders))
    assert result.summary["collectives_compared"] == 0
    assert result.findings == ["no collective is seen on every rank: lateness cannot be compared"]


def test_median_pace_counterfactual_matches_the_planted_arrivals(tmp_path):
    """If the straggler kept its median time to the collective, the other rank would stop waiting for it in the
    steps where it ran slower than its median: computed independently from the step table."""
    folders, _ = write_planted(tmp_path / "job", steps=60, seed=3)
    result = analyze(from_ingest(folders))
    paced = result.summary["driver"]["if_at_median_pace"]
    s = result.steps.pivot_table(index="step", columns="rank", values=["arrival_ns", "start_ns"]).iloc[1:]
    own, other, start = s[("arrival_ns", 1)], s[("arrival_ns", 0)], s[("start_ns", 1)]
    new = start + (own - start).median()
    expected = (np.maximum(own, other) - other) - (np.maximum(new, other) - other)
    assert paced["others_wait_less_per_step_ns"]["value"] == pytest.approx(expected.clip(lower=0).mean(), rel=1e-6)
    lo, hi = paced["others_wait_less_per_step_ns"]["interval"]
    assert lo <= paced["others_wait_less_per_step_ns"]["value"] <= hi
    assert any(f.startswith("if rank 1 kept its median pace") for f in result.findings)


def test_waits_of_many_ranks_are_two_findings_not_one_per_rank():
    """A 256-rank job gave 256 'rank N waits ...' findings. Beyond WAIT_LINES_MAX ranks the straggler keeps its own
    line and the others are one line with their range and median; up to it, one line per rank as before."""
    from gpuvar.ranks.analyze import WAIT_LINES_MAX, wait_lines

    def per_rank(n: int, straggler: int) -> dict:
        per = {str(r): {"wait_share": 0.30 + r / 1000, "wait_ns": 3e8, "profiled_ns": 1e9} for r in range(n)}
        per[str(straggler)]["wait_share"] = 0.05
        return per

    many = wait_lines(list(range(40)), per_rank(40, 17), 17)
    assert many == [
        "rank 17, the straggler, waits 5 % of its time in collectives (300 ms of 1000 ms)",
        "the other 39 ranks wait 30–34 % of their time in collectives (median 32 %; every rank's wait: "
        "ranks.json per_rank)",
    ]
    unordered = wait_lines(list(range(40)), per_rank(40, 17), None)  # the clocks disagree: no straggler
    assert unordered == [
        "the 40 ranks wait 5–34 % of their time in collectives (median 32 %; every rank's wait: ranks.json per_rank)"
    ]
    few = wait_lines(list(range(WAIT_LINES_MAX)), per_rank(WAIT_LINES_MAX, 3), 3)
    assert len(few) == WAIT_LINES_MAX and few[3].startswith("rank 3 waits 5 % of its time in collectives")


def test_the_figures_of_many_ranks_draw_the_straggler_and_the_extremes():
    """The first 16 of 256 ranks left the straggler out of timeline.png and skew.png."""
    from gpuvar.ranks.report import MAX_TIMELINE_RANKS, drawn_ranks

    ranks = list(range(256))
    per = {str(r): {"wait_share": 0.4 + (r % 7) / 100} for r in ranks}
    per["226"]["wait_share"], per["3"]["wait_share"] = 0.08, 0.9  # the straggler waits least, rank 3 most
    drawn = drawn_ranks({"ranks": ranks, "straggler": 226, "per_rank": per})
    assert len(drawn) == MAX_TIMELINE_RANKS == len(set(drawn)) and drawn == sorted(drawn)
    assert {226, 3, 0, 255} <= set(drawn)  # the straggler, the most waiting, and the spread's two ends
    assert max(b - a for a, b in zip(drawn, drawn[1:])) <= 2 * 256 // (MAX_TIMELINE_RANKS - 2)  # evenly spaced
    assert drawn_ranks({"ranks": ranks[:5], "straggler": 1, "per_rank": {}}) == [0, 1, 2, 3, 4]
