"""`gpuvar causal-checks`: one table of every causal graph of a run and whether its checks passed.

Why: a run over many datasets, targets and kernels draws dozens of graphs; the user must see at a glance
which ones failed their assumption checks before acting on any of them (results/causal/checks.tsv).
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuvar.artifacts import CAUSAL_SUMMARY

COLUMNS = ["dataset", "target", "group", "status", "verdict", "share", "trusted", "explained_share", "rows", "warnings"]


def configure(p):
    p.add_argument("causal_dirs", nargs="+", help="output folders of `gpuvar causal` (results/causal/DATASET/TARGET)")
    p.add_argument("--output", "-o", required=True, help="TSV to write (one row per graph)")


def collect(causal_dirs) -> list[dict]:
    """One row per analysis group of every folder (dataset and target from results/causal/DATASET/TARGET)."""
    from gpuvar.errors import InputError

    rows = []
    for folder in map(Path, causal_dirs):
        summary_path = folder / CAUSAL_SUMMARY
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(summary_path, f"cannot read causal summary ({exc})") from None
        for g in summary.get("groups", []):
            rows.append(
                {
                    "dataset": folder.parent.name,
                    "target": summary.get("target", folder.name),
                    "group": g["group"],
                    "status": g["status"],
                    "verdict": (g.get("verdict") or {}).get("verdict", ""),
                    "share": "" if not g.get("verdict") else f"{g['verdict'].get('share', 0):.3f}",
                    "trusted": "" if g["status"] != "ok" else ("yes" if g.get("trusted") else "no"),
                    "explained_share": "" if g.get("explained_share") is None else f"{g['explained_share']:.3f}",
                    "rows": g.get("rows_used", ""),
                    "warnings": "; ".join(g.get("warnings") or []) or (g.get("skip_reason") or ""),
                }
            )
    return rows


def run(args) -> int:
    import csv
    import sys

    rows = collect(args.causal_dirs)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(out)
    graphs = [r for r in rows if r["status"] == "ok"]
    counts = {}
    for r in graphs:
        counts[r["verdict"] or "no verdict"] = counts.get(r["verdict"] or "no verdict", 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    print(f"{len(graphs)} causal graphs: {summary or 'none'} (see {out})", file=sys.stderr)
    return 0
