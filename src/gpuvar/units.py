"""Units shared across stages: bin-width parsing (the config model and the MPI binning job, which must not import
pydantic: every rank pays its start-up) and durations as the pages print them (findings, ranks, verify)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"\s*(\d{1,15}(?:\.\d{1,9})?)\s*(ns|us|ms|s)?\s*")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
MAX_BIN_NS = 86_400 * 1_000_000_000  # one day
MAX_LAUNCHES = 1_000_000_000


def parse_bin_width(text: str | int | float) -> tuple[float, str]:
    """'10ms' -> (10_000_000, 'ns'); a bare number means launches (for traces without timestamps).

    Bounded so that no accepted value can overflow or split a command later: a whole number of ns from 1 ns to
    one day, or a whole number of launches from 1 to 10^9."""
    m = _DURATION.fullmatch(str(text)) if not isinstance(text, bool) else None
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"bin width {text!r} is not a positive number with a unit ns, us, ms or s (e.g. '10ms')")
    value, unit = float(m.group(1)), m.group(2)
    if unit:
        ns = value * _UNIT_NS[unit]
        if not 1 <= ns <= MAX_BIN_NS or abs(ns - round(ns)) > 1e-6:
            raise ValueError(f"bin width {text!r} must be a whole number of ns from 1ns to 1 day (86400s)")
        return float(round(ns)), "ns"
    if value != int(value) or not 1 <= value <= MAX_LAUNCHES:
        raise ValueError(f"bin width {text!r} without a unit is launches: a whole number from 1 to {MAX_LAUNCHES}")
    return value, "launches"


def format_bin_width(text: str | int | float) -> str:
    """The bin width validated and as one shell-safe token: '10 ms' -> '10ms', 50 -> '50'."""
    parse_bin_width(text)
    return "".join(str(text).split())


def counted(n: int, noun: str) -> str:
    """'1 launch', '2 launches', '1 kernel name', '609 call sites': what a page says of a count (the pages used to
    read '1 launches of 1 kernel names at 1 call sites'). Plural by English's regular rule, which every noun the
    pages count follows (launch -> launches, call site -> call sites, group -> groups)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n} {noun}s"


def three_digits(x: float) -> str:
    """x to three significant digits (trailing zeros dropped), or its whole part where that would take
    exponent notation (3833.1 -> 3833, 999.6 -> 1000, 0.1142 -> 0.114)."""
    text = f"{x:.3g}"
    return f"{x:.0f}" if "e" in text else text


def duration_text(ns: float) -> str:
    """A duration a reader takes in at a glance: µs below 0.1 ms, ms below 1 s, else s; three significant
    digits, never exponent notation (a launch 3.8 s into a trace read '3.83e+03 ms')."""
    a = abs(ns)
    if a >= 1e9:
        return f"{three_digits(ns / 1e9)} s"
    return f"{three_digits(ns / 1e6)} ms" if a >= 1e5 else f"{three_digits(ns / 1e3)} µs"
