"""The Slurm profile, and the workflow run through a REAL single-node Slurm cluster (issue 6).

Without a cluster: the profiles say what the README's "Running on a cluster" promises (MPI via srun, > 1 task, one core per
rank, values to edit clearly marked), name only rules that exist, and a dry run over 50 datasets shows
50 independent branches in seconds.

With a cluster (`@pytest.mark.slurm`; started by ci/local-slurm/start.sh, which needs root and apt-get, or
already running): the small demo config runs with `--profile profiles/slurm --workflow-profile
ci/profile-slurm-ci`; we check that jobs went through Slurm (sacct), that the MPI binning job ran 2 ranks
under srun, that a failing job is reported with its log paths, that a rerun resumes without recomputing
finished jobs, and that the data outputs equal those of a local run byte for byte. Set
GPUVAR_REQUIRE_SLURM=1 (CI) to turn "cannot start the cluster" from a skip into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO

VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = str(VENV_BIN / "snakemake")
START, STOP = REPO / "ci/local-slurm/start.sh", REPO / "ci/local-slurm/stop.sh"
SLURM_PROFILE = REPO / "profiles/slurm"
CI_PROFILE = REPO / "ci/profile-slurm-ci"
TEST_CONFIG = REPO / "ci/slurm-test-config.yaml"
# the analysis chain only (make_demo_data, ingest_trace, bin_trace, discover_causal_graph): plots add jobs
# but nothing Slurm-specific, and CI must stay under 5 minutes
UNTIL = ["--until", "discover_causal_graph"]
# JSON keys that legitimately differ between two runs of the same job (timings, memory, where it ran)
VOLATILE_KEY = re.compile(
    r"(^|_)(seconds|elapsed|wall|time|timing|timings|startup|rss|host|hostname|pid|date|created)(_|$)|_s$", re.I
)
DATA_SUFFIXES = {".parquet", ".json", ".csv", ".tsv", ".graphml"}


def snakemake_env() -> dict:
    """The environment of the submitting shell; Slurm jobs inherit it (sbatch --export=ALL)."""
    return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}


def snakemake(workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile", timeout: int = 300):
    """Run the workflow in WORKDIR (outputs, .snakemake and Slurm logs land there)."""
    cmd = [SNAKEMAKE, "-s", str(snakefile), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=snakemake_env(), timeout=timeout)


def snapshot_workflow(dest: Path) -> Path:
    """A copy of the workflow definition, so that editing the repository while the minutes-long Slurm test
    runs does not trigger Snakemake's code-changed reruns (or break the jobs, which re-read the Snakefile)."""
    dest.mkdir(parents=True)
    for name in ("Snakefile", "workflow", "config", "envs"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest / "Snakefile"


def load_profile(path: Path) -> dict:
    return yaml.safe_load((path / "config.yaml").read_text())


def workflow_rules() -> set[str]:
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))])
    plain = re.findall(r"^\s*rule\s+(\w+)\s*:", text, re.M)
    derived = re.findall(r"^\s*use rule \w+ as (\w+) with:", text, re.M)  # bin_scaling_trace, normalize_rank, ...
    return set(plain) | set(derived)


# ------------------------------------------------------------------------------------------- profiles


def test_slurm_profile_runs_mpi_rule_with_srun_one_core_per_rank():
    profile = load_profile(SLURM_PROFILE)
    assert profile["executor"] == "slurm"
    bin_trace = profile["set-resources"]["bin_trace"]
    assert bin_trace["mpi"] == "srun"
    assert "tasks" not in bin_trace, "the rank count is binning.ranks in the config, defined once"
    assert int(bin_trace["cpus_per_task"]) == 1, "more than 1 would reserve tasks x cpus cores"
    assert int(bin_trace["mem_mb_per_cpu"]) > 0


def test_every_mpi_rule_runs_with_srun_on_slurm():
    """A rule with an `mpi` launcher resource left at mpiexec would start every rank inside one Slurm task."""
    text = "\n".join(p.read_text() for p in sorted((REPO / "workflow/rules").glob("*.smk")))
    mpi_rules = {m for m in re.findall(r"^rule (\w+):\n(?:(?!^rule ).*\n)*?\s+mpi=", text, re.M)}
    assert {"bin_trace", "analyse_ranks"} <= mpi_rules
    profile = load_profile(SLURM_PROFILE)["set-resources"]
    for rule in mpi_rules:
        assert profile[rule]["mpi"] == "srun" and int(profile[rule]["cpus_per_task"]) == 1, rule
        assert "tasks" not in profile[rule], rule


def test_slurm_profile_marks_site_values_to_edit():
    resources = load_profile(SLURM_PROFILE)["default-resources"]
    for key in ("slurm_account", "slurm_partition"):
        assert "EDIT" in str(resources[key]), f"{key} must be an obvious placeholder"
    assert int(resources["runtime"]) > 0 and int(resources["mem_mb"]) > 0


def test_set_resources_name_only_existing_rules():
    """A renamed rule would silently lose its Slurm settings (e.g. run MPI with mpiexec inside one task)."""
    for profile in (SLURM_PROFILE, CI_PROFILE):
        names = set(load_profile(profile).get("set-resources", {}))
        assert names <= workflow_rules(), f"{profile}: unknown rules {sorted(names - workflow_rules())}"


def test_local_profile_stays_local_and_no_default_profile():
    local = load_profile(REPO / "profiles/local")
    assert "executor" not in local and "set-resources" not in local, "local runs keep mpi=mpiexec"
    assert int(local["cores"]) >= 1
    assert not (REPO / "profiles/default").exists(), "profiles/default is loaded automatically by Snakemake"


def test_ci_profile_does_not_replace_mpi_settings():
    """A later profile replaces whole keys: set-resources must come from profiles/slurm only."""
    ci = load_profile(CI_PROFILE)
    assert "set-resources" not in ci and "executor" not in ci
    assert int(ci["slurm-init-seconds-before-status-checks"]) <= 10


def test_dry_run_of_50_datasets_gives_50_parallel_branches(tmp_path):
    """A glob source expands to 50 datasets; the DAG is 50 independent chains, built in seconds."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for i in range(50):
        (traces / f"run{i:02d}.sqlite").write_bytes(b"SQLite format 3\x00")  # dry run: existence only
    config = {
        "demo": {"enabled": False},
        "datasets": [{"name": "job", "source": f"{traces}/*.sqlite", "targets": ["kernel_variability"]}],
        "scaling": {"dataset": None},
        "comparisons": [],
    }
    (tmp_path / "many.yaml").write_text(yaml.safe_dump(config))
    work = tmp_path / "work"
    t0 = time.monotonic()
    dry = snakemake(work, "--profile", str(SLURM_PROFILE), "-n", "--configfile", str(tmp_path / "many.yaml"))
    elapsed = time.monotonic() - t0
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout + dry.stderr)
    assert counts["ingest_trace"] == 50 and counts["bin_trace"] == 50, counts
    assert elapsed < 60, f"dry run of 50 datasets took {elapsed:.1f}s"

    dag = snakemake(work, "--profile", str(SLURM_PROFILE), "--dag", "--configfile", str(tmp_path / "many.yaml"))
    assert dag.returncode == 0, dag.stderr[-3000:]
    assert independent_branches(dag.stdout) == 50


def test_the_shipped_placeholders_are_named_on_a_dry_run_and_refused_on_a_real_run(tmp_path):
    """profiles/slurm ships EDIT-ME values: a dry run (what users do first) says in one line where to set them;
    a real run is refused in one line before any job runs (the local executor stands in for sbatch: the
    refusal comes first either way)."""
    demo = ("--configfile", str(REPO / "config/config.yaml"))
    dry = snakemake(tmp_path, "--profile", str(SLURM_PROFILE), "-n", *demo)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert [line for line in dry.stderr.splitlines() if "EDIT-ME" in line] == [
        "gpuvar: before a real run, set slurm_account=EDIT-ME-account, slurm_partition=EDIT-ME-partition in "
        "profiles/slurm/config.yaml, default-resources (or a --workflow-profile of your own)"
    ]
    real = snakemake(tmp_path, "--profile", str(SLURM_PROFILE), "--executor", "local", "-c1", *demo)
    assert real.returncode == 1 and "Traceback" not in real.stderr
    assert "gpuvar: the cluster profile still has the placeholder slurm_account=EDIT-ME-account" in real.stderr
    assert not (tmp_path / "resources").exists() and not (tmp_path / "results").exists()


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table Snakemake prints: rule -> number of jobs."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", output, re.M) if m[1] != "total"}


def independent_branches(dot: str) -> int:
    """Connected components of the job DAG once the aggregating nodes are removed: `all` and the run-wide tables
    (`summarise_causal_checks` and `summarise_findings` read every branch's result, after the branches are done)."""
    labels = dict(re.findall(r'^\s*(\d+)\[label = "([^"\\]+)', dot, re.M))
    aggregating = ("all", "summarise_causal_checks", "summarise_findings")
    parent = {n: n for n, label in labels.items() if label not in aggregating}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in re.findall(r"^\s*(\d+)\s*->\s*(\d+)", dot, re.M):
        if a in parent and b in parent:
            parent[find(a)] = find(b)
    return len({find(n) for n in parent})


# ------------------------------------------------------------------------------- the real cluster


def _shell(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _cluster_up() -> bool:
    try:
        return (
            _shell(["scontrol", "ping"], timeout=10).returncode == 0 and _shell(["sacct", "-n", "-X"]).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _unavailable(reason: str):
    if os.environ.get("GPUVAR_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm cluster required (GPUVAR_REQUIRE_SLURM=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running cluster: reuse one that answers, else start ours (and stop it afterwards)."""
    if _cluster_up():
        yield
        return
    if os.geteuid() != 0:
        _unavailable("no Slurm cluster running and not root, so ci/local-slurm/start.sh cannot start one")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        _unavailable("no Slurm cluster running, Slurm not installed and no apt-get to install it")
    start = _shell(["bash", str(START)], timeout=600)
    if start.returncode != 0 or not _cluster_up():
        _unavailable(f"ci/local-slurm/start.sh could not start a cluster:\n{start.stderr[-2000:]}")
    yield
    _shell(["bash", str(STOP)], timeout=120)


def sacct_jobs(workdir: Path) -> list[dict]:
    """Slurm's accounting records of the jobs submitted from WORKDIR (the plugin sets -D WORKDIR)."""
    out = _shell(["sacct", "-X", "-n", "-P", "-a", "-S", "now-1hour", "-o", "JobID,State,WorkDir%300,Comment%300"])
    assert out.returncode == 0, out.stderr
    rows = [dict(zip(("id", "state", "workdir", "comment"), line.split("|", 3))) for line in out.stdout.splitlines()]
    return [r for r in rows if r["workdir"].rstrip("/") == str(workdir)]


def data_files(workdir: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(workdir)): p
        for p in sorted((workdir / "results").rglob("*"))
        if p.is_file() and p.suffix in DATA_SUFFIXES
    }


def strip_volatile(value, root: Path):
    """JSON without timing/memory fields and with the run directory replaced by a placeholder."""
    if isinstance(value, dict):
        return {k: strip_volatile(v, root) for k, v in value.items() if not VOLATILE_KEY.search(k)}
    if isinstance(value, list):
        return [strip_volatile(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(str(root), "<run>")
    return value


def mtimes(workdir: Path) -> dict[str, int]:
    return {name: path.stat().st_mtime_ns for name, path in data_files(workdir).items()}


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory):
    """Run 1 with a corrupt third dataset (must fail, others finish), fix it, run 2 (must resume only it);
    a local run of the same two good datasets runs alongside for comparison."""
    tmp = tmp_path_factory.mktemp("slurm")
    slurm_dir, local_dir = tmp / "slurm", tmp / "local"
    broken = tmp / "incoming" / "broken.sqlite"
    broken.parent.mkdir()
    broken.write_text("this is not a profiler trace\n")
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config["datasets"].append({"name": "broken", "source": str(broken), "targets": ["kernel_variability"]})
    with_broken = tmp / "with-broken.yaml"
    with_broken.write_text(yaml.safe_dump(config))

    snakefile = snapshot_workflow(tmp / "workflow-snapshot")
    local = subprocess.Popen(
        [
            SNAKEMAKE,
            "-s",
            str(snakefile),
            "-d",
            str(local_dir),
            "--profile",
            str(REPO / "profiles/local"),
            "--cores",
            "2",
            "--configfile",
            str(TEST_CONFIG),
            *UNTIL,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=snakemake_env(),
    )
    profiles = ["--profile", str(SLURM_PROFILE), "--workflow-profile", str(CI_PROFILE), *UNTIL]
    first = snakemake(slurm_dir, *profiles, "--configfile", str(with_broken), snakefile=snakefile)
    jobs_first = sacct_jobs(slurm_dir)
    before = mtimes(slurm_dir)
    broken_log = slurm_dir / "logs/ingest_trace/broken.log"
    first_log = broken_log.read_text() if broken_log.exists() else ""
    good = slurm_dir / "resources/demo/rank1.sqlite"
    if not good.exists():
        pytest.fail(f"the first Slurm run wrote no demo data:\n{(first.stdout + first.stderr)[-4000:]}")
    shutil.copyfile(good, broken)  # fix the input
    second = snakemake(slurm_dir, *profiles, "--configfile", str(with_broken), snakefile=snakefile)
    local_out, _ = local.communicate(timeout=300)
    return {
        "dir": slurm_dir,
        "local_dir": local_dir,
        "first": first,
        "first_log": first_log,
        "second": second,
        "local": (local.returncode, local_out),
        "jobs_first": jobs_first,
        "jobs_all": sacct_jobs(slurm_dir),
        "before": before,
        "after": mtimes(slurm_dir),
    }


@pytest.mark.slurm
def test_failed_slurm_job_is_reported_with_its_logs(slurm_run):
    first = slurm_run["first"]
    assert first.returncode != 0, "a corrupt input must fail the run"
    text = first.stdout + first.stderr
    assert "logs/ingest_trace/broken.log" in text, text[-3000:]
    slurm_logs = re.findall(r"\S*\.snakemake/slurm_logs/rule_ingest_trace/broken/\d+\.log", text)
    assert slurm_logs and Path(slurm_logs[0]).exists(), "the failed job's Slurm log is named and kept"
    assert "broken.sqlite" in slurm_run["first_log"], "the rule's log says which file is bad"
    states = [j["state"] for j in slurm_run["jobs_first"]]
    assert states.count("FAILED") == 1, states


@pytest.mark.slurm
def test_good_branches_finish_despite_the_failure(slurm_run):
    done = slurm_run["before"]
    for dataset in ("rank0", "rank1"):
        assert f"results/bin/{dataset}/kernel_variability/bin.json" in done
    assert not any("/broken/" in name for name in done if name.startswith("results/bin"))


@pytest.mark.slurm
def test_jobs_went_through_slurm(slurm_run):
    second = slurm_run["second"]
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    jobs = slurm_run["jobs_all"]
    assert jobs, "sacct lists no job submitted from the run directory"
    assert [j["comment"] for j in jobs if j["state"] != "COMPLETED"] == ["rule_ingest_trace_wildcards_broken"], jobs
    # make_demo_data + 3 datasets x (ingest, bin, causal), each a Slurm job (the plugin's --comment names it)
    completed = sorted(j["comment"] for j in jobs if j["state"] == "COMPLETED")
    datasets = ("broken", "rank0", "rank1")
    expected = (
        ["rule_make_demo_data"]
        + [f"rule_{rule}_wildcards_{d}" for rule in ("ingest_trace", "normalize_columns") for d in datasets]
        + [
            f"rule_{rule}_wildcards_{d}_kernel_variability"
            for rule in ("bin_trace", "discover_causal_graph")
            for d in datasets
        ]
    )
    assert completed == sorted(expected), completed


@pytest.mark.slurm
def test_binning_ran_two_mpi_ranks_under_srun(slurm_run):
    for dataset in ("rank0", "rank1", "broken"):
        report = json.loads((slurm_run["dir"] / f"results/bin/{dataset}/kernel_variability/bin.json").read_text())
        assert report["ranks"] == 2, report


@pytest.mark.slurm
def test_rerun_resumes_without_recomputing(slurm_run):
    second = slurm_run["second"]
    counts = job_counts(second.stdout + second.stderr)
    assert "make_demo_data" not in counts and counts.get("ingest_trace") == 1, counts
    before, after = slurm_run["before"], slurm_run["after"]
    assert {k: after[k] for k in before} == before, "finished outputs were rewritten by the rerun"
    new_jobs = len(slurm_run["jobs_all"]) - len(slurm_run["jobs_first"])
    assert new_jobs == 4, f"rerun should submit only broken's read, normalize, bin and causal jobs, not {new_jobs}"


@pytest.mark.slurm
def test_slurm_outputs_equal_local_outputs(slurm_run):
    code, log = slurm_run["local"]
    assert code == 0, log[-4000:]
    slurm_dir, local_dir = slurm_run["dir"], slurm_run["local_dir"]
    local = data_files(local_dir)
    on_slurm = {k: v for k, v in data_files(slurm_dir).items() if "/broken" not in k}
    assert any(name.endswith("bins.parquet") for name in local) and any("causal" in name for name in local)
    assert sorted(on_slurm) == sorted(local)
    for name, path in local.items():
        if path.suffix == ".json":
            a = strip_volatile(json.loads(path.read_text()), local_dir)
            b = strip_volatile(json.loads(on_slurm[name].read_text()), slurm_dir)
            assert a == b, name
        else:
            assert path.read_bytes() == on_slurm[name].read_bytes(), name


@pytest.mark.slurm
def test_slurm_jobs_see_the_submitting_venv(slurm_cluster):
    """gpuvar is only in the venv; a job started like the plugin's (--export=ALL) must find that one."""
    out = _shell(
        ["srun", "-A", "gpuvar-ci", "-p", "debug", "-n", "1", "--export=ALL", "sh", "-c", "command -v gpuvar"],
        env=snakemake_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(VENV_BIN / "gpuvar")
