"""discover_all end to end: planted drivers, output files, skip records, bootstrap determinism, CLI."""

from __future__ import annotations

import json
import os

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from gpuvar.causal.discover import discover_all, total_effects
from gpuvar.causal.options import causal_options as opts
from gpuvar.causal.prepare import group_slug
from gpuvar.errors import GpuvarError
from gpuvar.layout import ALL_GROUP


def planted(n=300, seed=0):
    """grid_x drives the target up, grid_y down; block_x and registers are unrelated noise."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "kernel_name": np.where(rng.random(n) < 0.5, "gemm", "axpy"),
            "start": np.arange(n),
            "duration": rng.integers(1, 9, n),
            "grid_x": rng.integers(1, 200, n).astype(float),
            "grid_y": rng.uniform(0, 50, n),
            "block_x": rng.uniform(0, 1, n),
            "registers_per_thread": rng.integers(16, 64, n).astype(float),
        }
    )
    gx = (df.grid_x - df.grid_x.mean()) / df.grid_x.std()
    gy = (df.grid_y - df.grid_y.mean()) / df.grid_y.std()
    df["kernel_variability"] = 2.0 * gx - 1.2 * gy + 0.5 * rng.laplace(size=n)
    return df


def test_planted_drivers_are_top_two(tmp_path):
    summary = discover_all(planted(), opts(target="kernel_variability", bootstrap=0), tmp_path)
    assert summary["n_ok"] == 3 and summary["n_skipped"] == 0
    for group in ("gemm", "axpy", ALL_GROUP):
        out = tmp_path / group_slug(group)
        c = pd.read_csv(out / "contributions.csv")
        top = c.head(2).set_index("feature")
        assert set(top.index) == {"grid_x", "grid_y"}
        assert top.at["grid_x", "sign"] == 1 and top.at["grid_y", "sign"] == -1
        assert c["feature"].iloc[0] == "grid_x"
        rec = json.loads((out / "causal.json").read_text())
        # variance shares add up to the explained share, not to 100 %
        assert abs(c["variance_share"].sum() - rec["explained_share"]) < 1e-6 and 0.5 < rec["explained_share"] < 1
        edges = pd.read_csv(out / "edges.csv")
        assert list(edges.columns) == [
            "from",
            "to",
            "coefficient",
            "sign",
            "probability",
            "sign_agreement",
            "in_random_bins",
        ]
        assert not (edges["from"] == "kernel_variability").any()  # the target is a sink
        order = json.loads((out / "order.json").read_text())
        assert order["causal_order"][-1] == "kernel_variability"
        adj = pd.read_csv(out / "adjacency.csv", index_col="to")
        assert list(adj.index) == list(adj.columns)
        g = nx.read_graphml(out / "graph.graphml")
        assert g.nodes["kernel_variability"]["is_target"] is True
        e = g.edges["grid_x", "kernel_variability"]
        assert e["sign"] == 1 and e["weight"] > 0 and e["variance_share"] > 0
        assert rec["status"] == "ok" and rec["engine"] == "fast" and "fit_s" in rec["timings"]
        assert {"r2_parents", "sink", "independence", "non_gaussianity", "total_effects"} <= set(rec["checks"])


def test_total_effect_includes_indirect_paths():
    # x0 -> x1 (0.5), x1 -> t (2), x0 -> t (1): total effect of x0 on t = 1 + 0.5 * 2
    B = np.zeros((3, 3))
    B[1, 0], B[2, 1], B[2, 0] = 0.5, 2.0, 1.0
    assert np.allclose(total_effects(B, 2), [2.0, 2.0, 0.0])


def test_small_groups_are_skip_records(tmp_path):
    df = planted(80)
    df.loc[df.index[:3], "kernel_name"] = "tiny"
    summary = discover_all(df, opts(target="kernel_variability", features="grid_x,grid_y", bootstrap=0), tmp_path)
    tiny = next(g for g in summary["groups"] if g["group"] == "tiny")
    assert tiny["status"] == "skipped" and "min_rows" in tiny["skip_reason"]
    rec = json.loads((tmp_path / tiny["slug"] / "causal.json").read_text())
    assert rec["status"] == "skipped" and not (tmp_path / tiny["slug"] / "edges.csv").exists()


def test_bad_arguments(tmp_path):
    with pytest.raises(GpuvarError, match="target column"):
        discover_all(planted(), opts(target="missing", bootstrap=0), tmp_path)
    with pytest.raises(GpuvarError, match="engine"):
        opts(target="kernel_variability", engine="gpu")
    # the config's bounds hold for a library caller too (a threshold of 0.3 would merge unrelated features)
    with pytest.raises(GpuvarError, match="collinear_threshold"):
        opts(target="kernel_variability", collinear_threshold=0.3)


def test_bootstrap_identical_bytes_for_any_worker_count(tmp_path):
    df = planted(120, seed=3)
    args = dict(target="kernel_variability", group_by=None, features="grid_x,grid_y,block_x", bootstrap=12, seed=5)
    discover_all(df, opts(**args, workers=1), tmp_path / "w1")
    discover_all(df, opts(**args, workers=2), tmp_path / "w2")
    slug = group_slug(ALL_GROUP)
    b1 = (tmp_path / "w1" / slug / "bootstrap_edges.csv").read_bytes()
    assert b1 == (tmp_path / "w2" / slug / "bootstrap_edges.csv").read_bytes()
    assert (tmp_path / "w1" / slug / "graph.graphml").read_bytes() == (
        tmp_path / "w2" / slug / "graph.graphml"
    ).read_bytes()
    boot = pd.read_csv(tmp_path / "w1" / slug / "bootstrap_edges.csv")
    assert {"from", "to", "probability", "coef_mean", "coef_std", "coef_q05", "coef_q50", "coef_q95"} <= set(
        boot.columns
    )
    row = boot[(boot["from"] == "grid_x") & (boot["to"] == "kernel_variability")].iloc[0]
    assert row["probability"] == 1.0 and row["coef_q05"] > 0


def test_the_job_fits_resamples_beside_its_helpers_one_group_ahead(tmp_path, monkeypatch):
    """workers=2: one helper and the job's own process fit the resamples (the job fits the chunks no helper has
    started), each group's fits and checks running while the helper fits the group before's; every file of every
    group (two kernel groups and all rows) is the bytes of the fit in one process."""
    from gpuvar.causal import bootstrap

    fitted_here = []
    own = bootstrap.Bootstrap._fit_here
    monkeypatch.setattr(bootstrap.Bootstrap, "_fit_here", lambda self: fitted_here.append(own(self)) or fitted_here[-1])
    df = planted(300, seed=7)
    args = dict(target="kernel_variability", group_by="kernel_name", features="grid_x,grid_y,block_x", bootstrap=24)
    discover_all(df, opts(**args, workers=1), tmp_path / "w1")
    discover_all(df, opts(**args, workers=2), tmp_path / "w2")
    assert len(fitted_here) == 3 and sum(map(len, fitted_here)) > 0  # (3 groups; chunks fitted in the job)
    files = sorted(p.relative_to(tmp_path / "w1") for p in (tmp_path / "w1").rglob("*.csv"))
    assert len(files) >= 3 * 4
    for f in files:
        assert (tmp_path / "w1" / f).read_bytes() == (tmp_path / "w2" / f).read_bytes(), f


def _fit_then_thread_counts() -> dict[str, int]:
    """In a bootstrap worker: one fit (loads scipy's OpenBLAS and sklearn's OpenMP), then every pool's threads."""
    from threadpoolctl import threadpool_info

    from gpuvar.causal.bootstrap import fit_adjacency

    fit_adjacency(np.random.default_rng(0).laplace(size=(200, 4)), None, "fast", threads=1)
    return {info["filepath"]: info["num_threads"] for info in threadpool_info()}


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every pool has one thread anyway")
def test_bootstrap_workers_run_every_blas_and_openmp_pool_on_one_thread():
    """The pool already fills the cores: a library loaded after the worker's limit (scipy's OpenBLAS) ran one
    thread per core, and 2 workers x 2 BLAS threads made the demo's causal jobs 1.7x slower."""
    from gpuvar.causal.bootstrap import make_pool

    with make_pool(1) as pool:
        counts = pool.submit(_fit_then_thread_counts).result()
    assert any("openblas" in path for path in counts) and set(counts.values()) == {1}, counts


def test_lingam_engine_matches_fast(tmp_path):
    pytest.importorskip("lingam")
    df = planted(150, seed=4)
    for engine in ("fast", "lingam"):
        discover_all(
            df, opts(target="kernel_variability", group_by=None, bootstrap=0, engine=engine), tmp_path / engine
        )
    slug = group_slug(ALL_GROUP)
    for name in ("edges.csv", "contributions.csv", "order.json", "adjacency.csv"):
        assert (tmp_path / "fast" / slug / name).read_bytes() == (tmp_path / "lingam" / slug / name).read_bytes()


def test_cli(tmp_path, run_cli):
    rows = tmp_path / "rows.parquet"
    planted(100).to_parquet(rows)
    res = run_cli("causal", rows, "--target", "kernel_variability", "--bootstrap", "0", "--output", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["n_ok"] == 3
    res = run_cli("causal", rows, "--target", "nope", "--output", tmp_path / "bad")
    assert res.returncode == 2 and "rows.parquet" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("causal", tmp_path / "missing.parquet", "--target", "t", "--output", tmp_path / "bad")
    assert res.returncode == 2 and "file not found" in res.stderr


def test_bootstrap_logs_progress(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="gpuvar.causal"):
        discover_all(
            planted(90),
            opts(target="kernel_variability", group_by=None, features="grid_x,grid_y", bootstrap=10, workers=1),
            tmp_path,
        )
    msgs = [r.getMessage() for r in caplog.records if "bootstrap" in r.getMessage()]
    assert msgs[-1] == "bootstrap 10/10 resamples (100%)" and len(msgs) == 10


def test_bench_causal_prints_one_json(capsys):
    pytest.importorskip("lingam")
    import argparse

    from gpuvar.bench.causal import configure_causal, run_causal

    parser = argparse.ArgumentParser()
    configure_causal(parser)
    assert run_causal(parser.parse_args(["--p", "6", "--n", "300", "--seed", "1"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["p"] == 6 and out["n"] == 300 and out["same_order"] is True
    assert out["max_abs_adjacency_diff"] <= 1e-8 and {"lingam_s", "gpuvar_s", "speedup"} <= set(out)


def test_causal_checks_table_lists_every_graph_and_flags(tmp_path, run_cli):
    df = planted(300)
    root = tmp_path / "results" / "causal" / "demo" / "kernel_variability"
    discover_all(df, opts(target="kernel_variability", bootstrap=0), root)
    res = run_cli("causal-checks", root, "-o", tmp_path / "checks.tsv")
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(tmp_path / "checks.tsv", sep="\t", keep_default_na=False)
    summary = json.loads((root / "summary.json").read_text())
    assert len(table) == len(summary["groups"]) and set(table["dataset"]) == {"demo"}
    assert set(table.loc[table["trusted"] == "no", "group"]) == set(summary["flagged"])
    assert "3 causal graphs: " in res.stderr and "explained" in res.stderr  # verdict counts


def test_the_random_fits_read_only_the_columns_they_use(tmp_path):
    """The random bins' rows may be given as a reader of the columns wanted: it is asked for the target, the
    grouping and the groups' features only (a 256-rank job's sample rows have 56 columns, read whole 0.44 GB), and
    every file written is what the whole frame gives."""
    sample = planted(n=400, seed=9)
    sample["launch_config"] = "256x1x1"  # columns no fit uses
    sample["call_site"] = "train.py:10"
    asked = []

    def reader(columns):
        asked.append(list(columns))
        return sample[[c for c in columns if c in sample.columns]]

    options = opts(target="kernel_variability", bootstrap=0)
    discover_all(planted(), options, tmp_path / "whole", sample)
    summary = discover_all(planted(), options, tmp_path / "read", reader)
    assert summary["random_bins_compared"] and len(asked) == 1
    assert asked[0][0] == "kernel_variability" and "kernel_name" in asked[0] and "grid_x" in asked[0]
    assert not {"launch_config", "call_site", "start"} & set(asked[0])

    def files(root):
        out = {}
        for path in sorted(root.rglob("*")):
            if path.is_file():
                text = path.read_text()
                out[path.relative_to(root)] = json.loads(text) if path.suffix == ".json" else text
                if isinstance(out[path.relative_to(root)], dict):
                    out[path.relative_to(root)].pop("elapsed_s", None)
                    out[path.relative_to(root)].pop("timings", None)
        return out

    whole, read = files(tmp_path / "whole"), files(tmp_path / "read")
    assert whole.keys() == read.keys() and len(whole) > 10
    assert [p for p in whole if whole[p] != read[p]] == []
