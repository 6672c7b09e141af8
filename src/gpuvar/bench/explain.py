"""`gpuvar explain` end to end on one or more traces: wall time to the first findings, per stage, as JSON.

The goal (issue 21): the first findings of the real varlen H100 trace within 60 s on a 2-core machine. Run
`gpuvar bench explain ../shared/data/real/pytorch-kineto-trace/h100-varlen-transformer-block/varlen.pt.trace.json.gz`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from gpuvar.layout import EXPLAIN_FINDINGS, FINDINGS_RECORD


def configure_explain(p):
    p.add_argument("traces", nargs="+", type=Path, help="profiler file(s) (several = ranks of one job)")
    p.add_argument("--no-causal", action="store_true", help="findings only (skip binning and causal graphs)")


def run_explain(args) -> int:
    import contextlib
    import io

    from gpuvar.cli import main

    with tempfile.TemporaryDirectory(prefix="gpuvar-bench-explain-") as tmp:
        argv = ["explain", *map(str, args.traces), "-o", tmp] + (["--no-causal"] if args.no_causal else [])
        t0 = time.perf_counter()
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
            code = main(argv)
        wall = time.perf_counter() - t0
        record = (
            json.loads((Path(tmp) / EXPLAIN_FINDINGS / FINDINGS_RECORD).read_text())["datasets"][0] if not code else {}
        )
    stages = [line.split("]", 1) for line in err.getvalue().splitlines() if line.startswith("[")]
    print(
        json.dumps(
            {
                "bench": "explain",
                "traces": [str(t) for t in args.traces],
                "causal": not args.no_causal,
                "exit": code,
                "wall_s": round(wall, 3),
                "progress": [{"at_s": float(a.strip("[ s")), "stage": b.strip()} for a, b in stages],
                "findings": len(record.get("findings", [])),
                "first": (record.get("findings") or [{}])[0].get("headline"),
                "cpu_count": os.cpu_count(),
                "load_avg_1min": round(os.getloadavg()[0], 2),
                "stdout_lines": len(out.getvalue().splitlines()),
            },
            indent=2,
        )
    )
    return code
