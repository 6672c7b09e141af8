"""The canonical schema every reader maps onto, and the Table 1 counter names.

Readers produce a pandas DataFrame that uses canonical column names where they know them and keeps every
other source column; `finalize_kernels` / `finalize_memcpy` then add what can be derived (duration, grid
totals, shared memory, the launch-configuration key, short names), fill absent columns with nulls and cast
to the documented types, so every downstream stage sees the same columns whatever the vendor.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd
import pyarrow as pa

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}


@dataclass(frozen=True)
class CanonicalColumn:
    table: str
    column: str
    type: str
    unit: str
    group: str
    sources: dict[str, str]
    description: str


def _schema_text() -> str:
    return resources.files("gpuvar.data").joinpath("canonical_schema.csv").read_text()


@lru_cache(maxsize=None)
def source_formats() -> tuple[str, ...]:
    """The per-format source columns of the schema file (every header between 'group' and 'description')."""
    header = next(csv.reader(_schema_text().splitlines()))
    return tuple(header[header.index("group") + 1 : header.index("description")])


@lru_cache(maxsize=None)
def canonical_columns(table: str) -> tuple[CanonicalColumn, ...]:
    """The documented columns of `table` ('kernels' or 'memcpy'), in output order."""
    vendors = source_formats()
    rows = [r for r in csv.DictReader(_schema_text().splitlines()) if r["table"] == table]
    return tuple(
        CanonicalColumn(
            r["table"], r["column"], r["type"], r["unit"], r["group"], {v: r[v] for v in vendors}, r["description"]
        )
        for r in rows
    )


@lru_cache(maxsize=None)
def table1_mapping() -> dict[str, tuple[str, str]]:
    """Paper Table 1: original counter/column name -> (simplified name, group)."""
    text = resources.files("gpuvar.data").joinpath("table1.csv").read_text()
    return {r["original"]: (r["simplified"], r["group"]) for r in csv.DictReader(text.splitlines())}


def table1_rename(columns) -> dict[str, str]:
    """Rename map for the Table 1 counters present in `columns` (exact, then case-insensitive match)."""
    mapping = table1_mapping()
    by_lower = {k.lower(): v[0] for k, v in mapping.items()}
    out = {}
    for col in columns:
        if col in mapping:
            out[col] = mapping[col][0]
        elif col.lower() in by_lower:
            out[col] = by_lower[col.lower()]
    return out


_OPEN, _CLOSE = "<([", ">)]"


def _depth_zero_text(name: str) -> str:
    """The name with every bracketed part emptied ('f<int>(float)' -> 'f<>()').

    Tolerant, because real exports mangle brackets: a stray closer is dropped (one Windows ncu export writes
    'unnamed>::saxpy_kernel(...)') and an opener left open at the end (a truncated name) stays as it is."""
    out, depth = [], 0
    for ch in name:
        if ch in _OPEN:
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch in _CLOSE:
            if depth == 0:
                continue
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_kernel_name(name: str) -> str:
    """The kernel's own identifier, as nsys's shortName: 'void ns::<unnamed>::foo<float>(float*, int)' -> 'foo'.

    Template arguments, parameters, return type and namespaces (also '<unnamed>' and '(anonymous namespace)')
    are removed by bracket depth, not by a regular expression, because PyTorch kernel names nest lambdas and
    templates several levels deep. A name with nothing left after that is kept whole.
    """
    if not isinstance(name, str):
        return name
    text = _depth_zero_text(name.strip().replace("(anonymous namespace)", "anonymous_namespace"))
    if not text:
        return name
    head = text.split("(", 1)[0].rstrip()  # drop the parameter list
    tokens = head.split()
    if not tokens:
        return name
    short = tokens[-1].split("::")[-1].replace("<>", "").replace("[]", "").rstrip("<[")
    return short or name


def _int_values(values: pd.Series) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 values, null mask or None) from anything numeric; floats are rounded (ns resolution).

    Plain int64 columns pass through without a copy: this runs on every column of 100 M-row tables.
    """
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iub":
        return values.to_numpy(dtype=np.int64, copy=False), None
    if isinstance(values.dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) and values.dtype.kind in "iu":
        mask = values.isna().to_numpy()
        return values.to_numpy(dtype=np.int64, na_value=0), (mask if mask.any() else None)
    numeric = pd.to_numeric(values, errors="coerce")
    if isinstance(numeric.dtype, pd.api.extensions.ExtensionDtype):
        numeric = numeric.astype("float64")
    floats = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    mask = ~np.isfinite(floats) | (np.abs(floats) >= 2.0**63)
    ints = np.where(mask, 0, np.round(np.where(mask, 0, floats))).astype(np.int64)
    return ints, (mask if mask.any() else None)


def int_column(values) -> pd.Series:
    """Nullable int64 Series (for arithmetic on possibly-missing columns)."""
    series = values if isinstance(values, pd.Series) else pd.Series(values)
    ints, mask = _int_values(series)
    return pd.Series(
        pd.arrays.IntegerArray(ints, mask if mask is not None else np.zeros(len(ints), bool)), index=series.index
    )


def _int_arrow(values: pd.Series) -> pa.Array:
    ints, mask = _int_values(values)
    return pa.array(ints, type=pa.int64(), mask=mask)


def _string_arrow(values: pd.Series) -> pa.Array:
    """Strings via a dictionary (names repeat millions of times; building Python strings per row is slow)."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype("category")
    categories = pa.array([str(c) for c in values.cat.categories], type=pa.string())
    codes = values.cat.codes.to_numpy()
    mask = codes < 0
    indices = pa.array(np.where(mask, 0, codes).astype(np.int32), mask=mask if mask.any() else None)
    return pa.DictionaryArray.from_arrays(indices, categories).cast(pa.string())


def _text_categorical(values: pd.Series) -> bool:
    """A categorical of strings of which at least one used category is not a number: written as text.

    Decided on the categories (a few thousand) instead of converting every row (seconds per 10 M rows); the
    result is what the per-row conversion in _finalize would give."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        return False
    categories = values.cat.categories
    if not all(isinstance(c, str) for c in categories):
        return False
    codes = values.cat.codes.to_numpy()
    used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(categories)))
    numeric = pd.to_numeric(pd.Series(np.asarray(categories, dtype=object)[used]), errors="coerce")
    return bool(numeric.isna().any())


LAUNCH_CONFIG_PARTS = (
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "lds_per_workgroup",
)
_MISSING = np.iinfo(np.int64).min


def launch_config_codes(parts: list[np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """Codes and readable labels ('g128x1x1 b256x1x1 r32 s0') of each distinct launch configuration.

    Each column is factorised on its own and the codes combined in mixed radix, then factorised again: linear
    time, where np.unique(axis=0) costs seconds per million rows. _MISSING marks an absent value ('?').
    """
    key = np.zeros(len(parts[0]), dtype=np.int64)
    uniques_per_part = []
    for values in parts:
        codes, uniques = pd.factorize(values)
        key = key * len(uniques) + codes
        uniques_per_part.append(uniques)
    codes, combos = pd.factorize(key)
    labels = []
    for combo in combos:
        digits = []
        for uniques in reversed(uniques_per_part):
            combo, digit = divmod(int(combo), len(uniques))
            digits.append(uniques[digit])
        shown = ["?" if v == _MISSING else str(v) for v in reversed(digits)]
        labels.append("g{}x{}x{} b{}x{}x{} r{} s{}".format(*shown))
    return codes, labels


def _launch_config_key(df: pd.DataFrame) -> pd.Categorical:
    """Launch-configuration key of every row (see launch_config_codes)."""
    parts = []
    for p in LAUNCH_CONFIG_PARTS:
        if p not in df.columns:
            parts.append(np.full(len(df), _MISSING, dtype=np.int64))
            continue
        ints, mask = _int_values(df[p])
        parts.append(np.where(mask, _MISSING, ints) if mask is not None else ints)
    codes, labels = launch_config_codes(parts)
    return pd.Categorical.from_codes(codes, categories=labels)


def dimension_product(df: pd.DataFrame, dim: str) -> pd.Series:
    """{dim}_x * {dim}_y * {dim}_z as nullable int64 (grid_size, workgroup_size): a missing y or z counts as 1, a
    missing x makes it null."""

    def col(name):
        return int_column(df[name]) if name in df.columns else pd.Series(pd.NA, index=df.index, dtype="Int64")

    return col(f"{dim}_x") * col(f"{dim}_y").fillna(1) * col(f"{dim}_z").fillna(1)


def _derive_kernel_columns(df: pd.DataFrame) -> pd.DataFrame:
    def col(name):
        return df[name] if name in df.columns else pd.Series(pd.NA, index=df.index, dtype="Int64")

    if "duration" not in df.columns and {"start", "end"} <= set(df.columns):
        df["duration"] = int_column(df["end"]) - int_column(df["start"])
    for dim in ("grid", "block"):
        for axis in "xyz":
            if f"{dim}_{axis}" not in df.columns:
                df[f"{dim}_{axis}"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    if "grid_size" not in df.columns:
        df["grid_size"] = dimension_product(df, "grid")
    if "workgroup_size" not in df.columns:
        df["workgroup_size"] = dimension_product(df, "block")
    if "lds_per_workgroup" not in df.columns and (
        "static_shared_memory" in df.columns or "dynamic_shared_memory" in df.columns
    ):
        df["lds_per_workgroup"] = int_column(col("static_shared_memory")).fillna(0) + int_column(
            col("dynamic_shared_memory")
        ).fillna(0)
    if "kernel_short_name" not in df.columns and "kernel_name" in df.columns:
        df["kernel_short_name"] = df["kernel_name"].astype("category").map(short_kernel_name).astype(object)
    return df


def _finalize(df: pd.DataFrame, table: str) -> pa.Table:
    columns = canonical_columns(table)
    known = {c.column for c in columns}
    arrays, fields = [], []
    # one all-null array per type, shared by every schema column without a value (Arrow arrays are immutable):
    # a trace fills ~16 of the kernels' 54 (no AMD registers on NVIDIA, no shapes, one process), each 8 bytes
    # per row when it had its own (1 M Kineto kernels: ~130 MB of the ingest's peak). The same Parquet bytes.
    nulls: dict = {}
    for c in columns:
        typ = _ARROW_TYPES[c.type]
        if c.column == "launch_config" and table == "kernels":
            arr = _string_arrow(pd.Series(_launch_config_key(df)))
        elif c.column in df.columns:
            values = df[c.column]
            if c.type == "int64":
                arr = _int_arrow(values)
            elif c.type == "string":
                arr = _string_arrow(values)
            else:
                arr = pa.array(pd.to_numeric(values, errors="coerce"), type=typ, from_pandas=True)
        else:
            arr = None
        if arr is None or (len(df) and arr.null_count == len(df)):
            if typ not in nulls:
                nulls[typ] = pa.nulls(len(df), type=typ)
            arr = nulls[typ]
        arrays.append(arr)
        fields.append(pa.field(c.column, typ))
    extras = [c for c in df.columns if c not in known]
    bulk = _numeric_block(df, extras)  # wide traces: 100k counter columns converted in one Arrow call
    for extra in extras:
        if bulk and extra in bulk:
            arrays.append(bulk[extra])
            fields.append(pa.field(str(extra), bulk[extra].type))
            continue
        values = df[extra]
        if isinstance(values.dtype, pd.ArrowDtype) and pa.types.is_integer(values.dtype.pyarrow_dtype):
            arr = _arrow_integers(values)
            arrays.append(arr)
            fields.append(pa.field(str(extra), arr.type))
            continue
        if _text_categorical(values):  # names etc.: strings through the dictionary, not 1 Python object per row
            arr = _string_arrow(values)
            arrays.append(arr)
            fields.append(pa.field(str(extra), arr.type))
            continue
        if isinstance(values.dtype, (pd.CategoricalDtype, pd.StringDtype)):  # pandas 3 reads text as `str`: as
            values = values.astype(object)  # object, it is parsed as numbers where it is numbers, else Arrow's string
        if values.dtype == object:
            numeric = pd.to_numeric(values, errors="coerce")
            if numeric.notna().sum() == values.notna().sum():
                values = numeric
        try:
            arr = pa.array(values, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = pa.array(values.astype(str).where(values.notna(), None), type=pa.string())
        arrays.append(arr)
        fields.append(pa.field(str(extra), arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_integers(values: pd.Series) -> pa.Array:
    """An Arrow-backed integer extra column as it is (no copy); with nulls as int64, which is what the numpy path
    (a nullable Int64 column) gives."""
    column = values.array.__arrow_array__()
    column = column.cast(pa.int64()) if column.null_count and column.type != pa.int64() else column
    return column.combine_chunks()  # one chunk, as a numpy column gives: the Parquet pages are then the same bytes


def _numeric_block(df: pd.DataFrame, extras: list) -> dict:
    """{column: Arrow array} for the plain numpy-numeric extra columns, taken as one 2-D array per dtype: per-column
    pandas access costs ~50 us, which is seconds on a 100,000-column counter file (Arrow's from_pandas too)."""
    if len(extras) < 64 or df.columns.has_duplicates:
        return {}
    wanted = set(extras)
    by_dtype: dict = {}
    for column, dtype in zip(df.columns, df.dtypes):
        if column in wanted and isinstance(dtype, np.dtype) and dtype.kind in "iufb":
            by_dtype.setdefault(dtype, []).append(column)
    out = {}
    for dtype, columns in by_dtype.items():
        block = np.asfortranarray(df.loc[:, columns].to_numpy(dtype=dtype))  # each column contiguous
        for j, column in enumerate(columns):
            out[column] = pa.array(block[:, j], from_pandas=True)  # NaN -> null, as the per-column path
    return out


def finalize_kernels(df: pd.DataFrame) -> pa.Table:
    """Canonical kernel table: documented columns first (derived where possible), extra columns kept after."""
    return _finalize(_derive_kernel_columns(df.copy(deep=False)), "kernels")


def finalize_memcpy(df: pd.DataFrame) -> pa.Table:
    """Canonical memcpy table."""
    df = df.copy(deep=False)
    if "duration" not in df.columns and {"start", "end"} <= set(df.columns):
        df["duration"] = int_column(df["end"]) - int_column(df["start"])
    return _finalize(df, "memcpy")


def empty_memcpy() -> pa.Table:
    """The canonical memcpy table with no rows: what ingest writes for a source without copies, so every
    ingest folder has the same files and the binning rule can declare memcpy.parquet as an input."""
    return finalize_memcpy(pd.DataFrame())
