"""Outputs of `gpuvar ranks`: ranks.json, steps.csv, call_sites.csv, ranks.md (and ranks.html, the page with its figures embedded,
for the report), timeline.png, skew.png (byte-identical on rerun)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuvar.atomic import staged_folder
from gpuvar.layout import RANKS_PAGE, RANKS_PAGE_HTML, RANKS_RECORD, RANKS_SITES, RANKS_STEPS
from gpuvar.markdown_html import render_html
from gpuvar.output import write_csv, write_json, write_text
from gpuvar.plots import style
from gpuvar.ranks.analyze import RankAnalysis
from gpuvar.ranks.load import RankInput
from gpuvar.ranks.sites import page_lines
from gpuvar.text_safety import md_code, md_text

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
TIMELINE_STEPS = 4
MAX_TIMELINE_RANKS = 16


def _page(result: RankAnalysis) -> str:
    s = result.summary
    lines = ["# Ranks", ""] + [f"- {md_text(f)}" for f in result.findings]
    if "per_rank" in s:
        source = md_text(s["collective_source"])
        lines += ["", f"Collectives: {source}; {s['collectives_compared']} compared on every rank."]
        for r, reasons in sorted(s.get("dropped_collectives", {}).items()):
            words = ", ".join(f"{n} ({reason})" for reason, n in sorted(reasons.items()))
            lines.append(f"Dropped collectives of rank {r}: {words}.")
        lines += ["", "| rank | last in | wait | wait share | busy | idle (in steps) |", "|---|---|---|---|---|---|"]
        for r, p in s["per_rank"].items():
            last = f"{p['last_steps']} of {s['collectives_compared']}" if s.get("clocks_agree", True) else "not known"
            share = "n/a" if p["wait_share"] is None else f"{100 * p['wait_share']:.1f} %"
            lines.append(
                f"| {r} | {last} | {p['wait_ns'] / 1e6:.1f} ms "
                f"| {share} | {p['busy_ns'] / 1e6:.1f} ms | {p['idle_ns'] / 1e6:.1f} ms |"
            )
        parts = s["driver"].get("parts", [])
        if parts:
            lines += [  # (the record's `target` names the unit of its numbers; the table gives ms)
                "",
                f"What rank {s['straggler']}'s time to the collective (step start to arrival) is made of, step by step"
                " (the first step, start-up, left out; docs/ranks.md):",
                "",
            ]
            lines += ["| part | share of its variance | share of its covariance with lateness | mean per step |"]
            lines += ["|---|---|---|---|"]
            for p in parts:
                late = p["share_of_lateness_covariance"]
                lines.append(
                    f"| {md_code(p['part'])} | {100 * p['share_of_variance']:.1f} % | "
                    f"{'n/a' if late is None else f'{100 * late:.1f} %'} | {p['mean_ns_per_step'] / 1e6:.3f} ms |"
                )
            if s["driver"].get("host_stalls"):
                stalls = ", ".join(f"step {x['step']} ({x['gap_ns'] / 1e6:.1f} ms)" for x in s["driver"]["host_stalls"])
                lines += ["", f"Host stalls left out of the split: {stalls}."]
        lines += page_lines(s.get("call_sites_across_ranks", []))
        lines += [
            "",
            "## Figures",
            "",
            "- busy, idle and wait per rank: [timeline.png](timeline.png)",
            "- arrival after the first rank: [skew.png](skew.png)",
            "",
            "Definitions: docs/ranks.md.",
        ]
    return "\n".join(lines) + "\n"


def drawn_ranks(summary: dict, limit: int = MAX_TIMELINE_RANKS) -> list[int]:
    """The ranks both figures draw, in rank order: every rank up to `limit`; beyond, the straggler, the ranks that
    wait least and most in collectives, and the others evenly spaced by rank. Why: the first 16 of a 256-rank job
    left the straggler (rank 226) out of both figures."""
    ranks = list(summary["ranks"])
    if len(ranks) <= limit:
        return ranks
    per = summary.get("per_rank", {})
    chosen = {summary["straggler"]} if summary.get("straggler") in ranks else set()
    waits = [(per[str(r)]["wait_share"], r) for r in ranks if per.get(str(r), {}).get("wait_share") is not None]
    if waits:
        chosen |= {min(waits)[1], max(waits)[1]}
    others = [r for r in ranks if r not in chosen]
    spaced = np.linspace(0, len(others) - 1, limit - len(chosen)).round().astype(int)  # (steps >= 1: distinct)
    return sorted(chosen | {others[i] for i in spaced})


def _not_drawn(summary: dict, drawn: list[int]) -> str:
    hidden = len(summary["ranks"]) - len(drawn)
    if not hidden:
        return ""
    return f"{hidden} ranks not drawn (drawn: the straggler, the ranks waiting least and most, others evenly spaced)"


def _label(summary: dict, r: int) -> str:
    """'rank R', the straggler marked where it is one of three ranks or more (of two, the page's first line names
    it) and the ranks' clocks agree (else no rank is called late)."""
    named = summary.get("clocks_agree", True) and len(summary["ranks"]) > 2
    return f"rank {r} (straggler)" if named and r == summary.get("straggler") else f"rank {r}"


def timeline_window(result: RankAnalysis) -> tuple[list, list[int]]:
    """(the steps, the ranks) timeline.png draws: TIMELINE_STEPS steps around the latest arrival, the ranks of
    drawn_ranks; only their launches are needed (gpuvar.ranks.job gathers just these)."""
    steps = result.steps
    ranks = drawn_ranks(result.summary)
    lateness = steps.groupby("step")["late_ns"].max().fillna(0)
    lateness = lateness[lateness.index > lateness.index.min()]  # the start-up step dwarfs the rest
    centre = int(lateness.idxmax()) if len(lateness) else int(steps["step"].min())
    shown = [s for s in sorted(steps["step"].unique()) if centre - 1 <= s < centre - 1 + TIMELINE_STEPS]
    return shown, ranks


def _timeline(result: RankAnalysis, data: RankInput, stem: Path) -> None:
    steps = result.steps
    shown, ranks = timeline_window(result)
    part = steps[steps["step"].isin(shown) & steps["rank"].isin(ranks)]
    t0 = int(part["start_ns"].min())
    fig = style.figure(8, 0.6 + 0.55 * len(ranks))
    ax = fig.add_subplot(111)
    launches = []
    for frame in (data.kernels, data.copies):
        launches.append(frame[frame["step"].isin(shown) & frame["rank"].isin(ranks)][["rank", "start", "end"]])
    col = data.collectives[data.collectives["rank"].isin(ranks)]
    t1 = int(part["end_ns"].max())
    for y, r in enumerate(ranks):
        mine = part[part["rank"] == r]
        ax.broken_barh(
            [((a - t0) / 1e6, (b - a) / 1e6) for a, b in zip(mine["start_ns"], mine["end_ns"])],
            (y - 0.3, 0.6),
            facecolors="#dddddd",
            label="idle (in step)" if y == 0 else None,
        )
        busy = [f[f["rank"] == r] for f in launches]
        ax.broken_barh(
            [((a - t0) / 1e6, (b - a) / 1e6) for f in busy for a, b in zip(f["start"], f["end"])],
            (y - 0.3, 0.6),
            facecolors="#1f77b4",
            label="busy" if y == 0 else None,
        )
        w = col[(col["rank"] == r) & (col["end"] > t0) & (col["start"] < t1)]
        ax.broken_barh(
            [((a - t0) / 1e6, (b - a) / 1e6) for a, b in zip(w["start"], w["end"])],
            (y - 0.12, 0.24),
            facecolors="#d62728",
            label="wait (in collective)" if y == 0 else None,
        )
    ax.set_yticks(range(len(ranks)), [_label(result.summary, r) for r in ranks])
    ax.set_xlabel("ms from the first shown step's start")
    ax.set_title(f"steps {shown[0]}-{shown[-1]} (around the step with the latest arrival)")
    # the legend a fixed distance under the axes (-0.35 of their height at two ranks): a fraction of a 16-rank
    # figure's height left 3 inches of white under it
    below = -0.35 * 1.7 / (0.6 + 0.55 * len(ranks))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, below), fontsize=7, ncol=3, frameon=False)
    style.footnote(fig, [_not_drawn(result.summary, ranks)])
    style.save_figure(fig, stem, formats=("png",))


def _skew(result: RankAnalysis, stem: Path) -> None:
    steps = result.steps
    ranks = drawn_ranks(result.summary)
    fig = style.figure(8, 3.2)
    ax = fig.add_subplot(111)
    straggler = result.summary.get("straggler")
    many = len(ranks) > len(COLOURS)  # colours would repeat: the straggler in red, the others grey
    others = sum(r != straggler for r in ranks)
    first_other = next((r for r in ranks if r != straggler), None)  # (the one grey rank that carries the label)
    for i, r in enumerate(ranks):
        mine = steps[(steps["rank"] == r) & steps["late_ns"].notna()]
        if not many:
            colour, size, label = COLOURS[i % len(COLOURS)], 3, _label(result.summary, r)
        elif r == straggler:
            colour, size, label = "#d62728", 4, _label(result.summary, r)
        else:
            colour, size, label = "#999999", 3, f"{others} other ranks" if r == first_other else None
        ax.plot(
            mine["step"], mine["late_ns"] / 1e6, ".", ms=size, color=colour, label=label, zorder=3 if size > 3 else 2
        )
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("step")
    ax.set_ylabel("arrival after the first rank (ms)")
    ax.legend(fontsize=7)
    style.footnote(fig, ["symlog scale: linear below 0.1 ms", _not_drawn(result.summary, ranks)])
    style.save_figure(fig, stem, formats=("png",))


def write_pages(markdown: str, folder: Path) -> None:
    """ranks.md and ranks.html (figures embedded: the report shows it as the ranks page)."""
    write_text(markdown, folder / RANKS_PAGE)
    write_text(render_html(markdown, folder, "gpuvar ranks"), folder / RANKS_PAGE_HTML)


def write_outputs(result: RankAnalysis, data: RankInput, out: str | Path) -> Path:
    out = Path(out)
    with staged_folder(out) as tmp:
        record = dict(result.summary, findings=result.findings, sources=data.sources)
        if not result.steps.empty:
            write_csv(result.steps, tmp / RANKS_STEPS)
        if not result.sites.empty:
            write_csv(result.sites, tmp / RANKS_SITES)
            _timeline(result, data, tmp / "timeline")
            _skew(result, tmp / "skew")
        write_pages(_page(result), tmp)
        write_json(record, tmp / RANKS_RECORD)
    return out
