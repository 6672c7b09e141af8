"""One look and byte-identical files for every gpuvar figure.

Why: the workflow reruns plots whenever an input changes and users diff results between runs, so a figure
must depend only on its data. Matplotlib otherwise embeds a creation date and its version (PNG 'Software',
SVG 'Date'/'Creator') and random SVG element ids; `svg.hashsalt` fixes the ids, the metadata below strips the
rest, text is drawn as paths with the bundled DejaVu Sans so the host's fonts do not matter.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes; also the only backend whose pixels we pin down

import matplotlib.pyplot as plt  # noqa: E402

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
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(RC):
        for fmt in formats:
            if fmt not in _METADATA:
                raise ValueError(f"unsupported figure format {fmt!r}; use one of {', '.join(_METADATA)}")
            path = stem.with_name(f"{stem.name}.{fmt}")
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            res = raster_dpi(fig, dpi) if fmt in _RASTER else dpi
            fig.savefig(tmp, format=fmt, dpi=res, metadata=_METADATA[fmt], bbox_inches="tight", pad_inches=0.1)
            os.replace(tmp, path)
            written.append(path)
    plt.close(fig)
    return written


def write_csv(frame, path: str | Path) -> Path:
    """The data behind a figure, atomically, with a stable float format (so reruns diff cleanly)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    frame.to_csv(tmp, index=False, float_format="%.10g")
    os.replace(tmp, path)
    return path


def footnote(fig, lines: Iterable[str]) -> None:
    """Small grey text below the figure (tight bbox grows to fit): what was hidden or skipped, so a figure
    never hides data silently."""
    text = "\n".join(line for line in lines if line)
    if text:
        fig.text(0.01, -0.01, text, ha="left", va="top", fontsize=7, color="#555555", wrap=True)
