"""Each rule's `gpuvar` arguments, made from the typed config and the rule's files.

The rules call these from `params:` and hand the list to a script (workflow/scripts/) or, for the MPI job, to
`shell:` with every item quoted. Settings come through gpuvar.options (the config field defines flag, default
and bounds), so a rule never restates an option.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from gpuvar.errors import ConfigError
from gpuvar.options import arguments, comma_list

LAUNCHERS = ("srun", "mpiexec", "mpirun", "mpiexec.hydra")
_LAUNCHER = re.compile(r"(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*/(?P<name>[A-Za-z0-9_.-]+)|(?P<bare>[A-Za-z0-9_.-]+)")
_OPTION = re.compile(r"-[A-Za-z][A-Za-z0-9]*|--[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:/@%+=-]+)?")


def mapping_files() -> list[str]:
    """The files normalize_columns applies (Table 1, the canonical schema): its inputs, so that editing one
    reruns normalization (and what follows) but never the read of the profiler file."""
    data = resources.files("gpuvar.data")
    return [str(data.joinpath(name)) for name in ("table1.csv", "canonical_schema.csv")]


def read_arguments(reg, dataset: str, source, output) -> list[str]:
    """`gpuvar read`: the profiler file's tables as read, into the raw folder."""
    keep = "--keep-vendor-columns" if reg.cfg.ingest.keep_vendor_columns else "--no-keep-vendor-columns"
    return [source, "--output", output, "--format", reg.datasets[dataset].format, keep]


def causal_arguments(reg, dataset: str, target: str, rows, sample, output, threads: int) -> list[str]:
    """`gpuvar causal` on one analysis: the rows causal.rows names (top-k bins, compared with the random
    sample; or the random sample itself), the dataset's grouping and features, the causal settings."""
    from gpuvar.causal.cli import CONFIG_OPTIONS

    cfg, d = reg.cfg, reg.datasets[dataset]
    selection = [rows, "--random-rows", sample] if cfg.causal.rows == "top_k" else [sample]
    return [
        *selection,
        "--target",
        target,
        "--group-by",
        d.group_by if cfg.causal.per_group else "none",
        "--features",
        comma_list(d.features),
        # the bootstrap's workers: the threads Snakemake gave the job (causal.workers, scaled to --cores)
        *arguments(cfg, [o for o in CONFIG_OPTIONS if o.flag != "--workers"]),
        "--workers",
        str(threads),
        "--output",
        output,
    ]


def figure_arguments(reg) -> list[str]:
    """--formats and --dpi of every figure."""
    from gpuvar.plots.cli import FIGURE_OPTIONS

    return arguments(reg.cfg, FIGURE_OPTIONS)


def causal_figure_arguments(reg, causal_dir, output, which: str = "all") -> list[str]:
    """`gpuvar plot causal`: one graph per group of a causal folder, edges filtered by the plots settings."""
    from gpuvar.plots.cli import EDGE_FILTERS

    return [
        "causal",
        causal_dir,
        "--output",
        output,
        "--which",
        which,
        *figure_arguments(reg),
        *arguments(reg.cfg, EDGE_FILTERS),
    ]


def stem(data_file) -> str:
    """A figure's output stem: its CSV's path without .csv (the figures are stem.<format>)."""
    return str(data_file).removesuffix(".csv")


def parallel_arguments(reg, rows, data_file, target: str, features=None) -> list[str]:
    """`gpuvar plot parallel` of the top-k rows; features: a paper figure's axes, else plots.parallel_features."""
    axes = comma_list(features if features else reg.cfg.plots.parallel_features)
    return [
        "parallel",
        rows,
        "--output",
        stem(data_file),
        "--target",
        target,
        "--features",
        axes,
        *figure_arguments(reg),
    ]


def timeline_arguments(reg, bins, report, data_file, target: str) -> list[str]:
    """`gpuvar plot timeline` of one binning run."""
    return [
        "timeline",
        bins,
        "--bin-json",
        report,
        "--output",
        stem(data_file),
        "--target",
        target,
        *figure_arguments(reg),
    ]


def scaling_arguments(reg, reports, data_file) -> list[str]:
    """`gpuvar plot scaling` of the runs' bin.json files."""
    return ["scaling", *reports, "--output", stem(data_file), *figure_arguments(reg)]


def demo_arguments(reg, output) -> list[str]:
    """`gpuvar demo-data`: the embedded demo set."""
    return ["--output", output, "--seed", reg.cfg.demo.seed, "--rows", reg.cfg.demo.rows]


def folder(path) -> str:
    """The folder a declared output file lives in (the commands take output folders)."""
    return str(Path(path).parent)


def compare_arguments(reg, comparison, baseline_kernels, candidate_kernels, output) -> list[str]:
    """`gpuvar compare` of one configured comparison: both ingests, each common target's binning and causal
    folders, and the figure settings."""
    from gpuvar.compare.workflow import side_arguments

    return [
        baseline_kernels,
        candidate_kernels,
        "--output",
        output,
        "--names",
        f"{comparison.baseline},{comparison.candidate}",
        *side_arguments(comparison, reg.datasets),
        *figure_arguments(reg),
        "--seed",
        reg.cfg.causal.seed,
        "--min-probability",
        reg.cfg.plots.min_probability,
        "--key",
        comparison.key,
        "--min-effect",
        comparison.min_effect,
    ]


def scaling_trace_arguments(reg, rows, threads: int, output) -> list[str]:
    """`gpuvar demo-data --format canonical`: the big synthetic trace a scaling study of a demo dataset times."""
    return [
        "--format",
        "canonical",
        "--rows",
        rows,
        "--seed",
        reg.cfg.demo.seed,
        "--workers",
        threads,
        "--output",
        folder(output),
    ]


def paper_demo_arguments(reg, name: str, output) -> list[str]:
    """`gpuvar demo-data --format ncu`: the stand-in for a PerfCounter dataset of the paper (Table 2's size)."""
    spec = reg.paper.demo_perfcounter[name]
    return [
        "--format",
        "ncu",
        "--rows",
        spec["rows"],
        "--variant",
        spec["variant"],
        "--seed",
        reg.cfg.demo.seed,
        "--output",
        output,
    ]


def findings_arguments(dataset: str, inputs, output, seed: int) -> list[str]:
    """`gpuvar findings` of one dataset: its ingest folder, and its kernel_variability causal folder if analysed."""
    causal = ["--causal", str(inputs.causal)] if "causal" in inputs.keys() else []
    return [folder(inputs.kernels), "--name", dataset, *causal, "--seed", str(seed), "-o", str(output)]


def findings_page_arguments(dataset_folders, record) -> list[str]:
    """`gpuvar findings --combine`: every dataset's findings.json into results/findings/."""
    from gpuvar.artifacts import FINDINGS_RECORD

    return ["--combine", *[f"{d}/{FINDINGS_RECORD}" for d in dataset_folders], "-o", folder(record)]


def launcher_words(value) -> list[str]:
    """The MPI rules' launcher (resources `mpi`, from the rule, a profile's set-resources or --set-resources)
    as words for `shell:`: one of LAUNCHERS (or an absolute path to one) followed by options only, `-x` or
    `--flag[=value]` with safe characters. Anything else (a `;`, `$(...)`, a quote, a second command, an
    option value as its own word) is a ConfigError naming the value: a profile must not run arbitrary shell."""
    words = str(value).split()
    first = _LAUNCHER.fullmatch(words[0]) if words else None
    name = first and (first["name"] or first["bare"])
    bad = [w for w in words[1:] if not _OPTION.fullmatch(w)]
    if name not in LAUNCHERS or bad:
        why = (
            f"word {bad[0]!r} is not an option like -x or --flag=value"
            if name in LAUNCHERS
            else f"the launcher must be one of {', '.join(LAUNCHERS)} (or an absolute path to one)"
        )
        raise ConfigError(f"invalid config: resources mpi={str(value)!r}: {why}")
    return words


def mpi_launcher(wildcards, resources) -> list[str]:
    """`params:` function of the MPI rules: their launcher words, validated when Snakemake builds the jobs,
    before any runs. A bad value stops Snakemake with one line (SystemExit: an exception would come back as
    Snakemake's InputFunctionException with a traceback), as a bad config does at start-up."""
    try:
        return launcher_words(resources.mpi)
    except ConfigError as error:
        raise SystemExit(f"gpuvar: {error}") from None


def ranks_arguments(inputs, output, seed: int) -> list[str]:
    """`gpuvar ranks`: the rank traces (--traces) or the merged ingest folder."""
    source = ["--traces", *map(str, inputs.traces)] if "traces" in inputs.keys() else [folder(inputs.kernels)]
    return [*source, "--seed", str(seed), "-o", str(output)]
