"""Write kernel launches as the two CSV pages of one Nsight Compute 2025.3 report, shaped like the real exports.

The real H100 exports this copies (tests/data/recorded/h100-random-sizes-basic, `ncu --import R --csv` and
`ncu --import R --csv --page raw`, Nsight Compute 2025.3.1) have: no BOM, LF line ends, every field quoted.
  * details page (long): the identity columns, Section Name, Metric Name, Metric Unit, Metric Value, then the five
    rule columns (Rule Name, Rule Type, Rule Description, Estimated Speedup Type, Estimated Speedup). A metric row
    stops after an empty Rule Name (16 fields, so it ends with a comma); a rule row fills all 20 and has the
    section's identifier (e.g. "SpeedOfLight") as Section Name and empty metric fields. Each value is scaled to its
    own unit ("42.34" us, "231.42" Kbyte/block next to "0" byte/block), printed with two decimals unless
    integral, integers with thousands separators ("83,331").
  * raw page (wide): one row per launch after a header and a units row (empty identity fields), metrics sorted by
    name, one fixed unit per column ("us", "Mbyte", "cycle"), floats with six decimals, unitless integers with
    thousands separators ("1,056").
Values are given in base units (ns, byte, cycle, hz, %, counts); this module only formats them. Writes go to a
temporary file renamed into place, so an interrupted run leaves no partial CSV.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuvar.output import replacing

IDENTITY_HEADER = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
RULE_HEADER = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
DETAILS_HEADER = IDENTITY_HEADER + ("Section Name", "Metric Name", "Metric Unit", "Metric Value") + RULE_HEADER
PROCESS_ID = 749
PROCESS_NAME = "python3.12"
HOST_NAME = "127.0.0.1"
COMPUTE_CAPABILITY = "9.0"
COMMAND_LINE_SECTION = "Command line profiler metrics"  # details section of metrics asked for with --metrics

_SI = (("", 1.0), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12))
_TIME = (("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9))


@dataclass
class Launch:
    """One kernel launch: identity, details-page rows and raw-page values (base units)."""

    launch_id: int
    kernel_name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    details: list[tuple[str, str, str, object]] = field(default_factory=list)  # (section, name, base unit, value)
    rules: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)  # (section id, *RULE_HEADER)
    raw: dict[str, object] = field(default_factory=dict)  # raw metric name -> value in its base unit
    stream: int = 7
    context: int = 1
    device: int = 0


def _q(text) -> str:
    return '"' + str(text).replace('"', '""') + '"'


def _number(value: float, decimals: int = 2) -> str:
    """ncu's printing: integral values as integers with thousands separators, others with `decimals`."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}"


def _scaled(value: float, base: str) -> tuple[str, float]:
    """(printed unit, printed value) of a base-unit value on the details page: each value in its own unit."""
    num, sep, den = base.partition("/")
    if num == "ns":
        steps = _TIME
    elif num in ("byte", "cycle", "inst", "sector"):
        steps = tuple((p + num, f) for p, f in _SI)
        if num != "byte":  # counts of cycles and instructions are printed whole ("83,331")
            steps = steps[:1]
    elif num == "hz":
        return "Ghz" + sep + den, value / 1e9
    else:
        return base, value
    unit, factor = steps[0]
    for candidate, f in steps:
        if abs(value) >= f:
            unit, factor = candidate, f
    return unit + sep + den, value / factor


def _raw_value(value, unit: str, divisor: float, is_float: bool) -> str:
    """A raw-page value printed in the column's fixed unit (`divisor` base units per printed unit)."""
    if isinstance(value, str):
        return value
    printed = float(value) / divisor
    if is_float:
        return f"{printed:.6f}"
    if unit:
        return str(int(round(printed)))
    return _number(round(printed, 2))


def _identity(launch: Launch) -> str:
    gx, gy, gz = launch.grid
    bx, by, bz = launch.block
    fields = (
        launch.launch_id,
        PROCESS_ID,
        PROCESS_NAME,
        HOST_NAME,
        launch.kernel_name,
        launch.context,
        launch.stream,
        f"({bx}, {by}, {bz})",
        f"({gx}, {gy}, {gz})",
        launch.device,
        COMPUTE_CAPABILITY,
    )
    return ",".join(_q(f) for f in fields)


def _details_lines(launch: Launch) -> list[str]:
    prefix = _identity(launch)
    lines = []
    for section, name, base, value in launch.details:
        if isinstance(value, str):
            unit, text = base, value
        else:
            unit, scaled = _scaled(float(value), base)
            text = _number(scaled)
        lines.append(f"{prefix},{_q(section)},{_q(name)},{_q(unit)},{_q(text)},\n")
    for section_id, *rule in launch.rules:
        lines.append(f"{prefix},{_q(section_id)},{_q('')},{_q('')},{_q('')},{','.join(_q(r) for r in rule)}\n")
    return lines


def _write(path, lines) -> Path:
    path = Path(path)
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.writelines(lines)
    return path


def write_details(path, launches: list[Launch]) -> Path:
    """The details page (`ncu --import R --csv`): one row per (launch, metric), then the launch's rule rows."""
    lines = [",".join(_q(h) for h in DETAILS_HEADER) + "\n"]
    for launch in launches:
        lines.extend(_details_lines(launch))
    return _write(path, lines)


def write_raw(path, launches: list[Launch], columns: dict[str, tuple[str, float, bool]]) -> Path:
    """The raw page (`--page raw`): `columns` maps each metric to (printed unit, base units per printed unit,
    printed as float: "42.336000" rather than "42");
    metrics are written in name order, as ncu sorts them; a launch without a metric gets an empty field."""
    names = sorted(columns)
    lines = [
        ",".join(_q(h) for h in IDENTITY_HEADER + tuple(names)) + "\n",
        ",".join(_q(u) for u in ("",) * len(IDENTITY_HEADER) + tuple(columns[n][0] for n in names)) + "\n",
    ]
    for launch in launches:
        values = []
        for name in names:
            unit, divisor, is_float = columns[name]
            value = launch.raw.get(name)
            values.append(_q("" if value is None else _raw_value(value, unit, divisor, is_float)))
        lines.append(_identity(launch) + "," + ",".join(values) + "\n")
    return _write(path, lines)
