"""Compare two runs: which kernels got slower beyond run-to-run noise, whether the variable windows moved, and
which causes of variability changed.

Modules, one job each: `inputs` (find and read both runs' ingest, binning and causal outputs), `kernels`
(per-kernel statistics, bootstrap interval, Mann-Whitney + Benjamini-Hochberg), `windows` (top-k windows),
`causal_diff` (edges and variance shares), `figures` (seaborn figures), `run` (assemble and write
compare.json / kernels.csv), `planted` (the demo pair with a known answer), `cli`.
"""
