"""`snakemake paper`: the paper's datasets (config/paper.yaml, Table 2), the scaling study, and which figure
shows what (FIGURES below: fixed by the paper, so code rather than configuration).

config/paper.yaml is an ordinary gpuvar config holding only `datasets` and `scaling` (so it also works with
`snakemake --configfile config/paper.yaml`); binning/causal/plot settings are refused there because the
paper's figures use the same analysis settings as the everyday workflow (config/config.yaml). Validated
here, so a mistake stops `snakemake paper` at start-up with the key and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuvar.config import Config, Dataset, read_yaml_mapping, validate_config
from gpuvar.errors import ConfigError

ALLOWED_KEYS = ("datasets", "scaling")
# The paper's figures: Fig. 2 per-kernel graphs of ranks 0-3, Fig. 3 whole-dataset graphs of ranks 0 and 3,
# Fig. 4 parallel coordinates (grid_x, copy kind) of rank 0 for both targets, Fig. 5a the PerfCounter
# graphs, Fig. 5b the scaling study. Dataset names refer to config/paper.yaml.
FIGURES = {
    "fig2": {
        "kind": "causal",
        "groups": "per_kernel",
        "datasets": ["rank0", "rank1", "rank2", "rank3"],
        "target": "kernel_variability",
    },
    "fig3": {"kind": "causal", "groups": "whole", "datasets": ["rank0", "rank3"], "target": "kernel_variability"},
    "fig4": {
        "kind": "parallel",
        "datasets": ["rank0"],
        "targets": ["memory_stall", "kernel_variability"],
        "features": ["grid_x", "linked_copy_kind"],
    },
    "fig5a": {
        "kind": "causal",
        "groups": "all",
        "datasets": ["inversek2j", "accuracy", "sw4lite"],
        "target": "kernel_variability",
    },
    "fig5b": {"kind": "scaling"},
}
# Stand-ins for the PerfCounter datasets when their source is resources/paper/<name>_ncu.csv: Table 2's
# sample counts as launches; variant shifts the synthetic kernel mix.
DEMO_PERFCOUNTER = {
    "inversek2j": {"rows": 1642, "variant": 0},
    "accuracy": {"rows": 1200, "variant": 1},
    "sw4lite": {"rows": 1201, "variant": 2},
}
KINDS = ("causal", "parallel", "scaling")
GROUPS = ("per_kernel", "whole", "all")


@dataclass(frozen=True)
class Figure:
    """One paper figure: kind causal (graphs of `groups`), parallel (coordinates of `features`) or scaling."""

    name: str
    kind: str
    datasets: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    groups: str = "all"
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class PaperConfig:
    config: Config
    figures: dict[str, Figure]
    demo_perfcounter: dict[str, dict[str, int]] = field(default_factory=dict)


def _figure(name: str, raw, datasets: dict[str, Dataset]) -> Figure:
    where = f"figures.{name}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with kind, datasets, target(s)")
    unknown = set(raw) - {"kind", "datasets", "target", "targets", "groups", "features"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: {kind!r} is not allowed; allowed: {', '.join(KINDS)}")
    if kind == "scaling":
        return Figure(name, kind)
    names = tuple(raw.get("datasets") or ())
    missing = [d for d in names if d not in datasets]
    if not names or missing:
        raise ConfigError(
            f"{where} needs dataset(s) {', '.join(missing) or '(none given)'}, not in the paper config "
            f"(has: {', '.join(datasets)})"
        )
    targets = tuple(raw.get("targets") or ([raw["target"]] if raw.get("target") else []))
    if not targets:
        raise ConfigError(f"{where}: give target or targets")
    for d in names:
        for t in targets:
            if t not in datasets[d].targets:
                raise ConfigError(
                    f"{where}: dataset {d} does not analyse target {t} (its targets: {', '.join(datasets[d].targets)})"
                )
    groups = raw.get("groups", "all")
    if groups not in GROUPS:
        raise ConfigError(f"{where}.groups: {groups!r} is not allowed; allowed: {', '.join(GROUPS)}")
    features = tuple(raw.get("features") or ())
    if kind == "parallel" and not features:
        raise ConfigError(f"{where}.features: list the parallel-coordinate axes")
    return Figure(name, kind, names, targets, groups, features)


def _demo(raw) -> dict[str, dict[str, int]]:
    out = {}
    for name, spec in (raw or {}).items():
        rows, variant = (spec or {}).get("rows"), (spec or {}).get("variant", 0)
        if not isinstance(rows, int) or rows <= 0 or not isinstance(variant, int):
            raise ConfigError(f"demo_perfcounter.{name}: expected {{rows: positive int, variant: int}}, got {spec!r}")
        out[str(name)] = {"rows": rows, "variant": variant}
    return out


def parse_paper_config(
    raw, base: str | Path = ".", figures: dict | None = None, demo: dict | None = None
) -> PaperConfig:
    """Validate an already-loaded paper.yaml mapping against the figures (default FIGURES)."""
    if not isinstance(raw, dict):
        raise ConfigError("paper config: expected a mapping with datasets and scaling")
    extra = sorted(set(raw) - set(ALLOWED_KEYS))
    if extra:
        raise ConfigError(
            f"paper config: {', '.join(extra)}: not allowed here (only {', '.join(ALLOWED_KEYS)}; "
            "binning, causal and plot settings come from config/config.yaml)"
        )
    config = validate_config({"datasets": raw.get("datasets"), "scaling": raw.get("scaling") or {}}, base)
    datasets = {d.name: d for d in config.datasets}
    figures = {str(k): _figure(str(k), v, datasets) for k, v in (FIGURES if figures is None else figures).items()}
    if any(f.kind == "scaling" for f in figures.values()) and config.scaling.dataset is None:
        raise ConfigError("paper config: a scaling figure needs scaling.dataset")
    return PaperConfig(config, figures, _demo(DEMO_PERFCOUNTER if demo is None else demo))


def load_paper_config(path: str | Path, base: str | Path = ".") -> PaperConfig:
    """Read and validate config/paper.yaml (ConfigError names the key and what is allowed)."""
    path = Path(path)
    raw = read_yaml_mapping(path, "paper config")
    try:
        return parse_paper_config(raw, base)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def same_dataset(a: Dataset, b: Dataset) -> bool:
    """Two definitions computing the same results (targets aside: the target is part of each output path)."""
    keys = ("source", "format", "group_by", "features")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def merge_datasets(paper: PaperConfig, datasets: dict[str, Dataset]) -> tuple[dict[str, Dataset], dict[str, str]]:
    """The workflow's datasets plus the paper's (a new dict; `datasets` is not changed), and paper name ->
    workflow name.

    A paper dataset identical to a workflow dataset of the same name is shared (computed once). One that
    differs is added as 'paper-<name>' instead of failing, so a main config pointing rank0 at other data
    does not stop `snakemake` itself.
    """
    merged, names = dict(datasets), {}
    for d in paper.config.datasets:
        name = d.name
        if name in merged and not same_dataset(merged[name], d):
            name = f"paper-{d.name}"
        names[d.name] = name
        merged.setdefault(name, d.model_copy(update={"name": name}))
    return merged, names
