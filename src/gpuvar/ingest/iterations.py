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
  * an anchor launched once per loop cuts segments of about one loop's length (label drift adds or removes a
    launch or two); a kernel name that a size-picked library variant takes in some loops only (a GEMM that is
    `tile64` in small iterations, `tile128` in big ones) cuts segments of one, two, three loops, and so does a name
    launched twice per loop at uneven places. In a loop that repeats exactly, every anchor agrees everywhere, so
    the score cannot tell them apart: the anchors whose segments are REGULAR_SHARE or more within half the typical
    length of it rank first;
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
REGULAR_SHARE = 0.75  # of an anchor's segments within half the typical length of it: one loop each (see below)
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
    """No iterations: -1 everywhere, as read-only views of one value (no memory per launch)."""
    nothing = np.broadcast_to(np.array(-1, np.int64), n)
    return Iterations(nothing, nothing, None, 0.0, 0)


CHUNK = 1 << 20  # launches per step of the passes below: their work arrays stay this long at any trace length


def _chunks(n: int):
    for a in range(0, n, CHUNK):
        yield a, min(a + CHUNK, n)


def _place(starts: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(segment, position in it) of launches a..b-1 given the anchors' indices; segment -1 (position -1) before
    the first anchor. A segment runs from its anchor to the next one."""
    idx = np.arange(a, b, dtype=np.int64)
    seg = np.searchsorted(starts, idx, side="right") - 1
    pos = np.where(seg >= 0, idx - starts[np.maximum(seg, 0)], -1)
    return seg, pos


class _Sequence:
    """A launch sequence as codes with each code's family, read in chunks (no per-launch work array longer than
    CHUNK: at 20 M launches the whole-array version held ~2 GB)."""

    def __init__(self, codes: np.ndarray, family_of_code: np.ndarray):
        self.codes, self.family_of_code = codes, family_of_code
        self.n_fam = int(family_of_code.max()) + 1 if len(family_of_code) else 1

    def family(self, a: int, b: int) -> np.ndarray:
        return self.family_of_code[self.codes[a:b]]


def _appearance(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct codes in order of first appearance, launches per code value), chunk by chunk: bincount and
    unique widen a narrow code array to int64 first, 8 bytes per launch at once."""
    order: dict[int, None] = {}
    counts = np.zeros(0, np.int64)
    for a, b in _chunks(len(codes)):
        part = codes[a:b]
        order.update(dict.fromkeys(pd.unique(part).tolist()))
        found = np.bincount(part)
        counts = np.pad(counts, (0, max(0, len(found) - len(counts))))
        counts[: len(found)] += found
    return np.fromiter(order, np.int64, len(order)), counts


def _agreement(seq: _Sequence, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(modal family per position, strong positions, launches that agree): a launch agrees when its family is the
    modal family at its position over all segments; a position is strong when most segments have it with one
    family. Positions from MAX_POSITIONS on are not compared."""
    n = len(seq.codes)
    lengths = np.diff(np.append(starts, n))
    width = int(min(lengths.max(), MAX_POSITIONS))
    counts = np.zeros(width * seq.n_fam, np.int64)
    for a, b in _chunks(n):
        seg, pos = _place(starts, a, b)
        inside = (seg >= 0) & (pos < MAX_POSITIONS)
        counts += np.bincount(pos[inside] * seq.n_fam + seq.family(a, b)[inside], minlength=len(counts))
    counts = counts.reshape(-1, seq.n_fam)
    mode = counts.argmax(axis=1)
    strong = counts.max(axis=1) * 2 >= len(starts)
    agree = 0
    for a, b in _chunks(n):
        agree += int(_agrees(seq, starts, mode, a, b)[0].sum())
    return mode, strong, agree


def _agrees(seq: _Sequence, starts: np.ndarray, mode: np.ndarray, a: int, b: int):
    """(agrees, segment, position) of launches a..b-1."""
    seg, pos = _place(starts, a, b)
    inside = (seg >= 0) & (pos < MAX_POSITIONS)
    agrees = np.zeros(b - a, dtype=bool)
    agrees[inside] = mode[pos[inside]] == seq.family(a, b)[inside]
    return agrees, seg, pos


def find_iterations(names: np.ndarray) -> Iterations:
    """Iterations of one launch sequence (kernel names in launch order); see the module docstring."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object).fillna("?"))
    return find_iterations_coded(codes, np.asarray(distinct, dtype=object))


def find_iterations_coded(codes: np.ndarray, names: np.ndarray, dtype=np.int64) -> Iterations:
    """find_iterations of the sequence names[codes] (integer codes into distinct names, nulls already named):
    what a dictionary-encoded kernel_name column gives without a Python string per launch. dtype: of the
    iteration and position arrays (int32 halves them on a long trace)."""
    n = len(codes)
    if n < 2 * (MIN_ITERATIONS + 1):
        return _none(n)
    codes = np.asarray(codes)
    seen, counts = _appearance(codes)  # ties between anchors go to the first to appear
    family_of_code = np.zeros(int(seen.max()) + 1, np.int64)
    family_of_code[seen] = _families(np.asarray(names, dtype=object)[seen])
    seq = _Sequence(codes, family_of_code)
    counts = counts[seen]
    order = np.lexsort((np.arange(len(seen)), -counts))
    best = None
    for c in order[:MAX_CANDIDATES]:
        if counts[c] < MIN_ITERATIONS + 1:
            break
        starts = np.flatnonzero(codes == codes.dtype.type(seen[c]))  # (an int64 scalar would widen the array)
        lengths = np.bincount(np.diff(np.append(starts, n)))
        if lengths.argmax() < 2 or lengths.max() < MODAL_SHARE * counts[c]:
            continue  # no typical segment of two launches or more: a random order, or a loop of one kernel
        mode, strong, agree = _agreement(seq, starts)
        typical = int(lengths.argmax())  # segments of about one loop: the typical length, give or take label drift
        regular = float(lengths[typical - typical // 2 : typical + typical // 2 + 1].sum()) / len(starts)
        score = float(agree) / n
        key = (regular >= REGULAR_SHARE, score, -int(starts[0]))
        if best is None or key > best[0]:
            best = (key, c, starts, mode, strong)
    if best is None or best[0][1] < MIN_SCORE:
        return _none(n)
    _, c, starts, mode, strong = best
    modal = np.flatnonzero(strong)
    if not len(modal):
        return _none(n)
    # a segment is an iteration when it agrees at >= half of the modal positions
    hits = np.zeros(len(starts), np.int64)
    for a, b in _chunks(n):
        agrees, seg, pos = _agrees(seq, starts, mode, a, b)
        on_modal = (seg >= 0) & np.isin(pos, modal) & agrees
        hits += np.bincount(seg[on_modal], minlength=len(starts))
    is_iteration = hits * 2 >= len(modal)
    count = int(is_iteration.sum())
    if count < MIN_ITERATIONS:
        return _none(n)
    number = np.cumsum(is_iteration) - 1
    iteration, position = np.empty(n, dtype), np.empty(n, dtype)
    for a, b in _chunks(n):
        seg, pos = _place(starts, a, b)
        keep = (seg >= 0) & is_iteration[np.maximum(seg, 0)]
        iteration[a:b] = np.where(keep, number[np.maximum(seg, 0)], -1)
        position[a:b] = np.where(keep, pos, -1)
    return Iterations(iteration, position, str(np.asarray(names, dtype=object)[seen[c]]), best[0][1], count)
