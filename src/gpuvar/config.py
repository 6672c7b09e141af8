"""Typed workflow configuration. At start-up the workflow validates its config with `validate_config`
(gpuvar.workflow.registry), so a wrong key or value stops the run before any job, with the key path, the bad
value and what is allowed. A stage's settings object (gpuvar.causal.options) is built from these models.
"""

from __future__ import annotations

import errno
import glob
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpuvar.errors import ConfigError
from gpuvar.targets import TARGETS
from gpuvar.units import MAX_LAUNCHES, format_bin_width

FORMATS = (
    "auto",
    "nsys-sqlite",
    "ncu-csv",
    "rocprof-csv",
    "rocprof-db",
    "omniperf-pmc-perf",
    "rocprofv3-csv",
    "ncu-rep",
    "rocpd-sqlite",
    "pytorch-kineto",
    "nsys-rep",
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# Feature (column) names reach shell commands and comma-separated options: canonical names (docs/schema.md),
# raw ncu metrics (dram__bytes.sum.per_second), Omniperf counters (TCC_EA0_RDREQ[0]) and ncu details-page
# names ("Memory Throughput") fit; shell metacharacters, quotes, commas and control characters do not.
_FEATURE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/\[\]()%# -]{0,199}")
FEATURE_ALLOWED = "a column name: a letter or '_', then letters, digits, space and _ . : / [ ] ( ) % # -"
MAX_SEED = 2**32 - 1


def not_bool(v):
    """YAML `true` is not a number (pydantic would read it as 1)."""
    if isinstance(v, bool):
        raise ValueError("must be a number, not true/false")
    return v


def _feature_names(v):
    """Each name must match _FEATURE in full: it is passed to shell commands (quoted) and split on commas."""
    if isinstance(v, list):
        if not v:
            raise ValueError("must list at least one column (or be 'auto')")
        for name in v:
            if isinstance(name, str) and (not _FEATURE.fullmatch(name) or name != name.strip()):
                raise ValueError(f"feature {name!r} is not {FEATURE_ALLOWED}")
        if len(v) > 10_000:
            raise ValueError("lists more than 10000 features")
    return v


Int = Annotated[int, BeforeValidator(not_bool)]
Float = Annotated[float, BeforeValidator(not_bool), AllowInfNan(False)]
Seed = Annotated[int, BeforeValidator(not_bool), Field(ge=0, le=MAX_SEED)]
Features = Annotated[Literal["auto"] | list[str], BeforeValidator(_feature_names)]


class OneOf:
    """A choice whose allowed values are read when a value is validated, not when this module is imported: the
    target names are gpuvar.targets.TARGETS', so a target added there is a config value at once. A value not
    allowed is refused as a Literal's is (the same one-line message); gpuvar.config_reference lists `choices()`."""

    def __init__(self, choices):
        self.choices = choices

    def __call__(self, value):
        allowed = tuple(self.choices())
        if value in allowed:
            return value
        names = [repr(c) for c in allowed]
        expected = names[-1] if len(names) < 2 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


TargetName = Annotated[str, BeforeValidator(OneOf(lambda: tuple(TARGETS)))]


class Strict(BaseModel):
    # defer_build: a model's validator is built when it first validates, not at import (every `gpuvar bin` rank
    # imports this module for its option defaults and never validates a config)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Dataset(Strict):
    """One trace to analyse; each dataset is an independent branch of the DAG."""

    name: str = Field(description="identifier used in output paths")
    source: str | list[str] = Field(
        min_length=1,
        description="profiler file or folder (a folder that is not one trace, e.g. a dataset folder with its "
        "notes: the one trace directly in it, found by content; with merge: true its traces, the job's ranks); a glob "
        "expands to one dataset per match. A list (globs expand in "
        "place) without merge: the files of one trace, a rocprof / rocprofv3 kernel trace with its counter passes "
        "(joined by dispatch). With merge: true, a list of files and/or globs whose matches are ingested side by "
        "side (one job per file) and combined",
    )
    merge: bool = Field(False, description="combine the files of `source` into one dataset with a rank column")
    format: Literal[FORMATS] = Field("auto", description="auto (detect by content) or a reader's name")
    targets: list[TargetName] = Field(["kernel_variability"], description="targets analysed, one branch each")
    group_by: Literal["kernel_name", "kernel_short_name", "launch_config"] = Field(
        "kernel_name", description="column whose groups get their own causal graph"
    )
    features: Features = Field(
        "auto", description="'auto' (numeric, non-identifier columns) or a list of columns for causal discovery"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not _NAME.fullmatch(v):  # fullmatch: `$` would accept a trailing newline
            raise ValueError(
                "must start with a letter or digit and use only letters, digits, '_', '.', '-' (at most 100 characters)"
            )
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v):
        if any(ch in path for path in ([v] if isinstance(v, str) else v) for ch in "\n\r\0"):
            raise ValueError("must be a path without newline or NUL characters")
        return v

    @model_validator(mode="after")
    def _sources(self):
        if isinstance(self.source, list) and not self.source:
            raise ValueError("a list of sources needs at least one file")
        seen = set()
        for path in self.sources:  # one file twice: two ranks of one job, or one counter pass joined twice
            key = os.path.normpath(path)
            if key in seen:
                what = "each rank's file once" if self.merge else "each file of the trace once"
                raise ValueError(f"source lists {path!r} twice: {what}")
            seen.add(key)
        return self

    @property
    def sources(self) -> list[str]:
        """The dataset's files: one, the rank files of a merged dataset in rank (file) order, or the files of one
        trace (a kernel trace and its counter passes: a list without merge)."""
        return list(self.source) if isinstance(self.source, list) else [self.source]

    @field_validator("targets")
    @classmethod
    def _targets(cls, v):
        if not v:
            raise ValueError(f"must list at least one of {', '.join(TARGETS)}")
        return list(dict.fromkeys(v))


class Demo(Strict):
    enabled: bool = Field(True, description="write the embedded demo traces into resources/demo")
    seed: Seed = Field(0, description="seed of the synthetic traces")
    rows: Int = Field(20_000, gt=0, le=1_000_000_000, description="kernel launches per demo Nsight Systems rank")


class Ingest(Strict):
    keep_vendor_columns: bool = Field(
        True,
        description="Nsight Systems: also read the export columns the "
        "canonical schema does not use (kept under their own names)",
    )
    workers: Int = Field(
        0,
        ge=0,
        le=64,
        description="Nsight Systems exports ingested in pieces (above 2 M kernel rows): worker processes that fetch "
        "and normalize the pieces ahead of the one being written (0: a thread); the workflow's normalize job asks "
        "for 1 + workers cores",
    )


class Targets(Strict):
    variability_group: Literal["kernel", "launch_config", "call_site"] = Field(
        "kernel",
        description="kernel_variability is the launch's duration over the mean per 'kernel' name (the paper), "
        "per 'launch_config' (name + launch configuration) or per 'call_site' (name + launching op and position "
        "in the step: run-to-run variability only; docs/causal.md)",
    )
    memcpy_link: Literal["stream", "device"] = Field(
        "stream",
        description="each kernel is linked to the latest copy started before it on the same device "
        "and 'stream', or on the same 'device'",
    )


class Binning(Strict):
    bin_width: str = Field(
        "10ms",
        description="bin width with a unit ns/us/ms/s (e.g. 10ms), or a plain number "
        "of launches for traces without timestamps",
    )
    launch_bin_width: Int = Field(
        50,
        gt=0,
        le=MAX_LAUNCHES,
        description="launches per bin for traces without timestamps (Nsight Compute) when bin_width is a time",
    )
    top_k: Int = Field(20, gt=0, le=1_000_000, description="bins kept, by the variance of the target")
    # local runs: Snakemake reserves min(ranks, --cores) threads but mpiexec starts `ranks` processes, so more
    # ranks than cores oversubscribe the machine; 64 bounds a typo. On Slurm, tasks = ranks (profiles/slurm).
    ranks: Int = Field(2, gt=0, le=64, description="MPI ranks of the binning job (locally and on Slurm)")
    workers_per_rank: Int = Field(1, gt=0, le=64, description="threads per rank for the per-bin statistics")
    features: Features = Field(
        "auto",
        description="columns to also compute per-bin statistics of: 'auto' "
        "(duration; top-k rows keep every column) or a list",
    )

    @field_validator("bin_width", mode="before")
    @classmethod
    def _width(cls, v):
        return format_bin_width(v)  # one shell token ('10 ms' -> '10ms')


class Causal(Strict):
    seed: Seed = Field(0, description="seed of the bootstrap and of the random bin sample")
    bootstrap: Int = Field(100, ge=0, le=10_000, description="resamples of whole bins for edge probability (0: none)")
    min_rows: Int = Field(30, ge=2, le=1_000_000_000, description="groups with fewer usable rows are skipped")
    engine: Literal["fast", "lingam"] = Field("fast", description="fast (vectorised pwling) or lingam (reference)")
    workers: Int = Field(
        2,
        gt=0,
        le=64,
        description="processes fitting the bootstrap's resamples, the causal job's own included (1: no helper process)",
    )
    per_group: bool = Field(True, description="one graph per kernel group besides the whole dataset")
    rows: Literal["top_k", "random", "all"] = Field(
        "top_k",
        description="analyse the top-k bins (the paper's; compared with a random sample of as many bins), "
        "a random sample of bins, or all bins",
    )
    prior_knowledge: Literal["tiers", "sink", "none"] = Field(
        "tiers", description="tiers: launch configuration -> counters -> target; sink: only the target is a sink"
    )
    collinear_threshold: Float = Field(0.95, gt=0.5, le=1, description="merge features with |corr| >= this")


class Plots(Strict):
    formats: list[Literal["svg", "png"]] = Field(["svg", "png"], min_length=1, description="figure formats")
    min_variance_share: Float = Field(
        0.01, ge=0, le=1, description="hide edges into the target below this share of its variance"
    )
    min_probability: Float = Field(0.5, ge=0, le=1, description="hide edges below this bootstrap probability")
    parallel_features: Annotated[list[str], BeforeValidator(_feature_names)] = Field(
        ["grid_x", "grid_y", "block_x", "registers_per_thread", "linked_copy_kind"],
        description="axes of the parallel-coordinates plot besides the target",
    )
    dpi: Int = Field(110, ge=50, le=600, description="resolution of PNG figures")

    @field_validator("formats")
    @classmethod
    def _formats(cls, v):
        return list(dict.fromkeys(v))


class Scaling(Strict):
    dataset: str | None = Field(None, description="dataset whose binning job the `scaling` target times")
    target: TargetName = Field("kernel_variability", description="target of the timed binning runs")
    ranks: list[Int] = Field([1, 2], description="MPI rank counts to time")
    rows: Int = Field(
        2_000_000,
        gt=0,
        le=10_000_000_000,
        description="launches of the synthetic trace timed in "
        "place of a demo dataset (the demo's 20k launches are too few to time)",
    )

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v):
        if not v or any(r <= 0 or r > 64 for r in v):
            raise ValueError("must be a non-empty list of rank counts from 1 to 64")
        return sorted(set(v))


class CompareChoices(Strict):
    """What a comparison may choose per pair, in the config's `comparisons` and on `gpuvar compare`'s command line
    (defined once here: both inherit these fields)."""

    key: Literal["kernel_name", "kernel_short_name", "launch_config", "launch_op", "call_site"] = Field(
        "kernel_name",
        description="what kernels are matched by across the runs: name, short name, name + launch configuration, "
        "or launching op / call site + name (docs/compare.md)",
    )
    min_effect: Float = Field(
        0.02,
        ge=0,
        lt=1,
        description="smallest change of a median called slower/faster; smaller significant changes are "
        "'negligible' (0.02 = 2 %)",
    )


class Comparison(CompareChoices):
    """Two datasets compared by `gpuvar compare` (one DAG branch each): baseline and candidate are dataset names."""

    name: str = Field(description="identifier used in output paths")
    baseline: str = Field(description="dataset name of the run before")
    candidate: str = Field(description="dataset name of the run after")


class CompareStatistics(CompareChoices):
    """The statistics of `gpuvar compare` (gpuvar.compare): the per-pair choices and how the intervals and
    verdicts are made. Not config keys: a workflow comparison uses these defaults."""

    bootstrap: Int = Field(
        2000, ge=100, le=1_000_000, description="bootstrap resamples of steps for the ratio interval"
    )
    confidence: Float = Field(0.95, gt=0, lt=1, description="interval confidence")
    alpha: Float = Field(0.05, gt=0, lt=1, description="false-discovery rate for the verdicts")
    min_launches: Int = Field(5, ge=2, le=1_000_000_000, description="launches needed in both runs to test a kernel")
    forest_rows: Int = Field(30, gt=0, le=1000, description="rows drawn in the forest and delta-time figures")


class Verification(Strict):
    """A re-run that checks one dataset's findings (`gpuvar verify`; one DAG branch each): findings and rerun are
    dataset names, the rerun recorded with a finding's cause removed (one input size, no concurrent copy, ...)."""

    name: str = Field(description="identifier used in output paths")
    findings: str = Field(description="dataset name whose findings are checked")
    rerun: str = Field(description="dataset name of the re-run")
    tolerance: float = Field(
        0.02, ge=0, lt=1, description="relative widening of the predicted time-per-launch interval (0.02 = 2 %)"
    )
    cv_tolerance: float = Field(
        0.02, ge=0, lt=1, description="points the CV within call sites may exceed its predicted upper end"
    )


# Settings of a stage that are not config keys, with command-line options made from them (gpuvar.options): each
# stage's settings model builds on its section here, so every default and bound is written once.
STAGE_SECTIONS = {"compare": CompareStatistics}


class Config(Strict):
    # sections default through factories: an instance made at import would build every validator there
    demo: Demo = Field(default_factory=Demo)
    datasets: list[Dataset] = Field(min_length=1)
    ingest: Ingest = Field(default_factory=Ingest)
    targets: Targets = Field(default_factory=Targets)
    binning: Binning = Field(default_factory=Binning)
    causal: Causal = Field(default_factory=Causal)
    plots: Plots = Field(default_factory=Plots)
    scaling: Scaling = Field(default_factory=Scaling)
    comparisons: list[Comparison] = []
    verifications: list[Verification] = []

    @field_validator("comparisons", "verifications")
    @classmethod
    def _pairs(cls, v, info):
        """Named pairs of datasets (comparisons: baseline, candidate; verifications: findings, rerun): unique
        names, known datasets, two different datasets."""
        datasets = [d.name for d in info.data.get("datasets") or []]
        kind = "comparison" if info.field_name == "comparisons" else "verification"
        sides = ("baseline", "candidate") if kind == "comparison" else ("findings", "rerun")
        seen = set()
        for i, c in enumerate(v):
            if not _NAME.fullmatch(c.name):
                raise ValueError(
                    f"entry {i}: name {c.name!r} must start with a letter or digit and use only letters, "
                    "digits, '_', '.', '-'"
                )
            if c.name in seen:
                raise ValueError(f"entry {i}: name {c.name!r} is repeated; {kind} names must be unique")
            seen.add(c.name)
            for side in sides:
                if datasets and getattr(c, side) not in datasets:
                    raise ValueError(
                        f"entry {i} ({c.name}): {side} {getattr(c, side)!r} is not a dataset name; "
                        f"datasets: {', '.join(datasets)}"
                    )
            if getattr(c, sides[0]) == getattr(c, sides[1]):
                raise ValueError(
                    f"entry {i} ({c.name}): {sides[0]} and {sides[1]} are the same dataset {getattr(c, sides[0])!r}"
                )
        return v

    @model_validator(mode="after")
    def _unique_names(self):
        names = [d.name for d in self.datasets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"dataset names must be unique; repeated: {', '.join(dupes)}")
        if self.scaling.dataset is not None and self.scaling.dataset not in names:
            raise ValueError(f"scaling.dataset {self.scaling.dataset!r} is not one of the datasets: {', '.join(names)}")
        return self


def _describe(error: dict) -> str:
    """One line: key path, bad value, what is allowed."""
    loc = ""
    for part in error["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    kind, ctx = error["type"], error.get("ctx", {})
    value = error.get("input")
    if kind == "extra_forbidden":
        return f"{loc}: unknown key"
    if kind == "missing":
        return f"{loc}: required key is missing"
    if kind == "literal_error":
        return f"{loc}: {value!r} is not allowed; allowed: {ctx.get('expected', '')}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{loc}: {message} (got {value!r})" if not isinstance(value, dict | list) else f"{loc}: {message}"


def _is_glob(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def _glob(source: str, base: Path, dataset) -> list[str]:
    """Sorted matches of one glob, relative to `base` when the pattern is; ConfigError when none."""
    pattern = source if Path(source).is_absolute() else str(base / source)
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise ConfigError(f"datasets: source glob {source!r} of dataset {dataset!r} matches no file")
    return [m if Path(source).is_absolute() else str(Path(m).relative_to(base)) for m in matches]


def _merged_sources(d: dict, base: Path) -> dict:
    """merge: true, or a list: every glob in source (a string or a list) expands in place, keeping the listed
    order."""
    source = d.get("source")
    entries = source if isinstance(source, list) else [source]
    if not all(isinstance(e, str) for e in entries):
        return d  # let validation report the bad value
    files = []
    for entry in entries:
        files.extend(_glob(entry, base, d.get("name")) if _is_glob(entry) else [entry])
    return {**d, "source": files}


def _expand_globs(raw: dict, base: Path) -> dict:
    """A dataset whose source is a glob becomes one dataset per match, named '<name>_<file stem>'; with
    merge: true the matches stay one dataset (a list of rank files), and so do a list's (the files of one
    trace)."""
    if not isinstance(raw.get("datasets"), list):
        return raw
    out = []
    for d in raw["datasets"]:
        source = d.get("source") if isinstance(d, dict) else None
        if isinstance(d, dict) and (d.get("merge") is True or isinstance(source, list)):
            out.append(_merged_sources(d, base))
        elif isinstance(source, str) and _is_glob(source):
            for m in _glob(source, base, d.get("name")):
                out.append({**d, "name": f"{d.get('name')}_{Path(m).stem}", "source": m})
        else:
            out.append(d)
    return {**raw, "datasets": out}


# sources the workflow writes itself (make_demo_data, make_paper_perfcounter_demo): absent before the first run
WORKFLOW_SOURCES = ("resources/demo/", "resources/paper/")


def check_sources(cfg: Config, base: str | Path = ".") -> None:
    """Every dataset's source exists (unless the workflow writes it): ConfigError names the key and the path."""
    for i, d in enumerate(cfg.datasets):
        seen: dict[str, str] = {}
        for source in d.sources:
            if Path(source).as_posix().startswith(WORKFLOW_SOURCES):
                continue
            path = Path(source) if Path(source).is_absolute() else Path(base) / source
            try:
                path.stat()
            except OSError as exc:
                why = {errno.ELOOP: "symlink loop", errno.ENOENT: "no such file or folder"}.get(exc.errno, exc.strerror)
                raise ConfigError(f"datasets[{i}].source: {source!r} of dataset {d.name!r}: {why} ({path})") from None
            real = os.path.realpath(path)  # the same file by two names (a link, a relative and an absolute path)
            if real in seen:
                raise ConfigError(
                    f"datasets[{i}].source: {source!r} of dataset {d.name!r} is the same file as {seen[real]!r}: "
                    "each rank's file once"
                )
            seen[real] = source


def validate_config(raw: dict, base: str | Path = ".", origin: str = "config") -> Config:
    """Validate an already-loaded config mapping (Snakemake's `config`); ConfigError lists every problem."""
    if raw is None:
        raise ConfigError(f"{origin}: empty; expected a mapping with at least `datasets`")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{origin}: expected a mapping of keys (demo, datasets, binning, ...), got a {type(raw).__name__}"
        )
    raw = _expand_globs(raw, Path(base))
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors()]
        raise ConfigError("invalid config: " + "; ".join(lines)) from None


def validated(model: type[BaseModel], values: dict, origin: str):
    """`model` built from `values` (a stage's settings object): the config's own defaults and bounds; a bad value
    is one GpuvarError line naming `origin` and the key, as for a config file."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: " + "; ".join(_describe(e) for e in exc.errors())) from None


def read_yaml_mapping(path: str | Path, what: str = "config") -> dict:
    """The YAML mapping in `path` (a config or paper config file); ConfigError naming the file when it cannot be
    read, is not YAML, is empty or is not a mapping (Snakemake's own message names neither)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if raw is None:
        raise ConfigError(f"{path}: empty; expected a mapping with at least `datasets`")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: expected a mapping of keys (demo, datasets, binning, ...), got a {type(raw).__name__}"
        )
    return raw


def yaml_mapping_problem(path: str | Path) -> str | None:
    """Why a config file that exists is not a YAML mapping, naming the file; None when it is one or is absent
    (the Snakefile's check before Snakemake reads the file)."""
    if not Path(path).is_file():
        return None
    try:
        read_yaml_mapping(path)
    except ConfigError as exc:
        return str(exc)
    return None
