"""Raw JSON values of a Kineto trace decoded into columns, many at once: names, texts, durations, integers or
floats, [x, y, z] lists, exact decimal timestamps and piece dictionaries (distinct values and int32 codes).

Why apart from kineto_pieces: these say what one JSON value becomes (a value that does not fit becomes null or
NaN, never an error); kineto_pieces says which events and keys are read. Each decoder tries one msgspec call over
the whole list first and falls back to value-by-value decoding only when that fails.
"""

from __future__ import annotations

import io
import re
from decimal import ROUND_05UP, Decimal, InvalidOperation, localcontext
from itertools import compress

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

NULL = msgspec.Raw(b"null")
TS_TYPE = pa.decimal128(38, 12)  # exact µs: 26 integer digits, 12 decimals
DIM_AXES = ("[0]", "[1]", "[2]")
_DIMS_RE = re.compile(rb"(?:\[-?\d+,-?\d+,-?\d+\],)*\[-?\d+,-?\d+,-?\d+\]")
_NUMBER_OR_NULL = {int, float, type(None)}
ANY_JSON = msgspec.json.Decoder()
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)  # ValidationError is a DecodeError;
# RecursionError: msgspec gives up on a value nested ~1000+ deep (a damaged or hostile trace)
_STRINGS = msgspec.json.Decoder(list[str])
_TEXTS = msgspec.json.Decoder(list[str | None])
_FLOATS = msgspec.json.Decoder(list[float | None])


def json_value(raw):
    """One raw JSON value decoded, or None when it cannot be (invalid UTF-8 in a string, ...)."""
    try:
        return ANY_JSON.decode(raw)
    except (*DECODE_ERRORS, TypeError):
        return None


def decode_each(decoder, raws: list) -> list:
    """Raw JSON objects of one piece decoded by `decoder` (a list decoder) in one call; when that fails, one by
    one, and an object that does not fit gets None."""
    try:
        return decoder.decode(b"[" + b",".join(raws) + b"]")
    except DECODE_ERRORS:
        out = []
        for raw in raws:
            try:
                out.append(decoder.decode(b"[" + bytes(raw) + b"]")[0])
            except DECODE_ERRORS:
                out.append(None)
        return out


def decode_names(raws: list) -> list:
    """Raw JSON names -> str (a name that is not a string keeps its JSON text, invalid UTF-8 replaced)."""
    try:
        return _STRINGS.decode(b"[" + b",".join(raws) + b"]")
    except DECODE_ERRORS:
        names = []
        for raw in raws:
            value = json_value(raw)
            names.append(value if isinstance(value, str) else bytes(raw).decode("utf-8", "replace"))
        return names


def decode_texts(raws: list) -> list:
    """Raw JSON values -> str, None where a value is not a string."""
    try:
        return _TEXTS.decode(b"[" + b",".join(raws) + b"]")
    except DECODE_ERRORS:
        return [v if isinstance(v, str) else None for v in map(json_value, raws)]


def dur_to_us(raws: list) -> np.ndarray:
    """Raw JSON dur texts -> float64 µs (NaN when not a number)."""
    if not raws:
        return np.array([], dtype=np.float64)
    try:
        return np.array(_FLOATS.decode(b"[" + b",".join(raws) + b"]"), dtype=np.float64)
    except (*DECODE_ERRORS, TypeError, ValueError):
        return numbers([json_value(r) for r in raws], floats=True)


def numbers(values: list, floats: bool = False) -> np.ndarray:
    """JSON values as int64 numpy where all are integers (the usual case, exact), else float64 (NaN where a value
    is not a number: None, a string, a bool, a list). floats=True: always float64."""
    if floats:
        try:  # (no dtype: numpy would parse a string "5" as 5.0, where a string ts is not a number)
            arr = np.array(values)
        except (TypeError, ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "if" and arr.shape == (len(values),):  # not 2-D ([1, 2] each)
            return arr.astype(np.float64, copy=False)
        if set(map(type, values)) <= _NUMBER_OR_NULL:  # numbers and nulls (an event without the key)
            try:
                return np.array(values, dtype=np.float64)
            except OverflowError:  # an integer beyond float64
                pass
    else:
        try:
            arr = np.array(values)
        except (TypeError, ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind == "i" and arr.shape == (len(values),):
            return arr.astype(np.int64, copy=False)  # the usual case: integers, exact
        if set(map(type, values)) <= _NUMBER_OR_NULL:  # numbers and nulls (an event without the key)
            try:
                return np.array(values, dtype=np.float64)
            except OverflowError:  # an integer beyond float64
                pass
    series = pd.Series(values, dtype=object)
    series = series.where(series.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)))
    return pd.to_numeric(series, errors="coerce").astype("float64").to_numpy()


def dim_columns(raws: list, key: str) -> dict:
    """Raw [x, y, z] JSON lists -> key[0], key[1], key[2]; NaN where the value is not a 3-list of numbers.

    The usual case is parsed as text in one numpy call (a regular expression first proves every value is a
    3-list of integers): building a Python list per launch would cost more than decoding the event."""
    if raws:
        text, given = b",".join(raws).translate(None, b" \t\r\n"), None
        if not _DIMS_RE.fullmatch(text):  # nulls among them? (shorter than 7 bytes: not '[x,y,z]')
            given = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)) >= 7
            text = b",".join(compress(raws, given)).translate(None, b" \t\r\n")
        if given is None or not given.any() or _DIMS_RE.fullmatch(text):
            arr = np.fromstring(text.translate(None, b"[]"), dtype=np.int64, sep=",").reshape(-1, 3)
            if given is not None and not given.all():
                full = np.full((len(raws), 3), np.nan)
                full[given] = arr
                arr = full
            return {f"{key}{axis}": arr[:, i] for i, axis in enumerate(DIM_AXES)}
    values = [json_value(r) for r in raws]
    return {
        f"{key}{axis}": numbers([v[i] if isinstance(v, list) and len(v) == 3 else None for v in values])
        for i, axis in enumerate(DIM_AXES)
    }


def join_ts(raws) -> bytes:
    """Raw JSON ts texts joined by newlines, one line each (what ts_decimal parses). A number or a string never
    holds a raw newline (strings escape it), but an array or object may (`[1,\n2]`, valid JSON): such a value is
    not a number, so it is written as null, on its own line, instead of shifting every line after it (which
    nulled the whole piece's timestamps)."""
    raws = raws if isinstance(raws, list) else list(raws)
    joined = b"\n".join(raws)
    if b"\r" in joined or joined.count(b"\n") != max(len(raws) - 1, 0):
        joined = b"\n".join(b"null" if b"\n" in r or b"\r" in r else r for r in map(bytes, raws))
    return joined


def ts_decimal(joined: bytes, n: int) -> pa.Array:
    """n raw JSON ts texts (µs) joined by newlines, one per line (join_ts) -> exact decimals (TS_TYPE); null where
    not a number or out of range."""
    if not n:
        return pa.array([], type=TS_TYPE)
    try:
        table = pcsv.read_csv(
            io.BytesIO(joined),
            read_options=pcsv.ReadOptions(column_names=["v"], use_threads=False),  # (in a forked worker)
            parse_options=pcsv.ParseOptions(quote_char=False),
            convert_options=pcsv.ConvertOptions(column_types={"v": TS_TYPE}, null_values=["null"]),
        )
        values = table.column("v")
        if len(values) == n:
            return values.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    texts = joined.split(b"\n")
    return pa.array([_ts_one(t) for t in texts] if len(texts) == n else [None] * n, type=TS_TYPE)


def _ts_one(text: bytes) -> Decimal | None:
    """One ts text the fast parse refused: more than 12 decimals, or not a number. The 12th decimal is rounded
    'to odd' (ROUND_05UP: it stays sticky), so that rounding to ns later gives the exactly rounded value."""
    try:
        value = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not value.is_finite() or abs(value) >= Decimal(10) ** 26:
        return None
    with localcontext() as ctx:
        ctx.prec = 60
        return value.quantize(Decimal("1e-12"), rounding=ROUND_05UP)


def piece_dictionary(values: list) -> tuple[list, np.ndarray]:
    """(distinct values in first-seen order, int32 codes; -1 for None)."""
    codes, uniques = pd.factorize(np.array(values, dtype=object))
    return list(uniques), codes.astype(np.int32)


def text_column(raws: list) -> tuple[list, np.ndarray]:
    """Raw JSON values of one text args key -> a piece dictionary (distinct texts, int32 codes; -1 null).

    A text is the value's compact JSON (msgspec's encoding: no spaces), so that a value reads the same whatever
    the writer's spacing. Null where the key is absent, the value is not a list (Kineto writes a list for every
    input-shape key), or it cannot be decoded (invalid UTF-8): only that event's value. Each distinct raw value
    is decoded once (shapes repeat from step to step). Without shapes (every value the absent key's default)
    this costs one pass in C over the piece's ops."""
    n = len(raws)
    if raws.count(NULL) == n:
        return [], np.full(n, -1, dtype=np.int32)
    lengths = np.fromiter(map(len, raws), np.int64, n)  # the raw values as one Arrow binary array: hashed in C++
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))]
    )
    encoded = pc.dictionary_encode(values)  # (distinct values in first-seen order)
    uniques, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy()
    texts = []
    for raw in uniques:
        value = json_value(raw)
        texts.append(msgspec.json.encode(value).decode() if isinstance(value, list) else None)
    lookup: dict = {}
    glob = np.array([-1 if t is None else lookup.setdefault(t, len(lookup)) for t in texts] + [-1], dtype=np.int32)
    return list(lookup), glob[codes]
