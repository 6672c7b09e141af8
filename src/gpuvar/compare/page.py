"""compare.md: the comparison as a performance engineer reads it -- warnings first, then the time books, then
the rows that moved most, each with its verdict, interval and hint; and `console`, the few lines `gpuvar compare`
prints (the same books, the flagged rows first). Every number is also in compare.json."""

from __future__ import annotations

import math

from gpuvar.layout import COMPARE_KERNELS, COMPARE_PAGE
from gpuvar.text_safety import md_code, md_text

ROWS = 12
CONSOLE_ROWS = 5
# the figures the page links, in reading order, with what each shows
FIGURES = {
    "forest": "the ratio of every moved kernel with its interval",
    "delta_time": "where the time went: Δ total per kernel, split into per-launch change and launch count",
    "distributions": "the duration distributions of the kernels that moved most",
    "causal_diff": "the causal edges that differ between the runs",
}


def _ms(ns) -> str:
    return "–" if ns is None or not math.isfinite(ns) else f"{ns / 1e6:+.3f} ms"


def _ratio(row: dict) -> str:
    if row["ratio"] is None:
        return "–"
    if row["ci_low"] is None:
        return f"×{row['ratio']:.4f}"
    return f"×{row['ratio']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}]"


def render(record: dict, figures: list[str] = ()) -> str:
    """Markdown of one compare.json record; `figures`: the names (FIGURES) drawn as PNG beside the page."""
    b, c = record["baseline"], record["candidate"]
    lines = [f"# {md_text(b['name'])} → {md_text(c['name'])}", ""]
    if record["warnings"]:
        lines += ["**Warnings: these runs may not be comparable.**", ""]
        lines += [f"- {md_text(w)}" for w in record["warnings"]] + [""]
    books, counts = _books(record)
    lines += [
        f"{books}.",
        f"{counts}. Intervals resample {b['environment']['resampling'].get('unit', 'launch')}s of each run.",
        "",
        "| # | kernel / copy | verdict | ratio [interval] | Δ time | of which launch count | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(record["kernels"][:ROWS], 1):
        lines.append(
            f"| {i} | {md_code(row['label'])} | {row['verdict']} | {_ratio(row)} | {_ms(row['delta_total_ns'])} | "
            f"{_ms(row['delta_count_ns'])} | {md_text(row['hint'] or '')} |"
        )
    rest = record["kernels"][ROWS:]
    if rest:
        lines += ["", f"{len(rest)} more row(s) in kernels.csv, Δ {_ms(sum(r['delta_total_ns'] for r in rest))}."]
    if figures:
        lines += ["", "## Figures", ""] + [f"- {FIGURES[name]}: [{name}.png]({name}.png)" for name in figures]
    return "\n".join(lines) + "\n"


def _books(record: dict) -> tuple[str, str]:
    b, c, s = record["baseline"], record["candidate"], record["summary"]
    ratio = s["total_time_ratio"]
    books = (
        f"GPU time (kernels, copies, memsets) {b['total_ns'] / 1e6:.3f} ms → {c['total_ns'] / 1e6:.3f} ms: "
        f"Δ {_ms(s['delta_total_ns'])}" + (f" (×{ratio:.3f})" if ratio else "")
    )
    total = record.get("total") or {}
    if total.get("ratio") is not None:  # no interval where too few steps (or blocks) were resampled: say so
        interval = (
            f"[{total['ci_low']:.3f}, {total['ci_high']:.3f}]" if total.get("ci_low") is not None else "(no interval)"
        )
        books += f"; total per step ×{total['ratio']:.3f} {interval}: {total['verdict']}"
    counts = (
        f"{s['slower']} slower, {s['faster']} faster (beyond noise and at least "
        f"{100 * record['options']['min_effect']:g} %), {s['negligible']} negligible, {s['unchanged']} unchanged, "
        f"{s['untested']} untested, {s['added']} added, {s['removed']} removed"
    )
    return books, counts


def console(record: dict, output) -> str:
    """What `gpuvar compare` prints: the runs, the time books, the verdict counts, then the rows that moved
    most -- the slower and faster ones first, then the largest |Δ time| -- and where the page is."""
    b, c = record["baseline"], record["candidate"]
    books, counts = _books(record)
    lines = [f"{b['name']} → {c['name']}", f"  {books}", f"  {counts}"]
    rows = record["kernels"]
    flagged = [r for r in rows if r["verdict"] in ("slower", "faster")]
    shown = (flagged + [r for r in rows if r not in flagged])[:CONSOLE_ROWS]
    for i, row in enumerate(shown, 1):
        hint = f" ({row['hint']})" if row.get("hint") else ""
        ratio = f" {_ratio(row)}" if row["ratio"] is not None else ""
        lines.append(f"  {i}. {row['label']}: {row['verdict']}{ratio}, Δ {_ms(row['delta_total_ns'])}{hint}")
    if len(rows) > len(shown):
        lines.append(f"  {len(rows) - len(shown)} more row(s) in {output}/{COMPARE_KERNELS}")
    lines.append(f"comparison page: {output}/{COMPARE_PAGE}")
    return "\n".join(lines)
