"""Two "runs" of one real program from one real Kineto trace: its steps split in two halves, optionally with one
kernel slowed in the second.

Why: a comparison must call two runs of an identical program unchanged, and must find a small planted slowdown
of one kernel, on traces with real structure -- real kernels, real launching ops and steps, real contention and
step-to-step variation (which makes launches of one step dependent). No recorded pair of identical runs exists
for every trace here, but the two halves of a steady-state trace are just that: the same binary, the same
inputs distribution, another stretch of time. The split is at the end of a step boundary (the
`cudaDeviceSynchronize` that ends a step, or a `ProfilerStep#N` range), so every kernel of a step stays with
its step and the halves ingest like any recording. The slowdown stretches the chosen kernels' `dur` only; their
start times and everything else are the recording's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from gpuvar.errors import InputError

SYNC = "cudaDeviceSynchronize"


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def step_boundaries(events: list[dict]) -> list[float]:
    """End times (µs) of the steps: ProfilerStep#N ranges if the trace has them, else its synchronize calls."""
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    marks = steps or [e for e in events if e.get("name") == SYNC and e.get("ph") == "X"]
    return sorted(float(e["ts"]) + float(e.get("dur", 0)) for e in marks)


def split(
    trace: str | Path,
    baseline: str | Path,
    candidate: str | Path,
    *,
    slow_kernel: str | None = None,
    factor: float = 1.0,
) -> dict:
    """Write the first half of `trace`'s steps to `baseline` and the second to `candidate` (gzip JSON), the
    candidate's kernels whose name contains `slow_kernel` lasting `factor` times as long; returns the plan."""
    path = Path(trace)
    data = _load(path)
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(path, "not a Kineto trace: no traceEvents list")
    ends = step_boundaries(events)
    if len(ends) < 4:
        raise InputError(path, f"{len(ends)} step boundaries: too few to split into two runs")
    cut = ends[len(ends) // 2 - 1]  # end of the last step of the first half
    first, second, slowed = [], [], 0
    for e in events:
        ts = e.get("ts")
        if ts is None:  # metadata (process / thread names): both runs need it
            first.append(e)
            second.append(e)
        elif float(ts) <= cut:
            first.append(e)
        else:
            if slow_kernel and e.get("cat") == "kernel" and slow_kernel in str(e.get("name", "")):
                e = {**e, "dur": float(e["dur"]) * factor}
                slowed += 1
            second.append(e)
    if slow_kernel and not slowed:
        raise InputError(path, f"no kernel in the second half matches {slow_kernel!r}")
    for events_out, out in ((first, baseline), (second, candidate)):
        with gzip.open(out, "wt", encoding="utf-8", compresslevel=1) as fh:
            json.dump({**data, "traceEvents": events_out}, fh)
    return {
        "source": str(path),
        "steps": len(ends),
        "baseline_steps": len(ends) // 2,
        "candidate_steps": len(ends) - len(ends) // 2,
        "slow_kernel": slow_kernel,
        "factor": factor,
        "launches_slowed": slowed,
    }


def configure(p):
    p.add_argument("trace", help="a Kineto trace (.json or .json.gz) with ProfilerStep ranges or per-step syncs")
    p.add_argument("--output", "-o", required=True, help="folder for baseline.json.gz and candidate.json.gz")
    p.add_argument("--slow-kernel", help="slow the candidate's kernels whose name contains this text (default: none)")
    p.add_argument(
        "--factor", type=float, default=1.0, help="duration factor of the slowed kernels (default 1.0; 1.03 = +3 %%)"
    )


def run(args) -> int:
    from gpuvar.errors import GpuvarError

    if not 0.1 <= args.factor <= 10:
        raise GpuvarError(f"--factor must lie between 0.1 and 10, got {args.factor}")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    plan = split(
        args.trace,
        out / "baseline.json.gz",
        out / "candidate.json.gz",
        slow_kernel=args.slow_kernel,
        factor=args.factor,
    )
    print(json.dumps(plan, sort_keys=True))
    return 0
