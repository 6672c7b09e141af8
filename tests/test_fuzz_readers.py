"""Fuzzed readers: every malformed file either ingests with balanced row counts or raises a one-line GpuvarError.
An unbalanced reader (AccountingError, "internal accounting error") is a bug and fails the test."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
from conftest import real_file
from fuzz_cases import MUTATIONS, REAL_SEEDS, SQLITE_MUTATIONS, mutate_sqlite, mutate_text, seed_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvar.errors import AccountingError, GpuvarError
from gpuvar.ingest import ingest

EXAMPLES = int(os.environ.get("GPUVAR_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
_SEEDS: dict[str, tuple[bytes, str]] = {}


def _seed(kind: str) -> tuple[bytes, str]:
    """Seed bytes: written by the demo writers, or read from the real file (the test skips if it is absent)."""
    if kind in REAL_SEEDS:
        path = real_file(REAL_SEEDS[kind])
        return path.read_bytes(), path.suffix
    if kind not in _SEEDS:
        with tempfile.TemporaryDirectory() as tmp:
            _SEEDS[kind] = seed_bytes(kind, Path(tmp))
    return _SEEDS[kind]


def check_case(data: bytes, suffix: str) -> None:
    """The property: ingest succeeds with balanced counts, or fails with a one-line GpuvarError naming the file
    that is not an accounting error (rows lost or invented by the reader)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"case{suffix}"
        path.write_bytes(data)
        try:
            report = ingest(path, Path(tmp) / "out")
        except GpuvarError as exc:
            msg = str(exc)
            assert not isinstance(exc, AccountingError) and "accounting" not in msg, f"unbalanced reader: {msg}"
            assert str(path) in msg, msg
            assert "\n" not in msg, msg
            return
        for name, t in report["tables"].items():
            assert t["rows_read"] == t["rows_written"] + sum(t["dropped"].values()), (name, t)


@pytest.mark.timeout(max(120, 2 * EXAMPLES))  # a bound per reader, not per case
@pytest.mark.parametrize("kind", ["ncu_long", "ncu_wide", "rocprof", "omniperf", "rocprofv3", "rocprofv3_counters"])
@SETTINGS
@given(mutation=st.sampled_from(MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_csv_reader_fuzz(kind, mutation, salt):
    data, suffix = _seed(kind)
    check_case(mutate_text(data, mutation, random.Random(salt)), suffix)


@pytest.mark.timeout(max(120, 2 * EXAMPLES))  # a bound per reader, not per case
@pytest.mark.parametrize("kind", ["nsys", "rocprof_db"])
@SETTINGS
@given(mutation=st.sampled_from(SQLITE_MUTATIONS), salt=st.integers(0, 2**32 - 1))
def test_sqlite_reader_fuzz(kind, mutation, salt):
    data, suffix = _seed(kind)
    check_case(mutate_sqlite(data, mutation, random.Random(salt)), suffix)
