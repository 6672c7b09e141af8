"""Shared fixtures: where the real profiler files live, the repository root, a CLI runner, and the workflow runs
that the workflow, paper and layer tests share (the demo workflow runs once per session, not once per module).

Under pytest-xdist (`-n 2`, as .ci/test.sh runs it) tests are sent to the workers in groups (`--dist loadgroup`):
the tests of one module stay together (so a module-scoped fixture is built once), the tests that read the shared
workflow runs form one group (so the runs are made once, on one worker), and the end-to-end runs start first."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_runs import copy_run, data_digests, run_workflow, small_config

REPO = Path(__file__).resolve().parents[1]
REAL_DATA = Path(os.environ.get("GPUVAR_REAL_DATA", REPO.parent / "shared" / "data" / "real"))
# GPUVAR_REQUIRE_REAL_DATA=1 (set by .ci/test.sh): a missing real file fails the test instead of skipping it,
# so the ~70 real-data tests cannot pass silently on a machine without the data.
REQUIRE_REAL_DATA = os.environ.get("GPUVAR_REQUIRE_REAL_DATA", "0") == "1"


def _absent(reason: str) -> None:
    if REQUIRE_REAL_DATA:
        pytest.fail(f"{reason} (GPUVAR_REQUIRE_REAL_DATA=1: real data is required)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def real_data() -> Path:
    """Root of the real profiler files (GPUVAR_REAL_DATA, default ../shared/data/real); skips if absent."""
    if not REAL_DATA.is_dir():
        _absent(f"real profiler files not found at {REAL_DATA} (set GPUVAR_REAL_DATA)")
    return REAL_DATA


def real_file(relative: str) -> Path:
    """One real file by path relative to the real-data root; skips the test if it is absent."""
    path = REAL_DATA / relative
    if not path.exists():
        _absent(f"real profiler file not found: {path}")
    return path


@pytest.fixture
def run_cli():
    """Run `gpuvar ARGS...` in a subprocess; returns CompletedProcess (text)."""

    def _run(*args, check=False, **kwargs):
        return subprocess.run(
            [sys.executable, "-m", "gpuvar.cli", *map(str, args)], capture_output=True, text=True, check=check, **kwargs
        )

    return _run


# ----------------------------------------------------------------------------------- shared workflow runs
# Each is made once per test run, even with several xdist workers (_once), and only read by the tests (a test
# that builds more in a run copies it first, with copy_run). Under xdist the tests using them form the group
# SHARED_RUNS (below), so one worker builds them while the other runs other tests.


def _once(tmp_path_factory, name: str, build):
    """BUILD(folder) -> a JSON value, run once per test run: the first worker to ask builds it under a lock in
    the folder all xdist workers share (the run's base temp folder), the others wait for it and read the
    record. A failed build is recorded too, and fails every test that asks for it with the same message."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, record = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this worker dies
        if not record.exists():
            shutil.rmtree(folder, ignore_errors=True)  # left by a worker that died while building it
            folder.mkdir()
            try:
                value = {"value": build(folder)}
            except BaseException as exc:  # an assert, pytest.fail, or pytest-timeout's stop
                record.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"[-6000:]}))
                raise
            record.write_text(json.dumps(value))
    value = json.loads(record.read_text())
    if "error" in value:
        pytest.fail(f"building {name} failed (in another test or worker): {value['error']}", pytrace=False)
    return value["value"]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> tuple[Path, Path]:
    """`snakemake` (target all) on the small demo config: (run directory, config file)."""

    def build(folder: Path) -> list[str]:
        config, workdir = small_config(folder), folder / "run"
        proc = run_workflow(workdir, config)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return [str(workdir), str(config)]

    workdir, config = _once(tmp_path_factory, "demo_run", build)
    return Path(workdir), Path(config)


@pytest.fixture(scope="session")
def demo_report(demo_run, tmp_path_factory) -> Path:
    """`snakemake --report` of the demo run: the one HTML file."""
    workdir, config = demo_run

    def build(folder: Path) -> str:
        report = folder / "report.html"
        proc = run_workflow(workdir, config, "--report", str(report))
        assert proc.returncode == 0, proc.stderr[-4000:]
        return str(report)

    return Path(_once(tmp_path_factory, "demo_report", build))


def paper_targets() -> list[str]:
    """Every figure of `snakemake paper` and its data file, except Fig. 5b: it plots measured binning times,
    which differ on every run by nature."""
    from gpuvar.config import read_yaml_mapping, validate_config
    from gpuvar.plots.paper import load_paper_config, merge_datasets
    from gpuvar.workflow import figures as paths

    paper = load_paper_config(REPO / "config" / "paper.yaml", REPO)
    _, names = merge_datasets(
        paper, {d.name: d for d in validate_config(read_yaml_mapping(REPO / "config" / "config.yaml"), REPO).datasets}
    )
    return [p for p in paths.paper_outputs(paper, ["svg", "png"], names) if "/scaling" not in p]


@pytest.fixture(scope="session")
def paper_run(demo_run, tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The paper's figures (paper_targets) built in a copy of the demo run, whose datasets they share:
    (run directory, config file, digests of every data output right after the build)."""
    source, config = demo_run

    def build(folder: Path) -> list:
        workdir = copy_run(source, folder / "run")
        proc = run_workflow(workdir, config, *paper_targets())
        assert proc.returncode == 0, proc.stderr[-4000:]
        return [str(workdir), data_digests(workdir)]

    workdir, digests = _once(tmp_path_factory, "paper_run", build)
    return Path(workdir), config, digests


SHARED_RUNS = "shared_workflow_runs"  # the modules whose tests read the shared runs
_SHARED_MODULES = {"test_workflow.py", "test_paper.py"}
# modules of independent tests (no module-scoped fixture worth sharing, several slow end-to-end tests): their
# tests are spread over the workers one by one
_SPREAD = {"test_config_fuzz.py", "test_readme_commands.py", "test_shell_injection.py", "test_workflow_layer.py"}
# started first, in this order (the scheduler hands out the groups in collection order): the longest runs, so
# that neither worker is left with one of them at the end
_FIRST = (
    SHARED_RUNS,
    "test_slurm.py",
    "test_readme_commands.py",
    "test_empty_selection.py",
    "test_shell_injection.py",
    "test_workflow_layer.py",
    "test_config_fuzz.py",
)


def xdist_group(nodeid: str) -> str:
    """The group a test is sent to a worker with: its module, the shared runs' group, or itself alone."""
    module = nodeid.split("::")[0].rsplit("/", 1)[-1]
    if module in _SHARED_MODULES:
        return SHARED_RUNS
    return nodeid if module in _SPREAD else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: our groups (xdist_group), in collection order. pytest-xdist's own loadgroup reads
    xdist_group marks through a node id suffix that pytest 9.2 no longer takes, so the grouping is done here."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False  # keep the order below: the longest groups first
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Under xdist: the longest groups first (stable: the collection order otherwise). Without xdist nothing
    changes."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def rank(item) -> int:
        group = xdist_group(item.nodeid)
        for key in (group, item.path.name):
            if key in _FIRST:
                return _FIRST.index(key)
        return len(_FIRST)

    items.sort(key=rank)
