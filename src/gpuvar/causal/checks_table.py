"""`gpuvar causal-checks`: one table of every causal graph of a run and whether its checks passed.

Why: a run over many datasets, targets and kernels draws dozens of graphs; the user must see at a glance
which ones failed their assumption checks before acting on any of them (results/causal/checks.tsv; with
--html the same as a page, which the workflow puts in `snakemake --report` as the overview of every graph,
named as people name kernels rather than by the folder's slug).
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuvar.causal.describe import FLAGGED, NOT_EXPLAINED, SKIPPED, TRUSTED, graph_status, group_names
from gpuvar.layout import CAUSAL_SUMMARY

COLUMNS = [
    "dataset",
    "target",
    "group",
    "status",
    "verdict",
    "share",
    "trusted",
    "explained_share",
    "rows",
    "warnings",
    "checks",
    "name",
    "slug",
]


def configure(p):
    p.add_argument("causal_dirs", nargs="+", help="output folders of `gpuvar causal` (results/causal/DATASET/TARGET)")
    p.add_argument("--output", "-o", required=True, help="TSV to write (one row per graph)")
    p.add_argument("--html", default=None, help="also write the table as an HTML page (the report's overview)")


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
        groups = summary.get("groups", [])
        names = group_names([g["group"] for g in groups], 80)
        for g, name in zip(groups, names, strict=True):
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
                    "checks": graph_status(g),
                    "name": name,
                    "slug": g.get("slug") or "",
                }
            )
    return rows


_STYLE = """
body { font-family: DejaVu Sans, Arial, sans-serif; font-size: 13px; margin: 12px; color: #222; }
table { border-collapse: collapse; width: 100%; max-width: 1380px; table-layout: fixed; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
col.dataset { width: 8%; } col.target { width: 11%; } col.graph { width: 19%; } col.verdict { width: 13%; }
col.checks { width: 9%; } col.why { width: 26%; } col.rows { width: 5%; } col.file { width: 9%; }
th { background: #f2f3f4; }
td.checks { font-weight: bold; white-space: nowrap; }
tr.trusted td.checks { color: #1e8449; }
tr.flagged td.checks { color: #c0392b; }
tr.not-explained td.checks, tr.skipped td.checks { color: #7f8c8d; }
td.file, td.why { font-size: 11px; color: #555; }
"""
_MARK = {TRUSTED: "✓ ", FLAGGED: "⚠ ", NOT_EXPLAINED: "– ", SKIPPED: ""}


def render_html(rows: list[dict]) -> str:
    """A self-contained page (no script, no network) of every graph: its name, how to read it, its verdict and
    why, and the figure's file name; flagged graphs first within each dataset and target."""
    from html import escape

    order = {FLAGGED: 0, TRUSTED: 1, NOT_EXPLAINED: 2, SKIPPED: 3}
    counts = {s: sum(r["checks"] == s for r in rows) for s in order}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no graph"
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Causal graphs: which to trust</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h2>Causal graphs: which to trust ({len(rows)}: {escape(summary)})</h2>",
        "<p><b>trusted</b>: the features explain the target and every assumption check that counts passed. "
        "<b>flagged</b>: a check that counts failed (red banner on the figure): read the graph as a hypothesis. "
        "<b>not explained</b>: the checks passed but the recorded features explain too little to act on. "
        "<b>skipped</b>: too few rows for a graph. Figures are listed by the file name given last.</p>",
        "<table><colgroup>"
        + "".join(
            f'<col class="{c}">' for c in ("dataset", "target", "graph", "verdict", "checks", "why", "rows", "file")
        )
        + "</colgroup><tr><th>dataset</th><th>target</th><th>graph</th><th>verdict</th><th>checks</th>"
        "<th>failed checks, warnings or reason</th><th>rows</th><th>file</th></tr>",
    ]
    ranked = sorted(enumerate(rows), key=lambda ir: (ir[1]["dataset"], ir[1]["target"], order[ir[1]["checks"]], ir[0]))
    for _, r in ranked:
        verdict = r["verdict"] + (f" ({100 * float(r['share']):.0f} %)" if r["share"] not in ("", None) else "")
        cells = [
            escape(str(r["dataset"])),
            escape(str(r["target"])),
            f'<span title="{escape(str(r["group"]))}">{escape(r["name"])}</span>',
            escape(verdict),
            escape(_MARK[r["checks"]] + r["checks"]),
            escape(
                ("informational, not counted: " if r["checks"] == TRUSTED and r["warnings"] else "") + r["warnings"]
            ),
            escape(str(r["rows"])),
            escape(str(r["slug"])),
        ]
        classes = ["", "", "", "", "checks", "why", "", "file"]
        tds = "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>" for c, v in zip(classes, cells))
        lines.append(f'<tr class="{r["checks"].replace(" ", "-")}">{tds}</tr>')
    lines += ["</table>", "</body></html>", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    from gpuvar.output import write_text

    write_text(text, path)  # atomic; a failure (a folder at PATH, a full disk) leaves no temporary file behind


def run(args) -> int:
    import csv
    import io
    import sys

    rows = collect(args.causal_dirs)
    out = Path(args.output)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    _write(out, buffer.getvalue())
    if args.html:
        _write(Path(args.html), render_html(rows))
    graphs = [r for r in rows if r["status"] == "ok"]
    counts = {}
    for r in graphs:
        counts[r["verdict"] or "no verdict"] = counts.get(r["verdict"] or "no verdict", 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    print(f"{len(graphs)} causal graphs: {summary or 'none'} (see {out})", file=sys.stderr)
    return 0
