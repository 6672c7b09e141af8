"""A first run on one's own trace: a user's config names only its own datasets (no demo names), and what the
run prints at the end puts the findings first.

- The config model: `comparisons` and `scaling.dataset` are optional; without them `all` has no comparison
  and `snakemake scaling` nothing to time.
- The Snakefile: a `--configfile` is the whole config, not layered over config/config.yaml (the demo's, whose
  `comparisons` and `scaling.dataset` name demo datasets), so a user's config or config/paper.yaml runs as is.
- The end of a run: the top findings, then (secondary) how many causal graphs failed a check, then the page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from gpuvar.config import validate_config
from gpuvar.layout import CHECKS_TABLE
from gpuvar.workflow.compare import comparison_outputs
from gpuvar.workflow.figures import scaling_outputs
from gpuvar.workflow.registry import build_registry, print_run_summary

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def _user_config(tmp_path: Path) -> Path:
    """A user's config: one trace of theirs, every other key left to the defaults."""
    trace = tmp_path / "traces" / "train.rank0.sqlite"
    trace.parent.mkdir()
    trace.write_bytes(b"")  # a dry run checks that the source exists; it does not read it
    config = tmp_path / "my.yaml"
    config.write_text(yaml.safe_dump({"datasets": [{"name": "train", "source": str(trace)}]}))
    return config


def test_a_config_without_comparisons_or_scaling_plans_neither(tmp_path):
    raw = yaml.safe_load(_user_config(tmp_path).read_text())
    cfg = validate_config(raw, tmp_path)
    assert cfg.comparisons == [] and cfg.scaling.dataset is None
    assert comparison_outputs(cfg) == []
    assert scaling_outputs(cfg, {d.name: d for d in cfg.datasets}) == []
    registry = build_registry(raw, tmp_path)
    assert list(registry.datasets) == ["train"] and registry.analysis_outputs()


def _dry_run(config: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", "--configfile", str(config), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.timeout(600)
def test_a_users_configfile_is_not_layered_over_the_demo_config(tmp_path):
    """From the repository root, as the README says: the demo's comparison (pair_baseline, pair_candidate)
    and scaling dataset (rank0) do not leak into a user's run."""
    proc = _dry_run(_user_config(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wildcards: dataset=train" in proc.stdout
    assert "compare_runs" not in proc.stdout and "pair_baseline" not in proc.stdout
    assert "make_demo_data" not in proc.stdout  # no demo dataset, so the demo traces are not written


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.timeout(600)
def test_the_paper_config_runs_as_an_ordinary_config():
    """docs/paper.md: `snakemake --configfile config/paper.yaml` runs the everyday workflow on the paper's
    datasets (its two sections name no comparison)."""
    proc = _dry_run(REPO / "config" / "paper.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wildcards: dataset=sw4lite" in proc.stdout and "compare_runs" not in proc.stdout


def _record(dataset: str) -> dict:
    return {
        "dataset": dataset,
        "launches": 1000,
        "kernel_names": 3,
        "call_sites": 12,
        "pooled_shares": {"between": 0.2, "size": 0.5, "context": 0.1, "counters": 0.0, "unexplained": 0.2},
        "nothing_actionable": False,
        "findings": [{"rank": 1, "headline": "gemm_kernel: explained 90 % by grid_x +", "recoverable_ns": 5e6}],
        "stable": [],
    }


def test_the_run_ends_with_the_findings_then_the_checks_then_the_page(tmp_path, capsys):
    findings = tmp_path / "results" / "findings" / "findings.json"
    findings.parent.mkdir(parents=True)
    findings.write_text(json.dumps({"datasets": [_record("train")]}))
    checks = tmp_path / CHECKS_TABLE
    checks.parent.mkdir(parents=True)
    rows = ["dataset\ttarget\tgroup\tstatus\tverdict\tshare\ttrusted\texplained_share\trows\twarnings"]
    rows += [f"train\tkernel_variability\tg{i}\tok\texplained\t0.9\t{t}\t0.9\t100\t" for i, t in enumerate("yyn")]
    rows += ["train\tkernel_variability\tsmall\tskipped\t\t\t\t\t3\ttoo few rows"]
    checks.write_text("\n".join(r.replace("\ty\t", "\tyes\t").replace("\tn\t", "\tno\t") for r in rows) + "\n")

    print_run_summary(findings=findings, checks=checks)
    lines = capsys.readouterr().out.splitlines()
    first_finding = next(i for i, line in enumerate(lines) if "gemm_kernel" in line)
    failed = next(i for i, line in enumerate(lines) if "failed an assumption check" in line)
    assert "1 of 3 causal graphs" in lines[failed] and str(checks) in lines[failed]
    assert first_finding < failed < len(lines) - 2
    assert lines[-2].endswith(str(findings.with_name("findings.md")))
    assert lines[-1].endswith(str(findings.with_name("findings.html")))


def test_the_run_names_its_pages_by_full_path_and_prints_the_rank_findings(tmp_path, monkeypatch, capsys):
    """`make run CONFIG=my.yaml` works in runs/my/: the pages it names must be found from where the user stands
    (full paths), and a `merge: true` dataset's rank findings are printed as `gpuvar explain` prints them."""
    monkeypatch.chdir(tmp_path)  # Snakemake's --directory: the run's folder is the working directory
    findings = Path("results/findings/findings.json")
    findings.parent.mkdir(parents=True)
    findings.write_text(json.dumps({"datasets": [_record("train")]}))
    ranks = Path("results/ranks/job/ranks.json")
    ranks.parent.mkdir(parents=True)
    ranks.write_text(json.dumps({"findings": ["rank 1 is last in 98 % of collectives", "rank 0 waits 12 %"]}))
    print_run_summary(ranks=["job", "not_run"], findings=findings, checks=Path("absent.tsv"))
    lines = capsys.readouterr().out.splitlines()
    assert f"ranks of job ({tmp_path / 'results/ranks/job/ranks.md'})" in "\n".join(lines)
    assert "  ranks: rank 1 is last in 98 % of collectives" in lines and "not_run" not in "\n".join(lines)
    assert lines[-2].endswith(str(tmp_path / "results/findings/findings.md"))


def test_no_failed_graph_no_checks_line(tmp_path, capsys):
    findings = tmp_path / "findings.json"
    findings.write_text(json.dumps({"datasets": [_record("train")]}))
    print_run_summary(findings=findings, checks=tmp_path / "absent.tsv")
    out = capsys.readouterr().out
    assert "gemm_kernel" in out and "assumption check" not in out


@pytest.mark.snakemake
@pytest.mark.timeout(600)
def test_a_verification_plans_gpuvar_verify_of_the_findings_on_the_rerun(tmp_path):
    """config `verifications`: one `gpuvar verify` job per entry, after the findings of one dataset and the
    ingest of its re-run; a refuted finding is a result (--exit-zero), not a failed job."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in ("varlen", "fixed"):
        (traces / f"{name}.pt.trace.json.gz").write_bytes(b"")
    config = tmp_path / "my.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "datasets": [
                    {"name": "varlen", "source": str(traces / "varlen.pt.trace.json.gz")},
                    {"name": "fixed", "source": str(traces / "fixed.pt.trace.json.gz")},
                ],
                "verifications": [{"name": "fixed_length", "findings": "varlen", "rerun": "fixed"}],
            }
        )
    )
    proc = _dry_run(config, "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rule verify_findings" in proc.stdout and "results/verify/fixed_length/verify.json" in proc.stdout
    assert "results/findings/varlen" in proc.stdout and "results/ingest/fixed/kernels.parquet" in proc.stdout
    with pytest.raises(Exception, match="rerun 'nope' is not a dataset name"):
        raw = yaml.safe_load(config.read_text())
        raw["verifications"][0]["rerun"] = "nope"
        validate_config(raw, tmp_path)
