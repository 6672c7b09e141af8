"""One look and byte-identical files for every gpuvar figure.

Why: the workflow reruns plots whenever an input changes and users diff results between runs, so a figure
must depend only on its data. Matplotlib otherwise embeds a creation date and its version (PNG 'Software',
SVG 'Date'/'Creator') and random SVG element ids; `svg.hashsalt` fixes the ids, the metadata below strips the
rest, text is drawn as paths with the bundled DejaVu Sans so the host's fonts do not matter.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes; also the only backend whose pixels we pin down

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import cbook  # noqa: E402

from gpuvar.layout import figure_file  # noqa: E402
from gpuvar.output import replacing  # noqa: E402
from gpuvar.targets import TARGETS  # noqa: E402

# Sign colours of the paper's causal graphs (black positive, red negative).
POSITIVE = "#111111"
NEGATIVE = "#c0392b"
TARGET_FACE = "#f5b041"
FEATURE_FACE = "#d6eaf8"
HIGHLIGHT = "#c0392b"
CMAP = "viridis"

RC = {
    "svg.hashsalt": "gpuvar",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "path.simplify": True,
}

# Keys each backend accepts; None removes an entry matplotlib would otherwise fill in.
_METADATA = {
    "svg": {"Date": None, "Creator": "gpuvar"},
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": "gpuvar", "Producer": None},
}
_RASTER = ("png",)


def figure(width: float, height: float):
    """A new figure with the gpuvar style (rcParams applied for this figure's lifetime of drawing)."""
    plt.rcParams.update(RC)
    return plt.figure(figsize=(width, height))


MAX_PIXELS = 20_000_000  # per raster image; Pillow refuses images above 179 MP and warns above 89 MP


def raster_dpi(fig, dpi: float) -> float:
    """`dpi`, lowered so that the saved (tight) image has at most MAX_PIXELS: a figure grown with its data
    (a graph of hundreds of nodes) stays an image every viewer opens, at the cost of resolution."""
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches, as bbox_inches="tight" saves it
    area = (box.width + 0.2) * (box.height + 0.2)  # + pad_inches on each side
    return min(float(dpi), math.floor(math.sqrt(MAX_PIXELS / area))) if area > 0 else dpi


def save_figure(fig, stem: str | Path, formats: Iterable[str] = ("svg", "png"), dpi: int = 110) -> list[Path]:
    """Write `stem.<fmt>` for each format atomically (tmp + rename) and close the figure; returns the paths.
    Raster formats have at most MAX_PIXELS (see raster_dpi)."""
    stem = Path(stem)
    written = []
    with matplotlib.rc_context(RC):
        for fmt in formats:
            if fmt not in _METADATA:
                raise ValueError(f"unsupported figure format {fmt!r}; use one of {', '.join(_METADATA)}")
            path = Path(figure_file(stem, fmt))
            place_footnotes(fig)
            res = raster_dpi(fig, dpi) if fmt in _RASTER else dpi
            with replacing(path) as tmp:
                fig.savefig(tmp, format=fmt, dpi=res, metadata=_METADATA[fmt], bbox_inches="tight", pad_inches=0.1)
            written.append(path)
    plt.close(fig)
    return written


FOOTNOTE_GID = "gpuvar-footnote"
FOOTNOTE_X = 0.01  # left edge of the footnote, as a fraction of the figure's width
# the footnote's lines end by this fraction of the width: measured at the figure's dpi, hinted glyphs of 7-pt
# text saved at another dpi came out up to ~6 % wider (a line measured to fit ran past the figure's edge)
FOOTNOTE_FILL = 0.93
MIN_FOOTNOTE_CHARS = 20  # a footnote line is never broken shorter (a very narrow figure grows instead)
FOOTNOTE_GAP = 0.08  # inches between the lowest text of the figure (x label, tick labels) and the footnote


def footnote(fig, lines: Iterable[str]) -> None:
    """Small grey text below the figure (tight bbox grows to fit): what was hidden or skipped, so a figure
    never hides data silently. save_figure moves it below everything else drawn (place_footnotes)."""
    text = "\n".join(line for line in lines if line)
    if text:
        note = fig.text(FOOTNOTE_X, -0.01, text, ha="left", va="top", fontsize=7, color="#555555")
        note.set_gid(FOOTNOTE_GID)


def place_footnotes(fig) -> None:
    """Put the footnote just below the lowest artist of the figure: a fixed position overlapped the x label of
    short figures (the forest plot of a few kernels), whose label reaches below the figure's bottom edge."""
    notes = [t for t in fig.texts if t.get_gid() == FOOTNOTE_GID]
    if not notes:
        return
    renderer = fig.canvas.get_renderer()
    for note in notes:
        wrap_footnote(note, fig.bbox.width * (FOOTNOTE_FILL - FOOTNOTE_X), renderer)
        note.set_in_layout(False)
    box = fig.get_tightbbox(renderer)  # inches, without the footnotes
    for note in notes:
        note.set_in_layout(True)
    y = min(-0.01, (box.y0 - FOOTNOTE_GAP) / fig.get_figheight())
    for note in notes:
        note.set_y(y)


def wrap_footnote(note, width: float, renderer) -> None:
    """Break each line of the footnote `note` to fit `width` display pixels (the room to the figure's right
    edge), with wrap_label, measuring each line once or a few times. matplotlib's own wrap=True measured every
    word prefix of every line at every draw: ~100 words took 3.6 s of a 7 s causal-graph job. Idempotent: a line
    that fits is kept, so a second save (the next format) changes nothing."""
    font = note.get_fontproperties()

    def width_of(line: str) -> float:  # as the text is drawn: mathtext where matplotlib would parse it
        ismath = note.get_parse_math() and cbook.is_math_text(line)
        return renderer.get_text_width_height_descent(line, font, ismath=ismath)[0] if line else 0.0

    lines = []
    for line in note.get_text().split("\n"):
        measured = width_of(line)
        if measured <= width:
            lines.append(line)
            continue
        chars = max(MIN_FOOTNOTE_CHARS, int(len(line) * width / measured))
        wrapped = wrap_label(line, chars)
        while chars > MIN_FOOTNOTE_CHARS and any(width_of(part) > width for part in wrapped.split("\n")):
            chars = max(MIN_FOOTNOTE_CHARS, int(chars * 0.9))  # wider letters than the line's average
            wrapped = wrap_label(line, chars)
        lines.append(wrapped)
    note.set_text("\n".join(lines))


# ----------------------------------------------------------------------------------------------- labels
_WORDS = re.compile(r"\S+\s*")
_PIECES = re.compile(r"[^_./:]+[_./:]*|[_./:]+")


def wrap_label(text: str, width: int) -> str:
    """`text` on lines of at most ~`width` characters, broken only between words, and a word longer than the
    width only after one of its separators (_, ., /, :), so nothing is cut inside a word ('kernel_variability'
    never becomes 'kernel_variabi' + 'lity'); a part without a separator longer than the width keeps a line."""
    pieces = []
    for word in _WORDS.findall(str(text).strip()):
        pieces += _PIECES.findall(word) if len(word.rstrip()) > width else [word]
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    lines.append(line.rstrip())
    return "\n".join(lines)


# A target's unit is its Target's (gpuvar.targets); the canonical columns carry theirs in the schema.
_UNIT_BY_NAME = {"linked_copy_duration": "ns", "linked_copy_bytes": "bytes"}
_UNITLESS = ("", "flag", "count")


@functools.cache
def _schema_units() -> dict[str, str]:
    from gpuvar.schema import canonical_columns

    return {c.column: c.unit for table in ("kernels", "memcpy") for c in canonical_columns(table)}


def unit_of(column: str) -> str:
    """The unit of a plotted column (a target's Target.unit, 'ns' for durations, 'blocks' for grid_x, ...), '' if
    none is known (vendor counters carry theirs in the name) or the column is a count or a flag."""
    name = str(column)
    if name in TARGETS:
        return TARGETS[name].unit
    unit = _UNIT_BY_NAME.get(name) or _schema_units().get(name) or ("ns" if name.endswith("_ns") else "")
    return "" if unit in _UNITLESS else unit


def with_unit(column: str, unit: str | None = None, squared: bool = False) -> str:
    """'kernel_variability (ns)'; squared for a variance: 'var(kernel_variability) (ns²)'."""
    unit = unit_of(column) if unit is None else unit
    if not unit:
        return str(column)
    return f"{column} ({unit}²)" if squared else f"{column} ({unit})"
