"""Running the workflow from the tests: the small demo config, one `snakemake` call, digests of the data outputs
and the golden record they are compared with. The shared runs themselves are fixtures in conftest.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
GOLDEN = REPO / "tests" / "data" / "golden" / "small_config_digests.json"


def small_config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["demo"]["rows"] = 3000
    cfg["causal"]["bootstrap"] = 8
    cfg["causal"]["min_rows"] = 20
    cfg["binning"]["top_k"] = 10
    cfg["binning"]["bin_width"] = "5ms"
    cfg["scaling"]["rows"] = 20000
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_workflow(
    workdir: Path, config: Path, *extra: str, snakefile: Path = REPO / "Snakefile", env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake` on WORKDIR with CONFIG and 2 cores; ENV adds to (or overrides) the test's environment."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **(env or {})}
    return subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(snakefile),
            "-d",
            str(workdir),
            "--configfile",
            str(config),
            "--cores",
            "2",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def data_digests(workdir: Path) -> dict[str, str]:
    """Hashes of every data output (JSON logs with timings excluded)."""
    out = {}
    for path in sorted((workdir / "results").rglob("*")):
        if path.is_file() and path.suffix in {".parquet", ".csv", ".graphml", ".svg", ".png"}:
            out[str(path.relative_to(workdir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def copy_run(source: Path, dest: Path) -> Path:
    """A copy of a finished run directory (outputs, logs and Snakemake's metadata, timestamps kept), so that a
    test can build more targets in it without touching the shared run."""
    shutil.copytree(source, dest, symlinks=True)
    return dest


def assert_recorded_bytes(workdir: Path, paper: bool) -> None:
    """The data outputs of the small-config run equal the bytes recorded in tests/data/golden (made before the
    workflow-layer refactor of issue 16, so the refactor changed no result), and every data output of the run is
    recorded: the record was made by another run from scratch, in another folder, so this is also the check that
    a rerun writes the same bytes. paper: the paper run (results/paper/ and the paper-only datasets, and the
    demo run's outputs it was built over: building the paper's figures rewrote none of them), else the demo run.
    After a deliberate change of results, GPUVAR_UPDATE_GOLDEN=1 rewrites the record (review the diff: every
    changed file is a changed result)."""
    actual = {k: v for k, v in data_digests(workdir).items() if "/raw/" not in k}
    recorded = json.loads(GOLDEN.read_text())
    own = {d["name"] for d in yaml.safe_load((REPO / "config" / "config.yaml").read_text())["datasets"]}

    def in_all(key: str) -> bool:  # built by `snakemake` (all): not a paper figure, not a paper-only dataset
        parts = key.split("/")
        return parts[1] != "paper" and (parts[1] not in ("ingest", "bin", "causal", "plots") or parts[2] in own)

    def own_scope(key: str) -> bool:  # what this run adds to the record
        return not in_all(key) if paper else in_all(key)

    if os.environ.get("GPUVAR_UPDATE_GOLDEN") == "1":
        keep = {k: v for k, v in recorded.items() if not own_scope(k)}
        fresh = {k: v for k, v in actual.items() if own_scope(k)}
        GOLDEN.write_text(json.dumps(keep | fresh, indent=1, sort_keys=True) + "\n")
        return
    selected = {k: v for k, v in recorded.items() if own_scope(k) or (paper and k in actual)}
    assert selected, "nothing recorded"
    missing = sorted(k for k in selected if k not in actual)
    changed = sorted(k for k in selected if k in actual and actual[k] != selected[k])
    unrecorded = sorted(k for k in actual if own_scope(k) and k not in recorded)
    assert not missing and not changed and not unrecorded, {
        "missing": missing[:20],
        "changed": changed[:20],
        "unrecorded (a new output: GPUVAR_UPDATE_GOLDEN=1 records it)": unrecorded[:20],
        "of": len(selected),
    }
