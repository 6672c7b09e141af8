"""What each feature column is, from `data/feature_roles.csv`: the domain knowledge the causal stage needs.

Why a data file: which columns are categories, which are products of other columns and which are set by
the program (not by the hardware) is knowledge about the profilers, not about the algorithm; keeping it in
one table lets docs and code read the same facts. Rows are tried in order; the first whose pattern
(a regular expression over the whole column name) matches decides. Unmatched numeric columns are
hardware counters.

Roles and their tier in the prior knowledge (a lower tier cannot be caused by a higher one):
  launch  (tier 0)  launch configuration chosen by the program and its compiler
  context (tier 0)  what ran beside the launch on its GPU (ctx_*: concurrent copies, other streams' kernels,
                    host gaps, place in the step; gpuvar.ingest.context): set by the rest of the program,
                    so a possible cause of the kernel's counters and duration, never caused by them
  copy    (tier 0)  attributes of the copy the program issued
  derived (tier 0)  a product of other columns (kept only when its components are absent)
  counter (tier 1)  hardware counters and anything else measured during the run
  leak    (tier 1)  computed from the kernel's own elapsed time (cycles, rates per elapsed time): never a feature
                    unless listed explicitly (gpuvar.causal.prepare.leak_reason)
  target  (tier 2)  the variability being explained (a sink)
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

TIERS = {"launch": 0, "context": 0, "copy": 0, "derived": 0, "counter": 1, "leak": 1}
TARGET_TIER = 2
# Representative preference when near-duplicates merge: a launch parameter over a context column (what ran
# beside the kernel), over a derived one, over a copy attribute, over a counter (the one a performance
# engineer can change comes first; a context column names a cause outside the kernel, which a counter
# correlated with it would hide).
ROLE_PREFERENCE = {"launch": 0, "context": 1, "derived": 2, "copy": 3, "counter": 4, "leak": 5}


@dataclass(frozen=True)
class Role:
    role: str
    categorical: bool
    components: tuple[str, ...]
    why: str

    @property
    def tier(self) -> int:
        return TIERS[self.role]


COUNTER = Role("counter", False, (), "measured during the run (hardware counter or other metric)")


@lru_cache(maxsize=1)
def _rules() -> tuple[tuple[re.Pattern, Role], ...]:
    text = resources.files("gpuvar").joinpath("data/feature_roles.csv").read_text(encoding="utf-8")
    rules = []
    for row in csv.DictReader(text.splitlines()):
        components = tuple(c for c in row["components"].split("*") if c)
        role = Role(row["role"], row["categorical"] == "yes", components, row["why"])
        rules.append((re.compile(row["pattern"]), role))
    return tuple(rules)


def role_of(column: str) -> Role:
    """The role of a column (an indicator `col=level` has its column's role)."""
    base = column.split("=", 1)[0]
    for pattern, role in _rules():
        if pattern.fullmatch(base):
            return role
    return COUNTER


def is_categorical(column: str) -> bool:
    return role_of(column).categorical
