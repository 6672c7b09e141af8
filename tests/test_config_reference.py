"""docs/configuration.md is the config model's own reference (`gpuvar config-reference`): every key the workflow
accepts, with the default and bounds the model enforces."""

from __future__ import annotations

import os

import pytest
from conftest import REPO

from gpuvar.config import Config, validate_config
from gpuvar.config_reference import markdown

DOC = REPO / "docs" / "configuration.md"
TABLE_START = "| key | type |"


def test_docs_configuration_is_the_generated_reference():
    text = DOC.read_text()
    head = text[: text.index(TABLE_START)]
    if os.environ.get("GPUVAR_UPDATE_DOCS") == "1":
        DOC.write_text(head + markdown())
    assert text[len(head) :] == markdown(), "docs/configuration.md is stale: GPUVAR_UPDATE_DOCS=1 rewrites it"


def test_every_key_is_listed_with_the_default_the_model_applies():
    """A key missing from the reference, or a default the model would not apply, fails here."""
    table = markdown()
    defaults = validate_config({"datasets": [{"name": "a", "source": "/dev/null"}]}, "/")
    for section in ("binning", "causal", "plots", "targets", "ingest"):
        for key, value in getattr(defaults, section).model_dump().items():
            assert (
                f"| `{section}.{key}` |" in table
                and f"`{value!r}`" in table.split(f"`{section}.{key}`")[1].split("\n")[0]
            )
    assert "| `causal.collinear_threshold` | float | `0.95` | > 0.5, <= 1 |" in table
    assert set(Config.model_fields) == {
        row.split("`")[1].split(".")[0].removesuffix("[]") for row in table.splitlines()[2:]
    }


def test_one_section_and_an_unknown_section(run_cli):
    proc = run_cli("config-reference", "--section", "causal")
    assert proc.returncode == 0 and all(
        line.startswith(("| `causal.", "| key", "|---")) for line in proc.stdout.splitlines()
    )
    bad = run_cli("config-reference", "--section", "nope")
    assert bad.returncode == 2 and bad.stderr.strip() == "gpuvar config-reference: error: no config section 'nope'"


@pytest.mark.parametrize("key", ["collinear_threshold", "min_rows", "engine"])
def test_causal_options_take_the_documented_bounds(key):
    """The causal stage's settings object enforces what the reference says (issue 25 item 2)."""
    from gpuvar.causal.options import causal_options
    from gpuvar.errors import GpuvarError

    bad = {"collinear_threshold": 0.5, "min_rows": 1, "engine": "gpu"}[key]
    with pytest.raises(GpuvarError, match=key):
        causal_options(target="kernel_variability", **{key: bad})
