"""Bin-width parsing, shared by the config model and the MPI binning job (which must not import pydantic:
every rank pays its start-up)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_bin_width(text: str | int | float) -> tuple[float, str]:
    """'10ms' -> (10_000_000, 'ns'); a bare number means launches (for traces without timestamps)."""
    m = _DURATION.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"bin width {text!r} is not a positive number with a unit ns, us, ms or s (e.g. '10ms')")
    value, unit = float(m.group(1)), m.group(2)
    return (value * _UNIT_NS[unit], "ns") if unit else (value, "launches")
