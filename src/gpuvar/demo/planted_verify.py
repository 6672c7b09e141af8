"""Planted runs and re-runs for `gpuvar verify` (gpuvar.findings.verify): each re-run carries a known answer.

The original run is gpuvar.demo.planted_context's: a transformer-like step whose first kernel is 40 % slower in
the random 30 % of steps where a 512 MiB copy runs beside it. Its finding is "explained by ctx_copy_active". Re-runs:
  no_copy       the copy removed, the program otherwise the same: the finding must be `confirmed`
  same_steps    the copy removed, but the first kernel is still 40 % slower in the same kind of steps (the copy was
                only what those steps had in common with the real cause): `refuted`
  copy_stays    the copy still runs in 30 % of steps: `not tested` (the intervention was not applied)
Tables are canonical (the columns `gpuvar ingest` writes), with the context columns computed as ingest computes
them; seeded, so one seed gives the same rows.
"""

from __future__ import annotations

import pandas as pd

RERUNS = ("no_copy", "same_steps", "copy_stays")


def _with_context(kernels: pd.DataFrame, memcpy: pd.DataFrame) -> pd.DataFrame:
    from gpuvar.ingest.context import context_columns

    return kernels.assign(**context_columns(kernels, memcpy))


def original(steps: int = 300, seed: int = 0) -> pd.DataFrame:
    """The run whose finding is checked: the copy slows the first kernel."""
    from gpuvar.demo.planted_context import planted

    kernels, memcpy, _ = planted(steps, seed)
    return _with_context(kernels, memcpy)


def rerun(kind: str, steps: int = 300, seed: int = 1) -> pd.DataFrame:
    """A re-run of the program (another seed: other noise, other steps) of the given kind (module docstring)."""
    from gpuvar.demo import planted_context as pc

    if kind not in RERUNS:
        raise ValueError(f"kind must be one of {', '.join(RERUNS)}")
    saved = pc.COPY_FRACTION
    try:
        pc.COPY_FRACTION = saved if kind in ("same_steps", "copy_stays") else 0.0
        kernels, memcpy, truth = pc.planted(steps, seed)
    finally:
        pc.COPY_FRACTION = saved
    if kind == "same_steps":  # the slowdown stays in the steps that had the copy; the copy goes
        memcpy = memcpy[memcpy["copy_kind_name"] == "Memset"].reset_index(drop=True)
    return _with_context(kernels, memcpy)
