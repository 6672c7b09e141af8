"""A causal output drawn: one figure per analysis group (with its edge table and graph.graphml beside it) and
index.csv listing every group, drawn or skipped, under the name the report shows it by."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from gpuvar.causal.describe import group_names
from gpuvar.layout import ALL_GROUP, CAUSAL_GRAPH, FIGURE_INDEX, group_edges_file, group_graph_file
from gpuvar.output import write_csv
from gpuvar.plots import style
from gpuvar.plots.causal_graph.draw import draw_causal_graph
from gpuvar.plots.causal_graph.edges import hidden_counts
from gpuvar.plots.causal_graph.load import group_folders, load_group, skipped_groups


def plot_group(
    folder: str | Path,
    stem: str | Path,
    formats=("svg", "png"),
    dpi: int = 110,
    min_variance_share: float = 0.01,
    min_probability: float = 0.5,
    title: str | None = None,
) -> dict:
    """Draw one analysis group to stem.<fmt> and its edge table (with hidden reasons) to stem.edges.csv."""
    cg = load_group(folder)
    csv = Path(group_edges_file(str(stem)))
    fig, edges = draw_causal_graph(cg, min_variance_share, min_probability, title, csv.name)
    files = style.save_figure(fig, stem, formats, dpi)
    files.append(write_csv(edges, csv))
    hidden = hidden_counts(edges)
    return {
        "group": cg.group,
        "target": cg.target,
        "edges": int(len(edges)),
        "shown": int((edges["status"] == "shown").sum()),
        "hidden": dict(sorted(hidden.items())),
        "trusted": not cg.flagged,
        "files": [str(f) for f in files],
    }


# outdir/index.csv of plot_causal_dir: one row per group; `name` and `checks` are what the HTML report lists
# each figure by (gpuvar.workflow.figures.causal_labels), `slug` is the figure's file name
INDEX_COLUMNS = ["group", "slug", "name", "checks", "status", "edges", "shown", "hidden", "reason"]
REPORT_NAME_WIDTH = 80
TITLE_NAME_WIDTH = 60  # characters of a kernel's name in a figure title (group_name's default)


def plot_causal_dir(
    causal_dir: str | Path,
    outdir: str | Path,
    formats=("svg", "png"),
    dpi: int = 110,
    min_variance_share: float = 0.01,
    min_probability: float = 0.5,
    which: str = "all",
) -> pd.DataFrame:
    """One figure per analysis group of a `gpuvar causal` output into outdir/<slug>.<fmt> (+ .edges.csv).

    which: 'all', 'per_kernel' (every group but the whole dataset) or 'whole' (only the whole dataset).
    The group's graph.graphml is copied to outdir/<slug>.graphml. Writes outdir/index.csv listing every group
    (INDEX_COLUMNS): its readable name, how to read it (trusted, flagged, not explained, skipped), drawn or
    skipped and why; returns that table.
    """
    if which not in ("all", "per_kernel", "whole"):
        raise ValueError(f"which must be all, per_kernel or whole, not {which!r}")
    root, outdir = Path(causal_dir), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    # every group's title names it as the index does: told apart from the folder's other kernels (a tile size)
    loaded = [(folder, load_group(folder)) for folder in group_folders(root)]
    groups = [cg.group for _, cg in loaded] + [g["group"] for g in skipped_groups(root)]
    names = dict(zip(groups, group_names(groups, TITLE_NAME_WIDTH), strict=True))
    for folder, cg in loaded:
        is_whole = cg.group == ALL_GROUP
        if (which == "whole" and not is_whole) or (which == "per_kernel" and is_whole):
            continue
        fig, edges = draw_causal_graph(
            cg, min_variance_share, min_probability, edges_csv=group_edges_file(folder.name), name=names[cg.group]
        )
        style.save_figure(fig, outdir / folder.name, formats, dpi)
        write_csv(edges, outdir / group_edges_file(folder.name))
        if (folder / CAUSAL_GRAPH).is_file():  # the full graph travels with the figure
            shutil.copyfile(folder / CAUSAL_GRAPH, outdir / group_graph_file(folder.name))
        hidden = hidden_counts(edges)
        rows.append(
            {
                "group": cg.group,
                "slug": folder.name,
                "checks": cg.checks,
                "status": "drawn" if not cg.flagged else "drawn, flagged",
                "edges": len(edges),
                "shown": int((edges["status"] == "shown").sum()),
                "hidden": int(sum(hidden.values())),
                "reason": "; ".join([f"{n} {r}" for r, n in sorted(hidden.items())] + cg.warnings),
            }
        )
    for skipped in skipped_groups(root):
        if which == "all" or (which == "per_kernel") == (skipped["group"] != ALL_GROUP):
            rows.append(skipped | {"edges": 0, "shown": 0, "hidden": 0})
    for row, name in zip(rows, group_names([r["group"] for r in rows], REPORT_NAME_WIDTH), strict=True):
        row["name"] = name  # unique within the folder: the report lists the figures by it
    index = pd.DataFrame(rows, columns=INDEX_COLUMNS)
    write_csv(index, outdir / FIGURE_INDEX)
    return index
