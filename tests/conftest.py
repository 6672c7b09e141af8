"""Shared fixtures: where the real profiler files live, the repository root, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
