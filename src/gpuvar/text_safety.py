"""Names from a trace, shown safely: on a terminal, in a Markdown page, in a table cell.

Kernel names, launching ops, dataset and file names come from the profiled program and the user's files; any
of them may hold a newline, a terminal escape (`\\x1b[2J` clears the screen, OSC 8 writes links) or Markdown
(`# heading`, `|` ending a table cell, a backtick ending a code span). Every page and console line that shows
such a name passes it through one of these (the findings page too):

- plain(text): one printable line; control characters (C0, DEL, C1), line and paragraph separators and bidi
  overrides become visible escapes (`\\n`, `\\x1b`, `\\u202e`), so the name is still readable and identifiable.
- md_code(text): a Markdown code span that is one table cell (the name verbatim otherwise).
- md_text(text): plain text inside a Markdown line that cannot start a heading, list, link, tag or emphasis.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|#~&])")
_TICKS = re.compile(r"`+")


def _escape(match: re.Match) -> str:
    ch = match.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def plain(text) -> str:
    """`text` as one printable line (for a terminal, a log line, an error message)."""
    return _UNSAFE.sub(_escape, str(text))


def md_code(text) -> str:
    """`text` as one Markdown code span, safe in a table cell: a fence longer than any run of backticks in it,
    `|` escaped (GFM splits cells on it even inside code)."""
    body = plain(text).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in _TICKS.findall(body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_text(text) -> str:
    """`text` as plain words in a Markdown line: every character that could start structure is escaped."""
    return _MARKDOWN.sub(r"\\\1", plain(text))
