"""Typed workflow configuration. The Snakefile validates config/config.yaml with `load_config` at start-up,
so a wrong key or value stops the run before any job, with the key path, the bad value and what is allowed.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuvar.errors import ConfigError

FORMATS = ("auto", "nsys-sqlite", "ncu-csv", "rocprof-csv", "rocprof-db", "omniperf-pmc-perf", "rocprofv3-csv")
FORMATS += ("pytorch-kineto", "nsys-rep")
TARGETS = ("kernel_variability", "memory_stall")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse_bin_width(text: str | int | float) -> tuple[float, str]:
    """'10ms' -> (10_000_000, 'ns'); a bare number means launches (for traces without timestamps)."""
    m = _DURATION.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"bin width {text!r} is not a positive number with a unit ns, us, ms or s (e.g. '10ms')")
    value, unit = float(m.group(1)), m.group(2)
    return (value * _UNIT_NS[unit], "ns") if unit else (value, "launches")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dataset(Strict):
    """One trace to analyse; each dataset is an independent branch of the DAG."""

    name: str = Field(description="identifier used in output paths")
    source: str | list[str] = Field(
        description="profiler file or folder; a glob expands to one dataset per match. With merge: true, a list "
        "of files and/or globs whose matches are ingested side by side (one job per file) and combined"
    )
    merge: bool = Field(False, description="combine the files of `source` into one dataset with a rank column")
    format: Literal[FORMATS] = "auto"
    targets: list[Literal[TARGETS]] = ["kernel_variability"]
    group_by: Literal["kernel_name", "kernel_short_name", "launch_config"] = "kernel_name"
    features: Literal["auto"] | list[str] = "auto"

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not _NAME.match(v):
            raise ValueError("must start with a letter or digit and use only letters, digits, '_', '.', '-'")
        return v

    @model_validator(mode="after")
    def _sources(self):
        if isinstance(self.source, list) and not self.merge:
            raise ValueError("a list of sources needs merge: true (one dataset from several rank files)")
        if isinstance(self.source, list) and not self.source:
            raise ValueError("merge: true needs at least one source file")
        return self

    @property
    def sources(self) -> list[str]:
        """The dataset's files: one, or the rank files of a merged dataset in rank (file) order."""
        return list(self.source) if isinstance(self.source, list) else [self.source]

    @field_validator("targets")
    @classmethod
    def _targets(cls, v):
        if not v:
            raise ValueError(f"must list at least one of {', '.join(TARGETS)}")
        return list(dict.fromkeys(v))


class Demo(Strict):
    enabled: bool = True
    seed: int = 0
    rows: int = Field(20_000, gt=0)


class Targets(Strict):
    variability_group: Literal["kernel", "launch_config"] = "kernel"
    memcpy_link: Literal["stream", "device"] = "stream"


class Binning(Strict):
    bin_width: str = "10ms"
    launch_bin_width: int = Field(50, gt=0)
    top_k: int = Field(20, gt=0)
    ranks: int = Field(2, gt=0, le=4096)
    workers_per_rank: int = Field(1, gt=0)
    features: Literal["auto"] | list[str] = "auto"

    @field_validator("bin_width", mode="before")
    @classmethod
    def _width(cls, v):
        parse_bin_width(v)
        return str(v)


class Causal(Strict):
    seed: int = 0
    bootstrap: int = Field(100, ge=0)
    min_rows: int = Field(30, ge=2)
    engine: Literal["fast", "lingam"] = "fast"
    workers: int = Field(2, gt=0)
    per_group: bool = True


class Plots(Strict):
    formats: list[Literal["svg", "png"]] = ["svg", "png"]
    min_contribution_pct: float = Field(1.0, ge=0, le=100)
    min_probability: float = Field(0.5, ge=0, le=1)
    parallel_features: list[str] = ["grid_x", "grid_y", "block_x", "registers_per_thread", "linked_copy_kind"]
    dpi: int = Field(110, ge=50, le=600)


class Scaling(Strict):
    dataset: str | None = None
    target: Literal[TARGETS] = "kernel_variability"
    ranks: list[int] = [1, 2]
    rows: int = Field(2_000_000, gt=0)

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v):
        if not v or any(r <= 0 for r in v):
            raise ValueError("must be a non-empty list of positive rank counts")
        return sorted(set(v))


class Config(Strict):
    demo: Demo = Demo()
    datasets: list[Dataset] = Field(min_length=1)
    targets: Targets = Targets()
    binning: Binning = Binning()
    causal: Causal = Causal()
    plots: Plots = Plots()
    scaling: Scaling = Scaling()

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
    """merge: true: every glob in source (a string or a list) expands in place, keeping the listed order."""
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
    merge: true the matches stay one dataset (a list of rank files)."""
    if not isinstance(raw.get("datasets"), list):
        return raw
    out = []
    for d in raw["datasets"]:
        source = d.get("source") if isinstance(d, dict) else None
        if isinstance(d, dict) and d.get("merge") is True:
            out.append(_merged_sources(d, base))
        elif isinstance(source, str) and _is_glob(source):
            for m in _glob(source, base, d.get("name")):
                out.append({**d, "name": f"{d.get('name')}_{Path(m).stem}", "source": m})
        else:
            out.append(d)
    return {**raw, "datasets": out}


def validate_config(raw: dict, base: str | Path = ".") -> Config:
    """Validate an already-loaded config mapping (Snakemake's `config`); ConfigError lists every problem."""
    if not isinstance(raw, dict):
        raise ConfigError("config: expected a mapping of keys (demo, datasets, binning, ...)")
    raw = _expand_globs(raw, Path(base))
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors()]
        raise ConfigError("invalid config: " + "; ".join(lines)) from None


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return validate_config(raw, path.parent.parent if path.parent.name == "config" else path.parent)
