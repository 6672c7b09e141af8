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

Kinds (`kind`, the table's last column, `counter_kind`; a row without it is 'time' if it is a leak, else 'other'):
what a measured column counts, so that the findings can tell a counter that
may be named as a cause of the duration from one that is the duration in another form (issue 34, GUIDE §10):
  work   work or traffic whose direction on the duration is known: bytes, sectors, requests, instructions, waves
         (ncu dram__bytes_*, lts__t_sectors*, smsp__inst_executed*, launch__waves_per_multiprocessor; AMD SQ_WAVES,
         SQ_INSTS_*, TCC_*REQ*, TCP_*, TA_* wavefronts, FETCH_SIZE): an allowed findings driver
  time   the duration in another unit: elapsed or active cycles, per-second and per-elapsed-cycle rates, % of peak
         elapsed, throughput %, busy %, clocks measured during the kernel, latencies and in-flight levels, the
         duration itself. Exactly the rows of role `leak` (checked when the table is read): refused as causes
  stall  cycles or samples lost waiting on one reason (stall-reason samples, *_STALL_CYCLES): a mediator, time-like
         in unit; kept as a counter in causal graphs and named apart so that the findings decide
  other  everything else: ratios that are not per elapsed time (hit rates, achieved occupancy, IPC per active
         cycle), launch parameters, device attributes, unknown counters; analysed, but not a findings driver

How a column name is matched: the part before '=' (an indicator `col=level` has its column's role); a Nsight Compute
details-page name qualified by its section ('GPU Speed Of Light Throughput: Duration', written by gpuvar.ingest.ncu
when a metric name recurs in several sections) by its metric part, because the section name is not the metric
('... Throughput: SM Frequency' is a frequency, not a throughput); and each rule is tried on the name and on its
AMD stem (without an instance index '[3]', an aggregate suffix '_sum'/'_avr'/'_min'/'_max' or an Omniperf pass
suffix '_pass12'), so that 'TCC_HIT[0]' and 'GRBM_GUI_ACTIVE_pass12' get the rows of TCC_HIT and GRBM_GUI_ACTIVE.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

TIERS = {"launch": 0, "context": 0, "copy": 0, "derived": 0, "counter": 1, "leak": 1}
TARGET_TIER = 2
KINDS = ("work", "time", "stall", "other")
# Representative preference when near-duplicates merge: a launch parameter over a context column (what ran
# beside the kernel), over a derived one, over a copy attribute, over a counter (the one a performance
# engineer can change comes first; a context column names a cause outside the kernel, which a counter
# correlated with it would hide).
ROLE_PREFERENCE = {"launch": 0, "context": 1, "derived": 2, "copy": 3, "counter": 4, "leak": 5}
# a details-page name qualified by its section ('Section Name: Metric Name', gpuvar.ingest.ncu._metric_keys)
_SECTION_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9 ()/&,.#-]*: (?=\S)")
# AMD decorations of one counter: instance index, aggregate over instances, Omniperf pass suffix
_AMD_DECORATION = re.compile(r"(?:\[\d+\])?(?:_(?:sum|avr|min|max))?(?:_pass\d+)?$")


@dataclass(frozen=True)
class Role:
    role: str
    categorical: bool
    components: tuple[str, ...]
    why: str
    kind: str = "other"

    @property
    def tier(self) -> int:
        return TIERS[self.role]


COUNTER = Role("counter", False, (), "measured during the run (hardware counter or other metric)", "other")


@lru_cache(maxsize=1)
def _rules() -> tuple[tuple[re.Pattern, Role], ...]:
    return parse_rules(resources.files("gpuvar").joinpath("data/feature_roles.csv").read_text(encoding="utf-8"))


def parse_rules(text: str) -> tuple[tuple[re.Pattern, Role], ...]:
    """The rows of a role table (the CSV text of data/feature_roles.csv), in order."""
    rules = []
    for row in csv.DictReader(text.splitlines()):
        components = tuple(c for c in row["components"].split("*") if c)
        kind = row.get("kind") or ("time" if row["role"] == "leak" else "other")  # the last column may be left out
        role = Role(row["role"], row["categorical"] == "yes", components, row["why"], kind)
        # a leak is the duration in another form and a time-like counter is refused as a cause: one fact, two
        # columns, so a row that says one without the other is an error in the table, not a judgement call
        if role.role not in TIERS or role.kind not in KINDS or (role.role == "leak") != (role.kind == "time"):
            raise ValueError(f"data/feature_roles.csv: inconsistent row {row['pattern']!r} ({role.role}, {role.kind})")
        rules.append((re.compile(row["pattern"]), role))
    return tuple(rules)


def _candidates(column: str) -> tuple[str, ...]:
    """The names a column is matched under (the module docstring: indicator base, section-free, AMD stem)."""
    base = _SECTION_PREFIX.sub("", column.split("=", 1)[0], count=1)
    stem = _AMD_DECORATION.sub("", base)
    return (base,) if not stem or stem == base else (base, stem)


@lru_cache(maxsize=65536)
def role_of(column: str) -> Role:
    """The role of a column: the first row of the table whose pattern matches one of its names."""
    names = _candidates(column)
    for pattern, role in _rules():
        if any(pattern.fullmatch(name) for name in names):
            return role
    return COUNTER


def counter_kind(column: str) -> str:
    """What a column counts: 'work', 'time', 'stall' or 'other' (the module docstring). The findings may name a
    'work' column as a cause of the duration; a 'time' column never (it is the duration in another unit)."""
    return role_of(column).kind


def is_categorical(column: str) -> bool:
    return role_of(column).categorical
