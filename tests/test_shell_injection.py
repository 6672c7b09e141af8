"""Config values never reach a shell unquoted: hostile values are refused at start-up, and even a value that got
past validation is passed as one argument (the MPI rule's `shell:` quotes each with `:q`; the other rules'
scripts pass lists, with no shell at all). Both through the real `snakemake`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def _snakemake(snakefile: Path, workdir: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        [SNAKEMAKE, "-s", str(snakefile), "-d", str(workdir), "--configfile", str(config), "--cores", "1", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = tmp_path_factory.mktemp("trace") / "t.sqlite"
    write_nsys_demo(path, 400, 1, 0)
    return path


def _config(tmp: Path, trace: Path, **sections) -> Path:
    cfg = {
        "demo": {"enabled": False},
        "datasets": [{"name": "t", "source": str(trace), "targets": ["kernel_variability"]}],
        "causal": {"bootstrap": 0, "min_rows": 5},
        "binning": {"top_k": 3},
    }
    for key, value in sections.items():
        if key == "dataset":
            cfg["datasets"][0].update(value)
        else:
            cfg.setdefault(key, {}).update(value)
    path = tmp / "hostile.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "section, value, key",
    [
        ("binning", {"features": ["duration$(touch {marker})"]}, "binning.features"),
        ("dataset", {"features": ["grid_x`touch {marker}`"]}, "datasets[0].features"),
        ("plots", {"parallel_features": ["grid_x; touch {marker}"]}, "plots.parallel_features"),
        ("dataset", {"name": "t\n$(touch {marker})"}, "datasets[0].name"),
        ("binning", {"bin_width": "10ms $(touch {marker})"}, "binning.bin_width"),
    ],
)
def test_hostile_config_is_refused_before_any_shell_runs(tmp_path, trace, section, value, key):
    marker = tmp_path / "pwned"
    value = yaml.safe_load(yaml.safe_dump(value).replace("{marker}", str(marker)))
    proc = _snakemake(REPO / "Snakefile", tmp_path / "run", _config(tmp_path, trace, **{section: value}))
    assert proc.returncode != 0
    assert not marker.exists()
    assert f"gpuvar: invalid config: {key}:" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "value",
    ["srun", "mpiexec", "srun --mpi=pmix", "mpirun -l --bind-to=core", "/opt/mpich/bin/mpiexec.hydra --verbose"],
)
def test_a_launcher_with_options_is_accepted_word_by_word(value):
    from gpuvar.workflow.launcher import launcher_words

    assert launcher_words(value) == value.split()


@pytest.mark.parametrize(
    "value, why",
    [
        ("srun; touch pwned", "must be one of"),
        ("srun --mpi=pmix; touch pwned", "'--mpi=pmix;' is not an option"),
        ("srun --mpi=$(touch pwned)", "is not an option"),
        ("srun `touch pwned`", "is not an option"),
        ("srun touch pwned", "'touch' is not an option"),
        ("srun --export='A B'", "is not an option"),
        ("srun | sh", "'|' is not an option"),
        ("bash -c", "must be one of"),
        ("./mpiexec", "must be one of"),
        ("/opt/../bin/mpiexec", "must be one of"),
        ("", "must be one of"),
    ],
)
def test_a_launcher_that_is_not_a_launcher_with_options_is_refused(value, why):
    from gpuvar.errors import ConfigError
    from gpuvar.workflow.launcher import launcher_words

    with pytest.raises(ConfigError, match="invalid config: resources mpi=") as refused:
        launcher_words(value)
    assert why in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("via", ["--set-resources", "profile"])
def test_hostile_launcher_is_refused_before_any_shell_runs(tmp_path, trace, via):
    """Issue 22 item 7: `{resources.mpi}` reached `shell:` unquoted; a profile's (or the command line's) value
    is now validated when Snakemake builds the jobs and refused with one line, before any job runs."""
    marker = tmp_path / "pwned"
    value = f"mpiexec --version; touch {marker} #"  # unvalidated, the job would run both commands
    if via == "profile":
        profile = tmp_path / "profile"
        profile.mkdir()
        (profile / "config.yaml").write_text(yaml.safe_dump({"set-resources": {"bin_trace": {"mpi": value}}}))
        extra = ["--profile", str(profile)]
    else:
        extra = ["--set-resources", f"bin_trace:mpi={value!r}"]
    proc = _snakemake(REPO / "Snakefile", tmp_path / "run", _config(tmp_path, trace), *extra)
    assert proc.returncode != 0
    assert not marker.exists()
    assert f"gpuvar: invalid config: resources mpi={value!r}: word '--version;' is not an option" in proc.stderr, (
        proc.stderr[-2000:]
    )
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "logs").exists(), "no job ran"


def test_a_valid_launcher_reaches_the_command_as_given(tmp_path, trace):
    """`srun --mpi=pmix` (the README's advice for clusters whose MPI needs it) is what the MPI rule runs."""
    extra = ["-n", "-p", "--set-resources", "bin_trace:mpi='srun --mpi=pmix'"]
    proc = _snakemake(REPO / "Snakefile", tmp_path / "run", _config(tmp_path, trace), *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "srun --mpi=pmix -n 2 gpuvar bin " in proc.stdout + proc.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "stage, rules",
    [
        ("binning", ["bin_trace"]),
        ("causal+plots", ["discover_causal_graph", "plot_parallel_coordinates"]),
    ],
)
def test_values_past_validation_are_still_one_argument_each(tmp_path, trace, stage, rules):
    """A copy of the workflow whose validation is bypassed: the hostile values reach the rules' shell commands at
    run time (the jobs run, and fail on an unknown column), and the marker is still never created."""
    marker = tmp_path / "pwned"
    wf = tmp_path / "wf"
    for folder in ("workflow", "envs", "config"):
        shutil.copytree(REPO / folder, wf / folder)
    shutil.copy(REPO / "Snakefile", wf / "Snakefile")
    common = wf / "workflow" / "rules" / "common.smk"
    hostile = repr(f"x$(touch {marker})`touch {marker}`; touch {marker}")
    update = (
        f"'binning': REG.cfg.binning.model_copy(update={{'features': ['duration', {hostile}]}})"
        if stage == "binning"
        else f"'plots': REG.cfg.plots.model_copy(update={{'parallel_features': ['grid_x', {hostile}]}}), "
        f"'datasets': [d.model_copy(update={{'features': ['grid_x', {hostile}]}}) for d in REG.cfg.datasets]"
    )
    bypass = (
        f"import dataclasses\nREG = dataclasses.replace(REG, cfg=REG.cfg.model_copy(update={{{update}}}))\n"
        "REG = dataclasses.replace(REG, datasets={**REG.datasets, **{d.name: d for d in REG.cfg.datasets}})\n"
        "CFG = REG.cfg\n"
    )
    assert "CFG = REG.cfg\n" in common.read_text()
    common.write_text(common.read_text().replace("CFG = REG.cfg\n", bypass))
    workdir = tmp_path / "run"
    proc = _snakemake(wf / "Snakefile", workdir, _config(tmp_path, trace), "--keep-going")
    for rule in rules:  # the shell command of each rule did run
        assert (workdir / "logs" / rule / "t_kernel_variability.log").exists(), (rule, proc.stderr[-3000:])
    assert not marker.exists(), proc.stderr[-3000:]
