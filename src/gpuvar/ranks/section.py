"""The rank section of `gpuvar explain` with several rank files, for every format.

Where the collectives come from decides what is read: Kineto traces carry the host collective ops (gloo:/nccl:
ranges), which give the exact wait; their ingest keeps them (gpuvar.ingest.host_collectives), so each rank's ingest
folder is read as its trace would be, without reading the trace again. Every other
format (Nsight Systems without NVTX, rocprof, rocpd, Nsight Compute) has no host op to read, so the rank analysis
uses what the rank's ingest folder shows: its NCCL/RCCL kernels, else its host round trips through copies
(gpuvar.ranks.load.from_ingest). When neither gives steps and collectives to align the ranks, the section is one
line that says why (ranks.md and ranks.json hold it too), and the findings of the merged job still come out:
the rank analysis is an addition to them, not a condition. It runs as the rank job does (gpuvar.ranks.job), in this
process: one rank's launches at a time, the same outputs as the analysis of every launch at once."""

from __future__ import annotations

import json
from pathlib import Path

from gpuvar.atomic import staged_folder
from gpuvar.errors import InputError
from gpuvar.layout import INGEST_REPORT, RANKS_RECORD
from gpuvar.output import write_json

HOST_OP_FORMATS = ("pytorch-kineto",)  # formats whose reader keeps the host ops (raw table cpu_ops)
EMPTY = "no rank analysis: {why}"


def _format(part: Path) -> str | None:
    try:
        return json.loads((Path(part) / INGEST_REPORT).read_text()).get("format")
    except (OSError, ValueError):
        return None


def rank_section(traces: list, parts: list, folder: Path, seed: int = 0, workers: int = 1) -> list[str]:
    """Analyse the ranks (one trace or file group per rank, `parts` their ingest folders) into `folder`
    (ranks.md, ranks.json, steps.csv, figures), the rank files read by `workers` processes; returns the section's
    lines: the findings, or the one line that says why there are none."""
    from gpuvar.ranks.job import run_here

    host_ops = all(_format(p) in HOST_OP_FORMATS for p in parts)
    # the ingest keeps the traces' host collectives: the traces are not read again (at 256 ranks that was 140 s)
    kept = [str(p) for p in parts] if host_ops else None
    try:
        # the rank job in this process: one rank's launches at a time, the outputs of the analysis over all of
        # them (gpuvar.ranks.job); 256 ranks of 100 k launches held 5+ GB read into one table
        inputs = [str(t) for t in traces] if host_ops else [str(p) for p in parts]
        record = run_here(inputs, host_ops, str(folder), seed, workers, kept)
    except InputError as exc:
        why = f"{Path(exc.path).name if ',' not in exc.path else 'the rank files'}: {exc.reason}"
        write_empty(folder, why, [str(t) for t in traces])
        return [EMPTY.format(why=why)]
    return list(record["findings"])


def write_empty(folder: Path, why: str, sources: list[str]) -> None:
    """ranks.md and ranks.json of a rank section that has nothing to show, with the reason."""
    from gpuvar.ranks.report import write_pages
    from gpuvar.text_safety import md_text

    line = EMPTY.format(why=why)
    with staged_folder(Path(folder)) as tmp:
        write_pages(f"# Ranks\n\n- {md_text(line)}\n\nDefinitions: docs/ranks.md.\n", tmp)
        write_json({"findings": [line], "empty_because": why, "sources": sources}, tmp / RANKS_RECORD)
