"""The rules name their `gpuvar` command and every option they pass in `params:` (gpuvar.workflow.script): each
name is an option of that command, each config setting the command mirrors is passed, and one script runs them
all. These are read from the rule files, so a misspelt param fails here, not in the middle of a run."""

from __future__ import annotations

import argparse
import re

import pytest
from conftest import REPO

from gpuvar.binning.cli import workflow_arguments
from gpuvar.causal.cli import CONFIG_OPTIONS as CAUSAL_OPTIONS
from gpuvar.cli import build_parser
from gpuvar.config import read_yaml_mapping, validate_config
from gpuvar.plots.cli import EDGE_FILTERS, FIGURE_OPTIONS, PARALLEL_FEATURES
from gpuvar.workflow.script import command_line

RULE_FILES = sorted((REPO / "workflow" / "rules").glob("*.smk"))
HEADER = re.compile(r"^(\s*)(?:rule (\w+):|use rule \w+ as (\w+) with:)\s*$")


def rule_blocks() -> dict[str, list[str]]:
    """rule name -> its lines, from every rule file."""
    blocks: dict[str, list[str]] = {}
    for path in RULE_FILES:
        name = None
        for line in path.read_text().splitlines():
            header = HEADER.match(line)
            if header:
                name = header[2] or header[3]
                blocks[name] = []
            elif name:
                blocks[name].append(line)
    return blocks


def params_of(lines: list[str]) -> dict[str, str]:
    """A rule's params: name -> the text after `=` on its first line."""
    params, indent = {}, None
    for line in lines:
        stripped = line.strip()
        depth = len(line) - len(line.lstrip())
        if stripped == "params:":
            indent = depth
        elif indent is not None and stripped and depth <= indent:
            break
        elif indent is not None and depth == indent + 4:
            match = re.match(r"(\w+)=(.*)", stripped)
            if match:
                params[match[1]] = match[2]
    return params


BLOCKS = rule_blocks()
PARAMS = {name: params_of(lines) for name, lines in BLOCKS.items()}
COMMANDS = {  # rule -> (its command, its params)
    name: (re.fullmatch(r'"([\w -]+)",', params["command"])[1], params)
    for name, params in PARAMS.items()
    if "command" in params
}


def subcommand(words: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in words:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_one_script_runs_every_rule_but_the_mpi_job():
    assert {p.name for p in (REPO / "workflow" / "scripts").glob("*.py")} == {"gpuvar_command.py"}
    text = "\n".join(p.read_text() for p in RULE_FILES)
    scripts = re.findall(r"^\s*script:\n\s*(.+)$", text, re.M)
    assert scripts and set(scripts) == {"GPUVAR"}, set(scripts)
    # every rule with a script names its command (a `use rule` inherits it)
    named = {name for name, lines in BLOCKS.items() if any(line.strip() == "GPUVAR" for line in lines)}
    assert named <= set(COMMANDS), named - set(COMMANDS)
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("rule", sorted(COMMANDS))
def test_every_param_of_a_rule_is_an_option_of_its_command(rule):
    command, params = COMMANDS[rule]
    known = options(subcommand(command.split()))
    flags = {"--" + name.replace("_", "-") for name in params if name not in ("command", "positional")}
    assert flags <= known, (rule, command, sorted(flags - known))


@pytest.mark.parametrize(
    ("rule", "config_options"),
    [
        ("discover_causal_graph", CAUSAL_OPTIONS),
        ("plot_causal_graphs", FIGURE_OPTIONS + EDGE_FILTERS),
        ("plot_parallel_coordinates", FIGURE_OPTIONS + PARALLEL_FEATURES),
        ("plot_variability_timeline", FIGURE_OPTIONS),
        ("plot_scaling", FIGURE_OPTIONS),
    ],
)
def test_a_rule_passes_every_setting_its_command_mirrors(rule, config_options):
    """A setting added to the config and to the command's options reaches the workflow only if the rule passes
    it: the rule names each one."""
    params = COMMANDS[rule][1]
    missing = [o.flag for o in config_options if o.flag.removeprefix("--").replace("-", "_") not in params]
    assert not missing, (rule, missing)


def test_the_mpi_job_passes_every_binning_option_by_name():
    """bin_trace's shell names each option `gpuvar bin` takes from the config (the flags of
    gpuvar.binning.cli.workflow_arguments, also used to print a reproducing command), each value quoted."""
    block = "\n".join(BLOCKS["bin_trace"])
    shell = "".join(re.findall(r'^\s*"(.*)"$', block[block.index("shell:") :], re.M))
    cfg = validate_config(read_yaml_mapping(REPO / "config" / "config.yaml"), REPO)
    expected = {w for w in workflow_arguments(cfg, "kernel_variability") if w.startswith("--")}
    passed = set(re.findall(r"(--[a-z-]+) \{", shell))
    assert expected | {"--memcpy", "--output"} == passed, passed ^ expected
    assert all(field.endswith(":q") for field in re.findall(r"\{([^}]+)\}", shell)), shell


def test_the_rank_analysis_mpi_job_quotes_every_value():
    """analyse_ranks' shell: every field quoted (lists word by word), every option one of `gpuvar ranks`'."""
    block = "\n".join(BLOCKS["analyse_ranks"])
    shell = "".join(re.findall(r'^\s*"(.*)"$', block[block.index("shell:") :], re.M))
    assert all(field.endswith(":q") for field in re.findall(r"\{([^}]+)\}", shell)), shell
    assert set(re.findall(r"(--[a-z-]+) \{", shell)) <= options(subcommand(["ranks"]))
    assert "gpuvar ranks {params.inputs:q} {params.traces:q}" in shell


def test_command_line_turns_named_params_into_options():
    params = {
        "command": "plot causal",
        "positional": "results/causal/a/kernel_variability",
        "output": "out dir",
        "which": "all",
        "formats": ["png", "svg"],
        "prior": False,
        "combine": True,
        "random_rows": None,
        "features": [],
        "min_probability": 0.5,
    }
    assert command_line(params) == [
        "plot",
        "causal",
        "results/causal/a/kernel_variability",
        "--output",
        "out dir",
        "--which",
        "all",
        "--formats",
        "png,svg",
        "--no-prior",
        "--combine",
        "--min-probability",
        "0.5",
    ]
    assert command_line({"command": "ingest-merge", "positional": ["a", "b"]}) == ["ingest-merge", "a", "b"]


def test_a_job_log_starts_with_the_command_that_reruns_it(tmp_path):
    """The runner writes the command, shell-quoted, as the first line of the job's log (what a Slurm user reads
    when a job fails), then the command's own output."""
    import subprocess
    import sys

    log = tmp_path / "job one.log"
    code = (
        "from types import SimpleNamespace\n"
        "from gpuvar.workflow.script import run_rule\n"
        f"run_rule(SimpleNamespace(log=[{str(log)!r}], params={{'command': 'config-reference', 'section': 'demo',"
        " 'output': None}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    first, *rest = log.read_text().splitlines()
    assert first == "$ gpuvar config-reference --section demo"
    assert any("`demo.seed`" in line for line in rest)
