"""Iterations of a trace without step markers, found from its repeating launch pattern.

Why: a call site is "the same place in the program's loop". Nsight Compute exports, rocprof traces and Nsight
Systems exports without NVTX have no step markers, yet the program's loop still shows as a repeating sequence of
launches: in the ncu random-sizes program every iteration launches curand, sigmoid, mul and a GEMM. Without
iterations the only call site left is the launch configuration, and then a grid that follows the problem size
makes every size change look like a different place ("call-site differences"), which hides the cause. With
iterations, a call site is the position of the launch in its iteration, and a grid change at one position is
what it is: problem size.

The search, per sequence of launches (one per rank, in launch order):
  * a launch's *family* is its kernel name with every number replaced, so library variants picked by size
    (`..._tilesize64x256x32_...` / `..._tilesize128x128x32_...`) compare equal;
  * each kernel name seen at least MIN_ITERATIONS + 1 times is a candidate *anchor*: the sequence is cut before
    each of its launches into segments;
  * a segment's positions are compared with the modal family at the same position over all segments; a
    candidate's score is the share of all launches that sit at a position agreeing with its mode;
  * an anchor is tried only when a quarter of its segments share one length of two launches or more (a random
    launch order, or a loop of one kernel, has none);
  * the best-scoring anchor wins (ties: the anchor launched first, so a loop's first kernel beats its second);
    it is accepted when the score is at least MIN_SCORE, the typical segment has at least two launches (a loop of
    one kernel has no structure to find), and at least MIN_ITERATIONS segments are iterations.
A segment is an iteration when at least half of the modal positions agree with it; the others (a prologue such as
the curand that fills a matrix before the loop, an epilogue, launches before the first anchor) get no iteration.
Iterations are numbered from 0 in order. Label drift at one position (a GEMM that launches one kernel for small
sizes and two for large ones) only shifts the positions after it in that iteration; the score counts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_ITERATIONS = 3
MIN_SCORE = 0.6
MAX_CANDIDATES = 64  # most frequent names tried as anchors
MODAL_SHARE = 0.25  # of an anchor's segments at least this many have the typical length (label drift varies it)
MAX_POSITIONS = 4096  # positions compared per segment (a longer "iteration" is not a loop body we can use)
_NUMBER = re.compile(r"\d+")


def family_codes(names: np.ndarray) -> np.ndarray:
    """Codes of the names with every number replaced (library variants of one kernel compare equal)."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object).fillna("?"))
    return _families(np.asarray(distinct, dtype=object))[codes]


def _families(distinct: np.ndarray) -> np.ndarray:
    """Family code of each distinct name, numbered in the order the families first appear among the names as
    text, sorted (one regex per distinct name, not per launch: a trace has ~100 names and millions of launches)."""
    text, inverse = np.unique(np.array([str(d) for d in distinct], dtype=object), return_inverse=True)
    families = pd.factorize(np.array([_NUMBER.sub("#", d) for d in text], dtype=object))[0]
    return families[inverse].astype(np.int64)


@dataclass
class Iterations:
    """Per launch (in the order given): iteration number (-1: in none) and position in it (-1: none)."""

    iteration: np.ndarray
    position: np.ndarray
    anchor: str | None
    score: float
    count: int


def _none(n: int) -> Iterations:
    return Iterations(np.full(n, -1, np.int64), np.full(n, -1, np.int64), None, 0.0, 0)


def _segments(is_anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment id, position in segment) per launch; launches before the first anchor get segment -1."""
    seg = np.cumsum(is_anchor) - 1
    starts = np.flatnonzero(is_anchor)
    pos = np.arange(len(is_anchor)) - np.where(seg >= 0, starts[np.maximum(seg, 0)], 0)
    return seg, np.where(seg >= 0, pos, -1)


def _agreement(family: np.ndarray, seg: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(agrees per launch, modal positions count): whether each launch's family is the modal family at its
    position over all segments, and how many positions have a mode shared by at least half of the segments."""
    inside = (seg >= 0) & (pos < MAX_POSITIONS)
    agrees = np.zeros(len(family), dtype=bool)
    if not inside.any():
        return agrees, np.zeros(0)
    p, f = pos[inside], family[inside]
    n_fam = int(family.max()) + 1
    counts = np.bincount(p * n_fam + f, minlength=(int(p.max()) + 1) * n_fam).reshape(-1, n_fam)
    mode = counts.argmax(axis=1)
    agrees[np.flatnonzero(inside)] = mode[p] == f
    n_segments = int(seg.max()) + 1
    strong = counts.max(axis=1) * 2 >= n_segments  # a position most segments have, with one family
    return agrees, strong


def find_iterations(names: np.ndarray) -> Iterations:
    """Iterations of one launch sequence (kernel names in launch order); see the module docstring."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object).fillna("?"))
    return find_iterations_coded(codes, np.asarray(distinct, dtype=object))


def find_iterations_coded(codes: np.ndarray, names: np.ndarray) -> Iterations:
    """find_iterations of the sequence names[codes] (integer codes into distinct names, nulls already named):
    what a dictionary-encoded kernel_name column gives without a Python string per launch."""
    n = len(codes)
    if n < 2 * (MIN_ITERATIONS + 1):
        return _none(n)
    codes, seen = pd.factorize(np.asarray(codes, dtype=np.int64))  # numbered by first appearance, as factorize
    distinct = np.asarray(names, dtype=object)[seen]  # the names would be
    family = _families(distinct)[codes]
    counts = np.bincount(codes)
    order = np.lexsort((np.arange(len(distinct)), -counts))  # (factorize codes follow first appearance)
    best = None
    for c in order[:MAX_CANDIDATES]:
        if counts[c] < MIN_ITERATIONS + 1:
            break
        is_anchor = codes == c
        seg, pos = _segments(is_anchor)
        lengths = np.bincount(np.bincount(seg[seg >= 0]))
        if lengths.argmax() < 2 or lengths.max() < MODAL_SHARE * counts[c]:
            continue  # no typical segment of two launches or more: a random order, or a loop of one kernel
        agrees, strong = _agreement(family, seg, pos)
        score = float(agrees.sum()) / n
        first = int(np.flatnonzero(is_anchor)[0])
        key = (score, -first)
        if best is None or key > best[0]:
            best = (key, c, seg, pos, agrees, strong)
    if best is None or best[0][0] < MIN_SCORE:
        return _none(n)
    (score, _), c, seg, pos, agrees, strong = best
    modal = np.flatnonzero(strong)
    if not len(modal):
        return _none(n)
    # a segment is an iteration when it agrees at >= half of the modal positions
    inside = seg >= 0
    on_modal = inside & np.isin(pos, modal) & agrees
    hits = np.bincount(seg[on_modal], minlength=int(seg.max()) + 1)
    is_iteration = hits * 2 >= len(modal)
    number = np.cumsum(is_iteration) - 1
    keep = inside & is_iteration[np.maximum(seg, 0)]
    iteration = np.where(keep, number[np.maximum(seg, 0)], -1).astype(np.int64)
    count = int(is_iteration.sum())
    if count < MIN_ITERATIONS:
        return _none(n)
    return Iterations(iteration, np.where(keep, pos, -1).astype(np.int64), str(distinct[c]), score, count)
