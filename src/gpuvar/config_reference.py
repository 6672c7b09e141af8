"""Print the configuration reference (every key: type, default, bounds, meaning) as Markdown, made from the
typed config (gpuvar.config) as PyPSA-Eur's is from its schema; docs/configuration.md is this output (a test
keeps them in sync), so the reference cannot drift from what the workflow accepts."""

from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >="))


def configure(p):
    p.add_argument("--section", default=None, help="one top-level section only, e.g. causal (default: all)")


def _model_of(annotation) -> type[BaseModel] | None:
    """The config model a field holds (itself, or the item of a list of them)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _type_name(annotation, metadata=()) -> str:
    """The type as the reference shows it; a choice checked when a value is validated (gpuvar.config.OneOf, in
    `metadata`) lists its current choices as a Literal does."""
    for item in metadata:
        choices = getattr(getattr(item, "func", None), "choices", None)
        if choices is not None:
            return " \\| ".join(repr(c) for c in choices())
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0], args[1:])
    if args and type(None) in args:
        return " \\| ".join(_type_name(a) for a in args if a is not type(None)) + " (or null)"
    if args:
        return " \\| ".join(_type_name(a) for a in args) if origin is not list else f"list of {_type_name(args[0])}"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field) -> str:
    found = []
    for item in field.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return ", ".join(found)


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        return f"`{field.default!r}`" if field.default is not None else "`None`"
    if field.default_factory is not None:
        return "(see its keys)" if _model_of(field.annotation) else f"`{field.default_factory()!r}`"
    return "**required**"


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    """One row per leaf key; a section (a nested model, or a list of them) contributes its keys."""
    rows = []
    for name, field in model.model_fields.items():
        nested = _model_of(field.annotation)
        if nested is not None:
            rows += _rows(
                nested, f"{prefix}{name}[]." if typing.get_origin(field.annotation) is list else f"{prefix}{name}."
            )
            continue
        cells = [f"`{prefix}{name}`", _type_name(field.annotation, field.metadata), _default(field), _bounds(field)]
        cells.append((field.description or "").replace("|", "\\|"))
        rows.append("| " + " | ".join(" ".join(c.split()) for c in cells) + " |")
    return rows


def markdown(section: str | None = None) -> str:
    """The reference table, or one section's rows of it."""
    from gpuvar.config import Config

    rows = _rows(Config, "")
    if section is not None:
        rows = [r for r in rows if r.startswith((f"| `{section}.", f"| `{section}[].", f"| `{section}`"))]
    return (
        "\n".join(["| key | type | default | bounds | meaning |", "|---|---|---|---|---|", *rows]) + "\n"
        if rows
        else ""
    )


def run(args) -> int:
    from gpuvar.errors import GpuvarError

    text = markdown(args.section)
    if not text:
        raise GpuvarError(f"no config section {args.section!r}")
    print(text, end="")
    return 0
