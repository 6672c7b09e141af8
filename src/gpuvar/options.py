"""Command-line options made from the typed config (gpuvar.config): one definition per option.

A setting such as `binning.top_k` is defined once, as a field of the pydantic model (type, default, bounds,
description). `add_options` turns that field into the argparse option of the stage's command (same
default, same bounds, the description as help), and `arguments` turns a validated config back into that
command's arguments for the workflow's rules. So the config file, `gpuvar bin --help` and the rule
cannot disagree about a default or a limit.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, TypeAdapter, ValidationError


def _field(model: type[BaseModel], name: str):
    try:
        return model.model_fields[name]
    except KeyError:
        raise KeyError(f"{model.__name__} has no field {name!r}") from None


@lru_cache(maxsize=None)
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """The field's validator, built on first use: building one costs ~2 ms, and every `gpuvar` command builds
    the parsers of all subcommands but parses the options of one."""
    field = _field(model, name)
    return TypeAdapter(Annotated[field.annotation, field])


def _converter(model: type[BaseModel], name: str, flag: str, split_commas: bool):
    """argparse `type`: the command-line text validated by the config field's own type and bounds."""

    def convert(text: str):
        adapter = _adapter(model, name)
        value = [part.strip() for part in text.split(",")] if split_commas and text != "auto" else text
        try:
            return adapter.validate_strings(value) if isinstance(value, str) else adapter.validate_python(value)
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise argparse.ArgumentTypeError(f"{text!r}: {message}") from None

    convert.__name__ = flag.lstrip("-")
    return convert


def _model(section: str) -> type[BaseModel]:
    from gpuvar.config import Config

    return Config.model_fields[section].annotation


def help_text(section: str, name: str, description: str | None = None) -> str:
    """The field's description (or `description`: what the value does in this command), its default and the
    config key it mirrors."""
    field = _field(_model(section), name)
    return f"{description or field.description} (default: {comma_list(field.default)}; config: {section}.{name})"


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
        model = _model(option.section)
        field = _field(model, option.name)
        default = list(field.default) if isinstance(field.default, list) else field.default
        if field.annotation is bool:
            parser.add_argument(
                option.flag,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=help_text(option.section, option.name, option.description),
            )
            continue
        convert = _converter(model, option.name, option.flag, option.split_commas)
        parser.add_argument(
            option.flag, type=convert, default=default, help=help_text(option.section, option.name, option.description)
        )


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
