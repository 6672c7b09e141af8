"""The pages gpuvar writes (findings.md, ranks.md, compare.md) as self-contained HTML: what the report embeds.

Why: a performance engineer opens `snakemake --report report.html` in a browser, where Markdown shows as raw
text. Each page is the same Markdown gpuvar writes, rendered by markdown-it-py (CommonMark
with tables; a well-kept parser, so gpuvar writes no Markdown parser of its own), with every figure it links
embedded as a data URI (the page travels alone, inside the report or by mail) and a stylesheet that keeps tables
inside 1400 px: long names wrap at any character, wide cells scroll. Nothing executes; no network.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

STYLE = """
body { font-family: DejaVu Sans, Arial, sans-serif; font-size: 14px; line-height: 1.45; color: #222;
       max-width: 1360px; margin: 16px auto; padding: 0 16px; }
h1 { font-size: 24px; } h2 { font-size: 20px; border-bottom: 1px solid #ccc; margin-top: 32px; }
h3 { font-size: 16px; margin-top: 24px; }
code { font-size: 12px; background: #f3f4f5; padding: 1px 3px; overflow-wrap: anywhere; }
table { border-collapse: collapse; table-layout: auto; max-width: 100%; display: block; overflow-x: auto; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; max-width: 520px; }
th { background: #f2f3f4; }
img.evidence { max-width: 100%; height: auto; display: block; margin: 6px 0; border: 1px solid #eee; }
li { margin: 2px 0; }
code::before, code::after { content: none !important; }
"""
# Inside `snakemake --report` (Snakemake 8-9's report app, Tailwind classes) the landing description sits in a
# column 32 rem wide, inside a flex box that centres it vertically, so a page taller than the screen loses its top
# (flex centring overflows upwards, out of the scroll range). The fragment's style widens the column and aligns
# the box to the top; outside the report these selectors match nothing.
REPORT_OVERRIDES = """
.flex.items-center.justify-center.h-screen { align-items: flex-start !important; }
.prose.max-w-lg:has(.gpuvar-findings) { max-width: min(1150px, 100%) !important; }
"""
_FIGURE_LINK = re.compile(r'<a href="([^"]+\.png)">[^<]*</a>')


def _data_uri(path: Path) -> str | None:
    try:
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return None


def render_fragment(markdown: str, folder: Path) -> str:
    """The page's Markdown as an HTML fragment (a style and a div, no document around it): what the Snakemake
    report embeds as its landing content; figure links (relative to `folder`) become embedded images. The
    class name stays `gpuvar-findings` for every page: the report's style override keys on it."""
    from html import escape

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)

    def embed(match: re.Match) -> str:
        uri = _data_uri(Path(folder) / match.group(1))
        return f'<img class="evidence" alt="{escape(match.group(1))}" src="{uri}">' if uri else match.group(0)

    body = _FIGURE_LINK.sub(embed, body)
    style = STYLE.replace("body {", ".gpuvar-findings {") + REPORT_OVERRIDES
    return f'<style>{style}</style>\n<div class="gpuvar-findings">\n{body}</div>\n'


def render_html(markdown: str, folder: Path, title: str) -> str:
    """The page's Markdown as one self-contained HTML document (figures embedded)."""
    from html import escape

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title></head>\n<body>\n{render_fragment(markdown, folder)}</body></html>\n"
    )
