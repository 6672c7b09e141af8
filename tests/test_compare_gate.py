"""`gpuvar compare --fail-on slower|changed`: a CI gate that fails on a real slowdown beyond noise, and only then."""

from __future__ import annotations

import json

import pytest
from conftest import real_file

VARLEN = "pytorch-kineto-trace/h100-fixed-shape-copy-contention/fixedcontend.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The demo's planted pair: one kernel 10 % slower in the candidate (gpuvar.demo.planted_pair)."""
    from gpuvar.cli import main

    root = tmp_path_factory.mktemp("gate")
    assert main(["demo-data", "--format", "pair", "--rows", "4000", "-o", str(root / "demo")]) == 0
    for side in ("baseline", "candidate"):
        assert main(["ingest", str(root / "demo" / f"pair_{side}.sqlite"), "-o", str(root / side)]) == 0
    return root


def test_a_planted_slowdown_fails_the_gate_and_names_the_kernel(pair, run_cli):
    out = pair / "cmp"
    proc = run_cli("compare", pair / "baseline", pair / "candidate", "--fail-on", "slower", "-o", out)
    assert proc.returncode == 1, proc.stderr
    failing = [line for line in proc.stderr.splitlines() if "--fail-on slower:" in line]
    assert failing and all("gemm_tile_kernel" in line or "total GPU time" in line for line in failing), failing
    record = json.loads((out / "compare.json").read_text())
    assert record["total"]["key"] == "total GPU time per step"
    again = run_cli("compare", pair / "baseline", pair / "candidate", "-o", pair / "cmp2")
    assert again.returncode == 0  # without --fail-on the same comparison is a report, not a failure


def test_two_halves_of_one_recording_pass_the_gate(tmp_path, run_cli):
    """Steps of one real H100 recording split in two runs (gpuvar split-kineto): nothing slower, nothing changed."""
    halves = tmp_path / "halves"
    assert run_cli("split-kineto", real_file(VARLEN), "-o", halves).returncode == 0
    a, b = sorted(halves.glob("*.json.gz"))[:2]
    for fail_on in ("slower", "changed"):
        proc = run_cli("compare", a, b, "--fail-on", fail_on, "-o", tmp_path / fail_on)
        assert proc.returncode == 0, proc.stderr
