"""Command-line options made from the typed config (gpuvar.config): one definition per option.

A setting such as `binning.top_k` is defined once, as a field of the pydantic model (type, default, bounds,
description). `add_options` turns that field into the argparse option of the stage's command (same
default, same bounds, the description as help), and `arguments` turns a validated config back into that
command's arguments for the workflow's rules. So the config file, `gpuvar bin --help` and the rule
cannot disagree about a default or a limit.

Start-up: every MPI rank of `gpuvar bin` parses its options, and importing pydantic, the config models and
one validator per option took ~0.13 s of each rank's start-up (a quarter of the job's fixed cost). So the fields'
type, default, bounds and description are read from data/options.json, a table written from the models by
`python -m gpuvar.options` (tests/test_options.py fails when it is stale), and a plain value (an integer or
a finite number within the bounds, one of the choices) is taken without pydantic. Anything else (a list, a
value out of bounds, a spelling the table's check does not take) goes to the field's own pydantic validator,
so what is accepted, the value and the error message stay pydantic's (the same test checks both paths agree).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

FIELD_TABLE = Path(__file__).with_name("data") / "options.json"
_ASK_PYDANTIC = object()  # the quick check's answer when it cannot decide
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_BOUNDS = {"gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b, "le": lambda v, b: v <= b}


@lru_cache(maxsize=None)
def _table() -> dict[str, dict]:
    return json.loads(FIELD_TABLE.read_text())


def _spec(section: str, name: str) -> dict:
    """The field's row of the table: kind, default, bounds, choices, description."""
    try:
        return _table()[f"{section}.{name}"]
    except KeyError:
        raise KeyError(f"{section}.{name} is not in {FIELD_TABLE}: run `python -m gpuvar.options`") from None


def default(section: str, name: str):
    """The config field's default, from the table (no pydantic): what a pydantic-free settings object (the
    binning job's, built on every MPI rank) takes as its own default, so no default is written twice."""
    return _spec(section, name)["default"]


def bounds(section: str, name: str) -> dict:
    """The config field's bounds ({"gt": 0, "le": 64}), from the table: a caller that picks a value itself keeps
    within them without writing them again."""
    return _spec(section, name)["bounds"]


def out_of_bounds(section: str, name: str, value) -> str | None:
    """Why `value` breaks the field's bounds ("must be > 0"), or None; read from the table, as the command
    line checks them, for a settings object built by a library caller without the command line."""
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    for op, bound in _spec(section, name)["bounds"].items():
        if not _BOUNDS[op](value, bound):
            return f"must be {words[op]} {bound}"
    return None


def quick_value(spec: dict, text: str):
    """The value the field's pydantic validator gives `text`, for the plain cases the table describes (an
    integer or finite number in plain notation within the bounds, one of the choices, any text for a plain
    string); _ASK_PYDANTIC for everything else."""
    kind = spec["kind"]
    if kind == "choice":
        return text if text in spec["choices"] else _ASK_PYDANTIC
    if kind == "str":
        return text
    if kind == "int" and _INT.fullmatch(text):
        value = int(text)
    elif kind == "float" and _FLOAT.fullmatch(text):
        value = float(text)
        if not math.isfinite(value):
            return _ASK_PYDANTIC
    else:
        return _ASK_PYDANTIC
    return value if all(_BOUNDS[op](value, bound) for op, bound in spec["bounds"].items()) else _ASK_PYDANTIC


@lru_cache(maxsize=None)
def _adapter(section: str, name: str):
    """The field's validator, built on first use: building one costs ~2 ms (and importing pydantic and the
    config models ~0.1 s), and every `gpuvar` command builds the parsers of all subcommands but parses the
    options of one."""
    from typing import Annotated

    from pydantic import TypeAdapter

    field = _field(_model(section), name)
    return TypeAdapter(Annotated[field.annotation, field])


def pydantic_value(section: str, name: str, text: str, split_commas: bool = False):
    """`text` validated by the config field's own pydantic type and bounds (ValueError with pydantic's message)."""
    from pydantic import ValidationError

    adapter = _adapter(section, name)
    value = [part.strip() for part in text.split(",")] if split_commas and text != "auto" else text
    try:
        return adapter.validate_strings(value) if isinstance(value, str) else adapter.validate_python(value)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


def _converter(option: ConfigOption):
    """argparse `type`: the command-line text checked against the field's table row, else by pydantic."""
    spec = _spec(option.section, option.name)

    def convert(text: str):
        value = _ASK_PYDANTIC if option.split_commas else quick_value(spec, text)
        if value is not _ASK_PYDANTIC:
            return value
        try:
            return pydantic_value(option.section, option.name, text, option.split_commas)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    convert.__name__ = option.flag.lstrip("-")
    return convert


def _model(section: str):
    """The model of a config section (binning, causal, ...) or of a stage's own settings (config.STAGE_SECTIONS)."""
    from gpuvar.config import STAGE_SECTIONS, Config

    field = Config.model_fields.get(section)
    return field.annotation if field is not None else STAGE_SECTIONS[section]


def _field(model, name: str):
    try:
        return model.model_fields[name]
    except KeyError:
        raise KeyError(f"{model.__name__} has no field {name!r}") from None


def _stage_sections() -> set[str]:
    """Sections that are a stage's settings, not config keys (config.STAGE_SECTIONS), read from the table."""
    return {key.split(".")[0] for key, spec in _table().items() if spec.get("stage")}


def help_text(section: str, name: str, description: str | None = None) -> str:
    """The field's description (or `description`: what the value does in this command), its default and the
    config key it mirrors."""
    spec = _spec(section, name)
    where = f"config: {section}.{name}" if section not in _stage_sections() else f"settings: {section}.{name}"
    text = f"{description or spec['description']} (default: {comma_list(spec['default'])}; {where})"
    return text.replace("%", "%%")  # argparse formats help with %: a description's "2 %" is text


@dataclass(frozen=True)
class ConfigOption:
    """A command-line flag that mirrors config key `section.name` (e.g. --top-k and binning.top_k)."""

    flag: str
    section: str
    name: str
    split_commas: bool = False  # a list in the config, comma-separated on the command line
    description: str | None = None  # what the value does in this command, when the field's description says more


def add_options(parser, options) -> None:
    """Add each ConfigOption to `parser`: the field's type and bounds check the text, its default and
    description become the option's default and help."""
    for option in options:
        spec = _spec(option.section, option.name)
        help_ = help_text(option.section, option.name, option.description)
        if spec["kind"] == "bool":
            parser.add_argument(option.flag, action=argparse.BooleanOptionalAction, default=spec["default"], help=help_)
            continue
        parser.add_argument(option.flag, type=_converter(option), default=spec["default"], help=help_)


def arguments(cfg, options) -> list[str]:
    """The command-line arguments that give a command the settings of validated config `cfg` (for the
    workflow's rules: a list, so no value is ever parsed by a shell)."""
    out = []
    for option in options:
        out += option_words(option.flag, getattr(getattr(cfg, option.section), option.name))
    return out


def option_words(flag: str, value) -> list[str]:
    """One option as command-line words: a bool is `--flag` / `--no-flag`, a list comma-separated."""
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag.removeprefix("--")]
    return [flag, comma_list(value)]


def comma_list(value) -> str:
    """A list option as the command line takes it ('auto' stays 'auto')."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _kind(field) -> tuple[str, list | None]:
    """(kind, choices) of a config field for the table: plain int/float/str/bool, a choice (Literal), or
    'other' (lists, fields with their own validators), which the command line always hands to pydantic."""
    from typing import Literal, get_args, get_origin

    from pydantic.functional_validators import BeforeValidator

    from gpuvar.config import not_bool

    extra = [m for m in field.metadata if isinstance(m, BeforeValidator) and m.func is not not_bool]
    if extra:
        return "other", None
    if get_origin(field.annotation) is Literal:
        return "choice", list(get_args(field.annotation))
    names = {bool: "bool", int: "int", float: "float", str: "str"}
    return names.get(field.annotation, "other"), None


def field_table() -> dict[str, dict]:
    """Every field of every config section as the command line needs it (the content of data/options.json)."""
    import annotated_types
    from pydantic import BaseModel

    from gpuvar.config import STAGE_SECTIONS, Config

    table = {}
    sections = {section: f.annotation for section, f in Config.model_fields.items()} | STAGE_SECTIONS
    for section, model in sections.items():
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue  # datasets, comparisons: lists of entries, not command-line options
        for name, field in model.model_fields.items():
            kind, choices = _kind(field)
            bounds = {
                op: getattr(m, op)
                for m in field.metadata
                if isinstance(m, annotated_types.Gt | annotated_types.Ge | annotated_types.Lt | annotated_types.Le)
                for op in ("gt", "ge", "lt", "le")
                if hasattr(m, op)
            }
            table[f"{section}.{name}"] = {
                "stage": section in STAGE_SECTIONS,  # a stage's setting, not a config key
                "kind": kind,
                "default": field.default,
                "bounds": bounds,
                "choices": choices,
                "description": field.description,
            }
    return table


def table_text() -> str:
    return json.dumps(field_table(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m gpuvar.options: rewrite the table after a config field changed
    FIELD_TABLE.write_text(table_text())
    print(f"wrote {FIELD_TABLE}")
