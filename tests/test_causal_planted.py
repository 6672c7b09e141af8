"""Planted truth through the whole chain (real nsys / ncu formats -> ingest -> bin -> causal): the traps of
real traces (near-duplicates, categories, decoys, kernel identity, selection on the target) are handled."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd

from gpuvar.causal.discover import discover_all
from gpuvar.causal.options import causal_options as opts
from gpuvar.causal.prepare import group_slug
from gpuvar.demo import planted
from gpuvar.ingest import ingest
from gpuvar.layout import ALL_GROUP


def run_chain(source, out, top_k=20, bin_width="10ms", bootstrap=0, sample=True):
    """ingest -> gpuvar bin (one rank) -> discover_all; returns the causal output folder."""
    ingest(source, out / "ingest")
    cmd = [
        sys.executable,
        "-m",
        "gpuvar.cli",
        "bin",
        str(out / "ingest" / "kernels.parquet"),
        "--target",
        "kernel_variability",
        "--bin-width",
        bin_width,
        "--launch-bin-width",
        "40",
        "--top-k",
        str(top_k),
        "-o",
        str(out / "bin"),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = pd.read_parquet(out / "bin" / "topk_rows.parquet")
    random_rows = pd.read_parquet(out / "bin" / "sample_rows.parquet") if sample else None
    discover_all(rows, opts(target="kernel_variability", bootstrap=bootstrap, workers=1), out / "causal", random_rows)
    return out / "causal"


def group(causal, name):
    folder = causal / group_slug(name)
    return json.loads((folder / "causal.json").read_text()), pd.read_csv(folder / "contributions.csv")


def assert_traps_handled(causal, drivers, decoys):
    summary = json.loads((causal / "summary.json").read_text())
    ok = [g for g in summary["groups"] if g["status"] == "ok"]
    assert len(ok) == len(planted.KERNELS) + 1
    for g in ok:
        rec, contrib = group(causal, g["group"])
        c = contrib.set_index("feature")
        assert c["total_effect"].abs().max() <= 3.0, g["group"]  # no collinear blow-up
        assert c.at["grid_x", "sign"] == 1 and contrib["feature"].iloc[0] in drivers
        assert "≈" in c.at["grid_x", "label"]  # the near-duplicate decoy is merged into grid_x
        explained = rec["explained_share"]
        for decoy in decoys:
            if decoy in c.index:
                assert c.at[decoy, "variance_share"] < 0.05 * explained, (g["group"], decoy)
        assert {"sink", "independence", "non_gaussianity", "total_effects"} <= set(rec["checks"])
    rec, contrib = group(causal, ALL_GROUP)
    c = contrib.set_index("feature")
    assert rec["centred_within_groups"] == len(planted.KERNELS)
    for name, sign in drivers.items():  # every planted driver, with its sign, in the whole-trace graph
        assert c.at[name, "sign"] == sign and c.at[name, "variance_share"] > 0.05, name
    top = set(contrib["feature"].head(len(drivers)))
    assert top == set(drivers)


def test_nsys_traps(tmp_path):
    src = planted.write_nsys(tmp_path / "traps.sqlite", planted.traps(12_000, seed=1))
    causal = run_chain(src, tmp_path)
    drivers = {"grid_x": 1, "cacheConfig=2": 1, "dynamic_shared_memory": 1}
    assert_traps_handled(causal, drivers, ["scratch_per_workitem", "cacheConfig=3"])
    rec, _ = group(causal, ALL_GROUP)
    assert rec["categorical"]["cacheConfig"]["levels"][0] in ("1", "2", "3")
    assert "localMemoryTotal" in rec["dropped_columns"]


def test_ncu_traps(tmp_path):
    src = planted.write_ncu(tmp_path / "traps.csv", planted.traps(6_000, seed=2), seed=2)
    causal = run_chain(src, tmp_path, top_k=60)
    assert_traps_handled(causal, {"grid_x": 1, "dynamic_shared_memory": 1}, ["smsp__inst_executed.sum"])


def test_permuting_category_codes_changes_nothing(tmp_path):
    outs = []
    for k, codes in enumerate([(1, 2, 3), (3, 1, 2)]):
        src = planted.write_nsys(tmp_path / f"p{k}.sqlite", planted.traps(12_000, seed=3, codes=codes))
        outs.append(run_chain(src, tmp_path / f"run{k}"))
    a, b = (pd.read_csv(o / group_slug(ALL_GROUP) / "contributions.csv") for o in outs)
    assert np.allclose(a["total_effect"], b["total_effect"]) and np.allclose(a["variance_share"], b["variance_share"])
    rename = {"cacheConfig=2": "cacheConfig=1", "cacheConfig=3": "cacheConfig=2", "cacheConfig=1": "cacheConfig=3"}
    assert [rename.get(f, f) for f in a["feature"]] == list(b["feature"])  # only the level names follow the codes


def test_selection_induced_edge_is_flagged(tmp_path):
    src = planted.write_nsys(tmp_path / "sel.sqlite", planted.selection(16_000, seed=4))
    causal = run_chain(src, tmp_path, top_k=400, bin_width="2us")
    rec, _ = group(causal, ALL_GROUP)
    edges = pd.read_csv(causal / group_slug(ALL_GROUP) / "edges.csv")
    between = edges[edges["from"].isin(["grid_x", "block_x"]) & edges["to"].isin(["grid_x", "block_x"])]
    assert len(between) == 1, "top-k selection should induce a grid_x/block_x edge in the selected rows"
    assert not between["in_random_bins"].iloc[0]  # absent from a random sample of as many bins: flagged
    flagged = rec["selection"]["edges_only_in_selected_bins"]
    assert flagged == [f"{between['from'].iloc[0]} -> {between['to'].iloc[0]}"]
    into = edges[edges["to"] == "kernel_variability"]
    assert into["in_random_bins"].all()  # the real causes are found in random bins too
