"""Comparing ingest folders written different ways (in memory, in pieces, from the raw Parquet whole or in pieces):
the tests of issue 38 hold every way of ingesting to the bytes of the in-memory ingest, and they share this one
comparison so that none of them checks less than the others."""

from __future__ import annotations

import json
from pathlib import Path

from gpuvar.layout import INGEST_REPORT, KERNELS_TABLE, MEMCPY_TABLE

TABLES = (KERNELS_TABLE, MEMCPY_TABLE)
RUN_KEYS = ("seconds", "pieces")  # report keys that say how the ingest ran, not what it found


def assert_same_as_memory(memory: Path, written: dict[Path, dict]) -> None:
    """Each folder of `written` (folder -> the report its ingest returned) holds the tables of the in-memory ingest
    folder `memory` byte for byte, and its report equals `memory`'s ingest.json but for RUN_KEYS."""
    for name in TABLES:
        expected = (memory / name).read_bytes()
        for folder in written:
            assert (folder / name).read_bytes() == expected, f"{folder.name}/{name}"
    reference = _found(json.loads((memory / INGEST_REPORT).read_text()))
    for folder, report in written.items():
        found = _found(report)  # (a helper's asserts are not rewritten by pytest: the message names what differs)
        differ = sorted(key for key in found.keys() | reference.keys() if found.get(key) != reference.get(key))
        assert found == reference, f"{folder.name}/{INGEST_REPORT} differs in {differ}"


def _found(report: dict) -> dict:
    """The report without RUN_KEYS (a copy: the caller's report is left as it was)."""
    return {key: value for key, value in report.items() if key not in RUN_KEYS}
