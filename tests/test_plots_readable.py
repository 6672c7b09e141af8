"""Figures and the report as people read them (issue 25 item 9): dense causal graphs without arrows through
labels, no word cut in a label, units on every axis that plots a duration or a variance, legends and footnotes
that hide nothing, parallel coordinates whose colours tell the lines apart, and an HTML report that names every
graph and says which ones to trust."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from test_plots import TARGET, bins_frame, top_rows, write_group

from gpuvar.causal.describe import group_name
from gpuvar.plots import parallel, style, timeline
from gpuvar.plots.causal_graph.captions import default_title
from gpuvar.plots.causal_graph.draw import _curve, _overlap, draw_causal_graph
from gpuvar.plots.causal_graph.edges import classify_edges
from gpuvar.plots.causal_graph.folder import plot_causal_dir
from gpuvar.plots.causal_graph.layout import arrow_routes, layered_layout, node_label
from gpuvar.plots.causal_graph.load import load_group
from gpuvar.workflow import figures as workflow_figures

SEPARATORS = "_./: "


def cut_inside_a_word(original: str, wrapped: str) -> list[str]:
    """The places where `wrapped` breaks `original` other than after a separator (empty: none)."""
    bad, pos = [], 0
    lines = wrapped.split("\n")
    for i, line in enumerate(lines):
        while original[pos] == " " and not line.startswith(" "):
            pos += 1
        assert original.startswith(line, pos), (original, line)
        pos += len(line)
        if i < len(lines) - 1 and original[pos - 1] not in SEPARATORS and original[pos] != " ":
            bad.append(f"{original[:pos]}|{original[pos:]}")
    assert pos == len(original.rstrip())
    return bad


@pytest.mark.parametrize(
    "name, width",
    [
        ("kernel_variability", 14),
        ("ctx_kernels_concurrent", 14),
        ("sm__sass_thread_inst_executed_op_09_pred_on.sum.per_cycle_elapsed", 26),
        ("grid_x (≈ smsp__pcsamp_warps_issue_stalled_long_scoreboard)", 26),
        ("All kernels (whole dataset): what explains kernel_variability: explained 61 % by grid_x", 40),
        ("averyveryverylongwordwithoutanyseparatoratall", 10),
    ],
)
def test_labels_wrap_after_separators_never_inside_a_word(name, width):
    wrapped = style.wrap_label(name, width)
    assert not cut_inside_a_word(name, wrapped), wrapped
    words = re.findall(r"[^_./:\s]+", name)
    assert all(len(line) <= width or line.strip() in words for line in wrapped.split("\n")), wrapped
    assert style.wrap_label("kernel_variability", 14) == "kernel_\nvariability"  # was 'kernel_variabi' + 'lity'


LONG = [
    "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
    "dram__bytes_write.sum",
    "dram__bytes_read.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "smsp__inst_executed.sum",
]


def dense_edges():
    """A whole-dataset graph like the perfcounter / inversek2j ones: launch features acting on counters and
    on each other and the target, 17 edges over 8 nodes, long counter names."""
    e = [("grid_x", TARGET, 0.8, 0.55, 0.99), ("grid_y", TARGET, -0.3, 0.05, 0.9), (LONG[2], TARGET, 0.2, 0.03, 0.9)]
    e += [("grid_x", n, 0.5 + 0.05 * i, float("nan"), 0.9) for i, n in enumerate(LONG)]
    e += [("grid_y", LONG[3], -0.3, float("nan"), 0.9), ("grid_y", LONG[4], 0.4, float("nan"), 0.9)]
    e += [("grid_x", "grid_y", 0.2, float("nan"), 0.9), (LONG[1], LONG[2], 0.6, float("nan"), 0.9)]
    e += [(LONG[1], LONG[3], 0.5, float("nan"), 0.9), (LONG[4], LONG[2], 0.4, float("nan"), 0.9)]
    e += [(LONG[4], LONG[3], 0.7, float("nan"), 0.9)]
    return e


def inside(point, box, margin=1.0) -> bool:
    (px, py), (x, y, hw, hh) = point, box
    return abs(px - x) < hw - margin and abs(py - y) < hh - margin


def test_a_dense_graph_has_no_arrow_through_a_label_and_no_label_on_a_label(tmp_path):
    """The ring layout drew arrows across node labels and labels over labels on dense whole-dataset graphs;
    layered, every arrow runs between boxes, and neither boxes nor arrow labels overlap."""
    cg = load_group(write_group(tmp_path / "g", dense_edges(), group="__all__"))
    shown = classify_edges(cg, 0.01, 0.5).query("status == 'shown'")
    assert len(shown) == len(dense_edges())
    layout = layered_layout(cg, shown)
    boxes = {n: (*layout.pos[n], *layout.half[n]) for n in layout.pos}
    for (u, v), points in arrow_routes(layout).items():
        curve = _curve(points).to_polygons(closed_only=False)[0]
        crossed = {n for n, box in boxes.items() if any(inside(p, box) for p in curve)}
        assert not crossed, ((u, v), crossed)
        assert curve[-1][0] > curve[0][0]  # pointing right: causes before effects
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert _overlap(boxes[a], boxes[b]) == 0, (a, b)
    fig, _ = draw_causal_graph(cg)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t.get_window_extent(renderer) for t in ax.texts if t.get_zorder() == 4]  # on the arrows
    nodes = [p.get_window_extent(renderer) for p in ax.patches if p.get_zorder() == 5]
    assert len(labels) == len(shown) and len(nodes) == len(boxes)
    for i, a in enumerate(labels):
        assert not any(a.overlaps(b) for b in labels[i + 1 :] + nodes), a
    node_texts = [t.get_text() for t in ax.texts if t.get_zorder() == 6]
    for name in boxes:
        assert node_label(name) in node_texts
        assert not cut_inside_a_word(name, node_label(name))
    assert ax.get_title().startswith("All kernels (whole dataset): ")
    plt.close(fig)


def test_many_direct_causes_go_on_both_sides_of_the_target(tmp_path):
    """40 features into the target were one column 40 labels tall: the weaker half goes right of the target."""
    edges = [(f"counter_{i:02d}.sum", TARGET, 0.5, 0.05 - 0.001 * i, 0.9) for i in range(40)]
    cg = load_group(write_group(tmp_path / "g", edges))
    shown = classify_edges(cg, 0.01, 0.5).query("status == 'shown'")
    pos = layered_layout(cg, shown).pos
    tx = pos[TARGET][0]
    left = [n for n in pos if pos[n][0] < tx]
    right = [n for n in pos if pos[n][0] > tx]
    assert len(left) == len(right) == 20
    assert max(n[8:10] for n in left) < min(n[8:10] for n in right)  # the 20 largest shares on the left


def test_titles_name_the_kernel_without_cutting_a_word(tmp_path):
    name = "void elementwise_add_kernel<float>(float*, float const*, float const*, long)"
    cg = load_group(write_group(tmp_path / "g", dense_edges()[:3], group=name))
    assert default_title(cg) == "elementwise_add_kernel<float>: causes of kernel_variability"
    assert group_name("__all__") == "All kernels (whole dataset)"


# ----------------------------------------------------------------------------------------------- units
def test_timeline_says_its_variance_unit_and_keeps_the_legend_off_the_data(tmp_path):
    table = timeline.timeline_table(bins_frame(), top_k=3)
    fig = timeline.draw_timeline(table, TARGET)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "var(kernel_variability) per bin (µs²)"  # variances of ~1e6..1e8 ns²
    assert ax.get_xlabel() == "time from trace start (s)"
    line = ax.get_lines()[0]
    assert np.allclose(line.get_ydata(), table["var"] / 1e6, equal_nan=True)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= frame.x1  # outside: the highest bins are often at the top right
    plt.close(fig)
    small = timeline.timeline_table(bins_frame().assign(var=lambda d: d["var"] / 1e6), top_k=3)
    fig = timeline.draw_timeline(small, TARGET)
    assert fig.axes[0].get_ylabel().endswith("(ns²)")
    plt.close(fig)


def test_parallel_axes_say_their_units():
    fig, _, _ = parallel.draw_parallel(top_rows(), TARGET, ["grid_x", "block_x", "linked_copy_kind"])
    ax, bar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "grid_x\n(blocks)",
        "block_x\n(threads)",
        "linked_copy_kind",
        "kernel_variability\n(ns)",
    ]
    assert bar.get_ylabel() == "kernel_variability (ns), colour by rank"
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- colours
def test_parallel_colours_separate_lines_when_a_few_launches_are_extreme():
    """Fig. 4 had almost every line one colour: a linear (or log) scale spent on a few extreme launches. The
    colour is the target's rank, so each tenth of the scale colours a tenth of the lines."""
    rows = top_rows(n=2000)
    rows.loc[:4, TARGET] = 1e9  # five extreme launches
    fig, table, _ = parallel.draw_parallel(rows, TARGET, ["grid_x", "linked_copy_kind"])
    ax = fig.axes[0]
    lines = ax.collections[0]
    colour = np.asarray(lines.get_array())
    counts, _ = np.histogram(colour, bins=10, range=(0, 1))
    assert counts.min() >= 150 and counts.max() <= 250, counts  # ~200 lines per tenth of the scale
    assert lines.get_alpha() < 0.5  # 2000 lines: fainter, so that density shows
    # lines sharing one grid_x value fan out over a band instead of lying on one another
    ys = np.array([seg[0][1] for seg in lines.get_segments()])
    for value in (64, 128, 1024):
        at = ys[table["grid_x"].to_numpy() == value]
        assert len(np.unique(at)) == len(at) and np.ptp(at) <= 2 * parallel.BAND + 1e-9
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- footnotes
CAUSAL_FOOTNOTE = (  # a causal graph's footnote, as drawn on the demo's AMD dataset
    "Black: positive effect, red: negative. Label/width: share of the target's variance that enters through the "
    "feature (edges into the target), coefficient in SD per SD (other edges). Together the features explain 19 %.",
    "Verdict: partly explained (cross-validated share 0.17, permutation p = 0.005; basis: launch configuration, "
    "problem size, copy and context features (direction known)).",
    "READ WITH CARE - unconstrained fit has edges out of the target (to ctx_kernels_concurrent): the target may not "
    "be a sink; dependent residuals in 7 of 28 pairs (worst grid_x / sq_insts_valu): a hidden common cause or a "
    "non-linear effect; rows from 3 bin(s): the bin bootstrap says little about stability",
    "Hidden: 2 of 9 edges (2 with bootstrap probability < 0.5).",
)


@pytest.mark.parametrize("inches, dpi", [(7.5, 60), (9.9, 110), (16, 110), (5, 200)])
def test_a_long_footnote_wraps_inside_the_figure_and_keeps_every_word(tmp_path, inches, dpi):
    """The footnote (~100 words on a causal graph) is broken to the figure's width by gpuvar itself (matplotlib's
    wrap=True measured every word prefix at every draw: half of a causal-graph job): every word kept in order,
    nothing cut inside a word, no line past the figure's right edge in the image saved at the figure's dpi or
    another, and a second save (the next format) rewraps nothing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig, ax = plt.subplots(figsize=(inches, 2))
    ax.plot([0, 1], [0, 1])
    style.footnote(fig, CAUSAL_FOOTNOTE)
    style.save_figure(fig, tmp_path / "fig", ["png"], dpi)
    note = next(t for t in fig.texts if t.get_gid() == style.FOOTNOTE_GID)
    wrapped = note.get_text()
    assert wrapped.split() == " ".join(CAUSAL_FOOTNOTE).split()  # every word, in order: only line breaks added
    assert not cut_inside_a_word(" ".join(CAUSAL_FOOTNOTE), wrapped)
    assert len(wrapped.split("\n")) > len(CAUSAL_FOOTNOTE)  # it did wrap
    FigureCanvasAgg(fig)  # (saved and closed: a canvas to measure it again)
    style.place_footnotes(fig)  # what the next format's save does first
    assert note.get_text() == wrapped
    fig.set_dpi(dpi)  # measured as saved
    assert note.get_window_extent(fig.canvas.get_renderer()).x1 <= fig.bbox.x1


def test_forest_footnote_is_below_the_x_label(tmp_path, monkeypatch):
    """A forest plot of one or two kernels is short: its x label reached below the figure, onto the footnote."""
    from gpuvar.compare import figures

    table = pd.DataFrame(
        {
            "key": ["a", "b"],
            "label": ["[memcpy HtoD]", "gemm_tile_kernel<float, 128>"],
            "ratio": [0.99, 1.09],
            "ci_low": [0.9, 1.08],
            "ci_high": [1.3, 1.1],
            "verdict": ["unchanged", "slower"],
        }
    )
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    seen = []
    save = style.save_figure
    monkeypatch.setattr(style, "save_figure", lambda fig, *a, **k: seen.append(fig) or save(fig, *a, **k))
    for rows in (table.head(1), table):
        figures.forest(rows, tmp_path / f"forest{len(rows)}", ["png"], 80, ("base", "cand"))
        fig = seen[-1]
        renderer = FigureCanvasAgg(fig).get_renderer()  # saved and closed: a canvas to measure it again
        note = next(t for t in fig.texts if t.get_gid() == style.FOOTNOTE_GID)
        xlabel = fig.axes[0].xaxis.label.get_window_extent(renderer)
        assert note.get_window_extent(renderer).y1 < xlabel.y0, len(rows)
        legend = fig.axes[0].get_legend().get_window_extent(renderer)
        assert legend.x0 >= fig.axes[0].get_window_extent(renderer).x1  # never on a kernel's point


# ----------------------------------------------------------------------------------------------- report
def write_causal_run(root):
    """A `gpuvar causal` folder: a flagged kernel graph, a trusted whole-dataset graph, a kernel whose name has
    braces, a skipped kernel (summary.json and each group's causal.json)."""
    groups = [
        ("void gemm_tile_kernel<float, 128>(float const*, float*, int)", "void_gemm-ca17dbcd", ["residuals"], False),
        ("__all__", "all-1a465e64", [], True),
        ("void at::native::{anonymous}::softmax<float>(float*)", "void_at_native-191b7697", [], True),
    ]
    summary = {"target": TARGET, "groups": []}
    for name, slug, failed, trusted in groups:
        folder = write_group(root / slug, dense_edges()[:3], group=name)
        verdict = {"verdict": "explained", "share": 0.8, "failed_checks": failed}
        record = {"group": name, "slug": slug, "status": "ok", "target": TARGET, "trusted": trusted}
        record |= {"verdict": verdict, "warnings": ["dependent residuals in 2 of 21 pairs"] if failed else []}
        (folder / "causal.json").write_text(json.dumps(record))
        summary["groups"].append(record | {"rows_used": 300, "explained_share": 0.8})
    (root / "tiny-0000").mkdir()
    skipped = {"group": "tiny_kernel(int)", "slug": "tiny-0000", "status": "skipped", "skip_reason": "12 rows < 30"}
    (root / "tiny-0000" / "causal.json").write_text(json.dumps(skipped))
    summary["groups"].append(skipped)
    (root / "summary.json").write_text(json.dumps(summary))
    return root


def test_report_labels_name_each_graph_and_say_whether_to_trust_it(tmp_path):
    """`snakemake --report` listed the causal graphs by folder slug ('void_gemm_tile_kernel_float_128_float_
    co-ca17dbcd'); its labels now give the kernel's name, the checks' outcome and how to read the graph."""
    from snakemake.io import apply_wildcards

    root = write_causal_run(tmp_path / "results" / "causal" / "demo" / TARGET)
    out = tmp_path / "plots"
    index = plot_causal_dir(root, out, formats=["png"])
    assert set(index["checks"]) == {"flagged", "trusted", "skipped"}
    labels = workflow_figures.causal_labels(dataset="{dataset}", target="{target}", figure="causal graph")
    shown = {}
    for slug in ("void_gemm-ca17dbcd", "all-1a465e64", "void_at_native-191b7697"):
        wildcards = SimpleNamespace(group=slug, dataset="demo", target=TARGET)
        row = labels(wildcards, output=[str(out)])
        assert all(isinstance(v, str) for v in row.values())  # what Snakemake accepts
        shown[slug] = {k: apply_wildcards(v, vars(wildcards)) for k, v in row.items()}  # what the report does
    assert shown["void_gemm-ca17dbcd"] == {
        "graph": "gemm_tile_kernel<float, 128>",
        "checks": "flagged",
        "read as": "a hypothesis",
        "dataset": "demo",
        "target": TARGET,
        "figure": "causal graph",
    }
    assert shown["all-1a465e64"]["graph"] == "All kernels (whole dataset)"
    assert shown["all-1a465e64"]["checks"] == "trusted" and shown["all-1a465e64"]["read as"] == "a finding"
    assert shown["void_at_native-191b7697"]["graph"] == "{\u200banonymous}::softmax<float>"  # not a wildcard
    assert all(slug.split("-")[-1] not in row["graph"] for slug, row in shown.items())  # no hash of a slug


def toggles(rows: list[dict]) -> list[str]:
    """The labels Snakemake's report (abstract_results.js) turns into an on/off toggle: beyond the first label,
    one with exactly two values each on half the rows, if it is the only such label."""
    keys = list(rows[0])[1:]
    found = []
    for key in keys:
        values = [r[key] for r in rows]
        unique = set(values)
        if len(unique) == 2 and all(values.count(v) * 2 == len(rows) for v in unique):
            found.append(key)
    return found if len(found) == 1 else []


@pytest.mark.parametrize("checks", [["trusted", "flagged"], ["trusted", "trusted"], ["flagged", "trusted"] * 2])
def test_report_labels_never_become_a_broken_toggle(checks):
    """A toggle whose other value a row lacks shows an empty row: the second status label prevents it."""
    rows = [
        {"graph": f"kernel {i}", "checks": c, "read as": workflow_figures.READ_AS[c], "dataset": "d", "figure": "f"}
        for i, c in enumerate(checks)
    ]
    assert toggles(rows) == []
    assert len(set(workflow_figures.READ_AS.values())) == len(workflow_figures.READ_AS)


def test_checks_overview_lists_every_graph_by_name_with_its_status(tmp_path, run_cli):
    """The report's overview (results/causal/checks.html): every graph, named as people name it, trusted or
    flagged, flagged first; the same names and statuses as the TSV."""
    root = write_causal_run(tmp_path / "results" / "causal" / "demo" / TARGET)
    res = run_cli("causal-checks", root, "-o", tmp_path / "checks.tsv", "--html", tmp_path / "checks.html")
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "checks.html").read_text()
    rows = re.findall(r'<tr class="([a-z-]+)">(.*?)</tr>', page)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", body) for _, body in rows]
    listed = [(re.sub(r"<[^>]+>", "", c[2]), c[4], c[-1]) for c in cells]
    assert listed == [
        ("gemm_tile_kernel&lt;float, 128&gt;", "⚠ flagged", "void_gemm-ca17dbcd"),
        ("All kernels (whole dataset)", "✓ trusted", "all-1a465e64"),
        ("{anonymous}::softmax&lt;float&gt;", "✓ trusted", "void_at_native-191b7697"),
        ("tiny_kernel", "skipped", "tiny-0000"),
    ]
    assert "(4: 1 flagged, 2 trusted, 1 skipped)" in page
    assert "http" not in page and "<script" not in page  # self-contained, as the report embeds it
    table = pd.read_csv(tmp_path / "checks.tsv", sep="\t", keep_default_na=False)
    assert list(table["checks"]) == ["flagged", "trusted", "trusted", "skipped"]
    assert list(table["name"])[:2] == ["gemm_tile_kernel<float, 128>", "All kernels (whole dataset)"]
