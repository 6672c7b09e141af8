"""Findings of datasets from their ingest folders: per dataset findings.json, findings.md, decomposition.csv,
and one page over all of them.

Inputs are the canonical kernels table (every launch, with call_site / step / ctx_* columns when the reader
found them) and, optionally, the dataset's causal folder of the kernel_variability target: a kernel whose
graph exists gets the graph's path and verdict as evidence.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from gpuvar import __version__
from gpuvar.causal import share_test as V
from gpuvar.causal.within_site import DRIVER_MIN_SHARE, MIN_SITE_FIT
from gpuvar.errors import InputError, path_problem
from gpuvar.findings.decompose import MAX_DRIVERS, STABLE_CV, call_sites, groups_of, pooled_shares
from gpuvar.findings.page import plain, render
from gpuvar.findings.report import MAX_FINDINGS, MIN_RECOVERABLE_SHARE, percent
from gpuvar.layout import (
    CAUSAL_RECORD,
    CAUSAL_SUMMARY,
    DECOMPOSITION_TABLE,
    FINDINGS_FIGURES,
    FINDINGS_FRAGMENT,
    FINDINGS_HTML,
    FINDINGS_PAGE,
    FINDINGS_RECORD,
    PLOTS_CAUSAL,
    figure_file,
)
from gpuvar.markdown_html import render_fragment, render_html
from gpuvar.units import counted, duration_text

log = logging.getLogger("gpuvar.findings")


def thresholds() -> dict:
    """Every threshold a verdict or a category depends on (written into findings.json)."""
    return {
        "explained_share": V.EXPLAINED_SHARE,
        "partly_explained_share": V.PARTLY_SHARE,
        "permutation_alpha": V.ALPHA,
        "permutations": V.PERMUTATIONS,
        "folds": V.FOLDS,
        "min_launches": V.MIN_ROWS,
        "stable_cv_within_call_site": STABLE_CV,
        "min_recoverable_share_of_kernel_time": MIN_RECOVERABLE_SHARE,
        "findings_on_the_page_per_dataset": MAX_FINDINGS,
        "driver_min_share_of_within": DRIVER_MIN_SHARE,
        "max_drivers": MAX_DRIVERS,
        "min_launches_for_a_slope_per_call_site": MIN_SITE_FIT,
    }


FIGURE_COLUMNS = ("duration", "step", "call_site", "launch_config")  # and the finding's first driver


class Kept:
    """The launches of the findings that can be on the page (the MAX_FINDINGS with most time above median so far),
    kept from the pass that fitted them for the evidence figures; and what the bench reports about the fits."""

    def __init__(self, limit: int = MAX_FINDINGS):
        self.limit = limit
        self.parts: dict[str, tuple[float, pd.DataFrame]] = {}
        self.held_rows_max = 0
        self.groups_sampled = 0
        self.fit_cap = None

    def offer(self, entry: dict, part: pd.DataFrame) -> None:
        """Keep the columns its figure draws (gpuvar.findings.figures): a part has every column of the table, and
        ten of them held the findings stage 0.3 GB above its rounds at 20 M launches."""
        driver = [entry["drivers"][0]["feature"]] if entry.get("drivers") else []
        columns = [c for c in dict.fromkeys([*FIGURE_COLUMNS, *driver]) if c in part.columns]
        self.parts[entry["group"]] = (entry["recoverable_ns"], part[columns])
        if len(self.parts) > self.limit:
            worst = max(self.parts, key=lambda g: (-self.parts[g][0], g))
            del self.parts[worst]

    def part(self, group: str) -> pd.DataFrame:
        return self.parts[group][1]


def causal_evidence(record: dict, causal_dir: Path | None, plots_dir: Path | None) -> None:
    """Attach to each finding the causal graphs (folder, verdict, figure) of its kernels, when the causal run
    analysed them: the graphs are per kernel name over the most variable windows, the finding over every launch
    of its call sites, so the page says which graph to open and that its scope differs."""
    from gpuvar.causal.describe import graph_status

    if causal_dir is None or not (causal_dir / CAUSAL_SUMMARY).is_file():
        return
    summary = json.loads((causal_dir / CAUSAL_SUMMARY).read_text())
    by_group = {g["group"]: g for g in summary.get("groups", [])}
    for finding in record["findings"]:
        graphs = []
        for kernel in finding["kernels"]:
            group = by_group.get(kernel["kernel"])
            if group is None:
                continue
            folder = causal_dir / group["slug"]
            graph = {"kernel": kernel["kernel"], "folder": str(folder)}
            if (folder / CAUSAL_RECORD).is_file():
                causal = json.loads((folder / CAUSAL_RECORD).read_text())
                verdict = causal.get("verdict") or {}
                graph["verdict"] = verdict.get("verdict")
                graph["share"] = verdict.get("share")
                graph["rows"] = verdict.get("rows")
                graph["status"] = causal.get("status")
                graph["checks"] = graph_status(causal)
            if plots_dir is not None:
                figure = plots_dir / PLOTS_CAUSAL / figure_file(group["slug"], "png")
                if figure.is_file():
                    graph["figure"] = str(figure)
            graphs.append(graph)
        if graphs:
            finding["evidence"]["causal_graphs"] = graphs


def _ingest_facts(ingest_dir: Path) -> tuple[str | None, object, list[str]]:
    """(format, devices, the notes on steps and call sites) from the ingest report, when there is one."""
    from gpuvar.layout import INGEST_REPORT

    try:
        report = json.loads((Path(ingest_dir) / INGEST_REPORT).read_text())
    except (OSError, ValueError):
        return None, None, []
    notes = [n for n in report.get("notes", []) if isinstance(n, str) and "call sites" in n]
    return report.get("format"), report.get("devices") or report.get("notes"), notes


def analyse_dataset(
    name: str,
    ingest_dir: Path,
    causal_dir: Path | None = None,
    plots_dir: Path | None = None,
    seed: int = 0,
    cap: int | None = None,
) -> tuple[dict, pd.DataFrame, Kept]:
    """(findings record, decomposition table, the launches of the findings that can be on the page) of one
    dataset. kernels.parquet is read batch by batch (gpuvar.findings.passes): the record's numbers are exact over
    every launch, each group's fits see at most `cap` launches (gpuvar.findings.sample.FIT_CAP)."""
    from gpuvar.findings.advice import vendor_of
    from gpuvar.findings.decompose import decompose_part
    from gpuvar.findings.entries import assemble, group_entry, origins
    from gpuvar.findings.passes import Passes
    from gpuvar.findings.source import kernels_source
    from gpuvar.heap import give_back

    source = kernels_source(ingest_dir)
    fmt, devices, notes = _ingest_facts(ingest_dir)
    vendor = vendor_of(fmt, devices)
    kept = Kept()
    with Passes(source, seed, cap) as passes:
        summary = passes.summary
        origin = origins(summary)
        decompositions, listed = [], []
        for g, group, part, exact in passes.groups():
            dec = decompose_part(group, part, passes.inputs, seed, exact)
            decompositions.append(dec)
            listed.append(group_entry(dec, summary, g, part, seed, vendor, origin))
            if listed[-1][0] == "findings":
                kept.offer(listed[-1][1], part)
        give_back()  # the rounds' frames, freed, under the step level's fits
        step_record = summary.steps.record(summary.step_launches, summary.groups, seed)
        record = assemble(
            name,
            summary,
            decompositions,
            listed,
            pooled_shares(decompositions),
            vendor,
            step_record,
            notes,
            passes.record(),
        )
        kept.held_rows_max, kept.groups_sampled, kept.fit_cap = (
            passes.held_rows_max,
            passes.plan.groups_sampled,
            passes.cap,
        )
    record["ingest"] = str(ingest_dir)
    causal_evidence(record, Path(causal_dir) if causal_dir else None, Path(plots_dir) if plots_dir else None)
    rows = []
    for dec in decompositions:
        r = dec.record()
        rows.append(
            {
                "group": dec.group,
                "kernels": len(dec.kernels),
                "launches": dec.launches,
                "total_ns": r["total_ns"],
                "cv": r["cv"],
                "cv_within_call_site": r["cv_within_call_site"],
                "call_sites": dec.call_sites,
                **r["shares"],
                "verdict": dec.verdict.verdict,
                "within_share_explained": round(dec.verdict.share, 6),
                "p_value": r["verdict"]["p_value"],
                "drivers": "; ".join(f"{d.label} {'+' if d.sign > 0 else '-'} {d.share:.3f}" for d in dec.drivers),
            }
        )
    table = pd.DataFrame(rows, columns=list(rows[0]) if rows else ["group"])
    return record, table, kept


def _draw_figures(record: dict, kernels, tmp: Path, folder: Path) -> None:
    """figures/NN.png per finding on the page (its evidence), the path recorded in the finding. `kernels`: what
    analyse_dataset kept (each finding's launches), or a whole kernels table."""
    from gpuvar.findings.figures import finding_figure

    findings = record["findings"][: record["page_findings"]]
    parts = kernels.part if isinstance(kernels, Kept) else _parts_of(kernels, [f["group"] for f in findings])
    for finding in findings:
        part = parts(finding["group"])
        stem = f"{FINDINGS_FIGURES}/{finding['rank']:02d}"
        finding_figure(part, call_sites(part).to_numpy(), finding, tmp / stem)
        finding["evidence"]["figure"] = figure_file(stem, "png")  # relative to the findings folder: the page links it


def _parts_of(kernels: pd.DataFrame, wanted: list[str]):
    """group -> its launches with a duration (step_threads as the fits saw it), from a whole table."""
    from gpuvar.findings.features import STEP_THREADS, step_threads

    threads = step_threads(kernels)
    if threads is not None:
        kernels = kernels.assign(**{STEP_THREADS: threads})
    rows = kernels[pd.to_numeric(kernels["duration"], errors="coerce").notna()]
    groups = groups_of(rows)
    return lambda group: rows[(groups == group).to_numpy()]


def _round_floats(table: pd.DataFrame) -> pd.DataFrame:
    """Floats at 12 significant digits, as every causal output (gpuvar.causal.discover.stable_float): the last
    bits of a float sum depend on the CPU's SIMD path, not on the data."""
    from gpuvar.causal.discover import stable_float

    out = table.copy()
    for column in out.columns:
        if pd.api.types.is_float_dtype(out[column]):
            out[column] = [stable_float(v) for v in out[column]]
    return out


def write_dataset(
    record: dict, table: pd.DataFrame, folder: Path, kernels: pd.DataFrame | None = None, finish=None
) -> dict:
    """findings.json, findings.md, decomposition.csv and, given the kernels, one evidence figure per finding;
    returns the record written. finish(record) -> the record the page shows, called once the figures are drawn
    (gpuvar explain attaches the causal graphs there: they run beside the figures, which do not show them)."""
    from gpuvar.atomic import staged_folder
    from gpuvar.output import write_json

    with staged_folder(folder) as tmp:
        if kernels is not None:
            _draw_figures(record, kernels, tmp, folder)
        if finish is not None:
            record = finish(record)
        _round_floats(table).to_csv(tmp / DECOMPOSITION_TABLE, index=False)
        page = render([record], __version__)
        (tmp / FINDINGS_PAGE).write_text(page, encoding="utf-8")
        (tmp / FINDINGS_HTML).write_text(
            render_html(page, tmp, f"gpuvar findings: {record['dataset']}"), encoding="utf-8"
        )
        write_json(
            {"gpuvar_version": __version__, "thresholds": thresholds(), "datasets": [record]}, tmp / FINDINGS_RECORD
        )
    return record


def rebase_figures(record: dict, source_folder: Path, folder: Path) -> dict:
    """The record with its figure paths relative to `folder` (where the combined page is) instead of its own."""
    import copy
    import os

    record = copy.deepcopy(record)
    for finding in record["findings"]:
        figure = finding["evidence"].get("figure")
        if figure:
            finding["evidence"]["figure"] = os.path.relpath(Path(source_folder) / figure, Path(folder))
    return record


def write_index(records: list[dict], folder: Path) -> None:
    """findings.md + findings.json over every dataset (the run's first page)."""
    from gpuvar.atomic import staged_folder
    from gpuvar.output import write_json

    with staged_folder(folder, replace=False, last=(FINDINGS_RECORD,)) as tmp:
        page = render(records, __version__)
        (tmp / FINDINGS_PAGE).write_text(page, encoding="utf-8")
        (tmp / FINDINGS_HTML).write_text(render_html(page, Path(folder), "gpuvar findings"), encoding="utf-8")
        (tmp / FINDINGS_FRAGMENT).write_text(render_fragment(page, Path(folder)), encoding="utf-8")
        write_json(
            {"gpuvar_version": __version__, "thresholds": thresholds(), "datasets": records}, tmp / FINDINGS_RECORD
        )


def load_dataset_record(path: Path) -> dict:
    path = Path(path)
    problem = path_problem(path)
    if problem:
        raise InputError(path, problem)
    try:
        data = json.loads(path.read_text())
        return data["datasets"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InputError(path, f"not a findings.json: {exc}") from exc


def console_summary(records: list[dict], top: int = 5) -> str:
    """The few lines a user reads in the terminal: the step level, the top findings and where the page is."""
    from gpuvar.findings.steps import headline

    lines = []
    for rec in records:
        shares = rec["pooled_shares"]
        spread = (
            f"spread of durations: {percent(shares['between'])} call sites, {percent(shares['size'])} size, "
            f"{percent(shares['context'])} context, {percent(shares.get('counters', 0.0))} counters, "
            f"{percent(shares['unexplained'])} unexplained"
            if sum(shares.values()) > 0
            else "no spread of durations to split (too few launches to compare)"
        )
        lines.append(
            f"{plain(rec['dataset'])}: {counted(rec['launches'], 'launch')}, "
            f"{counted(rec['kernel_names'], 'kernel name')} at {counted(rec['call_sites'], 'call site')}; {spread}"
        )
        step = headline(rec.get("step_level"))
        if step:
            lines.append(f"  {plain(step)}")
        if rec["nothing_actionable"]:
            lines.append("  nothing actionable: every group is stable within its call sites, small or not comparable")
        for f in rec["findings"][:top]:
            lines.append(f"  {f['rank']}. {plain(f['headline'])} — {duration_text(f['recoverable_ns'])} above median")
        if rec["stable"]:
            lines.append(
                f"  {counted(len(rec['stable']), 'group')} stable (CV within call sites < {percent(STABLE_CV)}, "
                f"{V.MIN_ROWS}+ launches)"
            )
        if rec.get("not_compared"):
            lines.append(f"  {counted(len(rec['not_compared']), 'group')} not compared (too few launches)")
    return "\n".join(lines)
