"""Assemble a comparison of two runs and write it: compare.json, kernels.csv, causal_diff.csv, figures.

compare.json holds every number (strict JSON: NaN becomes null, keys sorted) so a rerun is byte-identical
and other tools can read it; kernels.csv is the per-kernel table in the same order (largest |Δ time| first);
`warnings` leads the record when the runs differ in GPUs, ranks or program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.compare import causal_diff, environment, figures, inputs, kernels, page, windows
from gpuvar.compare.settings import CompareSettings
from gpuvar.errors import InputError
from gpuvar.layout import (
    COMPARE_CAUSAL_DIFF,
    COMPARE_KERNELS,
    COMPARE_PAGE,
    COMPARE_PAGE_HTML,
    COMPARE_RECORD,
    figure_file,
)
from gpuvar.markdown_html import render_html
from gpuvar.output import json_ready, write_csv, write_json, write_text


@dataclass
class Run:
    """One side of a comparison: its label and the folders of its outputs (bins/causal: one per target)."""

    name: str
    ingest: Path
    bins: list[Path] = field(default_factory=list)
    causal: list[Path] = field(default_factory=list)
    source: Path | None = None  # the profiler file this side was ingested from by `gpuvar compare` itself
    kept: Path | None = None  # where that ingest is once the comparison is in place (OUTPUT/ingest/<side>)


OPTION_KEYS = ("key", "bootstrap", "confidence", "alpha", "min_launches", "min_effect", "seed", "min_probability")


def _by_target(folders: list[Path], reader, what: str) -> dict:
    out = {}
    for folder in folders:
        item = reader(folder)
        if item.target in out:
            raise InputError(folder, f"a second {what} folder for target {item.target} (one per target)")
        out[item.target] = item
    return out


def _side(run: Run, k: inputs.Kernels) -> dict:
    kinds = k.frame.groupby("kind")["duration"].sum()
    return {
        "name": run.name,
        "kernels_file": str(run.kept / k.path.name if run.kept else k.path),
        "source": str(run.source) if run.source else None,
        "rows_in": k.rows_in,
        "rows_used": int(len(k.frame)),
        "rows_dropped": dict(sorted(k.dropped.items())),
        "kernels": int(k.frame.loc[k.frame["kind"] == "kernel", "key"].nunique()),
        "total_ns": float(k.frame["duration"].sum()),
        "kernel_ns": float(kinds.get("kernel", 0.0)),
        "copy_ns": float(kinds.get("copy", 0.0)),
        "memset_ns": float(kinds.get("memset", 0.0)),
    }


def summarise(table: pd.DataFrame, sides: tuple[dict, dict]) -> dict:
    """Counts per verdict and the time books: delta_total_ns is the sum of the rows' Δ time, which is the
    difference of the two runs' total kernel + copy + memset time (nothing is left out of the books). An empty
    table (compare_kernels keeps its columns) gives zeros."""
    counts = table["verdict"].value_counts()
    total_b, total_c = sides[0]["total_ns"], sides[1]["total_ns"]

    def delta(mask) -> float:
        return float(table.loc[mask, "delta_total_ns"].sum())

    return {
        "rows": int(len(table)),
        "in_both": int((table["status"] == "both").sum()),
        "tested": int(table["p_value"].notna().sum()),  # untested rows have no p-value
        **{v: int(counts.get(v, 0)) for v in kernels.VERDICTS},
        "total_ns_baseline": total_b,
        "total_ns_candidate": total_c,
        "delta_total_ns": float(table["delta_total_ns"].sum()),
        "total_time_ratio": total_c / total_b if total_b > 0 else None,
        **{f"delta_{v}_ns": delta(table["verdict"] == v) for v in kernels.VERDICTS},
        **{f"delta_{kind}_ns": delta(table["kind"] == kind) for kind in ("kernel", "copy", "memset")},
    }


TOTAL_KEY = "total GPU time per step"


def total_row(kb: pd.DataFrame, kc: pd.DataFrame, options: CompareSettings) -> dict:
    """The runs' total GPU time (kernels, copies, memsets) per resampling unit (step, else time block) compared
    like one kernel: ratio of the median per-unit totals, the same cluster bootstrap, noise and minimum effect,
    so a slowdown spread thinly over many kernels, none of them beyond noise alone, still shows in the total."""

    def per_unit(frame: pd.DataFrame) -> pd.DataFrame:
        totals = frame.groupby("unit", sort=True)["duration"].sum()
        return pd.DataFrame({"key": TOTAL_KEY, "duration": totals.to_numpy(np.float64), "unit": totals.index})

    table = _compare(per_unit(kb), per_unit(kc), options)
    row = table.iloc[0].to_dict() if len(table) else {"key": TOTAL_KEY, "verdict": "untested"}
    return {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}


def _compare(baseline: pd.DataFrame, candidate: pd.DataFrame, options: CompareSettings) -> pd.DataFrame:
    """kernels.compare_kernels with the comparison's statistics: per kernel and for the total alike."""
    return kernels.compare_kernels(
        baseline,
        candidate,
        bootstrap=options.bootstrap,
        confidence=options.confidence,
        alpha=options.alpha,
        min_launches=options.min_launches,
        min_effect=options.min_effect,
        seed=options.seed,
    )


def gate(record: dict, fail_on: str) -> list[str]:
    """What fails a CI gate: the rows (kernels, copies, memsets) and the total whose verdict is `slower` (fail_on
    'slower') or `slower`/`faster` (fail_on 'changed'), beyond noise and the minimum effect."""
    bad = ("slower",) if fail_on == "slower" else ("slower", "faster")
    rows = [r for r in record["kernels"] if r["verdict"] in bad]
    total = record.get("total") or {}
    failing = [f"{r['label']}: {r['verdict']} ×{r['ratio']:.3f}" for r in rows]
    if total.get("verdict") in bad:
        failing.insert(0, f"{TOTAL_KEY}: {total['verdict']} ×{total['ratio']:.3f}")
    return failing


def compare_runs(baseline: Run, candidate: Run, outdir: str | Path, options: CompareSettings | None = None) -> dict:
    """Compare two runs and write OUTDIR/{compare.json,kernels.csv,causal_diff.csv,forest.*,distributions.*,
    causal_diff.*}; returns the compare.json record. `options`: gpuvar.compare.settings (default: its defaults)."""
    options = options or CompareSettings()
    outdir = Path(outdir)
    kb = inputs.read_kernels(baseline.ingest, options.key)
    kc = inputs.read_kernels(candidate.ingest, options.key)
    table = _compare(kb.frame, kc.frame, options)
    bins_b, bins_c = (_by_target(r.bins, inputs.read_bins, "bin") for r in (baseline, candidate))
    causal_b, causal_c = (_by_target(r.causal, inputs.read_causal, "causal") for r in (baseline, candidate))
    win = {t: windows.compare_windows(bins_b[t], bins_c[t]) for t in sorted(set(bins_b) & set(bins_c))}
    causes, diff_rows = {}, []
    for t in sorted(set(causal_b) & set(causal_c)):
        causes[t], rows = causal_diff.diff_causal(causal_b[t], causal_c[t], options.min_probability)
        diff_rows.append(rows.assign(target=t))
    diffs = (
        pd.concat(diff_rows, ignore_index=True)
        if diff_rows
        else pd.DataFrame(columns=[*causal_diff.DIFF_COLUMNS, "target"])
    )
    diffs = diffs[["target", *causal_diff.DIFF_COLUMNS]]
    sides = (_side(baseline, kb), _side(candidate, kc))
    names = (baseline.name, candidate.name)
    envs = (environment.describe(kb), environment.describe(kc))
    record = {
        "warnings": environment.warnings(*envs, table, names),
        "baseline": sides[0]
        | {"environment": envs[0], "bin": [str(p) for p in baseline.bins], "causal": [str(p) for p in baseline.causal]},
        "candidate": sides[1]
        | {
            "environment": envs[1],
            "bin": [str(p) for p in candidate.bins],
            "causal": [str(p) for p in candidate.causal],
        },
        "options": {k: getattr(options, k) for k in OPTION_KEYS},
        "summary": summarise(table, sides),
        "total": total_row(kb.frame, kc.frame, options),
        "kernels": table.to_dict("records"),
        "windows": win,
        "causes": causes,
        "targets_not_compared": {
            "windows": sorted(set(bins_b) ^ set(bins_c)),
            "causes": sorted(set(causal_b) ^ set(causal_c)),
        },
        "definitions": {
            "ratio": "median candidate / median baseline; ci_low/ci_high: percentile bootstrap interval, "
            "resampling whole steps (or time blocks) of each run",
            "p_value": "Wald test of log(ratio) with the bootstrap standard error; q_value: Benjamini-Hochberg "
            "over the tested kernels",
            "delta_total_ns": "total time candidate - baseline (sort key); = delta_rate_ns + delta_count_ns",
            "delta_rate_ns": "(mean candidate - mean baseline) x launches in the candidate: the per-launch change",
            "delta_count_ns": "mean baseline x (launches candidate - launches baseline): the launch-count change",
            "verdict": "slower/faster: q < alpha, the interval excludes 1 and the ratio is beyond 1 +/- min_effect; "
            "negligible: significant but within min_effect",
            "delta_cv": "coefficient of variation (std/mean) candidate - baseline",
            "variance_share": "fraction of the target's variance a feature accounts for (causal contributions.csv)",
        },
    }
    record = json_ready(record)
    outdir.mkdir(parents=True, exist_ok=True)
    write_csv(table, outdir / COMPARE_KERNELS)
    write_csv(diffs, outdir / COMPARE_CAUSAL_DIFF)
    figures.forest(table, outdir / "forest", options.formats, options.dpi, names, options.forest_rows)
    figures.delta_time(table, outdir / "delta_time", options.formats, options.dpi, names, options.forest_rows)
    figures.distributions(table, kb.frame, kc.frame, outdir / "distributions", options.formats, options.dpi, names)
    figures.causal_diff(causes, diffs, outdir / "causal_diff", options.formats, options.dpi)
    # the page last: it links (and its HTML embeds) the figures drawn as PNG
    drawn = [name for name in page.FIGURES if (outdir / figure_file(name, "png")).exists()]
    markdown = page.render(record, drawn)
    write_text(markdown, outdir / COMPARE_PAGE)
    title = f"gpuvar compare: {record['baseline']['name']} → {record['candidate']['name']}"
    write_text(render_html(markdown, outdir, title), outdir / COMPARE_PAGE_HTML)
    write_json(record, outdir / COMPARE_RECORD)  # last: its presence means the comparison is complete
    return record
