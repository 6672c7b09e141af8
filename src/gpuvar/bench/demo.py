"""`gpuvar bench demo`: the whole demo workflow (`make demo`'s snakemake run) timed in a fresh folder.

Why: the first run decides whether a user keeps the tool; this measures it the way a new user meets it
(demo data written, every dataset ingested, binned, analysed and drawn, the comparison included), and
splits the time by rule from Snakemake's own benchmark files. Prints one JSON object.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TARGET_S = 120.0  # issue: the demo workflow in two minutes on 2 cores
CAUSAL_TARGET_S = 60.0  # issue: the causal stage of the demo (all datasets, groups, bootstrap) in a minute


def repo_root() -> Path:
    """The source checkout holding the Snakefile (the package is installed editable from src/)."""
    import gpuvar

    root = Path(gpuvar.__file__).resolve().parents[2]
    if not (root / "Snakefile").is_file():
        from gpuvar.errors import GpuvarError

        raise GpuvarError(f"bench demo needs a source checkout with a Snakefile (looked in {root})")
    return root


def configure_demo(p):
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores (default: %(default)s)")
    p.add_argument("--configfile", default=None, help="config to run (default: the checkout's config/config.yaml)")
    p.add_argument("--workdir", default=None, help="folder to run in (default: a fresh temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")


def rule_seconds(workdir: Path) -> dict[str, dict[str, float]]:
    """Per rule: jobs and summed wall seconds from benchmarks/<rule>/*.tsv."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "seconds": 0.0})
    for path in sorted((workdir / "benchmarks").glob("*/*.tsv")):
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                out[path.parent.name]["jobs"] += 1
                out[path.parent.name]["seconds"] += float(row["s"])
    return {k: {"jobs": int(v["jobs"]), "seconds": round(v["seconds"], 3)} for k, v in sorted(out.items())}


def run_demo(args) -> int:
    from gpuvar.errors import GpuvarError

    root = repo_root()
    config = Path(args.configfile) if args.configfile else root / "config" / "config.yaml"
    own = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="gpuvar-bench-demo-")) if own else Path(args.workdir)
    snakemake = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [
        str(snakemake),
        "-s",
        str(root / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(config),
        "--cores",
        str(args.cores),
        "--quiet",
        "rules",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    try:
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise GpuvarError(f"demo workflow failed (exit {proc.returncode}): {tail}; log in {workdir}/.snakemake/log")
        rules = rule_seconds(workdir)
        causal = rules.get("discover_causal_graph", {}).get("seconds", 0.0)
        result = {
            "bench": "demo",
            "cores": args.cores,
            "config": str(config),
            "wall_s": round(wall, 3),
            "target_s": TARGET_S,
            "met": wall <= TARGET_S,
            "causal_stage_s": causal,
            "causal_target_s": CAUSAL_TARGET_S,
            "causal_met": causal <= CAUSAL_TARGET_S,
            "jobs": sum(r["jobs"] for r in rules.values()),
            "rules": rules,
            "note": "rule seconds are summed over jobs (parallel branches overlap in wall time)",
        }
        print(json.dumps(result, sort_keys=True))
    finally:
        if own and not args.keep and proc.returncode == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0
