"""Wide files: a CSV with tens of thousands of counter columns ingests with every value intact, in bounded time
and memory (Arrow's CSV reader needs a block larger than the header, and converts columns in batches)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuvar.demo.ncu_writer import IDENTITY_HEADER

COLUMNS = 30_000  # crosses the 8192-column batch boundary several times; 100k is measured in docs/robustness.md


def _omniperf(path: Path, n: int) -> None:
    head = (
        "Dispatch_ID,GPU_ID,Grid_Size,Workgroup_Size,LDS_Per_Workgroup,Scratch_Per_Workitem,Arch_VGPR,Accum_VGPR,"
        "SGPR,Wave_Size,Kernel_Name,Correlation_ID".split(",")
    )
    lines = [",".join(head + [f"SQ_CTR{i}" for i in range(n)] + ["Start_Timestamp", "End_Timestamp"])]
    for r in range(3):
        lines.append(
            ",".join(
                [str(r), "2", "1024", "256", "0", "0", "4", "4", "16", "64", '"k"', str(r)]
                + [str(r * 1000 + i % 997) for i in range(n)]
                + [str(1000 + 100 * r), str(1050 + 100 * r)]
            )
        )
    path.write_text("\n".join(lines) + "\n")


def _ncu_raw(path: Path, n: int) -> None:
    head = [*IDENTITY_HEADER, "gpu__time_duration.sum"] + [f"m{i}__bytes.sum" for i in range(n)]
    units = [""] * 11 + ["nsecond"] + ["Kbyte"] * n
    rows = [
        [r, 1, "p", "h", "k(int)", 1, 7, "(256, 1, 1)", "(64, 1, 1)", 0, "9.0", 1000 + r]
        + [r * 1000 + i % 997 for i in range(n)]
        for r in range(3)
    ]
    path.write_text("\n".join(",".join(f'"{v}"' for v in row) for row in [head, units, *rows]) + "\n")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "kind, write, column, scale",
    [
        ("omniperf-pmc-perf", _omniperf, "SQ_CTR{i}", 1),
        ("ncu-csv", _ncu_raw, "m{i}__bytes.sum", 1000),  # Kbyte -> byte
    ],
)
def test_wide_csv_ingests_every_column_in_bounded_time_and_memory(tmp_path, kind, write, column, scale):
    source = tmp_path / "wide.csv"
    write(source, COLUMNS)
    # peak RSS from /proc/self/status VmHWM: ru_maxrss of a child started by a large parent (pytest) includes the
    # parent's high-water mark at exec, so it would measure the test process, not the ingest
    script = (
        "import sys; from gpuvar.ingest import ingest; ingest(sys.argv[1], sys.argv[2]); "
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"
    )
    t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(source), str(tmp_path / "out")], capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # children's CPU accumulates: take the difference
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert cpu < 60, (cpu, time.perf_counter() - t0)  # ~3 s here; 60 s: a loaded CI box
    assert int(proc.stdout.split()[-1]) < 700 * 1024, proc.stdout  # peak RSS (KiB); ~0.4 GB here
    report = json.loads((tmp_path / "out" / "ingest.json").read_text())
    assert report["format"] == kind and report["tables"]["kernels"]["rows_written"] == 3
    table = pq.read_table(tmp_path / "out" / "kernels.parquet")
    for i in (0, 8191, 8192, 16385, COLUMNS - 1):  # values on both sides of every batch boundary
        assert table.column(column.format(i=i)).to_pylist() == [(r * 1000 + i % 997) * scale for r in range(3)], i
