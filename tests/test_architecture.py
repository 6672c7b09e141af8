"""docs/architecture.md against the code: every path it names exists, every rule it names is a rule (and
every rule is named), every artifact name it lists is the one gpuvar.layout defines."""

from __future__ import annotations

import re

from conftest import REPO

import gpuvar.layout as layout

DOC = (REPO / "docs" / "architecture.md").read_text()
RULE_TEXT = "\n".join(p.read_text() for p in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))])
RULES = set(re.findall(r"^\s*(?:rule (\w+):|use rule \w+ as (\w+) with:)", RULE_TEXT, re.M))
RULES = {a or b for a, b in RULES}


def _code_spans() -> list[str]:
    return re.findall(r"`([^`\n]+)`", DOC)


def test_every_path_the_page_names_exists():
    paths = [s for s in _code_spans() if re.fullmatch(r"[\w./-]+\.(py|smk|csv|yaml|md)|[\w-]+/[\w./-]*", s)]
    assert len(paths) > 20
    source_names = {f.name for top in ("src", "workflow", "tests", "docs", "config") for f in (REPO / top).rglob("*")}
    workflow_outputs = (
        "results/",
        "resources/",
        "raw/",
        "kernels.parquet",
        "memcpy.parquet",
        "ingest.json",
        "bins.parquet",
        "topk_rows.parquet",
        "sample_rows.parquet",
        "bin.json",
        "causal.json",
        "summary.json",
        "raw.json",
        "findings.json",
        "findings.md",
        "decomposition.csv",
        "steps.csv",
        "call_sites.csv",
    )  # written by a run, named by gpuvar.layout (test below)
    missing = [
        p
        for p in paths
        if "{" not in p
        and "<" not in p
        and not p.startswith(workflow_outputs)
        and not ((REPO / p).exists() if "/" in p else p in source_names)
    ]
    assert not missing, missing


def test_every_rule_is_documented_and_every_documented_rule_exists():
    named = {s for s in _code_spans() if re.fullmatch(r"[a-z]+(_[a-z]+)+", s) and ("_" in s)}
    documented_rules = {
        s for s in named if s in RULES or re.fullmatch(r"(ingest|normalize|bin|plot|make|merge)_\w+", s)
    }
    assert documented_rules - RULES <= {"plot_outputs"}, documented_rules - RULES
    assert RULES - {"all", "paper", "scaling"} <= named, RULES - named


def test_artifact_names_match_the_module():
    for name in (
        "KERNELS_TABLE",
        "MEMCPY_TABLE",
        "INGEST_REPORT",
        "BINS_TABLE",
        "TOPK_ROWS",
        "SAMPLE_ROWS",
        "BIN_REPORT",
        "CAUSAL_RECORD",
        "CAUSAL_SUMMARY",
    ):
        assert f"`{getattr(layout, name)}`" in DOC, name
    assert f"`{layout.RAW_FOLDER}/`" in DOC and "`raw.json`" in DOC
    assert f"`{layout.CHECKS_TABLE}`" in DOC
    assert f"`{layout.RANKS_SITES}`" in DOC
    assert f"`{layout.ALL_GROUP}`" in DOC
