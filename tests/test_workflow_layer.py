"""The workflow layer as a user meets it: the rule chain of the paper, what a mapping change reruns, include order,
no copied rule bodies, the Slurm rank count, a scaling study on an Nsight Compute dataset."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from workflow_runs import run_workflow, small_config

RULE_FILES = sorted((REPO / "workflow" / "rules").glob("*.smk"))


def _dry_run(workdir: Path, config: Path, *extra: str, snakefile: Path = REPO / "Snakefile", env: dict | None = None):
    return run_workflow(workdir, config, "-n", *extra, snakefile=snakefile, env=env)


def _jobs(stdout: str) -> dict[str, int]:
    """Rule -> job count from a dry run's job table."""
    table = stdout.split("Job stats:")[1].split("total")[0] if "Job stats:" in stdout else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


def test_rule_graph_is_the_papers_chain(tmp_path):
    """ingest_trace -> normalize_columns -> bin_trace -> discover_causal_graph -> plots, as `--rulegraph` shows."""
    proc = _dry_run(tmp_path, small_config(tmp_path), "--rulegraph")
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = dict(re.findall(r'(\d+)\[label = "(\w+)"', proc.stdout))
    edges = {(names[a], names[b]) for a, b in re.findall(r"(\d+) -> (\d+)", proc.stdout)}
    chain = [
        "make_demo_data",
        "ingest_trace",
        "normalize_columns",
        "bin_trace",
        "discover_causal_graph",
        "plot_causal_graphs",
    ]
    for step, after in zip(chain, chain[1:]):
        assert (step, after) in edges, (step, after, sorted(edges))
    assert ("ingest_trace", "bin_trace") not in edges  # normalization is its own step, not fused into ingest


def test_changed_mapping_reruns_normalization_not_the_read(tmp_path):
    """Editing Table 1 (src/gpuvar/data/table1.csv) reruns normalize_columns and what follows, never the slow
    read of the profiler file. The edit is made in a private copy of the package, which every run of this test
    imports (PYTHONPATH): the repository's file is never touched, so tests running beside this one (pytest-xdist)
    read it unchanged."""
    import gpuvar
    from gpuvar.layout import mapping_files

    package = Path(gpuvar.__file__).parent
    src = tmp_path / "src"
    shutil.copytree(package, src / "gpuvar", ignore=shutil.ignore_patterns("__pycache__"))
    table1 = src / "gpuvar" / Path(mapping_files()[0]).relative_to(package)
    assert table1.name == "table1.csv" and table1.is_file()
    env = {"PYTHONPATH": str(src)}
    config, workdir = small_config(tmp_path), tmp_path / "run"
    done = run_workflow(workdir, config, "results/bin/rank0/kernel_variability/bin.json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _jobs(_dry_run(workdir, config, "results/bin/rank0/kernel_variability/bin.json", env=env).stdout) == {}
    # an edit of the mapping (Snakemake compares content, so a touch alone would not count)
    table1.write_bytes(table1.read_bytes() + b"\n")
    jobs = _jobs(_dry_run(workdir, config, "results/bin/rank0/kernel_variability/bin.json", env=env).stdout)
    assert jobs.get("normalize_columns") == 1 and jobs.get("bin_trace") == 1, jobs
    assert "ingest_trace" not in jobs and "make_demo_data" not in jobs, jobs


def _copy_workflow(dest: Path) -> Path:
    for folder in ("workflow", "envs", "config"):
        shutil.copytree(REPO / folder, dest / folder)
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    return dest / "Snakefile"


def test_rule_files_include_in_any_order(tmp_path):
    """Reverse, then shuffle, the Snakefile's includes after common.smk (the definitions): the same jobs for
    `all`, `paper` and `scaling` (one dry run of the three targets per order)."""
    config = small_config(tmp_path)
    targets = ("all", "paper", "scaling")
    expected = _jobs(_dry_run(tmp_path / "a", config, *targets).stdout)
    assert {"bin_trace", "bin_scaling_trace", "plot_paper_causal_graphs", "compare_runs"} <= set(expected), expected
    snakefile = _copy_workflow(tmp_path / "wf")
    text = snakefile.read_text()
    includes = re.findall(r'^include: "workflow/rules/(?!common)\w+\.smk"\n', text, re.M)
    assert len(includes) >= 6
    body = text
    for line in includes:
        body = body.replace(line, "", 1)
    anchor = 'include: "workflow/rules/common.smk"\n'
    for order in (includes[::-1], random.Random(1).sample(includes, len(includes))):
        snakefile.write_text(body.replace(anchor, anchor + "".join(order)))
        proc = _dry_run(tmp_path / "b", config, *targets, snakefile=snakefile)
        assert proc.returncode == 0, (order, proc.stderr[-2000:])
        assert _jobs(proc.stdout) == expected, order


# lines every rule of a kind has: a directive, a resource, the runner, where `--output` points
TRIVIAL = re.compile(
    r"^(\w+:|ENV|GPUVAR|conda:|threads: \d+|\w+=\d+,|mem_mb=\d+,|runtime=\d+,|[)\]},(]+|\"\w+\","
    r"|output=lambda wildcards, output: [\w.]+\(?output[\w.\[\]]*\)?,)$"
)


def _rule_bodies() -> dict[str, list[str]]:
    """Rule name -> its body's lines (stripped), for every `rule` and `use rule` in the workflow."""
    bodies, current = {}, None
    for path in [REPO / "Snakefile", *RULE_FILES]:
        for line in path.read_text().splitlines():
            head = re.match(r"^\s*(?:rule (\w+):|use rule \w+ as (\w+) with:)", line)
            if head:
                current = head.group(1) or head.group(2)
                bodies[current] = []
            elif current and (not line.strip() or line.startswith((" ", "\t"))):
                if line.strip():
                    bodies[current].append(line.strip())
            else:
                current = None
    return bodies


def test_no_rule_body_is_a_copy_of_another():
    """Two rules sharing more than a few identical non-trivial lines are a copy that will drift (use
    `use rule ... with:` or a helper in gpuvar.workflow)."""
    bodies = _rule_bodies()
    assert {"ingest_trace", "normalize_columns", "bin_trace", "bin_scaling_trace"} <= set(bodies)
    meaningful = {
        name: {text for text in lines if len(text) > 24 and not TRIVIAL.match(text)} for name, lines in bodies.items()
    }
    names = sorted(meaningful)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = meaningful[a] & meaningful[b]
            assert len(shared) <= 3, (a, b, sorted(shared))


def test_no_rule_has_a_shell_except_the_mpi_job():
    """Only the MPI rules run a shell (mpiexec/srun); every other rule hands a list to a script."""
    bodies = _rule_bodies()
    with_shell = {name for name, lines in bodies.items() if "shell:" in lines}
    assert with_shell == {"bin_trace", "analyse_ranks"}, with_shell
    for script in (REPO / "workflow" / "scripts").glob("*.py"):
        assert len(script.read_text().splitlines()) <= 12, f"{script.name}: scripts stay thin (logic in gpuvar)"


def test_slurm_rank_count_comes_from_the_config(tmp_path):
    """profiles/slurm does not restate the rank count: binning.ranks sizes the Slurm job and the srun."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert "tasks" not in profile["set-resources"]["bin_trace"]
    cfg = yaml.safe_load(small_config(tmp_path).read_text())
    cfg["binning"]["ranks"] = 3
    config = tmp_path / "three.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = _dry_run(
        tmp_path / "run",
        config,
        "results/bin/rank0/kernel_variability/bin.json",
        "-p",
        "--set-resources",
        "bin_trace:mpi=srun",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"srun -n 3 gpuvar bin", proc.stdout), proc.stdout[-3000:]


def test_rank_analysis_is_an_mpi_job_over_each_rank_s_input(tmp_path):
    """A merged dataset's `gpuvar ranks` runs under mpiexec/srun with binning.ranks processes, at most one per rank
    file; Kineto rank files are named as traces (host collectives) and read from each rank's ingest folder, which
    keeps them (--ingested); other formats from each rank's own ingest folder; never from the merged table."""
    from gpuvar.demo.nsys_writer import write_nsys_demo

    cfg = yaml.safe_load(small_config(tmp_path).read_text())
    files = []
    for r in range(3):
        files.append(tmp_path / f"job_rank{r}.sqlite")
        write_nsys_demo(files[-1], 200, r, 0)
    cfg["datasets"].append({"name": "job", "source": [str(f) for f in files], "merge": True})
    cfg["binning"]["ranks"] = 2
    config = tmp_path / "ranks.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = _dry_run(
        tmp_path / "run", config, "results/ranks/job", "results/ranks/kineto", "-p", "--set-resources",
        "analyse_ranks:mpi=srun",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    folders = " ".join(f"results/ingest/job/ranks/{r}" for r in range(3))
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]  # (an empty --traces list: two spaces)
    assert f"srun -n 2 gpuvar ranks {folders} --seed 0 --output results/ranks/job" in "\n".join(lines)
    traces = "resources/demo/kineto_rank0.json.gz resources/demo/kineto_rank1.json.gz --traces"
    ingested = "--ingested results/ingest/kineto/ranks/0 results/ingest/kineto/ranks/1"
    assert f"srun -n 2 gpuvar ranks {traces} {ingested} --seed 0 --output results/ranks/kineto" in proc.stdout
    assert "merge_ranks" not in _jobs(proc.stdout)  # the rank analysis does not wait for the merged table


@pytest.mark.timeout(900)
def test_scaling_study_on_an_nsight_compute_dataset(tmp_path):
    """`snakemake scaling` on a dataset without copies or timestamps (Nsight Compute): each rank count bins the
    launch order (binning.launch_bin_width) and the figure is drawn."""
    ncu = tmp_path / "traces" / "app_ncu.csv"
    ncu.parent.mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "gpuvar.cli", "demo-data", "--format", "ncu", "--rows", "3000", "--output", str(ncu)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    cfg = yaml.safe_load(small_config(tmp_path).read_text())
    cfg["datasets"] = [{"name": "app", "source": str(ncu), "targets": ["kernel_variability"]}]
    cfg["comparisons"] = []
    cfg["scaling"] = {"dataset": "app", "target": "kernel_variability", "ranks": [1, 2]}
    config = tmp_path / "ncu.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = run_workflow(tmp_path / "run", config, "scaling")
    assert proc.returncode == 0, proc.stderr[-3000:]
    base = tmp_path / "run" / "results" / "scaling" / "app" / "kernel_variability"
    for ranks in (1, 2):
        report = yaml.safe_load((base / f"ranks{ranks}" / "bin.json").read_text())
        assert report["ranks"] == ranks
    assert (base / "ranks_1_2" / "scaling.csv").is_file() and (base / "ranks_1_2" / "scaling.svg").is_file()
