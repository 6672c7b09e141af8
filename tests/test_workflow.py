"""The whole workflow on a small embedded demo: every stage runs, the books balance, reruns are byte-identical."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO
from workflow_runs import SNAKEMAKE, assert_recorded_bytes

from gpuvar.text_safety import md_text


def test_results_are_the_recorded_bytes(demo_run):
    workdir, _ = demo_run
    assert_recorded_bytes(workdir, paper=False)


def test_every_analysis_has_outputs(demo_run):
    workdir, _ = demo_run
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for d in cfg["datasets"]:
        for target in d.get("targets", ["kernel_variability"]):
            assert (workdir / f"results/bin/{d['name']}/{target}/topk_rows.parquet").exists()
            assert (workdir / f"results/causal/{d['name']}/{target}").is_dir()


def test_the_run_ends_with_the_findings_page(demo_run):
    """results/findings/findings.md covers every dataset of config.yaml, with a per-dataset folder, and the run's
    last lines name the top findings and the page."""
    workdir, _ = demo_run
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    record = json.loads((workdir / "results/findings/findings.json").read_text())
    assert [d["dataset"] for d in record["datasets"]] == [d["name"] for d in cfg["datasets"]]
    page = (workdir / "results/findings/findings.md").read_text()
    for d in cfg["datasets"]:
        assert f"## {md_text(d['name'])}" in page  # as Markdown writes it (pair\\_baseline reads pair_baseline)
        assert (workdir / f"results/findings/{d['name']}/decomposition.csv").is_file()
    for dataset in record["datasets"]:
        for finding in dataset["findings"]:
            assert (workdir / "results/findings" / finding["evidence"]["figure"]).is_file()  # the page's link works
            shares = finding["shares"]
            assert sum(shares.values()) == pytest.approx(1.0, abs=1e-5)
            assert finding["verdict"]["verdict"] in (
                "explained",
                "partly explained",
                "not explained by recorded features",
                "declined",
            )


def test_merged_datasets_get_a_per_rank_analysis(demo_run):
    workdir, _ = demo_run
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    merged = [d["name"] for d in cfg["datasets"] if d.get("merge")]
    assert merged
    for name in merged:
        record = json.loads((workdir / f"results/ranks/{name}/ranks.json").read_text())
        assert record["findings"] and (workdir / f"results/ranks/{name}/ranks.md").is_file()


def test_books_balance_at_every_stage(demo_run):
    """rows in = rows out + documented drops, from the source file to the top-k rows."""
    workdir, _ = demo_run
    for report_path in sorted((workdir / "results/ingest").glob("*/ingest.json")):
        report = json.loads(report_path.read_text())
        for name, table in report["tables"].items():
            assert table["rows_read"] == table["rows_written"] + sum(table["dropped"].values()), (report_path, name)
            parquet = report_path.with_name(f"{name}.parquet")
            assert pq.ParquetFile(parquet).metadata.num_rows == table["rows_written"]
    for bin_json in sorted((workdir / "results/bin").glob("*/*/bin.json")):
        report = json.loads(bin_json.read_text())
        dataset = bin_json.parent.parent.name
        written = json.loads((workdir / f"results/ingest/{dataset}/ingest.json").read_text())
        assert report["rows_in"] == written["tables"]["kernels"]["rows_written"], bin_json
        assert report["rows_in"] == report["rows_binned"] + sum(report["rows_without_target"].values()), bin_json
        bins = pq.read_table(bin_json.with_name("bins.parquet")).to_pandas()
        assert int(bins["count"].sum()) == report["rows_binned"], bin_json
        topk = pq.ParquetFile(bin_json.with_name("topk_rows.parquet")).metadata.num_rows
        causal = workdir / "results/causal" / dataset / bin_json.parent.name
        for record_path in sorted(causal.glob("*/causal.json")):
            record = json.loads(record_path.read_text())
            assert record["rows_in"] == record["rows_used"] + sum(record["rows_dropped"].values()), record_path
            if record["group"] == "__all__":
                assert record["rows_in"] == topk, record_path  # the causal step sees every top-k row


def _contributions(workdir: Path, dataset: str, target: str, group_prefix: str) -> dict[str, tuple[float, int]]:
    (folder,) = (workdir / f"results/causal/{dataset}/{target}").glob(f"{group_prefix}*")
    table = pd.read_csv(folder / "contributions.csv")
    return {r.feature: (100 * r.variance_share, int(r.sign)) for r in table.itertuples()}


def test_demo_graphs_recover_the_planted_causes(demo_run):
    """The planted structure (src/gpuvar/demo/synth.py, demo.json) comes out with its signs."""
    workdir, _ = demo_run
    planted = json.loads((workdir / "resources/demo/demo.json").read_text())["planted"]
    assert set(planted["memory_stall"]) == {"linked_copy_bytes", "linked_copy_kind"}
    for dataset in ("rank0", "rank1"):
        kv = _contributions(workdir, dataset, "kernel_variability", "void_gemm_tile_kernel")
        assert kv["grid_x"][1] == 1 and kv["grid_y"][1] == -1, (dataset, kv)
        # the planted causes are the two largest shares (the demo's kernel noise is most of the variance)
        assert set(sorted(kv, key=lambda f: -kv[f][0])[:2]) == {"grid_x", "grid_y"}, (dataset, kv)
        stall = _contributions(workdir, dataset, "memory_stall", "all")
        top_two = sorted(stall, key=lambda f: -stall[f][0])[:2]
        assert set(top_two) == {"linked_copy_bytes", "linked_copy_kind=DtoD"}, (dataset, stall)
        assert stall["linked_copy_bytes"][1] == 1 and stall["linked_copy_kind=DtoD"][1] == -1
    for dataset in ("perfcounter", "amd"):
        summary = json.loads((workdir / f"results/causal/{dataset}/kernel_variability/summary.json").read_text())
        used = {f for g in summary["groups"] for f in g.get("features", [])}
        assert not used & {"gpu__time_duration.sum", "sm__cycles_elapsed.avg", "sq_cycles", "DispatchNs"}, used


def test_report_is_one_self_contained_html_with_every_figure(demo_run, demo_report):
    """`snakemake --report`: one HTML file embedding every PNG figure with its labels and caption."""
    workdir, _ = demo_run
    html = demo_report.read_text()
    figures = sorted((workdir / "results/plots").rglob("*.png"))
    assert len(figures) >= 30
    for figure in figures:
        key = f'"{figure.relative_to(workdir)}": {{"name": "{figure.name}"'
        assert key in html, figure
        entry = html[html.index(key) : html.index(key) + 2000]
        assert '"caption": "<p>' in entry, figure  # every figure says what it shows
    assert not re.search(r'(?:src|href)="https?://', html)  # nothing fetched from the network
    embedded = base64.b64encode(figures[0].read_bytes()[:300]).decode()[:200]
    assert embedded in html  # the image bytes themselves, not a link to them
    # causal graphs are listed by their kernel's name and whether to trust them, not by the folder's slug
    graphs = sorted((workdir / "results/plots").glob("*/*/causal/*.png"))
    for figure in graphs:
        at = html.index(f'"{figure.relative_to(workdir)}": {{"name"')
        labels, _ = json.JSONDecoder().raw_decode(html, html.index('"labels": ', at) + len('"labels": '))
        assert labels["checks"] in ("trusted", "flagged", "not explained"), (figure, labels)
        assert figure.stem.rsplit("-", 1)[-1] not in labels["graph"], (figure, labels)
    assert graphs
    assert '"results/causal/checks.html": {"name"' in html  # the overview: every graph, trusted or flagged


def test_report_lands_on_the_rendered_findings(demo_run, demo_report):
    """The report's landing content (Snakemake's workflow description, shown first) is the run's findings page
    rendered as HTML with its figures embedded, not raw Markdown and not only the rule graph; the style that keeps
    its top on screen and its column wide travels with it. (Looked at in headless Chromium: docs/causal.md.)"""
    workdir, _ = demo_run
    html = demo_report.read_text()
    at = html.index("workflow_desc = ") + len("workflow_desc = ")
    landing, _ = json.JSONDecoder().raw_decode(html, at)
    assert '<div class="gpuvar-findings">' in landing and "<h1>Findings</h1>" in landing
    datasets = json.loads((workdir / "results/findings/findings.json").read_text())["datasets"]
    for record in datasets:
        assert f"<h2>{record['dataset']}</h2>" in landing
        for finding in record["findings"][: record["page_findings"]]:
            assert f"<h3>{finding['rank']}. " in landing
    assert landing.count('<img class="evidence"') >= sum(r["page_findings"] for r in datasets)
    assert "data:image/png;base64," in landing and "### " not in landing and "**" not in landing
    assert "align-items: flex-start" in landing


def test_demo_comparison_finds_the_planted_slowdown_and_is_in_the_report(demo_run, demo_report):
    """config `comparisons`: the planted pair's slowed kernel is the one flagged, its figures reach the report."""
    workdir, _ = demo_run
    record = json.loads((workdir / "results/compare/planted_pair/compare.json").read_text())
    planted = json.loads((workdir / "resources/demo/demo.json").read_text())["planted_comparison"]
    flagged = [k for k in record["kernels"] if k["verdict"] in ("slower", "faster")]
    assert [k["key"] for k in flagged] == [planted["kernel"]] and flagged[0]["ci_low"] > 1
    html = demo_report.read_text()
    assert '"3 Comparisons"' in html and "results/compare/planted_pair/forest.png" in html
    assert "results/compare/planted_pair/compare.html" in html


def test_report_orders_findings_ranks_comparisons_checks(demo_run, demo_report):
    """The report's categories read in the order a user acts on them: findings, the rank page of each multi-rank
    dataset (rendered, its figures embedded), the comparisons, then which causal graphs to trust."""
    workdir, _ = demo_run
    html = demo_report.read_text()
    order = ["1 Findings (read first)", "2 Ranks", "3 Comparisons", "4 Causal graphs: which to trust"]
    assert all(f'"{name}"' in html for name in order)
    assert sorted(order) == order  # Snakemake lists categories sorted by name
    page = (workdir / "results/ranks/kineto/ranks.html").read_text()
    assert "<h1>Ranks</h1>" in page and page.count("data:image/png;base64,") == 2
    assert "results/ranks/kineto/ranks.html" in html


@pytest.mark.parametrize("rows", ["top_k", "random", "all"])
def test_causal_rows_option_reaches_the_causal_command(rows):
    """causal.rows: top-k bins checked against random bins (default), a random sample, or every bin; the rows
    `gpuvar causal` fits and its --random-rows are the registry's causal_rows and random_rows, which
    discover_causal_graph's params call (what `gpuvar bin` samples: the test below, through the rule)."""
    from types import SimpleNamespace

    from gpuvar.workflow.registry import build_registry

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["causal"]["rows"] = rows
    reg = build_registry(cfg, REPO)
    files = SimpleNamespace(rows="top.parquet", sample="sample.parquet")
    causal = (reg.causal_rows(files), reg.random_rows(files))
    assert causal == (("top.parquet", "sample.parquet") if rows == "top_k" else ("sample.parquet", None))


@pytest.mark.snakemake
@pytest.mark.timeout(600)
@pytest.mark.parametrize("rows, sample_bins", [("top_k", "7"), ("random", "7"), ("all", "-1")])
def test_sample_bins_reach_the_binning_command_as_the_rule_passes_them(tmp_path, rows, sample_bins):
    """causal.rows decides how many random bins `gpuvar bin` samples (--sample-bins): as many as the top-k, or
    every bin (-1) when the causal step reads all. Read where it matters: the command line bin_trace runs, as
    Snakemake prints it on a dry run (binning.top_k 7, not the default, so a rule passing top_k for `all`
    fails here)."""
    trace = tmp_path / "t.sqlite"
    trace.write_bytes(b"")  # a dry run checks that the source exists; it does not read it
    config = tmp_path / "rows.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "demo": {"enabled": False},
                "datasets": [{"name": "t", "source": str(trace)}],
                "binning": {"top_k": 7},
                "causal": {"rows": rows},
            }
        )
    )
    env = {**os.environ, "PATH": f"{Path(SNAKEMAKE).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path / "run"), "--configfile", str(config)]
        + ["--cores", "1", "-n", "-p", "results/bin/t/kernel_variability/bin.json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line for line in (proc.stdout + proc.stderr).splitlines() if " gpuvar bin " in line]
    assert len(commands) == 1, (proc.stdout + proc.stderr)[-3000:]
    assert re.search(r" --top-k '?7'? ", commands[0]), commands[0]
    assert re.search(rf" --sample-bins '?{re.escape(sample_bins)}'? ", commands[0]), commands[0]


def test_venv_snakemake_runs_rules_without_the_venv_on_path(tmp_path):
    """The README's `.venv/bin/snakemake --profile profiles/local` works without activating the venv: rules find
    `gpuvar` next to the Python that runs Snakemake."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(REPO / "config/config.yaml"),
            "--cores",
            "1",
            "resources/demo/demo.json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "resources/demo/demo.json").is_file()
