"""One settings model per stage (issue 39): the command line, the workflow's rules and `gpuvar explain` build the
same object, and every default and bound is the config model's.

Why: a default written twice drifts. Before this, `gpuvar bin`'s BinOptions said launch_bin_width=None while the
command line said 50, so a library caller binned an Nsight Compute trace differently from the CLI; compare
defined each option in three places. These tests compare every command-line default with the model field it
names, and each stage's settings object with the config section it comes from.
"""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import pytest

from gpuvar import config
from gpuvar.binning.cli import _options as bin_options_from_args
from gpuvar.binning.cli import bin_settings
from gpuvar.binning.plan import BinOptions, make_plan
from gpuvar.binning.selection import sample_bin_count
from gpuvar.causal.cli import options as causal_options_from_args
from gpuvar.causal.options import CausalOptions, causal_options
from gpuvar.cli import SUBCOMMANDS, build_parser
from gpuvar.compare.settings import CompareSettings
from gpuvar.errors import GpuvarError
from gpuvar.targets import DEFAULT_TARGET, TARGETS

FIELD = re.compile(r"\((?:default: .*?; )?(?:config|settings): (\w+)\.(\w+)\)")


def _model_default(section: str, name: str):
    model = config.Config.model_fields[section].annotation if section in config.Config.model_fields else None
    model = model or config.STAGE_SECTIONS[section]
    return model.model_fields[name].get_default(call_default_factory=True)


def _subparsers():
    parser = build_parser()
    (choices,) = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in sorted(choices.items()):
        yield name, sub
        for inner in sub._actions:  # `gpuvar plot causal|parallel|...`
            if isinstance(inner, argparse._SubParsersAction):
                yield from ((f"{name} {k}", v) for k, v in sorted(inner.choices.items()))


def _config_actions():
    for command, sub in _subparsers():
        for action in sub._actions:
            match = FIELD.search(action.help or "")
            if match:
                yield command, action, match.group(1), match.group(2)


def test_every_config_option_of_every_command_defaults_to_its_field():
    seen = 0
    for command, action, section, name in _config_actions():
        expected = _model_default(section, name)
        got = action.default
        if isinstance(expected, list) and isinstance(got, str):
            got = [part for part in got.split(",") if part] if got != "auto" else got
        assert got == expected, f"gpuvar {command} {action.option_strings[0]}: {got!r} != {section}.{name} {expected!r}"
        seen += 1
    assert seen >= 30, seen  # every command's config options were found (bin, causal, compare, plot, ...)
    assert (
        {"bin", "causal", "compare"}
        <= {c for c, *_ in _config_actions()}
        <= set(SUBCOMMANDS)
        | {
            "plot causal",
            "plot parallel",
            "plot timeline",
            "plot scaling",
        }
    )


def test_the_binning_settings_default_to_the_config():
    defaults = BinOptions(Path("k.parquet"))
    binning, targets, causal = config.Binning(), config.Targets(), config.Causal()
    assert defaults.bin_width == binning.bin_width and defaults.top_k == binning.top_k
    assert defaults.launch_bin_width == binning.launch_bin_width
    assert defaults.workers_per_rank == binning.workers_per_rank
    assert defaults.features == binning.features
    assert defaults.group == targets.variability_group and defaults.link == targets.memcpy_link
    assert defaults.sample_seed == causal.seed
    assert defaults.target == DEFAULT_TARGET == next(iter(TARGETS)) == config.Dataset.model_fields["targets"].default[0]


def test_the_binning_settings_check_the_config_bounds(tmp_path):
    """A library caller that builds BinOptions without the command line meets the config's bounds too."""
    from gpuvar.demo.canonical_writer import write_canonical_demo

    write_canonical_demo(tmp_path, rows=2000, seed=1)
    kernels = tmp_path / "kernels.parquet"
    for field, value in (("top_k", 0), ("workers_per_rank", 65), ("launch_bin_width", 0), ("sample_seed", -1)):
        with pytest.raises(GpuvarError, match=r"must be"):
            make_plan(BinOptions(kernels, **{field: value}))
    assert make_plan(BinOptions(kernels, top_k=1, workers_per_rank=64)).opts.top_k == 1


def test_the_stage_settings_are_the_config_sections():
    """The causal and compare settings are subclasses of their config sections, their extra fields the very
    FieldInfo of the section that owns them; nothing is redefined."""
    assert issubclass(CausalOptions, config.Causal) and issubclass(CompareSettings, config.CompareStatistics)

    def same(a, b):
        return (a.annotation, a.default, a.description, repr(a.metadata)) == (
            b.annotation,
            b.default,
            b.description,
            repr(b.metadata),
        )

    assert same(CompareSettings.model_fields["seed"], config.Causal.model_fields["seed"])
    for name in ("formats", "dpi", "min_probability"):
        assert same(CompareSettings.model_fields[name], config.Plots.model_fields[name]), name
    for name, field in config.Causal.model_fields.items():
        assert CausalOptions.model_fields[name].default == field.default, name


def test_the_per_run_options_default_to_the_settings():
    """The options that are not config keys (what one run analyses) default to the settings object's fields."""
    subs = dict(_subparsers())
    bin_defaults = {a.dest: a.default for a in subs["bin"]._actions}
    assert bin_defaults["target"] == BinOptions.target and bin_defaults["features"] == BinOptions.features
    causal_defaults = {a.dest: a.default for a in subs["causal"]._actions}
    assert causal_defaults["group_by"] == CausalOptions.model_fields["group_by"].default
    assert causal_defaults["features"] == CausalOptions.model_fields["features"].default
    from gpuvar.ingest import ingest
    from gpuvar.ingest.gpu_identity import UNKNOWN_GPU_DEFAULT
    from gpuvar.ingest.merge import merge

    ingest_default = inspect.signature(ingest).parameters["keep_vendor_columns"].default
    assert ingest_default == config.Ingest().keep_vendor_columns
    assert {a.dest: a.default for a in subs["ingest"]._actions}["keep_vendor_columns"] == ingest_default
    merge_cli = {a.dest: a.default for a in subs["ingest-merge"]._actions}["unknown_gpu"]
    assert merge_cli == inspect.signature(merge).parameters["unknown_gpu"].default == UNKNOWN_GPU_DEFAULT


def test_explain_builds_the_settings_the_command_line_builds(tmp_path):
    """`gpuvar explain` calls each stage's function with settings, not argument lists: the objects it builds
    are the ones `gpuvar bin` and `gpuvar causal` build from their defaults."""
    from gpuvar.demo.canonical_writer import write_canonical_demo

    write_canonical_demo(tmp_path, rows=2000, seed=1)
    kernels, copies, out = tmp_path / "kernels.parquet", tmp_path / "memcpy.parquet", tmp_path / "bins"
    sample = sample_bin_count(config.Binning(), config.Causal())
    explain_side = bin_settings(kernels, copies, out, target=DEFAULT_TARGET, sample_bins=sample)
    argv = ["bin", str(kernels), "--memcpy", str(copies), "-o", str(out), "--sample-bins", str(sample)]
    assert explain_side == bin_options_from_args(build_parser("bin").parse_args(argv))
    rows = tmp_path / "rows.parquet"
    argv = ["causal", str(rows), "--target", DEFAULT_TARGET, "-o", str(tmp_path / "causal")]
    assert causal_options(target=DEFAULT_TARGET) == causal_options_from_args(build_parser("causal").parse_args(argv))
    source = inspect.getsource(__import__("gpuvar.explain", fromlist=["_explain"])._explain)
    assert "build_parser" not in source and "parse_args" not in source and '"--' not in source
