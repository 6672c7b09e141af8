"""`gpuvar verify`: check each finding's prediction on a re-run with its cause removed.

Why: a finding is a claim a performance engineer acts on. Its prediction (gpuvar.findings.predict) says what a
re-run with the intervention applied must show; verify measures that re-run and scores each finding:

  confirmed   the intervention was applied and the measured outcome is inside the predicted interval, or better
  refuted     applied, and the outcome is outside it: the page says by how much and what that means
  not tested  the intervention was not applied in the re-run (the page says which feature still varies), the
              finding's call sites are not in the re-run, or the finding has no model (nothing explained it)

Call sites are matched by their physical label (launching op, occurrence in the step, index: the same program
gives the same labels whatever kernel variant ran; gpuvar.ingest.call_sites). An intervention is applied when:
  fix_size        the driver is constant within each matched call site of the re-run (spread at most
                  CONSTANT_SPREAD of its value): the prediction is made at that value
  remove_context  the driver is 0 on at least 1 - PRESENT_SHARE of the re-run's launches there
Outcomes, each compared with its 90 % interval (gpuvar.findings.predict):
  time per launch  inside the interval widened by `tolerance` (relative; default 2 %, compare's minimum effect:
                   two recordings of one program differ by up to ~1 % in clocks and placement), or below it for a
                   removed context (better); the time per step is reported beside it
  CV within call sites  at most the interval's upper end plus `cv_tolerance` (absolute; default 0.02: "falls to a
                   few %"), since a re-run's timing noise is never lower than its clocks allow
Exit status: 0 (nothing refuted), 1 (a finding refuted), 2 (an error).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.findings.predict import CONTEXT_INTERVENTION, SIZE_INTERVENTION, predict, rounded
from gpuvar.layout import EXPLAIN_FINDINGS, FINDINGS_RECORD, VERIFY_PAGE, VERIFY_RECORD  # noqa: F401 (the CLI writes them)

CONFIRMED, REFUTED, NOT_TESTED = "confirmed", "refuted", "not tested"
CONSTANT_SPREAD = 0.01
PRESENT_SHARE = 0.01
TOLERANCE = 0.02
CV_TOLERANCE = 0.02


def load_findings(path: Path) -> dict:
    """The dataset record of a findings folder (findings.json of one dataset; an explain output folder works)."""
    path = Path(path)
    candidates = [path, path / FINDINGS_RECORD, path / EXPLAIN_FINDINGS / FINDINGS_RECORD]
    for candidate in candidates:
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text())
                return data["datasets"][0]
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise InputError(candidate, f"not a findings.json: {exc}") from exc
    raise InputError(path, "no findings.json here (give a findings folder, or the output folder of gpuvar explain)")


def _site_values(frame: pd.DataFrame, sites: pd.Series, feature: str) -> pd.Series:
    return pd.to_numeric(frame[feature], errors="coerce").groupby(sites.to_numpy())


def _applied(intervention: dict, frame: pd.DataFrame, sites: pd.Series, matched: list[str]) -> tuple[bool, str, dict]:
    """(applied, why not, the value of the driver per matched call site in the re-run)."""
    feature = intervention["feature"]
    if feature not in frame.columns or pd.to_numeric(frame[feature], errors="coerce").isna().all():
        return False, f"{feature} is not recorded in the re-run", {}
    here = sites.isin(matched).to_numpy()
    values = pd.to_numeric(frame.loc[here, feature], errors="coerce")
    by_site = values.groupby(sites[here].to_numpy())
    if intervention["type"] == CONTEXT_INTERVENTION:
        present = float((values.fillna(0) > 0).mean()) if len(values) else 0.0
        if present > PRESENT_SHARE:
            return False, f"{feature} is still present beside {100 * present:.0f} % of its launches", {}
        return True, "", {s: 0.0 for s in matched}
    spread = (by_site.max() - by_site.min()) / by_site.median().abs().clip(lower=1e-12)
    if (spread > CONSTANT_SPREAD).any():
        cv = float((by_site.std(ddof=0) / by_site.mean().abs().clip(lower=1e-12)).max())
        return False, f"{feature} still varies (CV {100 * cv:.0f} % within call sites)", {}
    return True, "", {str(s): float(v) for s, v in by_site.median().items()}


def _without_new_context(frame: pd.DataFrame, sites: pd.Series, absent: list[str]) -> tuple:
    """The re-run's launches without a context the original run never had beside them (a copy the re-run added):
    the prediction is for a re-run that differs only by the intervention, so such launches are left out and
    counted ({column: launches left out})."""
    keep = np.ones(len(frame), dtype=bool)
    counts = {}
    for column in absent:
        if column in frame.columns:
            hit = (pd.to_numeric(frame[column], errors="coerce").fillna(0) > 0).to_numpy()
            if hit.any():
                counts[column] = int(hit.sum())
                keep &= ~hit
    return frame[keep], sites[keep], counts


def _measured(frame: pd.DataFrame, sites: pd.Series, matched: list[str]) -> dict:
    here = sites.isin(matched).to_numpy()
    part = frame.loc[here]
    s = sites[here].to_numpy()
    d = pd.to_numeric(part["duration"], errors="coerce").astype(np.float64)
    steps = pd.to_numeric(part["step"], errors="coerce") if "step" in part.columns else None
    per_site = d.groupby(s)
    n_steps = int(steps.nunique()) if steps is not None and steps.notna().all() else None
    per_step = per_site.size() / n_steps if n_steps else per_site.size() / per_site.size()
    means = per_site.mean()
    within = d - per_site.transform("mean")
    mean_all = float(d.mean())
    return {
        "launches": {str(k): int(v) for k, v in per_site.size().items()},
        "time_per_launch_ns": float((means * per_step).sum() / per_step.sum()),
        "time_per_step_ns": float((means * per_step).sum()),
        "cv_within_call_site": float(np.sqrt((within**2).mean()) / mean_all) if mean_all > 0 else 0.0,
    }


def _score(prediction: dict, measured: dict, context: bool, tolerance: float, cv_tolerance: float) -> tuple[str, str]:
    """(verdict, what it means) from the predicted intervals and the measured outcome."""
    lo, hi = prediction["time_per_launch_ns"]["interval"]
    got = measured["time_per_launch_ns"]
    low, high = lo * (1 - tolerance), hi * (1 + tolerance)
    time_ok = (low <= got <= high) or (context and got < low)
    cv_hi = prediction["cv_within_call_site"]["interval"][1] if "cv_within_call_site" in prediction else None
    cv_ok = cv_hi is None or measured["cv_within_call_site"] <= cv_hi + cv_tolerance
    if time_ok and cv_ok:
        return CONFIRMED, "the measured time per launch and CV within call sites are where the finding predicts"
    why = []
    if not time_ok:
        ratio = got / prediction["time_per_launch_ns"]["value"]
        why.append(
            f"the time per launch is {ratio:.3f}x the predicted {prediction['time_per_launch_ns']['value'] / 1e3:.4g} "
            f"µs (interval ±{100 * tolerance:.0f} %: {low / 1e3:.4g}–{high / 1e3:.4g} µs)"
        )
    if not cv_ok:
        why.append(
            f"the CV within call sites is {100 * measured['cv_within_call_site']:.1f} %, above the predicted "
            f"{100 * cv_hi:.1f} % (+{100 * cv_tolerance:.0f} points)"
        )
    meaning = (
        "the driver does not account for all of this variability, or the re-run changed more than the "
        "intervention (other inputs, clocks, placement): the finding's cause is incomplete"
    )
    return REFUTED, "; ".join(why) + f": {meaning}"


def verify_dataset(
    findings: dict, kernels: pd.DataFrame, tolerance: float = TOLERANCE, cv_tolerance: float = CV_TOLERANCE
) -> dict:
    """Score every finding of one dataset's record against the re-run's kernels table."""
    from gpuvar.findings.decompose import call_sites, groups_of

    rows = kernels[pd.to_numeric(kernels["duration"], errors="coerce").notna()]
    sites = call_sites(rows).astype(str)
    groups = groups_of(rows).astype(str)
    results = []
    for finding in findings["findings"]:
        entry = {"rank": finding["rank"], "group": finding["group"], "headline": finding["headline"]}
        prediction = finding.get("prediction")
        if not prediction:
            results.append(
                entry | {"verdict": NOT_TESTED, "reason": "no model: nothing recorded explains it (see its check)"}
            )
            continue
        intervention = prediction["intervention"]
        entry["intervention"] = intervention
        in_group = (groups == finding["group"]).to_numpy()
        models = prediction["model"]["sites"]
        present = set(sites[in_group])
        matched = sorted(s for s in models if s in present)
        if not matched:
            results.append(entry | {"verdict": NOT_TESTED, "reason": "its call sites are not in the re-run"})
            continue
        frame, site_of = rows[in_group], sites[in_group]
        frame, site_of, new_causes = _without_new_context(frame, site_of, prediction.get("context_absent", []))
        if frame.empty or not set(matched) & set(site_of):
            results.append(
                entry
                | {
                    "verdict": NOT_TESTED,
                    "reason": f"every launch ran beside {', '.join(new_causes)}, absent in the original run",
                }
            )
            continue
        matched = [s for s in matched if s in set(site_of)]
        applied, why, values = _applied(intervention, frame, site_of, matched)
        if not applied:
            results.append(entry | {"verdict": NOT_TESTED, "reason": why, "call_sites_matched": len(matched)})
            continue
        measured = _measured(frame, site_of, matched)
        predicted = rounded(predict({s: models[s] for s in matched}, values, measured["launches"]))
        outside = [s for s in matched if not models[s]["x_min"] <= values[s] <= models[s]["x_max"]]
        verdict, meaning = _score(
            predicted, measured, intervention["type"] == CONTEXT_INTERVENTION, tolerance, cv_tolerance
        )
        results.append(
            entry
            | {
                "verdict": verdict,
                "reason": meaning,
                "call_sites_matched": len(matched),
                "call_sites_missing": sorted(set(models) - set(matched)),
                "left_out_beside_new_causes": new_causes,
                "values": values,
                "outside_recorded_range": outside,
                "predicted": predicted,
                "measured": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in measured.items()},
            }
        )
    counts = {v: sum(r["verdict"] == v for r in results) for v in (CONFIRMED, REFUTED, NOT_TESTED)}
    return {
        "dataset": findings["dataset"],
        "tolerance": tolerance,
        "cv_tolerance": cv_tolerance,
        "counts": counts,
        "findings": results,
    }


def render(record: dict, rerun: str) -> str:
    """verify.md: per finding, what was predicted, what the re-run measured, and the verdict."""
    from gpuvar.findings.page import code, safe
    from gpuvar.findings.report import percent
    from gpuvar.units import duration_text

    c = record["counts"]
    lines = [
        f"# Verify: {safe(record['dataset'])} against {safe(rerun)}",
        "",
        f"{c[CONFIRMED]} confirmed, {c[REFUTED]} refuted, {c[NOT_TESTED]} not tested. A finding is confirmed when the "
        f"re-run applied its intervention and its time per launch lands in the predicted 90 % interval (widened by "
        f"{percent(record['tolerance'])}) and its CV within call sites at most {percent(record['cv_tolerance'])} above "
        "the predicted upper end; how to read it: docs/causal.md#verify.",
        "",
    ]
    for r in record["findings"]:
        lines += [f"## {r['rank']}. {safe(r['headline'])}", "", f"- **{r['verdict']}**: {safe(r['reason'])}"]
        iv = r.get("intervention")
        if iv:
            what = f"{iv['feature']} held constant" if iv["type"] == SIZE_INTERVENTION else f"{iv['feature']} removed"
            lines.append(f"- Intervention: {code(what)}")
        if "predicted" in r:
            p, m = r["predicted"], r["measured"]
            t = p["time_per_launch_ns"]
            lines.append(
                f"- Time per launch: measured {duration_text(m['time_per_launch_ns'])}, predicted "
                f"{duration_text(t['value'])} ({duration_text(t['interval'][0])}–{duration_text(t['interval'][1])})"
            )
            s = p["time_per_step_ns"]
            lines.append(
                f"- Time per step (its call sites): measured {duration_text(m['time_per_step_ns'])}, predicted "
                f"{duration_text(s['value'])} ({duration_text(s['interval'][0])}–{duration_text(s['interval'][1])})"
            )
            if "cv_within_call_site" in p:
                cv = p["cv_within_call_site"]
                lines.append(
                    f"- CV within call sites: measured {percent(m['cv_within_call_site'])}, predicted {percent(cv['value'])} "
                    f"({percent(cv['interval'][0])}–{percent(cv['interval'][1])})"
                )
            if r.get("left_out_beside_new_causes"):
                new = ", ".join(f"{n} beside {c}" for c, n in r["left_out_beside_new_causes"].items())
                lines.append(f"- Left out: {new} (a cause the original run never had beside these launches)")
            if r.get("outside_recorded_range"):
                lines.append(
                    f"- Note: the re-run's value lies outside the recorded range at {len(r['outside_recorded_range'])} call site(s): extrapolated from the nearest"
                )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
