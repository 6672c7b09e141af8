"""`gpuvar ... --help` says what each option does by default: every option of every subcommand (nested ones
such as `gpuvar bench causal` and `gpuvar plot causal` included) whose default is a value names that value in
its help, and the one-line descriptions of the subcommands are whole sentences."""

from __future__ import annotations

import argparse

from gpuvar.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("gpuvar",)):
    """(command words, parser) of the parser and of every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _has_default(action: argparse.Action) -> bool:
    """A default worth naming: not None / False (no value, a switch that is off), not an empty list (an
    `append` option given no times), not argparse's help/version/subcommand plumbing."""
    if isinstance(action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction):
        return False
    default = action.default
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (isinstance(default, list | tuple | str) and len(default) == 0)


def _shown(default) -> list[str]:
    """How a help text may write the default: as argparse's %(default)s does, or as a comma list."""
    forms = [str(default)]
    if isinstance(default, list | tuple):
        forms.append(",".join(map(str, default)))
    return forms


def options_without_their_default() -> list[str]:
    missing = []
    for path, parser in _parsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not _has_default(action) or action.help == argparse.SUPPRESS:
                continue
            text = formatter._expand_help(action) if action.help else ""
            if "default" not in text or not any(form in text for form in _shown(action.default)):
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"{' '.join(path)} {name} (default {action.default!r}): {text!r}")
    return missing


def test_every_option_with_a_default_names_it_in_its_help():
    missing = options_without_their_default()
    assert not missing, "options whose --help does not name their default:\n" + "\n".join(missing)


def test_the_walk_reaches_nested_subcommands_and_their_options():
    """The check above is only as good as its walk: it must see `gpuvar bench causal --p` and the options
    made from the config model (`gpuvar bin --top-k`)."""
    seen = {
        (" ".join(path), flag)
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        for flag in action.option_strings
    }
    assert ("gpuvar bench causal", "--p") in seen and ("gpuvar bin", "--top-k") in seen
    assert any(path.startswith("gpuvar plot ") for path, _ in seen)


def test_bin_sample_seed_help_is_about_bin():
    """`gpuvar bin --sample-seed` seeds the random bin sample; the causal step's bootstrap is not bin's."""
    bin_parser = dict(_parsers(build_parser()))[("gpuvar", "bin")]
    action = next(a for a in bin_parser._actions if "--sample-seed" in a.option_strings)
    text = bin_parser._get_formatter()._expand_help(action)
    assert "random bin sample" in text and "bootstrap" not in text
    assert "default: 0" in text and "config: causal.seed" in text


def test_subcommand_lines_are_whole_sentences():
    """The line under each subcommand in `gpuvar bench --help` (taken from the module docstring) ends a
    sentence instead of stopping where the docstring's first line wraps."""
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            for choice in action._choices_actions:
                if path == ("gpuvar", "bench"):
                    assert choice.help.endswith("."), (path, choice.dest, choice.help)
                assert not choice.help.endswith((",", " a", " the", " of", " on", " one")), (path, choice.help)
