"""`gpuvar compare`: slower kernels are found beyond noise (and only they), intervals are reproducible, windows and
causal graphs are diffed, outputs are strict JSON and byte-identical on rerun, bad inputs give one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpuvar.causal.discover import discover_all
from gpuvar.causal.options import causal_options
from gpuvar.compare import causal_diff, inputs, kernels, windows
from gpuvar.compare.run import Run, compare_runs
from gpuvar.compare.settings import CompareSettings
from gpuvar.demo import planted_pair as planted
from gpuvar.errors import InputError

TARGET = "kernel_variability"


def durations(rng, spec: dict[str, tuple[int, float]]) -> pd.DataFrame:
    """key -> (launches, median ns): exponential-tailed durations like real kernels."""
    parts = [pd.DataFrame({"key": k, "duration": m * (0.97 + rng.exponential(0.04, n))}) for k, (n, m) in spec.items()]
    return pd.concat(parts, ignore_index=True)


def test_kernel_table_flags_a_slowdown_orders_by_delta_time_and_lists_added_removed():
    rng = np.random.default_rng(1)
    base = durations(rng, {"gemm": (400, 50_000), "add": (2000, 3_000), "old": (50, 9_000)})
    cand = durations(rng, {"gemm": (400, 55_000), "add": (2000, 3_000), "new": (60, 7_000)})
    t = kernels.compare_kernels(base, cand, bootstrap=500).set_index("key")
    assert t.loc["gemm", "verdict"] == "slower" and t.loc["gemm", "ci_low"] > 1.05 and t.loc["gemm", "ci_high"] < 1.15
    assert t.loc["add", "verdict"] == "unchanged" and t.loc["add", "ci_low"] < 1 < t.loc["add", "ci_high"]
    assert t.loc["old", "verdict"] == "removed" and t.loc["new", "verdict"] == "added"
    # Δ time is the plain difference of totals, split exactly into per-launch and launch-count change
    for key in t.index:
        assert t.loc[key, "delta_total_ns"] == pytest.approx(t.loc[key, "total_ns_c"] - t.loc[key, "total_ns_b"])
        assert t.loc[key, "delta_rate_ns"] + t.loc[key, "delta_count_ns"] == pytest.approx(t.loc[key, "delta_total_ns"])
    assert t.loc["old", "delta_total_ns"] < 0 < t.loc["new", "delta_total_ns"]  # the sign is the time's
    deltas = list(t["delta_total_ns"].abs())
    assert list(t.index)[0] == "gemm" and deltas == sorted(deltas, reverse=True)
    assert t.loc["new", "launches_b"] == 0 and t.loc["old", "launches_c"] == 0


def test_minimum_effect_keeps_a_significant_but_tiny_change_out_of_slower():
    """A 0.5 % change with a tight interval is real but not worth acting on: `negligible` at the default 2 %
    floor, `slower` with the floor off."""
    rng = np.random.default_rng(5)
    base = pd.DataFrame({"key": "k", "duration": 10_000 * (1 + rng.normal(0, 0.002, 3000))})
    cand = pd.DataFrame({"key": "k", "duration": 10_050 * (1 + rng.normal(0, 0.002, 3000))})
    row = kernels.compare_kernels(base, cand, bootstrap=400).iloc[0]
    assert row["ci_low"] > 1 and row["q_value"] < 0.05 and row["verdict"] == "negligible"
    assert kernels.compare_kernels(base, cand, bootstrap=400, min_effect=0).iloc[0]["verdict"] == "slower"


def test_intervals_are_seeded_and_independent_of_other_kernels():
    rng = np.random.default_rng(2)
    base = durations(rng, {"a": (300, 1000), "b": (300, 2000)})
    cand = durations(rng, {"a": (300, 1010), "b": (300, 2000)})
    one = kernels.compare_kernels(base, cand, bootstrap=300, seed=7).set_index("key")
    two = kernels.compare_kernels(base, cand, bootstrap=300, seed=7).set_index("key")
    alone = kernels.compare_kernels(base[base.key == "a"], cand[cand.key == "a"], bootstrap=300, seed=7).set_index(
        "key"
    )
    assert one.loc["a", "ci_low"] == two.loc["a", "ci_low"] == alone.loc["a", "ci_low"]
    other = kernels.compare_kernels(base, cand, bootstrap=300, seed=8).set_index("key")
    assert other.loc["a", "ci_low"] != one.loc["a", "ci_low"]


def test_few_launches_are_untested_not_judged():
    base = pd.DataFrame({"key": ["k"] * 3, "duration": [1.0, 2.0, 3.0]})
    cand = pd.DataFrame({"key": ["k"] * 3, "duration": [10.0, 20.0, 30.0]})
    row = kernels.compare_kernels(base, cand, bootstrap=200, min_launches=5).iloc[0]
    assert row["verdict"] == "untested" and np.isnan(row["q_value"]) and row["ratio"] == 10.0


def test_cluster_bootstrap_draws_whole_units_and_takes_the_lower_median():
    """Against a direct implementation on the same draws: resample units, pool their launches, lower median."""
    rng = np.random.default_rng(3)
    units = np.repeat(np.arange(12), rng.integers(1, 6, 12))
    values = np.round(rng.exponential(100, len(units)) + 1000)
    got = kernels.cluster_medians(values, units, 300, np.random.default_rng(4))
    draws = np.random.default_rng(4).integers(0, 12, size=(300, 12))
    want = [
        np.sort(np.concatenate([values[units == u] for u in row]))[(sum((units == u).sum() for u in row) - 1) // 2]
        for row in draws
    ]
    assert np.array_equal(got, want)


def test_step_correlated_noise_is_not_a_slowdown():
    """The trap of launch-level resampling: a step's contention slows all its launches together. Two runs of one
    program (planted.step_noise_pair) differ only by which steps drew contention; resampling launches calls many
    of them slower or faster, resampling steps almost never: in about alpha = 5 % of the pairs. The kernels of
    one pair share its steps, so when a pair's contention draw is lopsided they move together: the false alarms
    are counted per pair."""
    pairs_flagged_by_steps, flagged_launches = 0, 0
    for seed in range(20):
        base, cand = planted.step_noise_pair(seed)
        steps = kernels.compare_kernels(base, cand, bootstrap=300, seed=seed, min_effect=0)
        launches = kernels.compare_kernels(
            base.drop(columns="unit"), cand.drop(columns="unit"), bootstrap=300, seed=seed, min_effect=0
        )
        pairs_flagged_by_steps += int(steps["verdict"].isin(["slower", "faster"]).any())
        flagged_launches += int(launches["verdict"].isin(["slower", "faster"]).sum())
    assert pairs_flagged_by_steps <= 2 and flagged_launches >= 10, (pairs_flagged_by_steps, flagged_launches)


def test_benjamini_hochberg_matches_the_textbook_values():
    q = kernels.benjamini_hochberg(np.array([0.01, np.nan, 0.04, 0.03, 0.5]))
    assert q[0] == pytest.approx(0.04) and np.isnan(q[1])
    assert q[2] == pytest.approx(0.04 * 4 / 3) and q[3] == pytest.approx(0.04 * 4 / 3) and q[4] == 0.5


def test_planted_pair_over_20_seeds_finds_the_slow_kernel_and_controls_false_discoveries():
    """The planted 10 % slowdown is flagged every time with an interval excluding 1; the other five kernels
    (same distribution in both runs) are flagged at most at the nominal false-discovery rate."""
    slow = planted.planted()["kernel"]
    fdp, null_p = [], []
    for seed in range(20):
        base, cand = planted.frames(2000, seed)
        t = kernels.compare_kernels(
            base.rename(columns={"kernel_name": "key"}),
            cand.rename(columns={"kernel_name": "key"}),
            bootstrap=400,
            seed=seed,
        ).set_index("key")
        assert t.loc[slow, "verdict"] == "slower", (seed, t.loc[slow])
        assert t.loc[slow, "ci_low"] > 1.0 and 1.04 < t.loc[slow, "ratio"] < 1.16, (seed, t.loc[slow])
        flagged = t.index[t["verdict"].isin(["slower", "faster"])]
        fdp.append(sum(k != slow for k in flagged) / max(len(flagged), 1))
        null_p += list(t.drop(index=slow)["p_value"])
    assert np.mean(fdp) <= 0.05, fdp
    assert np.mean(np.array(null_p) < 0.05) <= 0.15  # the test itself is calibrated on the unchanged kernels


def _causal_run(frame: pd.DataFrame, outdir) -> inputs.Causal:
    rows = frame.assign(
        kernel_variability=frame["duration"] - frame.groupby("kernel_name")["duration"].transform("mean")
    )
    discover_all(rows.drop(columns=["start", "duration"]), causal_options(target=TARGET, bootstrap=0), outdir)
    return inputs.read_causal(outdir)


def test_planted_pair_reports_the_removed_driver(tmp_path):
    base, cand = planted.frames(4000, 0)
    diff, rows = causal_diff.diff_causal(_causal_run(base, tmp_path / "b"), _causal_run(cand, tmp_path / "c"))
    group = next(g for g in diff["groups"] if g["group"] == planted.planted()["kernel"])
    assert {"from": "grid_y", "to": TARGET} in [{k: e[k] for k in ("from", "to")} for e in group["removed"]]
    others = [g for g in diff["groups"] if g["group"] not in (group["group"], "__all__")]
    assert all(not any(e["from"] == "grid_y" for e in g["removed"]) for g in others)
    assert set(rows["change"]) <= {"added", "removed", "flipped", "kept"}


def write_causal(folder, groups: dict[str, tuple[list, list | None]], boot: dict | None = None):
    """A `gpuvar causal` folder in the current format: group -> (edges (from, to, coef), shares or None);
    boot: (from, to) -> bootstrap probability, written as bootstrap_edges.csv of every group."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"target": TARGET, "groups": []}
    for i, (name, (edges, shares)) in enumerate(groups.items()):
        slug = f"g{i}-0000000{i}"
        (folder / slug).mkdir()
        pd.DataFrame(
            [{"from": a, "to": b, "coefficient": c, "sign": int(np.sign(c))} for a, b, c in edges],
            columns=["from", "to", "coefficient", "sign"],
        ).to_csv(folder / slug / "edges.csv", index=False)
        contrib = pd.DataFrame(
            [
                {"feature": f, "total_effect": te, "variance_share": s, "sign": int(np.sign(te))}
                for f, te, s in (shares or [])
            ]
        )
        if shares is not None and any(s is None for _, _, s in shares):
            contrib = contrib.drop(columns="variance_share")  # outputs from before the variance decomposition
        contrib.to_csv(folder / slug / "contributions.csv", index=False)
        if boot is not None:
            pd.DataFrame([{"from": a, "to": b, "probability": p} for (a, b), p in boot.items()]).to_csv(
                folder / slug / "bootstrap_edges.csv", index=False
            )
        summary["groups"].append({"group": name, "slug": slug, "status": "ok"})
    summary["groups"].append({"group": "tiny", "slug": "tiny-1", "status": "skipped"})
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_causal_diff_reports_added_removed_flipped_edges_and_share_changes(tmp_path):
    b = write_causal(
        tmp_path / "b",
        {
            "k": (
                [("grid_x", TARGET, 0.5), ("grid_y", TARGET, -0.4), ("block_x", "grid_x", 0.2)],
                [("grid_x", 0.5, 0.30), ("grid_y", -0.4, 0.20), ("block_x", 0.1, 0.01)],
            )
        },
    )
    c = write_causal(
        tmp_path / "c",
        {
            "k": (
                [("grid_x", TARGET, 0.6), ("smem", TARGET, 0.3), ("block_x", "grid_x", -0.2)],
                [("grid_x", 0.6, 0.45), ("smem", 0.3, 0.10), ("block_x", -0.1, 0.01)],
            )
        },
    )
    diff, rows = causal_diff.diff_causal(inputs.read_causal(b), inputs.read_causal(c))
    g = diff["groups"][0]
    assert [(e["from"], e["to"]) for e in g["added"]] == [("smem", TARGET)]
    assert [(e["from"], e["to"]) for e in g["removed"]] == [("grid_y", TARGET)]
    assert [(e["from"], e["to"]) for e in g["sign_flips"]] == [("block_x", "grid_x")] and g["kept"] == 1
    shares = {s["feature"]: s for s in g["variance_shares"]}
    assert shares["grid_x"]["delta"] == pytest.approx(0.15) and shares["grid_y"]["share_candidate"] is None
    assert g["explained_share_baseline"] == pytest.approx(0.51) and g["largest_share_change"]["feature"] == "grid_x"
    assert diff["skipped_baseline"] == ["tiny"] and len(rows) == 4


def test_causal_outputs_without_variance_share_give_null_shares_not_an_error(tmp_path):
    b = write_causal(tmp_path / "b", {"k": ([("grid_x", TARGET, 0.5)], [("grid_x", 0.5, None)])})
    c = write_causal(tmp_path / "c", {"k": ([("grid_x", TARGET, 0.5)], [("grid_x", 0.5, 0.2)])})
    g = causal_diff.diff_causal(inputs.read_causal(b), inputs.read_causal(c))[0]["groups"][0]
    assert g["shares_available"] is False and g["variance_shares"][0]["delta"] is None
    assert g["variance_shares"][0]["share_candidate"] == 0.2 and g["changes"] == 0


def test_edge_changes_seen_in_few_bootstrap_resamples_are_marked_unstable(tmp_path):
    """LiNGAM re-orients edges between dependent features from sample to sample: such changes are not causes."""
    edges_b = [("grid_x", TARGET, 0.5), ("grid_x", "grid_size", 0.7)]
    edges_c = [("grid_size", TARGET, 0.5), ("grid_size", "grid_x", 0.7)]
    old = [("grid_x", 0.5, None), ("grid_size", 0.0, None)]  # contributions without variance_share
    b = write_causal(
        tmp_path / "b",
        {"k": (edges_b, old)},
        {("grid_x", TARGET): 0.9, ("grid_x", "grid_size"): 0.55, ("grid_size", "grid_x"): 0.5},
    )
    c = write_causal(
        tmp_path / "c",
        {"k": (edges_c, old)},
        {
            ("grid_size", TARGET): 0.95,
            ("grid_x", TARGET): 0.1,
            ("grid_size", "grid_x"): 0.5,
            ("grid_x", "grid_size"): 0.5,
        },
    )
    g = causal_diff.diff_causal(inputs.read_causal(b), inputs.read_causal(c))[0]["groups"][0]
    assert g["changes"] == 2 and g["unstable_changes"] == 2
    assert g["driver_changes"] == [
        {"feature": "grid_size", "change": "added", "stable": True},
        {"feature": "grid_x", "change": "removed", "stable": True},
    ]


def make_bins(var: list[float], top: list[int], width=10_000_000.0, target=TARGET) -> inputs.Bins:
    frame = pd.DataFrame(
        {"bin": range(len(var)), "bin_start": [i * width for i in range(len(var))], "count": 10, "var": var}
    )
    return inputs.Bins(None, target, width, "ns", len(top), top, frame)


def test_windows_moved_or_not():
    same = windows.compare_windows(make_bins([1, 9, 2, 8, 3], [1, 3]), make_bins([1, 8, 2, 9, 3], [3, 1]))
    assert same["moved"] is False and same["overlap_fraction"] == 1.0 and same["variance_rank_correlation"] > 0.8
    moved = windows.compare_windows(make_bins([1, 9, 2, 8, 3], [1, 3]), make_bins([9, 1, 8, 2, 3], [0, 2]))
    assert moved["moved"] is True and moved["only_candidate"] == [0, 2] and moved["offsets_candidate"] == [0.0, 2e7]
    other = windows.compare_windows(make_bins([1, 2], [0]), make_bins([1, 2], [0], width=5e6))
    assert other["comparable"] is False and "bin widths differ" in other["reason"]


@pytest.fixture(scope="module")
def pair_outputs(tmp_path_factory):
    """Both planted runs as a user has them after ingest + causal: ingest folders and causal folders."""
    tmp = tmp_path_factory.mktemp("pair")
    runs = []
    for name, frame in zip(("base", "cand"), planted.frames(3000, 1)):
        (tmp / name / "ingest").mkdir(parents=True)
        frame.to_parquet(tmp / name / "ingest" / "kernels.parquet")
        _causal_run(frame, tmp / name / "causal")
        runs.append(Run(name, tmp / name / "ingest", [], [tmp / name / "causal"]))
    return tmp, runs


def test_outputs_are_strict_json_and_byte_identical_on_rerun(pair_outputs):
    tmp, (base, cand) = pair_outputs
    opts = CompareSettings(bootstrap=300)
    record = compare_runs(base, cand, tmp / "out1", opts)
    compare_runs(base, cand, tmp / "out2", opts)
    files = sorted(p.name for p in (tmp / "out1").iterdir())
    assert files == [
        "causal_diff.csv",
        "causal_diff.png",
        "causal_diff.svg",
        "compare.html",
        "compare.json",
        "compare.md",
        "delta_time.png",
        "delta_time.svg",
        "distributions.png",
        "distributions.svg",
        "forest.png",
        "forest.svg",
        "kernels.csv",
    ]
    for name in files:
        assert (tmp / "out1" / name).read_bytes() == (tmp / "out2" / name).read_bytes(), name
    page = (tmp / "out1" / "compare.md").read_text()
    assert "1 slower" in page and record["kernels"][0]["label"] in page
    text = (tmp / "out1" / "compare.json").read_text()
    assert "NaN" not in text and json.loads(text)["summary"]["slower"] == 1
    assert record["summary"]["in_both"] == 6 and record["causes"][TARGET]["groups_compared"] == 7
    table = pd.read_csv(tmp / "out1" / "kernels.csv")
    assert table["key"].iloc[0] == planted.planted()["kernel"] and table["verdict"].iloc[0] == "slower"


def test_cli_compares_and_reports_bad_input_on_one_line(pair_outputs, run_cli, tmp_path):
    tmp, (base, cand) = pair_outputs
    done = run_cli(
        "compare",
        base.ingest,
        cand.ingest,
        "-o",
        tmp_path / "out",
        "--baseline-causal",
        base.causal[0],
        "--candidate-causal",
        cand.causal[0],
        "--bootstrap",
        "200",
        "--formats",
        "png",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["slower"] == 1 and not (tmp_path / "out" / "forest.svg").exists()
    bad = run_cli("compare", base.ingest, tmp_path / "missing", "-o", tmp_path / "x")
    assert bad.returncode == 2 and "missing: file not found" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    (tmp_path / "notkernels.parquet").write_bytes(b"garbage")
    bad = run_cli("compare", base.ingest, tmp_path / "notkernels.parquet", "-o", tmp_path / "x")
    assert bad.returncode == 2 and "notkernels.parquet: cannot read kernels" in bad.stderr


def test_read_kernels_counts_dropped_rows(tmp_path):
    frame = pd.DataFrame({"kernel_name": ["a", None, "b", "c"], "duration": [5, 6, -1, None]})
    frame.to_parquet(tmp_path / "kernels.parquet")
    k = inputs.read_kernels(tmp_path)
    assert k.rows_in == 4 and len(k.frame) == 1 and k.dropped == {"no_kernel_name": 1, "no_positive_duration": 2}
    with pytest.raises(InputError, match="launch_config missing"):
        inputs.read_kernels(tmp_path, key="launch_config")
    frame.iloc[:1].assign(duration=0).to_parquet(tmp_path / "kernels.parquet")
    with pytest.raises(InputError, match="kernels.parquet: no kernel launch with a name and a positive duration"):
        inputs.read_kernels(tmp_path)
