"""`gpuvar compare` on profiler files, its console summary, and verdicts consistent with the interval (issue 36 item 4b).

Trace files are ingested first into OUTPUT/ingest/{baseline,candidate}; the console gets a few readable lines
(JSON with --json); a row's p-value is read off the same bootstrap as its interval, so a ratio whose interval
excludes 1 is never `unchanged` for want of significance -- unless Benjamini-Hochberg over many kernels says so,
and then the row's hint says it. Real pair: the two halves of the H100 fixed-shape recording as two
.pt.trace.json.gz files, the second with GELU 3 % slower (gpuvar.demo.kineto_split)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.compare.kernels import compare_kernels
from gpuvar.demo.kineto_split import split

FIXED = "pytorch-kineto-trace/h100-fixed-shape-copy-contention/fixedcontend.pt.trace.json.gz"
GELU = "GeluCUDAKernelImpl"


@pytest.fixture(scope="module")
def trace_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace_pair")
    before, after = root / "before.pt.trace.json.gz", root / "after.pt.trace.json.gz"
    split(real_file(FIXED), before, after, slow_kernel=GELU, factor=1.03)
    return before, after


def test_compare_two_trace_files_ingests_them_and_prints_a_summary(trace_pair, tmp_path, run_cli):
    before, after = trace_pair
    out = tmp_path / "cmp"
    proc = run_cli("compare", before, after, "-o", out, "--bootstrap", "500", "--formats", "png")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "before → after"  # the runs named as explain names a dataset
    assert lines[2].startswith("  1 slower, 0 faster (beyond noise and at least 2 %)")
    assert "GeluCUDAKernelImpl" in lines[3] and ": slower ×1.0" in lines[3]  # the flagged row comes first
    assert lines[-1] == f"comparison page: {out}/compare.md" and not proc.stdout.lstrip().startswith("{")
    record = json.loads((out / "compare.json").read_text())
    for side, trace in (("baseline", before), ("candidate", after)):
        assert (out / "ingest" / side / "kernels.parquet").is_file()
        assert record[side]["source"] == str(trace)
        assert record[side]["kernels_file"] == str(out / "ingest" / side / "kernels.parquet")
    # --json: the summary record for scripts
    again = run_cli("compare", out / "ingest" / "baseline", out / "ingest" / "candidate", "-o", tmp_path / "j",
                    "--bootstrap", "500", "--formats", "png", "--json")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["slower"] == 1


def test_real_rows_p_below_alpha_exactly_when_the_interval_excludes_one(trace_pair, tmp_path, run_cli):
    before, after = trace_pair
    proc = run_cli("compare", before, after, "-o", tmp_path / "cmp", "--bootstrap", "500", "--formats", "png")
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "cmp" / "kernels.csv")
    tested = table[table["p_value"].notna()]
    assert len(tested) >= 10
    excludes = (tested["ci_low"] > 1) | (tested["ci_high"] < 1)
    assert ((tested["p_value"] < 0.05) == excludes).all(), tested[["label", "ratio", "ci_low", "ci_high", "p_value"]]
    unexplained = tested[(tested["verdict"] == "unchanged") & excludes & ~tested["hint"].fillna("").str.contains("q =")]
    assert unexplained.empty


def _two_mode_pair(rng):
    """A baseline whose per-step medians jump between two modes (21 slow steps of 41 at 300 ns, 20 at 10 µs) and
    a candidate at 110 ns: every resampled ratio is below 1, but spread over 0.011..0.37."""
    units = np.repeat(np.arange(41), 10)
    base = np.where(units < 21, 300.0, 10_000.0) * (1 + 0.01 * rng.random(len(units)))
    cand = np.full(len(units), 110.0) * (1 + 0.01 * rng.random(len(units)))
    frame = pd.DataFrame({"key": "k", "unit": units})
    return frame.assign(duration=base), frame.assign(duration=cand)


def test_an_interval_excluding_one_is_not_called_unchanged():
    # the row: x0.37 [0.01, 0.63] labelled 'unchanged' (a Wald p from the spread of both modes)
    base, cand = _two_mode_pair(np.random.default_rng(0))
    (row,) = compare_kernels(base, cand, bootstrap=2000).to_dict("records")
    assert row["ratio"] == pytest.approx(0.365, abs=0.01) and row["ci_high"] < 1
    assert row["p_value"] < 0.05 and row["verdict"] == "faster"


def test_many_kernels_tested_is_said_in_the_row():
    """One kernel 1.5 % slower among 40 unchanged ones: its own interval excludes 1, but at the false-discovery
    rate over 41 kernels it is not shown; the row says so instead of a bare 'unchanged'."""
    rng = np.random.default_rng(3)
    frames = {"b": [], "c": []}
    units = np.repeat(np.arange(20), 5)
    for k in range(41):
        for side in "bc":
            factor = 1.03 if (k == 0 and side == "c") else 1.0
            d = 1000.0 * factor * (1 + 0.04 * rng.standard_normal(20))[units] * (1 + 0.01 * rng.random(len(units)))
            frames[side].append(pd.DataFrame({"key": f"k{k:02d}", "unit": units, "duration": d}))
    table = compare_kernels(pd.concat(frames["b"]), pd.concat(frames["c"]), bootstrap=1000, min_effect=0.0)
    excludes = (table["ci_low"] > 1) | (table["ci_high"] < 1)
    quiet = table[excludes & (table["verdict"] == "unchanged")]
    assert len(quiet) >= 1
    assert quiet["hint"].str.contains(r"interval excludes 1 but q = .* with 41 kernels tested").all()
    assert (table.loc[~excludes, "hint"] == "").all()
