"""Readable labels for kernels in comparison tables and figures.

Why: demangled CUDA names run to hundreds of characters of namespaces, lambdas and parameter lists, and the part
that tells two kernels apart (`GeluCUDAKernelImpl` inside `vectorized_elementwise_kernel<4, ...>`) sits in the
middle or at the end. Cutting on the right (what the figures did) kept `void at::native::vectorized_elem…` for
every elementwise kernel. Here a name loses its return type, namespace qualifiers, lambda chains and parameter
lists first; what is still too long is shortened from the *left*, so the template arguments that distinguish it
stay; and the PyTorch op that launched it (`aten::gelu`) goes in front where the trace records one.
"""

from __future__ import annotations

import re

ARROW = " → "
_LAMBDA = re.compile(r"::\{lambda\([^{}]*\)#\d+\}")
_OPERATOR_CALL = re.compile(r"::operator\(\)\(\)( const)?")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
_SPACES = re.compile(r"\s+")


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
    text = _strip_parameter_lists(text)
    text = _QUALIFIER.sub("", text)
    text = _SPACES.sub(" ", text).replace(" >", ">").replace("< ", "<").strip()
    return text or str(name)


def shorten_left(text: str, width: int) -> str:
    """`text` cut to `width` characters by dropping its start (marked by an ellipsis)."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


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
