"""Figures of the paper: causal graphs, parallel coordinates, variability timeline, scaling study.

Every figure is drawn with the Agg backend and saved with fixed metadata (see `style`), so a rerun on the
same inputs writes byte-identical SVG/PNG, and every figure is accompanied by the CSV of what it plots.
"""
