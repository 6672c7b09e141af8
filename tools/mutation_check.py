#!/usr/bin/env python3
"""Mutation check: break the code on purpose and see whether the tests notice.

Each mutation replaces one exact piece of source text in a temporary copy of the working tree, runs the tests
that claim to cover it (against the copy: PYTHONPATH points at its src/), and reports CAUGHT (the tests fail)
or NOT CAUGHT (they pass on broken code: a test that cannot fail). The working tree is never modified.

    .venv/bin/python tools/mutation_check.py            # every mutation (~5 minutes on 2 cores)
    .venv/bin/python tools/mutation_check.py --list     # names only
    .venv/bin/python tools/mutation_check.py nsys_device_id stats_ddof   # some of them
    .venv/bin/python tools/mutation_check.py nsys_device_id --tests tests/test_ingest_nsys.py  # other tests

Exit status 1 if any mutation is not caught (or its text is no longer found: update the table).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# name: (file, original text, mutated text, tests to run, what the mutation breaks)
MUTATIONS = {
    "rocprof_loses_a_row": (
        "src/gpuvar/ingest/rocprof.py",
        "out.kernels = amd_common.drop_nameless(df, out)",
        "out.kernels = amd_common.drop_nameless(df, out).iloc[1:]",
        ["tests/test_fuzz_readers.py::test_csv_reader_fuzz[rocprof]"],
        "a reader's counts: one row read but neither written nor dropped",
    ),
    "nsys_device_id": (
        "src/gpuvar/ingest/nsys.py",
        '"deviceId": "device_id",',
        '"deviceId": "deviceId",',
        ["tests/test_canonical_columns_real.py", "tests/test_ingest_nsys.py"],
        "a canonical column mapping (deviceId -> device_id; memory_stall then links nothing)",
    ),
    "rocprof_grid_blocks": (
        "src/gpuvar/ingest/amd_common.py",
        'df["grid_x"] = ceil_div(',
        'df["grid_x"] = to_int(',
        ["tests/test_canonical_columns_real.py", "tests/test_ingest_amd.py"],
        "a canonical column rule (AMD grid in blocks = ceil(grd / wgr))",
    ),
    "stats_ddof": (
        "src/gpuvar/binning/stats.py",
        "var = np.where(counts > 1, ss / (counts - 1), np.nan)",
        "var = np.where(counts > 1, ss / counts, np.nan)",
        ["tests/test_binning.py"],
        "a statistic: sample variance (ddof=1) becomes population variance",
    ),
    "causal_total_effect_sign": (
        "src/gpuvar/causal/discover.py",
        '"sign": int(np.sign(te[k])),',
        '"sign": -int(np.sign(te[k])),',
        ["tests/test_causal_discover.py"],
        "a sign in the causal total effects (contributions.csv)",
    ),
    "shell_quoting": (
        "workflow/rules/binning.smk",
        "--features {params.features:q}",
        "--features {params.features}",
        ["tests/test_shell_injection.py::test_values_past_validation_are_still_one_argument_each"],
        "quoting of a config value in a shell command",
    ),
    "dataset_name_match": (
        "src/gpuvar/config.py",
        "if not _NAME.fullmatch(v):",
        "if not re.match(_NAME.pattern + '$', v):",
        ["tests/test_config_fuzz.py", "tests/test_shell_injection.py::test_hostile_config_is_refused_before_any_shell_runs"],
        "dataset names matched with `$` (accepts a trailing newline)",
    ),
    "config_bound": (
        "src/gpuvar/config.py",
        "workers_per_rank: Int = Field(1, gt=0, le=64)",
        "workers_per_rank: Int = Field(1, gt=0)",
        ["tests/test_config_fuzz.py::test_every_field_rejects_in_one_line_or_runs"],
        "a config bound (workers_per_rank validates, then the binning CLI refuses it)",
    ),
    "atomic_bin_output": (
        "src/gpuvar/binning/cli.py",
        "        opts.output = tmp\n",
        "        pass\n",
        ["tests/test_atomic_outputs.py"],
        "atomic outputs: gpuvar bin writes straight into the target folder",
    ),
    "negative_duration_kept": (
        "src/gpuvar/ingest/sanity.py",
        "    if not n_bad:\n        return table",
        "    if True:\n        return table",
        ["tests/test_data_sanity.py"],
        "data sanity: an int64-overflowing end - start is kept as a negative duration",
    ),
    "no_link_warning": (
        "src/gpuvar/binning/selection.py",
        "if target == \"memory_stall\" and no_link and binned == 0:",
        "if False:",
        ["tests/test_empty_selection.py::test_bin_json_explains_and_warns"],
        "the '0 rows linked' warning in bin.json and the log",
    ),
}


def copy_tree(destination: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored), plus a link to the venv."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    if (REPO / ".venv").exists():
        (destination / ".venv").symlink_to((REPO / ".venv").resolve())


def run_one(name: str, timeout: int, tests: list[str] | None = None) -> tuple[str, float, str]:
    path, original, mutated, default_tests, _ = MUTATIONS[name]
    tests = tests or default_tests
    with tempfile.TemporaryDirectory(prefix=f"gpuvar-mutant-{name}-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        source = root / path
        text = source.read_text()
        if text.count(original) < 1:
            return "TEXT NOT FOUND", 0.0, f"{path}: {original!r}"
        source.write_text(text.replace(original, mutated))
        # the copy lives elsewhere: point it at the real files, and let their absence fail rather than skip
        real = os.environ.get("GPUVAR_REAL_DATA", str(REPO.parent / "shared" / "data" / "real"))
        env = {**os.environ, "PYTHONPATH": str(root / "src"), "GPUVAR_FUZZ_EXAMPLES": "40", "GPUVAR_REAL_DATA": real,
               "GPUVAR_REQUIRE_REAL_DATA": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                  cwd=root, env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return "TIMEOUT", time.perf_counter() - t0, ""
        seconds = time.perf_counter() - t0
        summary = (proc.stdout.strip().splitlines() or [""])[-1]
        if proc.returncode == 0:
            return "NOT CAUGHT", seconds, summary
        if proc.returncode in (1,):
            return "CAUGHT", seconds, summary
        return f"ERROR (pytest exit {proc.returncode})", seconds, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutation's test run")
    parser.add_argument("--tests", nargs="+", default=None,
                        help="run these tests instead of each mutation's own (e.g. to show an older suite missed it)")
    args = parser.parse_args()
    if args.list:
        for name, (path, *_, what) in MUTATIONS.items():
            print(f"{name:28} {path:40} {what}")
        return 0
    unknown = set(args.names) - set(MUTATIONS)
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    failed = 0
    print(f"{'mutation':28} {'result':12} {'seconds':>8}  tests")
    for name in args.names or MUTATIONS:
        result, seconds, summary = run_one(name, args.timeout, args.tests)
        failed += result != "CAUGHT"
        tests = " ".join(args.tests or MUTATIONS[name][3])
        print(f"{name:28} {result:12} {seconds:8.1f}  {tests} -> {summary}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
