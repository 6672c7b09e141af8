"""Causal stage: DirectLiNGAM per kernel group with the target as a sink (fast numpy engine by default).

Public API: discover_all (gpuvar.causal.discover) with its settings from gpuvar.causal.options.causal_options,
prepare_all, pwling.fit. Imports are lazy so that
`import gpuvar.causal` stays cheap.
"""

from __future__ import annotations


def discover_all(*args, **kwargs):
    """See gpuvar.causal.discover.discover_all."""
    from gpuvar.causal.discover import discover_all as _discover_all

    return _discover_all(*args, **kwargs)


__all__ = ["discover_all"]
