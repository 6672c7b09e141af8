"""Distributed binning (paper §2.3-2.4): targets per launch, fixed-width bins on the global timeline,
per-bin statistics, the top-k most variable bins and their rows. See `gpuvar.binning.job`."""
