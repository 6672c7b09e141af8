"""Causal graph figures (paper Figs. 2, 3, 5a): which features push the target up (black) or down (red).

One job per module: load (a `gpuvar causal` group folder read into a CausalGraph), edges (which edges are drawn
and why the others are not), layout (where boxes and arrows go), draw (the figure), captions (title and
footnote), folder (every group of a causal output drawn, and the index.csv listing them).

Input is one analysis group folder written by `gpuvar causal` (graph.graphml, or edges.csv +
contributions.csv + bootstrap_edges.csv). The layout is layered, left to right, with no random seed: causes
first, the target alone on the right, every arrow pointing right; an arrow longer than one layer passes
through a slot reserved in each layer it crosses, and the layers are ordered against crossings (dense
whole-dataset graphs drawn on rings crossed arrows over labels). Long names wrap after a separator, never
inside a word. Edges below the variance-share or bootstrap-probability thresholds are hidden and counted in
the footnote and in the edge CSV, so nothing disappears without a trace; so are the edges beyond the
MAX_DRAWN_EDGES strongest (the footnote says how many more the CSV lists), which with a pixel bound on the
PNG keeps a dense graph a figure drawn in seconds. A graph whose assumption checks failed (causal.json
`trusted: false`) carries a red banner with the failed checks, and edges found only in the selected bins
(not in a random sample of bins) are dashed.
"""
