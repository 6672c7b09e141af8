#!/usr/bin/env python3
"""Mutation check: break the code on purpose and see whether the tests notice.

Each mutation replaces one exact piece of source text in a temporary copy of the working tree, runs the tests
that claim to cover it (against the copy: PYTHONPATH points at its src/), and reports CAUGHT (the tests fail)
or NOT CAUGHT (they pass on broken code: a test that cannot fail). The working tree is never modified.

First every mutation must apply (its text is found in the current code; otherwise the check stops before
running anything: a stale mutation would otherwise look like a pass), then a baseline runs the same tests on
the unmutated copy: they must pass, or a "caught" mutation would only show a test that fails anyway.

    make mutation                                       # all of them (see README for the time it takes)
    .venv/bin/python tools/mutation_check.py --list     # names only
    .venv/bin/python tools/mutation_check.py --check    # only that every mutation applies (instant)
    .venv/bin/python tools/mutation_check.py nsys_device_id stats_ddof   # some of them
    .venv/bin/python tools/mutation_check.py nsys_device_id --tests tests/test_ingest_nsys.py  # other tests
    .venv/bin/python tools/mutation_check.py --jobs 2                  # two mutations at a time

Exit status 1 if any mutation is not caught or the baseline fails, 2 if a mutation no longer applies.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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
        # the nsys tests of the module first: the whole module first took 21 s to reach them
        ["tests/test_canonical_columns_real.py::test_nsys_every_canonical_column", "tests/test_ingest_nsys.py"],
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
        "src/gpuvar/causal/effects.py",
        '"sign": int(np.sign(te[k])),',
        '"sign": -int(np.sign(te[k])),',
        ["tests/test_causal_discover.py"],
        "a sign in the causal total effects (contributions.csv)",
    ),
    "rank_section_rereads_traces": (
        "src/gpuvar/ranks/section.py",
        "kept = [str(p) for p in parts] if host_ops else None",
        "kept = None",
        ["tests/test_ranks_kept_collectives.py::test_explains_rank_section_reads_the_rank_folders"],
        "explain's rank section reads every Kineto trace again instead of the ingest folders that keep them",
    ),
    "shell_quoting": (
        "workflow/rules/binning.smk",
        " --features {params.features:q} --group",
        " --features {params.features} --group",
        ["tests/test_shell_injection.py::test_values_past_validation_are_still_one_argument_each[binning-rules0]"],
        "quoting of the config values in the MPI rule's shell command",
    ),
    "dataset_name_match": (
        "src/gpuvar/config.py",
        "if not _NAME.fullmatch(v):",
        "if not re.match(_NAME.pattern + '$', v):",
        [  # the test that catches it ('evil\n') without the rest of the fuzz module first: 98 s -> a few
            "tests/test_config_fuzz.py::test_reported_values_are_refused_with_key_value_and_allowed",
            "tests/test_shell_injection.py::test_hostile_config_is_refused_before_any_shell_runs",
        ],
        "dataset names matched with `$` (accepts a trailing newline)",
    ),
    "config_bound": (
        "src/gpuvar/config.py",
        "workers_per_rank: Int = Field(1, gt=0, le=64,",
        "workers_per_rank: Int = Field(1, gt=0,",
        [
            "tests/test_options.py::test_field_table_is_written_from_the_config_models",
            "tests/test_config_fuzz.py::test_every_field_rejects_in_one_line_or_runs",
            "tests/test_config_fuzz.py::test_snakemake_start_up_refuses_in_one_line[binning-value4-binning."
            "workers_per_rank: Input should be less than or equal to 64]",
        ],
        "a config bound (workers_per_rank accepts 10**9: the statistics would start a billion threads)",
    ),
    "atomic_bin_output": (
        "src/gpuvar/binning/cli.py",
        "            code = run_rank(replace(opts, output=tmp), comm)\n",
        "            code = run_rank(opts, comm)\n",
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
        "if links_copies and no_link and binned == 0:",
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


def stale(names) -> list[str]:
    """The mutations whose original text is not in the current code (or whose replacement changes nothing)."""
    out = []
    for name in names:
        path, original, mutated, *_ = MUTATIONS[name]
        source = REPO / path
        text = source.read_text() if source.is_file() else ""
        if original == mutated or original not in text:
            out.append(f"{name}: {path} no longer contains {original!r}")
    return out


def run_tests(
    name: str, tests: list[str], timeout: int, mutation: tuple[str, str, str] | None
) -> tuple[str, float, str]:
    """pytest `tests` in a fresh copy of the tree, with `mutation` (path, original, mutated) applied if given."""
    with tempfile.TemporaryDirectory(prefix=f"gpuvar-mutant-{name}-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        if mutation is not None:
            path, original, mutated = mutation
            source = root / path
            source.write_text(source.read_text().replace(original, mutated))
        # the copy lives elsewhere: point it at the real files, and let their absence fail rather than skip
        real = os.environ.get("GPUVAR_REAL_DATA", str(REPO.parent / "shared" / "data" / "real"))
        env = {
            **os.environ,
            "PYTHONPATH": str(root / "src"),
            "GPUVAR_FUZZ_EXAMPLES": "40",
            "GPUVAR_REAL_DATA": real,
            "GPUVAR_REQUIRE_REAL_DATA": "1",
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        }
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                  cwd=root, env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return "TIMEOUT", time.perf_counter() - t0, ""
        seconds = time.perf_counter() - t0
        summary = (proc.stdout.strip().splitlines() or [""])[-1]
        if proc.returncode == 0:
            return "PASSED", seconds, summary
        if proc.returncode == 1:
            return "FAILED", seconds, summary
        return f"ERROR (pytest exit {proc.returncode})", seconds, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true", help="only check that every mutation applies")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test run")
    parser.add_argument(
        "--tests",
        nargs="+",
        default=None,
        help="run these tests instead of each mutation's own (e.g. to show an older suite missed it)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="mutations tested at once (each in its own copy of the tree; .ci/test.sh runs 2 on 2 cores)",
    )
    parser.add_argument(
        "--baseline-passed",
        action="store_true",
        help="skip the baseline run: the same tests just passed unmutated in this checkout (.ci/test.sh runs the "
        "whole suite first, so a second baseline there only costs ~4 minutes)",
    )
    args = parser.parse_args()
    if args.list:
        for name, (path, *_, what) in MUTATIONS.items():
            print(f"{name:28} {path:40} {what}")
        return 0
    unknown = set(args.names) - set(MUTATIONS)
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    names = args.names or list(MUTATIONS)
    problems = stale(names)
    if problems:
        for line in problems:
            print(f"mutation_check: stale mutation {line}: update MUTATIONS", file=sys.stderr)
        return 2
    if args.check:
        print(f"all {len(names)} mutations apply")
        return 0
    test_sets = {name: args.tests or MUTATIONS[name][3] for name in names}
    everything = list(dict.fromkeys(t for tests in test_sets.values() for t in tests))
    t0 = time.perf_counter()
    print(f"{'mutation':28} {'result':12} {'seconds':>8}  tests")
    if args.baseline_passed:
        result, seconds, summary = "PASSED", 0.0, "skipped: passed in the suite run just before"
    else:
        result, seconds, summary = run_tests("baseline", everything, args.timeout, None)
    print(f"{'(baseline, unmutated)':28} {result:12} {seconds:8.1f}  {' '.join(everything)} -> {summary}", flush=True)
    if result != "PASSED":
        print("mutation_check: the tests fail without any mutation: fix them first", file=sys.stderr)
        return 1

    def mutant(name: str) -> tuple[str, float, str]:
        path, original, mutated, *_ = MUTATIONS[name]
        return run_tests(name, test_sets[name], args.timeout, (path, original, mutated))

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each run is a pytest subprocess
        for name, (result, seconds, summary) in zip(names, pool.map(mutant, names)):  # printed in order
            result = {"FAILED": "CAUGHT", "PASSED": "NOT CAUGHT"}.get(result, result)
            failed += result != "CAUGHT"
            print(f"{name:28} {result:12} {seconds:8.1f}  {' '.join(test_sets[name])} -> {summary}", flush=True)
    print(f"{len(names) - failed} of {len(names)} caught in {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
