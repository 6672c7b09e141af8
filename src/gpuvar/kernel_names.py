"""Readable kernel names, shared by every page and figure that names a kernel (findings, compare, plots).

Why: demangled CUDA names run to hundreds of characters of namespaces, lambdas and parameter lists, and the part
that tells two kernels apart (`GeluCUDAKernelImpl` inside `vectorized_elementwise_kernel<4, ...>`) sits in the
middle or at the end. Cutting on the right (what the figures did) kept `void at::native::vectorized_elem…` for
every elementwise kernel. Here a name loses its return type, namespace qualifiers, lambda chains and parameter
lists first; what is still too long is shortened from the *left*, so the template arguments that distinguish it
stay; and the PyTorch op that launched it (`aten::gelu`) goes in front where the trace records one.
"""

from __future__ import annotations

import re

import numpy as np

ARROW = " → "
# lambdas as the demanglers print them: gcc/c++filt `{lambda(float)#1}`, Nsight Compute `[lambda(int) (instance 1)]`
_LAMBDA = re.compile(r"::\{lambda\([^{}]*\)#\d+\}|(?:::)?\[lambda\([^\[\]]*\) \(instance \d+\)\]")
_OPERATOR_CALL = re.compile(r"::operator ?\(\) ?\(\)( const)?")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
_SPACES = re.compile(r"\s+")
_OPERATOR = re.compile(r"::operator ?(?=[,<>\s]|$)")  # `...::operator ()(args)` once its arguments are gone
_INNER_VOID = re.compile(r"([<,]\s*)void\s+")


def _strip_parameter_lists(text: str) -> str:
    """Drop every parenthesised list `( ... )` (function parameters, function types in template arguments)."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def display_name(name: str) -> str:
    """A kernel name without what does not identify it: `void `, namespaces, lambdas, parameter lists."""
    text = str(name).strip()
    if text.startswith("void "):
        text = text[5:]
    text = text.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    text = _OPERATOR_CALL.sub("", _LAMBDA.sub("", text))
    text = _OPERATOR.sub("", _strip_parameter_lists(text))
    text = _QUALIFIER.sub("", text)
    text = _INNER_VOID.sub(r"\1", text)  # `void` of a function type inside template arguments
    text = _SPACES.sub(" ", text).replace(" >", ">").replace("< ", "<").strip()
    return text or str(name)


# a token of a kernel name: a run of word characters; what separates tokens (`_`, spaces, `<>,:*&`) is kept with it
_TOKEN = re.compile(r"[A-Za-z0-9.]+|[^A-Za-z0-9.]+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def shorten_left(text: str, width: int) -> str:
    """`text` cut to about `width` characters by dropping its start (marked by an ellipsis), at a token boundary:
    a name never starts mid-word ('…mbda ]::operator'); a single token longer than the width keeps its end."""
    if len(text) <= width:
        return text
    tokens, kept = _tokens(text), ""
    for token in reversed(tokens):
        if len(kept) + len(token) + 1 > width:
            break
        kept = token + kept
    kept = kept.lstrip("_ ,:*&>)")
    return "…" + (kept if kept else text[len(text) - width + 1 :])


def shorten_keeping(text: str, width: int, keep: set[str]) -> str:
    """`text` in about `width` characters: its identifier (or first word), then the words in `keep` (what tells it
    apart from its neighbours: a tile size, a template argument), then as much of its end as fits; whole words
    only, '…' where words were left out. Falls back to shorten_left when those do not fit."""
    if len(text) <= width:
        return text
    tokens = _tokens(text)
    words = [i for i, t in enumerate(tokens) if t[0].isalnum()]
    if not words:
        return shorten_left(text, width)
    # the head: the kernel's identifier before its template arguments when it is short, else its first word
    prefix = len(text.split("<", 1)[0]) if "<" in text else len(text)
    ends = np.cumsum([len(t) for t in tokens])
    head = {i for i in words if ends[i] <= prefix} if prefix <= width // 2 else set()
    first: dict[str, int] = {}
    for i in words:  # each kept word once: its first occurrence
        if tokens[i] in keep:
            first.setdefault(tokens[i], i)
    chosen = (head or {words[0]}) | set(first.values())
    if len(_render(tokens, chosen)) > width:
        return shorten_left(text, width)
    for i in reversed(words):  # the end of the name, as room allows
        if i not in chosen:
            if len(_render(tokens, chosen | {i})) > width:
                break
            chosen.add(i)
    return _render(tokens, chosen)


def _render(tokens: list[str], chosen: set[int]) -> str:
    """The chosen tokens with what separates neighbours (one separator token) or '…' over a gap; a trailing run
    of closing brackets is kept, other left-out ends become '…'."""
    out, last = [], None
    for i in sorted(chosen):
        if last is not None:
            out.append("".join(tokens[last + 1 : i]) if i <= last + 2 else "…")
        out.append(tokens[i])
        last = i
    rest = "".join(tokens[last + 1 :])
    out.append(rest if not any(c.isalnum() for c in rest) else "…")
    return "".join(out)


def _split(key: str, op: str | None) -> tuple[str, str]:
    """(head, display name): keys that already carry their op (`launch_op`/`call_site` keys) keep it once."""
    if ARROW in key:
        op, key = key.split(ARROW, 1)
    return (f"{op}{ARROW}" if op else ""), display_name(key)


def label(key: str, op: str | None, width: int = 64) -> str:
    """`op → kernel`: the launching op kept whole, the kernel shortened from the left, at most ~`width` chars."""
    head, shown = _split(key, op)
    return head + shorten_left(shown, max(12, width - len(head)))


def labels(keys: list[str], ops: list[str | None], width: int = 64) -> list[str]:
    """`label` for each key; where labels of the list would read the same (cuBLAS names that differ only in
    the tile size, mid-name), those keep the name's first word and the words that tell them apart."""
    parts = [_split(k, o) for k, o in zip(keys, ops)]
    out = [label(k, o, width) for k, o in zip(keys, ops)]
    # a long name of a family (same first word: cuBLAS sm80_xmma_gemm_..., one template) keeps the words that
    # differ between the family's names (tile size, warp size, template arguments), not only its end
    words_of = [[t for t in _tokens(name) if t[0].isalnum()] for _, name in parts]
    family: dict[str, list[int]] = {}
    for i, words in enumerate(words_of):
        family.setdefault(words[0] if words else "", []).append(i)
    for members in family.values():
        if len(members) < 2:
            continue
        common = set.intersection(*(set(words_of[i]) for i in members))
        for i in members:
            head, name = parts[i]
            budget = max(12, width - len(head))
            if len(name) > budget:
                out[i] = head + shorten_keeping(name, budget, set(words_of[i]) - common)
    full = [_QUALIFIER.sub("", k.split(ARROW, 1)[-1].replace("<unnamed>::", "")) for k in keys]
    kept: dict[int, list[str]] = {}  # per label, the words shown so far (first word first)
    for _ in range(2):  # a second pass separates labels the first made alike (a clash with a third name)
        for clash in _clashes(out):
            # names alike without their parameter lists (nvFuser kernels): the parameters tell them apart
            same = len({parts[i][1] for i in clash}) == 1
            words = [[t for t in _WORD.split(full[i] if same else parts[i][1]) if t] for i in clash]
            common = set.intersection(*(set(w) for w in words))
            for i, w in zip(clash, words):
                shown = kept.setdefault(i, w[:1])
                shown += [t for t in w[1:] if t not in common and t not in shown]
                text = shown[0] + ("…" + "_".join(shown[1:]) if len(shown) > 1 else "")
                out[i] = parts[i][0] + shorten_left(text, max(12, width - len(parts[i][0])))
    for clash in _clashes(out):  # still alike: the row order tells them apart
        for n, i in enumerate(clash, 1):
            out[i] = f"{out[i]} ({n})"
    return out


_WORD = re.compile(r"[_\s,<>()]+")


def _clashes(texts: list[str]) -> list[list[int]]:
    seen: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        seen.setdefault(text, []).append(i)
    return [ix for ix in seen.values() if len(ix) > 1]
