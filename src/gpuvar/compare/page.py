"""compare.md: the comparison as a performance engineer reads it -- warnings first, then the time books, then
the rows that moved most, each with its verdict, interval and hint. Every number is also in compare.json."""

from __future__ import annotations

import math

from gpuvar.text_safety import md_code, md_text

ROWS = 12


def _ms(ns) -> str:
    return "–" if ns is None or not math.isfinite(ns) else f"{ns / 1e6:+.3f} ms"


def _ratio(row: dict) -> str:
    if row["ratio"] is None:
        return "–"
    if row["ci_low"] is None:
        return f"×{row['ratio']:.4f}"
    return f"×{row['ratio']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}]"


def render(record: dict) -> str:
    """Markdown of one compare.json record."""
    b, c, s = record["baseline"], record["candidate"], record["summary"]
    lines = [f"# {md_text(b['name'])} → {md_text(c['name'])}", ""]
    if record["warnings"]:
        lines += ["**Warnings: these runs may not be comparable.**", ""]
        lines += [f"- {md_text(w)}" for w in record["warnings"]] + [""]
    floor = record["options"]["min_effect"]
    ratio = s["total_time_ratio"]
    lines += [
        f"GPU time (kernels, copies, memsets) {b['total_ns'] / 1e6:.3f} ms → {c['total_ns'] / 1e6:.3f} ms: "
        f"Δ {_ms(s['delta_total_ns'])}" + (f" (×{ratio:.3f})." if ratio else "."),
        f"{s['slower']} slower, {s['faster']} faster (beyond noise and at least {100 * floor:g} %), "
        f"{s['negligible']} negligible, {s['unchanged']} unchanged, {s['untested']} untested, "
        f"{s['added']} added, {s['removed']} removed. Intervals resample "
        f"{b['environment']['resampling'].get('unit', 'launch')}s of each run.",
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
    return "\n".join(lines) + "\n"
