"""Figures: each plot writes a real PNG/SVG plus its data, reruns are byte-identical, hidden edges are
counted by reason, missing parallel-coordinate features are reported, the `gpuvar plot` CLI works."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from gpuvar.errors import GpuvarError, InputError
from gpuvar.plots import parallel, scaling, timeline
from gpuvar.plots.causal_graph.draw import draw_causal_graph
from gpuvar.plots.causal_graph.edges import MAX_DRAWN_EDGES, classify_edges, hidden_counts
from gpuvar.plots.causal_graph.folder import plot_causal_dir, plot_group
from gpuvar.plots.causal_graph.layout import layered_layout
from gpuvar.plots.causal_graph.load import load_group

TARGET = "kernel_variability"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_group(folder, edges, group="void k<float>(int)", graphml=True, boot=True):
    """A causal group folder like `gpuvar causal` writes. edges: (from, to, coef, variance_share, prob)."""
    folder.mkdir(parents=True)
    nodes = sorted({e[0] for e in edges} | {e[1] for e in edges} | {"idle_feature"}) + [TARGET]
    nodes = list(dict.fromkeys(n for n in nodes if n != TARGET)) + [TARGET]
    (folder / "causal.json").write_text(json.dumps({"group": group, "target": TARGET, "status": "ok"}))
    (folder / "order.json").write_text(json.dumps({"causal_order": nodes, "target": TARGET}))
    pd.DataFrame(
        [(f, t, c, int(np.sign(c))) for f, t, c, _, _ in edges], columns=["from", "to", "coefficient", "sign"]
    ).to_csv(folder / "edges.csv", index=False)
    contrib = [(f, c, p, int(np.sign(c))) for f, t, c, p, _ in edges if t == TARGET]
    pd.DataFrame(contrib, columns=["feature", "total_effect", "variance_share", "sign"]).to_csv(
        folder / "contributions.csv", index=False
    )
    if boot:
        pd.DataFrame([(f, t, p) for f, t, _, _, p in edges], columns=["from", "to", "probability"]).to_csv(
            folder / "bootstrap_edges.csv", index=False
        )
    if graphml:
        g = nx.DiGraph()
        for n in nodes:
            g.add_node(n, is_target=n == TARGET)
        for f, t, c, p, prob in edges:
            attrs = {"weight": c, "sign": int(np.sign(c)), "probability": prob}
            if t == TARGET:
                attrs["variance_share"] = p
            g.add_edge(f, t, **attrs)
        nx.write_graphml(g, folder / "graph.graphml")
    return folder


EDGES = [
    ("grid_x", TARGET, 0.8, 0.60, 0.95),  # shown, positive
    ("grid_y", TARGET, -0.5, 0.395, 0.9),  # shown, negative
    ("block_x", TARGET, 0.01, 0.005, 0.99),  # hidden: variance share 0.5 % < 1 %
    ("registers_per_thread", TARGET, 0.3, 0.20, 0.3),  # hidden: probability 0.3 < 0.5 (checked first)
    ("grid_x", "grid_y", 0.4, float("nan"), 0.8),  # shown, feature -> feature
    ("block_x", "grid_y", -0.2, float("nan"), 0.1),  # hidden: probability
]


@pytest.fixture
def group(tmp_path):
    return write_group(tmp_path / "causal" / "k-1234abcd", EDGES)


def test_causal_graph_writes_png_svg_and_edge_table(group, tmp_path):
    result = plot_group(group, tmp_path / "out" / "g")
    png, svg = (tmp_path / "out" / "g.png").read_bytes(), (tmp_path / "out" / "g.svg").read_text()
    assert png.startswith(PNG_MAGIC) and len(png) > 5_000
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    edges = pd.read_csv(tmp_path / "out" / "g.edges.csv")
    assert len(edges) == len(EDGES) and result["shown"] == 3


def test_hidden_edges_counted_by_reason(group):
    cg = load_group(group)
    assert cg.target == TARGET and cg.group == "void k<float>(int)"
    table = classify_edges(cg, min_variance_share=0.01, min_probability=0.5)
    status = {(r["from"], r["to"]): r["status"] for r in table.to_dict("records")}
    assert status[("grid_x", TARGET)] == "shown"
    assert status[("block_x", TARGET)] == "variance share < 1 %"
    assert status[("registers_per_thread", TARGET)] == "bootstrap probability < 0.5"
    assert status[("grid_x", "grid_y")] == "shown"
    assert hidden_counts(table) == {"bootstrap probability < 0.5": 2, "variance share < 1 %": 1}
    assert hidden_counts(classify_edges(cg, 0.0, 0.0)) == {}


def test_csv_only_group_matches_graphml(tmp_path):
    a = load_group(write_group(tmp_path / "a", EDGES))
    b = load_group(write_group(tmp_path / "b", EDGES, graphml=False))
    ta, tb = (classify_edges(x, 0.01, 0.5).reset_index(drop=True) for x in (a, b))
    pd.testing.assert_frame_equal(ta, tb)


def test_without_bootstrap_nothing_hidden_by_probability(tmp_path):
    cg = load_group(write_group(tmp_path / "g", EDGES, graphml=False, boot=False))
    hidden = hidden_counts(classify_edges(cg, 0.01, 0.5))
    assert hidden == {"variance share < 1 %": 1}


def test_layout_is_deterministic_layered_and_points_to_the_target(group):
    """Causes left of what they cause, the target alone on the right, every arrow pointing right."""
    cg = load_group(group)
    shown = classify_edges(cg, 0.01, 0.5).query("status == 'shown'")
    layout = layered_layout(cg, shown)
    assert layout == layered_layout(cg, shown)
    pos = layout.pos
    assert set(pos) == {"grid_x", "grid_y", TARGET}  # idle_feature and hidden-edge features are not drawn
    assert pos["grid_x"][0] < pos["grid_y"][0] < pos[TARGET][0]  # grid_x -> grid_y -> target
    assert [x for n, (x, _) in pos.items() if x == pos[TARGET][0]] == [pos[TARGET][0]]
    for (u, v), route in layout.routes.items():
        xs = [x for x, _ in route]
        assert xs == sorted(xs) and route[0] == pos[u] and route[-1] == pos[v], (u, v)


def planted_ncu_graph(n_features=60, n_edges=450):
    """A dense graph like DirectLiNGAM gives on a raw Nsight Compute dataset: long metric names, every feature
    into the target, the rest feature -> feature in causal order; every edge passes the thresholds."""
    rng = np.random.default_rng(7)
    names = [f"sm__sass_thread_inst_executed_op_{i:02d}_pred_on.sum.per_cycle_elapsed" for i in range(n_features)]
    edges = [(f, TARGET, float(rng.uniform(0.1, 1)), float(rng.uniform(0.011, 0.05)), 0.9) for f in names]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    for k in rng.choice(len(pairs), n_edges - n_features, replace=False):
        edges.append((*pairs[k], float(rng.uniform(0.05, 2) * rng.choice([-1, 1])), float("nan"), 0.9))
    return edges


def test_a_dense_graph_draws_a_bounded_figure(tmp_path):
    """Issue 22 item 6: 450 edges (a raw ncu dataset took 26 min and wrote a 440-MP PNG) draw the strongest 40
    and the nodes they touch; the footnote points to the edge table, which keeps all 450; the PNG is bounded."""
    from matplotlib.patches import FancyArrowPatch

    folder = write_group(tmp_path / "causal" / "ncu", planted_ncu_graph())
    cg = load_group(folder)
    fig, edges = draw_causal_graph(cg, edges_csv="ncu.edges.csv")
    shown = edges[edges["status"] == "shown"]
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(edges) == 450 and len(shown) == MAX_DRAWN_EDGES == len(arrows)
    drawn_nodes = set(shown["from"]) | set(shown["to"]) | {TARGET}
    assert set(layered_layout(cg, shown).pos) == drawn_nodes and len(drawn_nodes) <= 81
    # the strongest: every edge into the target outranks the feature -> feature edges, by variance share
    into = edges[edges["into_target"]].sort_values("variance_share", ascending=False)
    assert set(shown["from"] + ">" + shown["to"]) == set(into["from"].head(40) + ">" + TARGET)
    footnote = "\n".join(t.get_text() for t in fig.texts)
    assert "410 more edges in ncu.edges.csv" in footnote
    import matplotlib.pyplot as plt

    plt.close(fig)

    result = plot_group(folder, tmp_path / "out" / "ncu", formats=["png"])
    assert result["edges"] == 450 and result["shown"] == 40 and result["hidden"] == {"strength rank > 40": 410}
    png = (tmp_path / "out" / "ncu.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # the IHDR chunk
    assert width * height <= 20_000_000, (width, height)
    assert len(pd.read_csv(tmp_path / "out" / "ncu.edges.csv")) == 450


def test_strongest_edges_by_coefficient_when_no_edge_enters_the_target(tmp_path):
    """Without variance shares, |coefficient| decides which edges are drawn (ties by name: deterministic)."""
    edges = [(f"f{i:03d}", f"g{i:03d}", (-1) ** i * (i + 1) / 100, float("nan"), 0.9) for i in range(100)]
    cg = load_group(write_group(tmp_path / "g", edges))
    table = classify_edges(cg, 0.01, 0.5, max_edges=10)
    shown = table[table["status"] == "shown"]
    assert sorted(shown["from"]) == [f"f{i:03d}" for i in range(90, 100)]


def test_plot_causal_dir_selects_groups_and_lists_skipped(tmp_path):
    root = tmp_path / "causal"
    write_group(root / "k-1", EDGES)
    write_group(root / "all-2", EDGES, group="__all__")
    (root / "small-3").mkdir()
    (root / "small-3" / "causal.json").write_text(
        json.dumps({"group": "tiny", "status": "skipped", "skip_reason": "12 rows < 30"})
    )
    index = plot_causal_dir(root, tmp_path / "per", which="per_kernel", formats=["png"])
    assert set(index["slug"]) == {"k-1", "small-3"}
    assert index.set_index("slug").loc["small-3", "reason"] == "12 rows < 30"
    assert (tmp_path / "per" / "k-1.png").is_file() and (tmp_path / "per" / "k-1.graphml").is_file()
    whole = plot_causal_dir(root, tmp_path / "whole", which="whole", formats=["svg"])
    assert list(whole["slug"]) == ["all-2"] and not (tmp_path / "whole" / "k-1.svg").exists()


def test_not_a_causal_folder_is_an_input_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="graph.graphml or edges.csv"):
        load_group(tmp_path / "empty")


def top_rows(n=400, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "grid_x": rng.choice([64, 128, 1024], n),
            "grid_y": rng.integers(1, 9, n),
            "block_x": rng.choice([128, 256], n),
            "linked_copy_kind": rng.choice([1, 2, 8], n).astype(float),
            "kernel_name": rng.choice(["a", "b"], n),
        }
    )
    df[TARGET] = df["grid_x"] * 10.0 + (df["linked_copy_kind"] == 8) * 5e3 + rng.normal(0, 100, n)
    return df


def test_parallel_skips_missing_and_non_numeric_features(tmp_path):
    rows = top_rows()
    rows.to_parquet(tmp_path / "rows.parquet")
    features = ["grid_x", "tcp_pending_stall", "kernel_name", "linked_copy_kind"]
    result = parallel.plot_parallel(tmp_path / "rows.parquet", tmp_path / "par", TARGET, features)
    assert result["axes"] == ["grid_x", "linked_copy_kind", TARGET]
    assert any(n.startswith("tcp_pending_stall: not in the rows") for n in result["notes"])
    assert any(n.startswith("kernel_name: not numeric") for n in result["notes"])
    data = pd.read_csv(tmp_path / "par.csv")
    assert list(data.columns) == result["axes"] and len(data) == len(rows)
    assert data[TARGET].is_monotonic_increasing  # drawn in target order: most variable on top
    assert sorted(data["grid_x"].unique()) == [64, 128, 1024]  # original units, not normalised
    assert (tmp_path / "par.png").read_bytes().startswith(PNG_MAGIC)


def test_parallel_without_target_is_an_error():
    with pytest.raises(GpuvarError, match="target column"):
        parallel.draw_parallel(top_rows().drop(columns=[TARGET]), TARGET, ["grid_x"])


def test_copy_kind_ticks_are_named():
    ticks, labels = parallel._ticks(np.array([1.0, 8.0, 8.0, 2.0]), "linked_copy_kind")
    assert list(ticks) == [1, 2, 8] and labels == ["HtoD (1)", "DtoH (2)", "DtoD (8)"]


def bins_frame(n=200, seed=1):
    rng = np.random.default_rng(seed)
    start = 5_000_000_000 + np.arange(n, dtype=np.int64) * 10_000_000
    var = rng.gamma(2.0, 1e6, n)
    var[[7, 50, 120]] *= 50
    var[3] = np.nan
    df = pd.DataFrame(
        {
            "bin": np.arange(n),
            "bin_start": start,
            "bin_end": start + 10_000_000,
            "count": rng.integers(1, 40, n),
            "var": var,
        }
    )
    df["variance_rank"] = df["var"].rank(ascending=False, method="first")
    return df


def test_timeline_marks_top_k_and_uses_seconds(tmp_path):
    bins_frame().to_parquet(tmp_path / "bins.parquet")
    (tmp_path / "bin.json").write_text(json.dumps({"top_k": 3, "bin_width": "10ms"}))
    result = timeline.plot_timeline(tmp_path / "bins.parquet", tmp_path / "tl", TARGET, tmp_path / "bin.json")
    data = pd.read_csv(tmp_path / "tl.csv")
    assert result["top_k"] == 3 and sorted(data.index[data["is_top_k"]]) == [7, 50, 120]
    assert data["x"].iloc[0] == 0 and data["x"].iloc[1] == pytest.approx(0.01)
    assert (tmp_path / "tl.svg").read_text().count("<svg") == 1


def test_timeline_top_k_without_rank_column():
    table = timeline.timeline_table(bins_frame().drop(columns=["variance_rank"]), top_k=2)
    assert sorted(table.index[table["is_top_k"]]) == [7, 50]  # largest variances; NaN never chosen


def test_bin_unit_from_bin_width():
    assert timeline.bin_unit({"bin_width": "10ms"}) == "ns"
    assert timeline.bin_unit({"bin_width": "500"}) == "launches"
    assert timeline.bin_unit({}) == "ns"


def write_runs(tmp_path, times=((1, 8.0), (2, 4.4), (4, 2.6))):
    paths = []
    for ranks, seconds in times:
        p = tmp_path / f"bin{ranks}.json"
        # the shape `gpuvar bin` writes: per-phase seconds (slowest rank), no overall time
        p.write_text(
            json.dumps({"ranks": ranks, "rows_in": 1000, "seconds": {"read": seconds / 2, "stats": seconds / 2}})
        )
        paths.append(p)
    return paths[::-1]  # order given must not matter


def test_scaling_table_ideal_and_efficiency(tmp_path):
    table = scaling.scaling_table(write_runs(tmp_path))
    assert list(table["ranks"]) == [1, 2, 4]
    assert list(table["ideal_s"]) == [8.0, 4.0, 2.0]
    assert table["efficiency"].tolist() == pytest.approx([1.0, 8 / 8.8, 8 / 10.4])
    assert "phase_read" in table.columns and table["rows"].tolist() == [1000] * 3


def test_scaling_prefers_overall_elapsed_time(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"ranks": 2, "elapsed_s": 5.0, "seconds": {"read": 1.0}}))
    assert scaling.scaling_record(tmp_path / "b.json")["total_s"] == 5.0


def test_scaling_needs_rank_count(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"elapsed_s": 1.0}))
    with pytest.raises(InputError, match="rank count"):
        scaling.scaling_record(tmp_path / "b.json")


def render_all(tmp_path, out):
    """Every figure kind once into folder `out`; returns the figure files written."""
    root = tmp_path / "in"
    if not root.exists():
        write_group(root / "causal" / "k-1", EDGES)
        top_rows().to_parquet(root / "rows.parquet", index=False)
        bins_frame().to_parquet(root / "bins.parquet", index=False)
        write_runs(root)
    out = tmp_path / out
    plot_causal_dir(root / "causal", out / "causal")
    parallel.plot_parallel(root / "rows.parquet", out / "parallel", TARGET, ["grid_x", "linked_copy_kind"])
    timeline.plot_timeline(root / "bins.parquet", out / "timeline", TARGET, top_k=3)
    scaling.plot_scaling(sorted(root.glob("bin*.json")), out / "scaling")
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.suffix in (".png", ".svg", ".csv"))


def test_rerun_is_byte_identical(tmp_path):
    first = render_all(tmp_path, "a")
    second = render_all(tmp_path, "b")
    assert first == second and len([p for p in first if p.suffix in (".png", ".svg")]) == 8
    for rel in first:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    svg = (tmp_path / "a" / "scaling.svg").read_text()
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg
    assert b"Software" not in (tmp_path / "a" / "scaling.png").read_bytes()


def test_cli_plot_causal_and_error(run_cli, group, tmp_path, capsys):
    done = run_cli(
        "plot", "causal", group.parent, "-o", tmp_path / "figs", "--formats", "png", "--min-probability", "0"
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["drawn"] == 1 and summary["hidden_edges"] == 1  # only the 0.5 % variance-share edge
    assert (tmp_path / "figs" / "k-1234abcd.png").is_file() and not (tmp_path / "figs" / "k-1234abcd.svg").exists()
    from gpuvar.cli import main

    assert (
        main(["plot", "timeline", str(tmp_path / "nope.parquet"), "-o", str(tmp_path / "t"), "--target", TARGET]) == 2
    )
    err = capsys.readouterr().err
    assert "nope.parquet" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as refused:  # checked by the option itself (plots.formats): usage + one line
        main(["plot", "scaling", str(tmp_path / "x.json"), "-o", str(tmp_path / "s"), "--formats", "pdf,gif"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --formats: 'pdf,gif'" in err and "Traceback" not in err
