"""What a causal graph figure says in words: its title (the verdict: what explains the target, how much, by which
drivers, in at most TITLE_LINES lines) and its footnote (how to read the edges, the verdict's numbers, failed
checks, what is hidden and where it is listed)."""

from __future__ import annotations

import re

import pandas as pd

from gpuvar.causal.describe import group_name
from gpuvar.causal.verdict import verdict_title
from gpuvar.kernel_names import shorten_left
from gpuvar.plots import style
from gpuvar.plots.causal_graph.edges import BEYOND, hidden_counts
from gpuvar.plots.causal_graph.layout import ALIASES, compact_label
from gpuvar.plots.causal_graph.load import CausalGraph


def footnote_lines(
    cg: CausalGraph, edges: pd.DataFrame, shown_nodes: set[str], edges_csv: str | None = None
) -> list[str]:
    explained = (
        "" if cg.explained_share is None else f" Together the features explain {100 * cg.explained_share:.0f} %."
    )
    lines = [
        "Black: positive effect, red: negative. Label/width: share of the target's variance that enters through "
        "the feature (edges into the target), coefficient in SD per SD (other edges)." + explained
    ]
    if cg.verdict:
        v = cg.verdict
        p = "" if v.get("p_value") is None else f", permutation p = {v['p_value']:.3g}"
        lines.append(
            f"Verdict: {v.get('verdict')} (cross-validated share {v.get('share', 0):.2f}{p}; basis: {v.get('basis')})."
        )
    if cg.flagged:
        lines.append("READ WITH CARE - " + "; ".join(cg.warnings))
    elif cg.warnings:
        lines.append(
            "Orientation checks (informational: the direction of these features is known): " + "; ".join(cg.warnings)
        )
    selection = edges[(edges["status"] == "shown") & (edges["in_random_bins"] == False)]  # noqa: E712
    if len(selection):
        lines.append(
            f"Dashed: {len(selection)} edge(s) found only in the most variable bins, not in a random "
            "sample of bins (possibly induced by the selection)."
        )
    hidden = hidden_counts(edges)
    if hidden:
        parts = [f"{n} with {reason}" for reason, n in sorted(hidden.items())]
        lines.append(f"Hidden: {sum(hidden.values())} of {len(edges)} edges ({'; '.join(parts)}).")
    beyond = int(edges["status"].str.startswith(BEYOND).sum())
    if beyond:
        lines.append(f"{beyond} more edges in {edges_csv or 'the edge table'} (only the strongest are drawn).")
    if edges["probability"].isna().all() and len(edges):
        lines.append("No bootstrap probabilities: edges not filtered by confidence.")
    counted = sorted(n for n in shown_nodes if compact_label(n) != n)
    if counted:
        lines.append(
            f"≈ … and N more: near-duplicate columns merged into the one named ({len(counted)} node(s)); every "
            f"name is in {edges_csv or 'the edge table'} and graph.graphml."
        )
    idle = sorted(set(cg.graph.nodes) - shown_nodes)
    if idle:
        lines.append(f"{len(idle)} feature(s) without a shown edge not drawn.")
    return lines


def default_title(cg: CausalGraph, name: str | None = None, aliases: bool = True) -> str:
    """The verdict in words: '<kernel>: what explains <target>: explained 99 % by grid_x' (kernel names
    without return type, namespaces and parameter lists), never "causes of" on a graph that does not explain
    its target. Near-duplicates of a driver are counted (compact_label), or left out with aliases=False."""
    name = name or group_name(cg.group)
    if cg.verdict is None:
        return f"{name}: causes of {cg.target}"
    drivers = [compact_label(d) if aliases else ALIASES.sub(r"\g<name>", d) for d in cg.drivers]
    return verdict_title(name, cg.target, cg.verdict, drivers)


TITLE_LINES = 2
_PERCENT = re.compile(r"(\d) %")


def fitted_title(cg: CausalGraph, width: int, name: str | None = None) -> str:
    """default_title in at most TITLE_LINES lines of `width` characters: with the drivers' near-duplicates
    counted; else without them; else with the kernel's name shortened at a word boundary (its end, which holds
    the template arguments, kept); else cut after the last whole word that fits."""
    name = name or group_name(cg.group)

    def fits(text: str) -> bool:  # ('100 %' is written '100%' below: a line never ends in a bare number)
        return style.wrap_label(text, width).count("\n") < TITLE_LINES

    for aliases in (True, False):
        title = _PERCENT.sub(r"\1%", default_title(cg, name, aliases))
        if fits(title):
            return title
    rest = title[len(name) :]  # ': what explains ...'
    budget = TITLE_LINES * width - len(rest) - 8  # wrapping at word boundaries leaves some room unused
    if budget >= 16:
        title = shorten_left(name, budget) + rest
        if fits(title):
            return title
    lines = style.wrap_label(title, width).split("\n")[:TITLE_LINES]
    return " ".join(lines).rstrip(" ,:") + " …"
