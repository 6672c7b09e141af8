"""Phase 0 of the binning job: the options checked against the kernels file, resolved once into a frozen Plan
(bin width and unit, axis, columns to read, features) that every later phase reads. Every rank does this
before any collective, so a bad argument or file fails identically everywhere."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar import targets as T
from gpuvar.binning.columns import open_parquet
from gpuvar.binning.partition import bin_width
from gpuvar.errors import GpuvarError, InputError
from gpuvar.options import ConfigOption, default, out_of_bounds

log = logging.getLogger("gpuvar.binning")
LINKED = T.LINKED_COPY_COLUMNS
ID_COLUMNS = (
    "kernel_name",
    "kernel_short_name",
    "launch_config",
    "call_site",
    "launch_op",
    "launch_id",
    "start",
    "end",
    "duration",
    "device_id",
    "stream_id",
)
DICTIONARY_COLUMNS = (
    "kernel_name",
    "launch_config",
    "call_site",
)  # read as Arrow dictionaries: one string decode per value


@dataclass
class BinOptions:
    """The binning job's settings (mutable: the CLI points `output` at its staging folder).

    A dataclass, not a pydantic model: every MPI rank builds it, and pydantic's import costs each rank ~0.1 s of
    start-up. Its defaults are the config's, read from the option table (gpuvar.options.default) rather than
    written here, and make_plan checks the bounds from the same table; the command line, the workflow's rule
    (through the command line) and `gpuvar explain` build it."""

    kernels: Path | list[Path]  # several: one table, the files' rows one after the other (columns.ParquetFiles)
    memcpy: Path | None = None
    target: str = T.DEFAULT_TARGET
    group: str = default("targets", "variability_group")
    link: str = default("targets", "memcpy_link")
    bin_width: str = default("binning", "bin_width")
    top_k: int = default("binning", "top_k")
    features: str = default("binning", "features")  # 'auto' | 'none' | 'f1,f2'
    workers_per_rank: int = default("binning", "workers_per_rank")
    output: Path = Path("bin-out")
    launch_bin_width: int | None = default("binning", "launch_bin_width")  # launches per bin without timestamps
    sample_bins: int | None = None  # random bins whose rows go to sample_rows.parquet (None: top_k; 0: none)
    sample_seed: int = default("causal", "seed")


# the settings that come from the config (one definition: gpuvar.config), each a command-line flag whose
# dest is the BinOptions field it sets; the rest are per-run inputs
CONFIG_OPTIONS = (
    ConfigOption("--group", "targets", "variability_group"),
    ConfigOption("--link", "targets", "memcpy_link"),
    ConfigOption("--bin-width", "binning", "bin_width"),
    ConfigOption("--launch-bin-width", "binning", "launch_bin_width"),
    ConfigOption("--top-k", "binning", "top_k"),
    ConfigOption("--workers-per-rank", "binning", "workers_per_rank"),
    # the config's causal.seed also seeds the causal step's bootstrap; `gpuvar bin` only draws the random bins
    ConfigOption("--sample-seed", "causal", "seed", description="seed of the random bin sample (--sample-bins)"),
)


class Collective(GpuvarError):
    """A user error every rank detects identically at the same point: exit 2 with one line, no abort."""


@dataclass(frozen=True)
class Plan:
    """What the job does, fixed before any data is read."""

    opts: BinOptions  # a private copy: later changes to the caller's options do not reach the job
    width: int  # bin width in `unit`
    unit: str  # 'ns' (time bins on `start`) or 'launches' (bins on `launch_id`)
    axis: str  # 'start' or 'launch_id'
    link: bool  # link each kernel to a copy (a memcpy file was given)
    features: tuple[str, ...]  # columns with per-bin statistics besides the target (may name linked columns)
    columns: tuple[str, ...]  # kernel columns the read phase decodes
    schema: pa.Schema  # the kernels file's schema, DICTIONARY_COLUMNS as dictionaries (as the read phase sees it)


def has_timeline(pf: pq.ParquetFile) -> bool:
    """False when every `start` is null (per the Parquet statistics, no data read): Nsight Compute data."""
    md, names = pf.metadata, pf.schema_arrow.names
    if "start" not in names or md.num_rows == 0:
        return "start" in names
    index = pf.schema.names.index("start")
    nulls = 0
    for rg in range(md.num_row_groups):
        stats = md.row_group(rg).column(index).statistics
        if stats is None or not stats.has_null_count:
            return True
        nulls += stats.null_count
    return nulls < md.num_rows


def feature_list(opts: BinOptions, names: list[str], link: bool) -> tuple[str, ...]:
    """Numeric columns to compute per-bin statistics of (besides the target)."""
    text = opts.features.strip()
    if text == "none" or text == "":
        return ()
    if text == "auto":
        return ("duration",) if "duration" in names else ()
    wanted = [f.strip() for f in text.split(",") if f.strip()]
    allowed = set(names) | (set(LINKED) if link else set())
    unknown = [f for f in wanted if f not in allowed]
    if unknown:
        raise Collective(f"--features: unknown column(s) {', '.join(unknown)}")
    return tuple(dict.fromkeys(wanted))


def first_file(kernels) -> Path:
    """The kernels file, or the first of several (they share one schema)."""
    return Path(kernels[0] if isinstance(kernels, list | tuple) else kernels)


def source_name(kernels) -> str:
    """The kernels file's name, or for several files their count and the first one's path (bins metadata)."""
    if isinstance(kernels, list | tuple) and len(kernels) > 1:
        return f"{len(kernels)} files, the first {kernels[0]}"
    return first_file(kernels).name


def make_plan(opts: BinOptions) -> Plan:
    """Check the options and the input files' columns; a one-line GpuvarError for anything wrong."""
    width, unit = bin_width(opts.bin_width)
    T.check_choice(opts.target, tuple(T.TARGETS), "target")
    T.check_choice(opts.group, T.GROUPS, "group")
    T.check_choice(opts.link, T.LINKS, "link")
    for option in CONFIG_OPTIONS:  # the config's bounds, for a caller that did not come through the command line
        value = getattr(opts, option.flag.removeprefix("--").replace("-", "_"))
        problem = isinstance(value, int | float) and out_of_bounds(option.section, option.name, value)
        if problem:
            raise GpuvarError(f"{option.flag} {problem}, got {value}")
    names = open_parquet(opts.kernels).schema_arrow.names
    if unit == "ns" and opts.launch_bin_width and not has_timeline(open_parquet(opts.kernels)):
        log.info(
            "%s has no kernel start times (Nsight Compute data): binning over launch order, %d launches "
            "per bin, instead of %s",
            source_name(opts.kernels),
            opts.launch_bin_width,
            opts.bin_width,
        )
        width, unit = bin_width(str(int(opts.launch_bin_width)))
    axis = "start" if unit == "ns" else "launch_id"
    schema = open_parquet(opts.kernels, read_dictionary=[c for c in DICTIONARY_COLUMNS if c in names]).schema_arrow
    if T.target(opts.target).links_copies and opts.memcpy is None:
        raise GpuvarError(f"--target {opts.target} needs --memcpy MEMCPY.parquet")
    link = opts.memcpy is not None
    if link and isinstance(opts.kernels, list | tuple) and len(opts.kernels) > 1:
        raise GpuvarError("--memcpy links the copies of one kernels file: give one (merged) kernels file with it")
    if link:
        open_parquet(opts.memcpy)
    need = ["kernel_name", "duration", axis] + ([T.GROUP_COLUMN[opts.group]] if opts.group != "kernel" else [])
    if link:
        need += ["start", "device_id"] + (["stream_id"] if opts.link == "stream" else [])
    missing = [c for c in dict.fromkeys(need) if c not in names]
    if missing:
        raise InputError(
            first_file(opts.kernels), f"missing column(s) {', '.join(missing)} (not a canonical kernels file?)"
        )
    features = feature_list(opts, names, link)
    columns = tuple(dict.fromkeys(need + [f for f in features if f in names]))
    return Plan(replace(opts), width, unit, axis, link, features, columns, schema)
