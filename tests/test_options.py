"""Command-line options that mirror config fields (gpuvar.options): the field table the commands read instead
of importing pydantic must be the models' own, and its quick check must never disagree with pydantic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvar.cli import build_parser
from gpuvar.options import _ASK_PYDANTIC, FIELD_TABLE, _table, pydantic_value, quick_value, table_text

QUICK_KINDS = ("int", "float", "choice", "str")
FIELDS = sorted(key for key, spec in _table().items() if spec["kind"] in QUICK_KINDS)


def test_field_table_is_written_from_the_config_models():
    assert FIELD_TABLE.read_text() == table_text(), (
        f"{FIELD_TABLE} is stale (a config field changed): run `python -m gpuvar.options`"
    )


def _edge_cases(spec: dict) -> list[str]:
    """Values at and around each bound, in the spellings a user types."""
    texts = [
        "",
        " ",
        "0",
        "-0",
        "1",
        "-1",
        "+1",
        "01",
        "1_000",
        "1.0",
        "1.5",
        "1e3",
        "1E-3",
        ".5",
        "5.",
        " 7",
        "7 ",
        "nan",
        "inf",
        "-inf",
        "1e400",
        "true",
        "None",
        "auto",
        "10ms",
        "9" * 40,
    ]
    for bound in spec["bounds"].values():
        for delta in (-1, 0, 1):
            texts += [str(bound + delta), repr(float(bound + delta)), str(bound + delta / 1000)]
    texts += [c for c in spec["choices"] or []] + [c.upper() for c in spec["choices"] or []]
    return texts


def _agrees(key: str, text: str) -> None:
    """The quick check takes `text` only as pydantic does: same value, same type."""
    spec = _table()[key]
    quick = quick_value(spec, text)
    if quick is _ASK_PYDANTIC:
        return  # pydantic decides, as before the table
    section, name = key.split(".")
    try:
        value = pydantic_value(section, name, text)
    except ValueError as exc:
        pytest.fail(f"{key}: quick check took {text!r} as {quick!r}, pydantic refuses it: {exc}")
    assert (type(quick), quick) == (type(value), value), (key, text)


@pytest.mark.parametrize("key", FIELDS)
def test_quick_check_agrees_with_pydantic_at_the_bounds(key):
    for text in _edge_cases(_table()[key]):
        _agrees(key, text)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    key=st.sampled_from(FIELDS),
    text=st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(alphabet="0123456789.-+eE_ x", max_size=12),
        st.text(max_size=8),
    ),
)
def test_quick_check_agrees_with_pydantic_on_any_text(key, text):
    _agrees(key, text)


def test_quick_check_takes_the_values_a_workflow_passes():
    """The plain values take the quick path (else every rank would import pydantic again)."""
    assert quick_value(_table()["binning.top_k"], "20") == 20
    assert quick_value(_table()["plots.min_probability"], "0.5") == 0.5
    assert quick_value(_table()["targets.memcpy_link"], "device") == "device"
    assert quick_value(_table()["binning.top_k"], "0") is _ASK_PYDANTIC  # out of bounds: pydantic says why


def test_a_refused_option_keeps_pydantics_message(capsys):
    with pytest.raises(SystemExit):
        build_parser("bin").parse_args(["bin", "k.parquet", "-o", "o", "--workers-per-rank", "65"])
    assert "argument --workers-per-rank: '65': Input should be less than or equal to 64" in capsys.readouterr().err
