"""The README's commands and those of the pages it sends a newcomer to (docs/usage.md, docs/cluster.md),
extracted and run as written: the stage-by-stage block on a real Nsight Systems trace of the demo (its
placeholder path replaced), and the cluster dry runs. And the README stays a five-minute read."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

README = (REPO / "README.md").read_text()
PAGES = [README, *((REPO / "docs" / name).read_text() for name in ("usage.md", "cluster.md"))]
BIN = Path(sys.executable).parent


def _bash_blocks() -> list[str]:
    return [block for page in PAGES for block in re.findall(r"```bash\n(.*?)```", page, re.S)]


def test_the_readme_is_a_five_minute_read_that_links_what_it_left_out():
    """At most 150 lines (the measurement history lives in docs/performance.md), with the two set-up commands,
    one real example, the formats, the cluster route, one performance table, and links that resolve."""
    assert len(README.splitlines()) <= 150
    assert "make demo" in README and "make test" in README and "gpuvar explain" in README
    assert README.count("\n## Performance") == 1 and "--profile profiles/slurm" in README
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / link).is_file(), link


def _commands(block: str) -> list[str]:
    """One command per line (backslash continuations joined), comments dropped."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(shlex.split(command), cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.timeout(900)
def test_stage_by_stage_commands_run_as_written(tmp_path):
    block = next(b for b in _bash_blocks() if "gpuvar ingest traces/" in b)
    commands = _commands(block)
    assert [c.split()[0] for c in commands].count("gpuvar") >= 7 and any(c.startswith("mpiexec") for c in commands)
    made = _run("gpuvar demo-data -o demo --seed 0 --rows 3000", tmp_path)
    assert made.returncode == 0, made.stderr
    trace = tmp_path / "traces" / "train.rank0.sqlite"
    trace.parent.mkdir()
    (tmp_path / "demo" / "rank0.sqlite").rename(trace)
    for command in commands:
        if command.startswith("gpuvar demo-data -o demo"):
            continue  # done above, with fewer rows
        proc = _run(command.replace("--top-k 20", "--top-k 5"), tmp_path)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
    assert (tmp_path / "out" / "raw" / "raw.json").is_file()
    assert (tmp_path / "out" / "checks.tsv").read_text().startswith("dataset")


@pytest.mark.timeout(600)
def test_cluster_dry_runs_as_written(tmp_path):
    """`snakemake --profile profiles/slurm -n` and `--rulegraph` from the README work from a fresh checkout."""
    block = next(b for b in _bash_blocks() if "--profile profiles/slurm -n" in b)
    for command in _commands(block):
        if "|" in command or " -n" not in command and "--rulegraph" not in command:
            continue  # piped to dot (not installed everywhere) or a real submission
        proc = _run(f"{command} -d {tmp_path / 'run'} --configfile {REPO / 'config' / 'config.yaml'}", REPO)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        assert "normalize_columns" in proc.stdout
