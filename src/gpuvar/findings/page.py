"""findings.md: the page a performance engineer reads first, from the findings records (findings.json).

Per dataset: what the trace is and how its call sites were found, the step level (why step time varies), then
the call sites grouped by launching op, ranked by time above their call site's median (the first MAX_FINDINGS;
every one is in findings.json), the advice once per dataset, the per-kernel-name table, and the groups that are
stable, differ only between call sites, could not be compared, or cost too little.
"""

from __future__ import annotations

from gpuvar.causal.share_test import MIN_ROWS
from gpuvar.findings.decompose import STABLE_CV
from gpuvar.findings.report import MAX_KERNEL_ROWS, MIN_RECOVERABLE_SHARE, percent, short_name
from gpuvar.findings.steps import headline as step_headline
from gpuvar.text_safety import md_code, md_text
from gpuvar.text_safety import plain as plain_text
from gpuvar.units import counted, duration_text

# names from a trace (kernels, ops, datasets) pass through gpuvar.text_safety: no Markdown structure, no escapes
safe, code, plain = md_text, md_code, plain_text


def _shares(s: dict) -> str:
    return (
        f"between call sites {percent(s['between_call_sites'])}, problem size {percent(s['size_launch_config'])}, "
        f"context {percent(s['context'])}, work counters {percent(s.get('counters', 0.0))}, "
        f"unexplained {percent(s['unexplained'])}"
    )


def _where(ev: dict) -> str:
    parts = []
    if "step" in ev:
        parts.append(f"step {ev['step']}")
    if "rank" in ev:
        parts.append(f"rank {ev['rank']}")
    if "from_step_start_ns" in ev:
        parts.append(f"{duration_text(ev['from_step_start_ns'])} into its step")
    if "from_trace_start_ns" in ev:
        parts.append(f"{duration_text(ev['from_trace_start_ns'])} after the trace's first kernel")
    if "start_ns" in ev:
        parts.append(f"profiler timestamp {ev['start_ns']}")
    if "launch_id" in ev and "start_ns" not in ev:
        parts.append(f"launch ID {ev['launch_id']}")
    return ", ".join(parts)


def _finding(f: dict) -> list[str]:
    v = f["verdict"]
    low, high = f["recoverable_interval_ns"]
    kernels = f["kernels"]
    names = ", ".join(f"{code(short_name(k['kernel'], 60))} ×{k['launches']}" for k in kernels[:3])
    more = f" and {len(kernels) - 3} more" if len(kernels) > 3 else ""
    lines = [
        f"### {f['rank']}. {safe(f['headline'])}",
        "",
        f"- **Time above the call site's median**: {duration_text(f['recoverable_ns'])} "
        f"(90 % interval {duration_text(low)}–{duration_text(high)}), "
        f"{percent(f['recoverable_share_of_kernel_time'])} of kernel time",
        f"- **Launches**: {f['launches']} at {counted(f['call_sites'], 'call site')}; CV {percent(f['cv'])}, within call sites "
        f"{percent(f['cv_within_call_site'])}; kernel{'s' if len(kernels) > 1 else ''}: {names}{more}",
        f"- **Where its variance comes from**: {_shares(f['shares'])}",
    ]
    verdict = f"- **Verdict**: {v['verdict']}"
    if v["verdict"] == "declined":
        verdict += f" ({v['reason']})"
    else:
        verdict += f" (cross-validated share {v['share']:.2f} of the within-call-site variance, a slope per call site"
        verdict += f", permutation p = {v['p_value']:.3g})" if v["p_value"] is not None else ")"
        check = v.get("residual_check")
        if check and not check["passed"] and v["share"] < 0.95:
            verdict += "; the remainder still depends on the features (non-linear effect): the share is a lower bound"
    lines.append(verdict)
    if f["drivers"]:
        drivers = "; ".join(_driver_text(d) for d in f["drivers"][:4])
        lines.append(f"- **Drivers** (each: what it adds to those before it): {drivers}")
    ev = f["evidence"]["slowest_launch"]
    ratio = f" = {ev['ratio']:.2f}× its call site's median" if ev.get("ratio") is not None else ""
    where = _where(ev)
    lines.append(
        f"- **Evidence**: longest launch {duration_text(ev['duration_ns'])}{ratio}"
        + (f" ({where})" if where else "")
        + f", call site {code(ev['call_site'])}"
    )
    if f["evidence"].get("steps_with_most_excess"):
        lines.append(
            f"  steps with the most time above median: {', '.join(map(str, f['evidence']['steps_with_most_excess']))}"
        )
    if f["top_call_sites"]:
        top = ", ".join(
            f"{code(c['call_site'])} {duration_text(c['excess_ns'])}" for c in f["top_call_sites"] if c["excess_ns"] > 0
        )
        if top:
            lines.append(f"  call sites with the most time above median: {top}")
    if f["evidence"].get("figure"):
        lines.append(f"  figure: [{f['evidence']['figure']}]({f['evidence']['figure']})")
    lines += [f"- **Do**: see *{f['advice']}* below", f"- **Check**: {f['verify']}"]
    prediction = f.get("prediction")
    if prediction:
        lines.append(f"- **Predicts** (checked by `gpuvar verify`): {_prediction_text(prediction)}")
    graphs = f["evidence"].get("causal_graphs") or []
    if graphs:
        lines.append("- **Causal graphs of its kernels** (the most variable windows only, one graph per kernel name):")
        for g in graphs[:3]:
            lines.append(f"  {code(short_name(g['kernel'], 60))}: {_graph_text(g)}")
        if len(graphs) > 3:
            lines.append(f"  and {len(graphs) - 3} more in findings.json")
    return lines + [""]


def _interval(x: dict, show) -> str:
    return f"{show(x['value'])} ({show(x['interval'][0])}–{show(x['interval'][1])})"


def _prediction_text(p: dict) -> str:
    """'with step_threads held at its median: 441 µs per step (440–441 µs), CV within call sites 0.3 % (...)'."""
    iv, ref = p["intervention"], p["at_reference"]
    if iv["type"] == "remove_context":
        text = f"without {iv['feature']}"
    else:
        text = f"with {iv['feature']} held at one value (here its median)"
    parts = []
    if "time_per_launch_ns" in ref:
        parts.append(f"{_interval(ref['time_per_launch_ns'], duration_text)} per launch")
    if "time_per_step_ns" in ref:
        parts.append(f"{_interval(ref['time_per_step_ns'], duration_text)} per step at its call sites")
    if "cv_within_call_site" in ref:
        parts.append(f"CV within call sites {_interval(ref['cv_within_call_site'], percent)}")
    text += ": " + ", ".join(parts)
    saving = p.get("saving")
    if saving:
        text += (
            f"; it saves {_interval(saving['per_affected_step_ns'], duration_text)} in each of the "
            f"{saving['affected_steps']} affected steps, {_interval(saving['over_the_run_ns'], duration_text)} over the run"
        )
    return text


def _graph_text(g: dict) -> str:
    """What the kernel's causal graph says, as checks.tsv says it (its verdict, its share, its checks)."""
    if g.get("status") != "ok" or not g.get("verdict"):
        return "no graph (skipped: too few rows in the selected windows)"
    share = f" {percent(g['share'])}" if g.get("verdict") in ("explained", "partly explained") else ""
    text = f"{g['verdict']}{share} over {g.get('rows', '?')} launches"
    figure = f", [figure]({g['figure']})" if g.get("figure") else ""
    return text + f" ({g.get('checks', '?')}){figure}"


def _driver_text(d: dict) -> str:
    """'grid_x (+, 98 %; moves with grid_size, dram__bytes_read.sum)': the driver, its sign, what it adds, and
    every near-duplicate (|corr| >= 0.95 within call sites: the data cannot tell them apart)."""
    same = d.get("near_duplicates") or []
    shown = ", ".join(safe(m) for m in same[:8]) + (f" and {len(same) - 8} more" if len(same) > 8 else "")
    tail = f"; moves with {shown}" if same else ""
    return f"{safe(d['feature'])} ({'+' if d['sign'] > 0 else '−'}, {percent(d['share_of_within'])}{tail})"


def _kernel_table(rec: dict) -> list[str]:
    rows = rec.get("kernels", [])
    if not rows:
        return []
    lines = [
        "**Kernels by time** (every kernel name; a name can run at several call sites, and one call site can run "
        "several names, the variants a library picks by size):",
        "",
        "| kernel | launches | time | of kernel time | CV | CV within call sites | call sites | launched by |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in rows[:MAX_KERNEL_ROWS]:
        lines.append(
            f"| {safe(k['short_name'])} | {k['launches']} | {duration_text(k['total_ns'])} | "
            f"{percent(k['share_of_kernel_time'])} | {percent(k['cv'])} | {percent(k['cv_within_call_site'])} | "
            f"{k['call_sites']} | {safe(', '.join(k['groups'][:2]))} |"
        )
    if len(rows) > MAX_KERNEL_ROWS:
        lines.append(f"\n{len(rows) - MAX_KERNEL_ROWS} more kernel names in findings.json.")
    return lines + [""]


def _listing(title: str, entries: list[dict], text) -> list[str]:
    if not entries:
        return []
    lines = [title, ""]
    for e in entries:
        lines.append(f"- {safe(e['short_name'])}: {text(e)}")
    return lines + [""]


def dataset_section(rec: dict) -> list[str]:
    lines = [f"## {safe(rec['dataset'])}", ""]
    steps = f", {rec['steps']} steps" if rec.get("steps") else ""
    unit = rec.get("unit", "kernel name")
    lines.append(
        f"{counted(rec['launches'], 'launch')} of {counted(rec['kernel_names'], 'kernel name')} at "
        f"{counted(rec['call_sites'], 'call site') if 'call_sites' in rec else '? call sites'}, "
        f"{duration_text(rec['kernel_time_ns'])} of kernel time{steps}; findings are grouped by {unit}"
        + (f" ({rec['vendor']} GPU)." if rec.get("vendor") not in (None, "unknown") else ".")
    )
    for note in rec.get("notes", []):
        lines.append(f"How call sites were found: {safe(note)}.")
    for note in rec.get("context_notes", []):
        lines.append(f"Context features: {safe(note)}.")
    lines.append("")
    step = step_headline(rec.get("step_level"))
    if step:
        lines += [f"**Step time**: {safe(step)}.", ""]
    elif not rec.get("steps"):
        lines += ["**Step time**: this trace has no steps (no step markers, syncs or repeating launch pattern).", ""]
    p = rec["pooled_shares"]
    if sum(p.values()) > 0:
        lines += [
            f"Spread of launch durations, all groups: between call sites {percent(p['between'])}, problem size "
            f"{percent(p['size'])}, context {percent(p['context'])}, work counters {percent(p.get('counters', 0.0))}, "
            f"unexplained {percent(p['unexplained'])}.",
            "",
        ]
    else:
        lines += ["No spread of launch durations to split: too few launches of any group to compare.", ""]
    if rec["nothing_actionable"]:
        lines += [
            f"**Nothing actionable.** Every group is stable within its call sites (CV < {percent(STABLE_CV)} with "
            f"{MIN_ROWS} launches or more), differs only between call sites, has too few launches to compare, or its "
            f"unexplained variability costs < {percent(MIN_RECOVERABLE_SHARE)} of kernel time.",
            "",
        ]
    shown = rec["findings"][: rec.get("page_findings", len(rec["findings"]))]
    for f in shown:
        lines += _finding(f)
    hidden = len(rec["findings"]) - len(shown)
    if hidden > 0:
        lines += [f"{hidden} more findings in findings.json.", ""]
    if rec.get("shared_advice"):
        lines += ["**What to do**, by the cause a finding names:", ""]
        for key, a in rec["shared_advice"].items():
            also = f" Could also be: {'; '.join(a['could_also_be'])}." if a.get("could_also_be") else ""
            lines.append(f"- *{key}*: {a['do']}{also}")
        lines.append("")
    lines += _kernel_table(rec)
    lines += _listing(
        "**Call-site differences, not run-to-run variability** (stable within each call site):",
        rec["call_site_differences"],
        lambda e: (
            f"{counted(e['launches'], 'launch')} at {counted(e['call_sites'], 'call site')}, "
            f"{percent(e['between_call_sites'])} of its "
            f"variance between them; CV within call sites {percent(e['cv_within'])}"
        ),
    )
    lines += _listing(
        f"**Stable** (CV within call sites < {percent(STABLE_CV)}, {MIN_ROWS} launches or more):",
        rec["stable"],
        lambda e: (
            f"{counted(e['launches'], 'launch')}, CV within call sites {100 * e['cv_within']:.1f} %"
        ),  # vs the 3 % line
    )
    lines += _listing(
        "**Not compared**:",
        rec.get("not_compared", []),
        lambda e: f"{counted(e['launches'], 'launch')} at {counted(e['call_sites'], 'call site')}: {e['reason']}",
    )
    lines += _listing(
        f"**Variable but costs < {percent(MIN_RECOVERABLE_SHARE)} of kernel time**, and nothing recorded explains it:",
        rec.get("below_time_floor", []),
        lambda e: f"CV within call sites {percent(e['cv_within'])}, {duration_text(e['recoverable_ns'])} above median",
    )
    return lines


def render(records: list[dict], version: str) -> str:
    lines = [
        "# Findings",
        "",
        f"gpuvar {version}. Per dataset: why the step time varies, then the places in the program (call sites, "
        "grouped by the op that launched them) whose run-to-run variability costs time, ranked by the time spent "
        "above their call site's median launch. A call site is the launching op, its occurrence in the step and "
        "the kernel's place among that op's launches, whatever kernel variant the library picked. Shares split a "
        "group's duration variance into call-site differences, problem size (launch configuration, input shapes, "
        "kernel variant, the step's work), context (copies, other streams and processes on the GPU, rank), work "
        "counters and the unexplained rest; they add up to 100 %. How to read it: docs/causal.md#findings.",
        "",
    ]
    for rec in records:
        lines += dataset_section(rec)
    return "\n".join(lines).rstrip() + "\n"
