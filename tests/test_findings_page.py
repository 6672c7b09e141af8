"""The findings page as a performance engineer reads it (issue 36 item 2), on the planted page traps
(gpuvar.demo.planted_findings.page_traps): every analysed group in findings.json while the page shows the top
ones; shared advice once; the longest launch as evidence, with times a person can find; the time floor; "stable"
only for enough launches; one launch is "nothing to compare"."""

from __future__ import annotations

import json
import re

import pytest

from gpuvar.demo.planted_findings import LONGEST_NS, PAGE_OPS, page_traps
from gpuvar.findings.report import MAX_FINDINGS
from gpuvar.units import duration_text


@pytest.fixture(scope="module")
def traps(tmp_path_factory):
    from gpuvar.cli import main

    folder = tmp_path_factory.mktemp("page_traps")
    (folder / "ingest").mkdir()
    frame = page_traps()
    frame.to_parquet(folder / "ingest" / "kernels.parquet")
    assert main(["findings", str(folder / "ingest"), "--name", "traps", "-o", str(folder / "out")]) in (0, None)
    record = json.loads((folder / "out" / "findings.json").read_text())["datasets"][0]
    return frame, record, (folder / "out" / "findings.md").read_text()


def test_findings_json_holds_every_analysed_group_and_the_page_the_top_ones(traps):
    _, record, page = traps
    ops = {f"aten::op{i}" for i in range(PAGE_OPS)}
    assert ops <= {f["group"] for f in record["findings"]}
    assert record["page_findings"] == MAX_FINDINGS < len(record["findings"])
    assert f"### {MAX_FINDINGS}. " in page and f"### {MAX_FINDINGS + 1}. " not in page
    assert f"{len(record['findings']) - MAX_FINDINGS} more findings in findings.json" in page


def test_shared_advice_is_written_once_per_dataset(traps):
    _, record, page = traps
    (key, advice), *_ = record["shared_advice"].items()
    assert page.count(advice["do"]) == 1
    assert page.count(f"**Do**: see *{key}* below") == sum(
        f["advice"] == key for f in record["findings"][:MAX_FINDINGS]
    )


def test_the_evidence_is_the_longest_launch_with_times_a_person_can_find(traps):
    frame, record, page = traps
    longest = frame.loc[frame["duration"].idxmax()]
    finding = next(f for f in record["findings"] if f["group"] == longest["launch_op"])
    launch = finding["evidence"]["slowest_launch"]
    assert launch["duration_ns"] == LONGEST_NS and launch["launch_id"] == longest["launch_id"]
    assert launch["ratio"] > 10 and launch["from_trace_start_ns"] == longest["start"] - frame["start"].min()
    line = next(x for x in page.splitlines() if f"longest launch {duration_text(LONGEST_NS)}" in x)
    assert "after the trace's first kernel" in line and f"profiler timestamp {longest['start']}" in line
    assert not re.search(r"\de\+\d", page)  # no 3.83e+03 ms


def test_a_group_below_the_time_floor_that_nothing_explains_is_not_ranked(traps):
    _, record, page = traps
    assert "aten::tiny" in {e["group"] for e in record["below_time_floor"]}
    assert "aten::tiny" not in {f["group"] for f in record["findings"]}
    assert "Variable but costs < 0.1 % of kernel time" in page


def test_stable_needs_enough_launches_and_one_launch_is_nothing_to_compare(traps):
    _, record, page = traps
    stable = {e["group"]: e for e in record["stable"]}
    assert set(stable) == {"aten::steady"} and stable["aten::steady"]["cv_within"] < 0.03
    not_compared = {e["group"]: e["reason"] for e in record["not_compared"]}
    assert set(not_compared) == {"aten::once", "aten::few_steady"}
    assert all(reason.startswith("too few launches") for reason in not_compared.values())
    assert re.search(r"aten::steady: 300 launches, CV within call sites \d\.\d %", page)


def test_a_one_launch_trace_reads_as_one_launch_with_nothing_to_split(tmp_path, run_cli):
    """The real Nsight Compute CSV of one SAXPY launch: counts in the singular, and no shares that add up to 0 %
    (the console printed "0 % call sites, 0 % size, ..." and "1 launches of 1 kernel names at 1 call sites")."""
    from conftest import real_file

    result = run_cli("explain", real_file("ncu-csv/roofline-profiler-rtx5070/saxpy.csv"), "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    first = result.stdout.splitlines()[0]
    assert first == (
        "saxpy: 1 launch, 1 kernel name at 1 call site; no spread of durations to split (too few launches to compare)"
    )
    assert "1 group not compared (too few launches)" in result.stdout
    page = (tmp_path / "out" / "findings" / "findings.md").read_text()
    assert "1 launch of 1 kernel name at 1 call site, " in page and "1 launch at 1 call site: too few" in page


@pytest.mark.long  # ~12 s of two explains: in `make test`, not `make test-fast`
@pytest.mark.parametrize(
    "trace",
    [
        "omniperf-pmc-perf/omniperf-multikernel-mi200/pmc_perf.csv",  # pandas PerformanceWarning before
        "pytorch-kineto-trace/hta-sampled-rank0/sampled_rank-0.json.gz",  # numpy RuntimeWarning before
    ],
)
def test_no_library_warning_reaches_the_console(trace, tmp_path, run_cli):
    from conftest import real_file

    result = run_cli("explain", str(real_file(trace)), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Warning" not in result.stderr and "Warning" not in result.stdout, result.stderr[-2000:]


def test_the_step_headline_says_how_many_partial_steps_it_left_out():
    """The dataset's line counts every step; the step line measures the whole ones. Where it left partial steps out
    (fewer than half the median step's launches: a step the profiler's window cut, or a launch pattern that split
    one), it says how many, so that the two counts do not contradict each other."""
    from gpuvar.findings.steps import headline

    record = {
        "gpu_time_ns": {"min": 1.4e4, "max": 2.2e5, "median": 2.5e4, "p95": 6.2e4, "cv": 0.53},
        "steps": 500_165,
        "partial_steps_left_out": 498_802,
        "shares": None,
        "declined": "too few steps",
    }
    assert "over 500165 steps (median 25 µs, p95 62 µs, CV 53 %; 498802 partial steps left out: under half the" in (
        headline(record)
    )
    record |= {"ranks": 4, "partial_steps_left_out": 1}
    assert "over 500165 steps of 4 ranks (median 25 µs, p95 62 µs, CV 53 %; 1 partial rank step left out:" in (
        headline(record)
    )
    record["partial_steps_left_out"] = 0
    assert "left out" not in headline(record)


def test_the_step_headline_says_which_op_offsets_shares_above_100_percent():
    """On a straggler rank its collective waits less as its GEMMs grow: a negative covariance share, and the GEMMs'
    share passes 100 %. The headline names the op that offsets it instead of leaving '105 %' unexplained."""
    from gpuvar.findings.steps import headline

    record = {
        "gpu_time_ns": {"min": 1.43e8, "max": 2.01e8, "median": 1.43e8, "p95": 2.01e8, "cv": 0.14},
        "steps": 100,
        "shares": {"size": 0.99, "context": 0.0, "unexplained": 0.01},
        "ops": [
            {"group": "aten::mm", "share": 1.05},
            {"group": "aten::add", "share": 0.42},
            {"group": "aten::copy_", "share": -0.01},
            {"group": "c10d::allreduce_", "share": -0.47},
        ],
    }
    line = headline(record)
    assert line.endswith(
        "carried by aten::mm 105 %, aten::add 42 %, offset by c10d::allreduce_ -47 % (its time falls as the step's rises)"
    )
    record["ops"] = record["ops"][:3]
    assert "offset" not in headline(record)  # -1 %: noise, not said
