"""findings.md: the page a performance engineer reads first, from the findings records (findings.json)."""

from __future__ import annotations

from gpuvar.findings.decompose import STABLE_CV
from gpuvar.findings.report import MIN_RECOVERABLE_SHARE, duration_text, percent


def _shares(s: dict) -> str:
    return (
        f"between call sites {percent(s['between_call_sites'])}, problem size / launch configuration "
        f"{percent(s['size_launch_config'])}, context {percent(s['context'])}, unexplained {percent(s['unexplained'])}"
    )


def _finding(f: dict, sites_are_configs: bool = False) -> list[str]:
    v = f["verdict"]
    low, high = f["recoverable_interval_ns"]
    lines = [
        f"### {f['rank']}. {f['headline']}",
        "",
        f"- **Time above the call site's median**: {duration_text(f['recoverable_ns'])} "
        f"(90 % interval {duration_text(low)}–{duration_text(high)}), {percent(f['recoverable_share_of_kernel_time'])} of kernel time",
        f"- **Launches**: {f['launches']} at {f['call_sites']} call site(s)"
        + (" (launch configurations)" if sites_are_configs else "")
        + f"; CV {percent(f['cv'])}, "
        f"within call sites {percent(f['cv_within_call_site'])}",
        f"- **Where its variance comes from**: {_shares(f['shares'])}",
    ]
    verdict = f"- **Verdict**: {v['verdict']}"
    if v["verdict"] == "declined":
        verdict += f" ({v['reason']})"
    else:
        verdict += f" (cross-validated share {v['share']:.2f} of the within-call-site variance"
        verdict += f", permutation p = {v['p_value']:.3g})" if v["p_value"] is not None else ")"
        check = v.get("residual_check")
        if check and not check["passed"]:
            verdict += "; the remainder still depends on the features (non-linear effect): the share is a lower bound"
    lines.append(verdict)
    if f["drivers"]:
        drivers = ", ".join(
            f"{d['label']} ({'+' if d['sign'] > 0 else '−'}, {percent(d['share_of_within'])} alone)"
            for d in f["drivers"][:4]
        )
        lines.append(f"- **Drivers**: {drivers}")
    ev = f["evidence"]["slowest_launch"]
    where = ", ".join(f"{k} {ev[k]}" for k in ("step", "rank", "start") if k in ev)
    lines.append(
        f"- **Evidence**: slowest launch {duration_text(ev['duration_ns'])} = {ev['ratio']:.2f}× its call site's median"
        + (f" ({where})" if where else "")
        + f", call site `{ev['call_site']}`"
    )
    if f["evidence"].get("steps_with_most_excess"):
        lines.append(
            f"  steps with the most excess time: {', '.join(map(str, f['evidence']['steps_with_most_excess']))}"
        )
    if f["evidence"].get("figure"):
        lines.append(f"  figure: [{f['evidence']['figure']}]({f['evidence']['figure']})")
    lines += [f"- **Do**: {f['action']}", f"- **Check**: {f['verify']}"]
    if f["alternatives"]:
        lines.append(f"- **Could also be**: {'; '.join(f['alternatives'])}")
    kernel = f["kernel"] if len(f["kernel"]) <= 300 else f["kernel"][:299] + "…"
    lines.append(
        f"- Kernel: `{kernel}` (full name in findings.json)" if kernel != f["kernel"] else f"- Kernel: `{kernel}`"
    )
    return lines + [""]


def dataset_section(rec: dict) -> list[str]:
    lines = [f"## {rec['dataset']}", ""]
    steps = f", {rec['steps']} steps" if rec.get("steps") else ""
    lines.append(
        f"{rec['launches']} launches of {rec['kernel_names']} kernels, {duration_text(rec['kernel_time_ns'])} of kernel time{steps}."
    )
    p = rec["pooled_shares"]
    lines.append(
        f"Spread of kernel durations, all kernels: between call sites {percent(p['between'])}, problem size / "
        f"launch configuration {percent(p['size'])}, context {percent(p['context'])}, unexplained {percent(p['unexplained'])}."
    )
    if not rec.get("steps"):
        lines.append(
            "This trace has no step markers, so a call site is a launch configuration: launches of one kernel on "
            "different grids count as different call sites, and what the grid explains is in the between share."
        )
    lines.append("")
    if rec["nothing_actionable"]:
        lines += [
            f"**Nothing actionable.** Every kernel is stable within its call sites (CV < {percent(STABLE_CV)}), differs "
            f"only between call sites, or its variability costs < {percent(MIN_RECOVERABLE_SHARE)} of kernel time.",
            "",
        ]
    for f in rec["findings"]:
        lines += _finding(f, not rec.get("steps"))
    if rec["more_findings"]:
        lines += [f"{rec['more_findings']} more in findings.json.", ""]
    if rec["call_site_differences"]:
        lines += ["**Call-site differences, not run-to-run variability** (stable within each call site):", ""]
        for e in rec["call_site_differences"]:
            lines.append(
                f"- {e['short_name']}: {e['launches']} launches at {e['call_sites']} call sites, "
                f"{percent(e['between_call_sites'])} of its variance between them; CV within call sites {percent(e['cv_within'])}"
            )
        lines.append("")
    if rec["stable"]:
        lines += [f"**Stable** (CV within call sites < {percent(STABLE_CV)}, or too little time to matter):", ""]
        for e in rec["stable"]:
            lines.append(
                f"- {e['short_name']}: {e['launches']} launches, CV within call sites {percent(e['cv_within'])}"
            )
        lines.append("")
    return lines


def render(records: list[dict], version: str) -> str:
    lines = [
        "# Findings",
        "",
        f"gpuvar {version}. Per dataset, the kernels whose run-to-run variability costs time, ranked by the time "
        "spent above their call site's median launch. Shares split each kernel's duration variance into call-site "
        "differences, problem size / launch configuration, context (copies and kernels running beside it, gaps, "
        "rank) and the unexplained rest; they add up to 100 %. How to read it: docs/causal.md#findings.",
        "",
    ]
    for rec in records:
        lines += dataset_section(rec)
    return "\n".join(lines).rstrip() + "\n"
