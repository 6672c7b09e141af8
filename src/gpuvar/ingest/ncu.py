"""Nsight Compute CSV (`ncu --csv`): the long "details" layout and the wide `--page raw` layout.

Long layout: one row per (launch, metric) with `ID, Process ID, ..., Section Name, Metric Name, Metric Unit,
Metric Value`; it is pivoted to one row per launch `ID` (identity columns from the launch's first row, one
column per metric). Wide layout: one row per launch, identity columns then one column per metric, and a
second row holding the units (recognised by its empty ID). Either way the kernel table has one row per
launch, and rows_read counts launches (the long layout's metric-row count is in the notes).

Quirks handled (§2 of the shared field guide ../shared/GUIDE.md, outside the repo): UTF-8 BOM, CRLF,
`==PROF==` / program output before the header (and `==PROF==`-style report lines after it, counted in the notes),
thousands separators, `n/a`, empty units, sizes as "(x, y, z)". Older ncu versions lack Block Size / Grid Size /
Device / CC: only ID and Kernel Name (plus Metric Name and Metric Value in the long layout) are required.

Units: ncu may auto-scale units per value, so every value is converted to its base unit, and `duration` (ns)
comes from `gpu__time_duration.sum` or its alternatives (gpuvar.ingest.ncu_metrics, shared with .ncu-rep).
Nsight Compute has no timeline: start/end are null and launch order is `launch_id`. A launch without a
duration metric keeps its row (its launch configuration and counters are still valid data) with a null
duration, counted in the notes; a file where no launch has one is an error; rows whose ID is not a launch
number are dropped and counted. The ncu 2025+ details page appends rule-finding columns (RULE_COLUMNS):
metric rows stop after `Rule Name`, rule rows fill every field; rule rows are findings, kept in raw table
`rules`, never launches.

Two stages (gpuvar.ingest.raw): read_raw finds and parses the CSV (every field as text, the file's header
names; raw table `metrics` for the long layout, `launches` plus `units` for the wide one) and drops only rows
with too few fields; normalize pivots, parses numbers, scales units, maps names and drops rows without a
launch ID. `.ncu-rep` (ncu_rep.py) shares normalize's building blocks (ncu_metrics: identity, column_unit,
launch_table).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from gpuvar.errors import InputError
from gpuvar.ingest.base import (
    REPEATED_HEADER,
    ReaderOutput,
    csv_block_size,
    drop_repeated_headers,
    is_utf8,
    read_csv_bytes,
    require_columns,
    unique_names,
)
from gpuvar.ingest.ncu_metrics import (
    IDENTITY,
    SIZES,
    column_unit,
    identity,
    launch_table,
    raw_table,
    require_durations,
    unit_scale,
)
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "ncu-csv"

LONG_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
# ncu 2025+ details page: rule findings appended as columns; metric rows stop after the first of them
RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
# a concatenated export's second file starts with its BOM, then its ==PROF== lines
_REPORT_LINES = re.compile(rb"(?m)^(?:\xef\xbb\xbf)?==(?:PROF|WARNING|ERROR|INFO)==[^\n]*(?:\n|$)")
_NOT_A_VALUE = {"", "n/a", "N/A", "nan", "NaN", "-"}
_NUMBER = r"^[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity)$"

# what normalize builds from either layout: identity frame, metric columns, their units, rows without a launch ID
Columns = tuple[pd.DataFrame, dict, dict[str, str], int]


# --- finding the CSV inside the file ----------------------------------------------------------------------
def _header_fields(line: bytes) -> list[str] | None:
    """The fields of `line` if it is an ncu CSV header (fields named exactly ID and Kernel Name), else None."""
    if b"Kernel Name" not in line or b"ID" not in line:
        return None
    line = line.lstrip(b"\xef\xbb\xbf")
    try:
        fields = [f.strip() for f in next(csv.reader([line.decode("utf-8", errors="replace").rstrip("\r\n")]), [])]
    except csv.Error:  # an unbalanced quote: not a header
        return None
    if "ID" in fields and "Kernel Name" in fields:
        return fields
    return None


_LINE = re.compile(rb"[^\r\n]+")


def _find_header(data: bytes) -> tuple[int, list[str]] | None:
    """(offset of the header line, its fields), skipping ==PROF== lines and program output before it.

    Lines end at LF, CRLF or a lone CR (Windows and old Mac output mixed in one capture).
    ncu writes ID first, but the header is recognised by names alone so a reordered export still reads."""
    for line in _LINE.finditer(data):
        fields = _header_fields(line.group())
        if fields is not None:
            return line.start(), fields
    return None


def sniff(path: Path, head: bytes) -> bool:
    """An ncu CSV header (ID ... Kernel Name ...) somewhere in the first 64 KiB, after any preamble lines."""
    if not head or b"\x00" in head[:4096]:
        return False
    return _find_header(head) is not None


# --- parsing --------------------------------------------------------------------------------------------
def _strip_report_lines(data: bytes, offset: int) -> tuple[bytes | memoryview, int]:
    """The CSV part of `data` (from `offset`) without ==PROF==/==WARNING== lines interleaved after the header;
    returns (body, lines removed). Zero-copy in the usual case of no such lines."""
    if data.find(b"\n==", offset) < 0 and data.find(b"\n\xef\xbb\xbf==", offset) < 0:
        return memoryview(data)[offset:], 0
    return _REPORT_LINES.subn(b"", data[offset:])


def _check_truncated(path: Path, body, n_columns: int) -> None:
    """A file cut short mid-row (no final newline and an open quote or too few fields) is an error."""
    tail = bytes(body[-65536:])
    if tail.endswith((b"\n", b"\r")):
        return
    last = tail[max(tail.rfind(b"\n"), tail.rfind(b"\r")) + 1 :].decode("utf-8", errors="replace")  # lone CRs too
    if not last.strip():
        return
    if last.count('"') % 2:
        raise InputError(path, "truncated: the file ends inside a quoted field")
    try:
        fields = next(csv.reader([last]), [])
    except csv.Error as exc:  # e.g. a NUL byte in the last line
        raise InputError(path, f"truncated or damaged last row ({exc})") from None
    if len(fields) < n_columns:
        raise InputError(path, f"truncated: the last row has {len(fields)} of {n_columns} fields")


WIDE_BATCH = 8192  # columns converted per pass (see amd_common.WIDE_BATCH)


def _parse(path: Path, body, fields: list[str], out: RawTrace, width: int | None = None):
    """All fields as Arrow strings ('' for empty); returns (table, rows skipped for having too few fields, rule
    rows).

    A row with too few fields (program output printed after the header) is skipped and counted; one with too
    many means misaligned columns and is an error, as is any other tokenizer failure. `width` (ncu 2025+
    details page, see _rule_width): data rows have the first `width` header fields, and rows with every header
    field are rule findings, returned as raw lines for _rule_table."""
    names = unique_names(fields, "{name} ({n})", first=2)
    full = len(names)
    if width is not None:
        names = names[:width]
    short, rules = [], []
    first_pass = [True]

    def on_invalid(row):
        if row.actual_columns < row.expected_columns:
            if first_pass[0]:  # every pass of a wide file meets the same short rows: count them once
                short.append(row.number)
            return "skip"
        if width is not None and row.actual_columns == full:
            rules.append(row.text.encode("utf-8"))
            return "skip"
        return "error"

    def attempt(data) -> pa.Table:
        """Read all columns, WIDE_BATCH per pass on a very wide file: Arrow's reader holds ~10 KB per column."""
        parts = []
        for start in range(0, len(names), WIDE_BATCH):
            include = names[start : start + WIDE_BATCH] if len(names) > WIDE_BATCH else []
            parts.append(
                pcsv.read_csv(
                    pa.py_buffer(data),
                    read_options=pcsv.ReadOptions(column_names=names, skip_rows=1, block_size=csv_block_size(data)),
                    parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
                    convert_options=pcsv.ConvertOptions(
                        column_types={n: pa.string() for n in names},
                        strings_can_be_null=False,
                        quoted_strings_can_be_null=False,
                        include_columns=include,
                    ),
                )
            )
            first_pass[0] = False
        if len(parts) == 1:
            return parts[0]
        return pa.Table.from_arrays([c for part in parts for c in part.columns], names=names)

    if not is_utf8(body):
        out.notes.append("file is not valid UTF-8: decoded as latin-1")
        body = bytes(body).decode("latin-1").encode("utf-8")
    try:
        table = attempt(body)
    except pa.ArrowInvalid as exc:
        message = str(exc).splitlines()[0][:200]
        raise InputError(path, f"malformed CSV: {message}") from None
    if len(set(fields)) != len(fields):
        out.notes.append("repeated header names were suffixed ' (2)', ' (3)', ...")
    return table, len(short), rules


def _codes(column) -> tuple[np.ndarray, list]:
    """(int64 code per row, distinct values) of an Arrow string column, via dictionary encoding."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary.to_pylist()


def _numbers(column) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, is-text mask) of profiler-printed numbers, vectorised in Arrow.

    Same rules as base.to_number ('53,261,312', ' 12 ', 'n/a' -> NaN) at C++ speed, for the millions of
    values of a long-layout file; the mask marks values that are neither a number nor an n/a placeholder."""
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = pa.array(list(column), type=pa.string())
    clean = pc.utf8_trim_whitespace(pc.replace_substring(column, ",", ""))
    is_num = pc.fill_null(pc.match_substring_regex(clean, _NUMBER, ignore_case=True), False)
    values = pc.cast(pc.if_else(is_num, clean, pa.scalar(None, pa.string())), pa.float64())
    placeholder = pc.fill_null(pc.is_in(clean, value_set=pa.array(sorted(_NOT_A_VALUE))), True)
    text = pc.invert(pc.or_(is_num, placeholder))
    return values.to_numpy(zero_copy_only=False), text.to_numpy(zero_copy_only=False)


def _launch_id_values(column) -> np.ndarray:
    """Launch ID of each row as float64 (NaN when not a non-negative integer), parsed once per distinct ID."""
    codes, uniques = _codes(column)
    num = _numbers(uniques)[0] if uniques else np.empty(0)
    with np.errstate(invalid="ignore"):
        num = np.where((num >= 0) & (num < 2.0**63) & (num == np.floor(num)), num, np.nan)
    return num[codes] if len(codes) else np.empty(0)


def _metric_column(raw, values: np.ndarray, text: np.ndarray, factors) -> tuple[np.ndarray, bool]:
    """A metric column: floats in base units, or the source strings (n/a -> None) if any value is text.

    `raw` is called only for text columns (it materialises Python strings)."""
    if text.any():
        strings = raw().to_numpy(zero_copy_only=False)
        return np.where(text | ~np.isnan(values), strings, None), False
    return values * factors, True


def _valid_rows(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(row positions whose ID is a launch number, their IDs as int64)."""
    ids = _launch_id_values(table.column("ID"))
    rows = np.flatnonzero(~np.isnan(ids))
    return rows, ids[rows].astype(np.int64)


def _long_launches(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(row positions whose ID is a launch number, each row's launch (0..n-1, in order of first appearance), each
    launch's ID, the IDs' offsets per export) of the long layout.

    A launch's rows are consecutive. Exports concatenated (`cat a.csv b.csv`) number their launches from 0 again:
    a run of rows whose ID the current export already has starts the next export where the kernel name differs
    from that launch's, or where the ID is the export's first (the numbering starts over); a stray repeated row
    (same ID and name) stays with its launch. Launch IDs of export k are offset past export k-1's largest, so
    every launch keeps its own ID, in file order."""
    rows, ids = _valid_rows(table)
    if not len(rows):
        return rows, np.empty(0, np.int64), np.empty(0, np.int64), [0]
    names = _codes(table.column("Kernel Name"))[0][rows] if "Kernel Name" in table.column_names else np.zeros_like(ids)
    starts = np.flatnonzero(np.r_[True, (ids[1:] != ids[:-1]) | (names[1:] != names[:-1])])
    run_of_row = np.cumsum(np.r_[True, (ids[1:] != ids[:-1]) | (names[1:] != names[:-1])]) - 1
    keys, offsets, seen, first, offset, top = [], [0], {}, None, 0, -1
    for i, n in zip(ids[starts].tolist(), names[starts].tolist()):
        if i in seen and (seen[i] != n or i == first):  # the numbering starts over: the next export
            offset += top + 1
            offsets.append(offset)
            seen, first, top = {}, None, -1
        seen.setdefault(i, n)
        first = i if first is None else first
        top = max(top, i)
        keys.append(i + offset)
    codes, launch_ids = pd.factorize(np.asarray(keys, dtype=np.int64)[run_of_row])
    return rows, codes.astype(np.int64), np.asarray(launch_ids, dtype=np.int64), offsets


# --- long layout ------------------------------------------------------------------------------------------
def _metric_keys(table: pa.Table, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(key code per row, key names): the metric name, or 'Section: Metric' when the name recurs in several
    sections (the details page repeats some human-readable names)."""
    name_codes, names = _codes(table.column("Metric Name"))
    name_codes = name_codes[rows]
    if "Section Name" not in table.column_names:
        codes, uniques = pd.factorize(name_codes)
        return codes, [names[i] for i in uniques]
    sec_codes, sections = _codes(table.column("Section Name"))
    pair_codes, pairs = pd.factorize(name_codes * max(len(sections), 1) + sec_codes[rows])
    pair_names = pairs // max(len(sections), 1)
    shared = set(pd.Series(pair_names)[pd.Series(pair_names).duplicated()])
    keys = [
        f"{sections[p % max(len(sections), 1)]}: {names[n]}" if n in shared else names[n]
        for p, n in zip(pairs, pair_names)
    ]
    return pair_codes, keys


def _pivot_long(table: pa.Table, out: ReaderOutput) -> Columns:
    """(identity frame, metric columns, metric units, metric rows without a launch ID) of the long layout."""
    rows, id_codes, launch_ids, offsets = _long_launches(table)  # launches in order of first appearance
    n = len(launch_ids)
    if len(offsets) > 1:
        out.notes.append(
            f"{len(offsets)} exports concatenated (launch IDs start over at each): their launch IDs are offset by "
            + ", ".join(map(str, offsets))
            + " so that every launch keeps its own ID"
        )
    first = rows[np.unique(id_codes, return_index=True)[1]]
    skip = LONG_COLUMNS + RULE_COLUMNS  # a metric row's rule fields are empty (rules are in raw table `rules`)
    extras = [c for c in table.column_names if c not in IDENTITY and c not in SIZES and c not in skip]
    ident_df = table.select([c for c in table.column_names if c not in skip]).take(first).to_pandas()
    ident = identity(ident_df, np.asarray(launch_ids), extras, out)
    _note_name_conflicts(table, rows, id_codes, n, out)

    key_codes, key_names = _metric_keys(table, rows)
    if "Metric Unit" in table.column_names:
        unit_codes, unit_names = _codes(table.column("Metric Unit"))
        unit_codes = unit_codes[rows]
    else:
        unit_codes, unit_names = np.zeros(len(rows), dtype=np.int64), [""]
    scales = [unit_scale(u) for u in unit_names] or [("", 1.0)]
    factors = np.array([f for _, f in scales])[unit_codes]
    base_units = np.array([b for b, _ in scales], dtype=object)[unit_codes]
    value_col = table.column("Metric Value")
    all_values, all_text = _numbers(value_col)
    all_values, all_text = all_values[rows], all_text[rows]

    dup = pd.Series(key_codes.astype(np.int64) * max(n, 1) + id_codes).duplicated().to_numpy()
    if dup.any():
        out.notes.append(f"{int(dup.sum())} repeated (launch, metric) row(s): the first value is kept")
    order = np.argsort(key_codes, kind="stable")
    bounds = np.searchsorted(key_codes[order], np.arange(len(key_names) + 1))
    columns, unit_of = {}, {}
    for k, name in enumerate(key_names):
        sel = order[bounds[k] : bounds[k + 1]]
        sel = sel[~dup[sel]]
        values, numeric = _metric_column(
            lambda s=sel: value_col.take(rows[s]), all_values[sel], all_text[sel], factors[sel]
        )
        col = np.full(n, np.nan) if numeric else np.full(n, None, dtype=object)
        col[id_codes[sel]] = values
        columns[name] = col
        unit_of[name] = column_unit(name, base_units[sel], out)
    bad = table.num_rows - len(rows)
    out.notes.append(f"long layout: {table.num_rows} metric rows for {n} launches, {len(key_names)} metrics")
    return ident, columns, unit_of, bad


def _note_name_conflicts(table: pa.Table, rows: np.ndarray, id_codes: np.ndarray, n: int, out) -> None:
    """Note launch IDs whose rows name different kernels (e.g. two reports concatenated)."""
    if not n:
        return
    name_codes, names = _codes(table.column("Kernel Name"))
    pairs = pd.unique(id_codes.astype(np.int64) * max(len(names), 1) + name_codes[rows])
    conflicts = int((np.bincount(pairs // max(len(names), 1), minlength=n) > 1).sum())
    if conflicts:
        out.notes.append(f"{conflicts} launch ID(s) carry rows with different kernel names; the first is kept")


# --- wide layout ------------------------------------------------------------------------------------------
def _split_units_row(table: pa.Table, raw: RawTrace) -> tuple[pa.Table, pa.Table | None]:
    """(launch rows, units table) of the wide layout: the row after the header with an empty ID holds each
    column's unit; it becomes its own table (`column`, `unit`: one row per column, a 100,000-metric file stays
    one narrow table) or None when the file has no units row (noted)."""
    if table.num_rows and table.column("ID")[0].as_py().strip() == "":
        names = pa.array(table.column_names, pa.string())
        units = pa.array([table.column(name)[0].as_py() for name in table.column_names], pa.string())
        return table.slice(1), pa.Table.from_arrays([names, units], names=["column", "unit"])
    raw.notes.append("wide layout without a units row: metric units unknown (durations taken as ns)")
    return table, None


def _wide_columns(table: pa.Table, units_row: dict[str, str], out: ReaderOutput) -> Columns:
    """(identity frame, metric columns, metric units, rows without a launch ID) of the wide layout."""
    rows, ids = _valid_rows(table)
    bad = table.num_rows - len(rows)
    table = table.take(rows)
    known = [c for c in table.column_names if c in IDENTITY or c in SIZES]
    ident = identity(table.select(known).to_pandas(), ids, [], out)
    columns, unit_of = {}, {}
    metrics = [name for name in table.column_names if name not in IDENTITY and name not in SIZES]
    # every metric parsed in one Arrow pass over all values: per-column compute calls cost ~80 us each, which
    # is seconds on a 100,000-metric file; values and text masks are then cut back into columns
    n = table.num_rows
    if metrics and n:
        values, text = _numbers(pa.chunked_array([c for m in metrics for c in table.column(m).chunks], pa.string()))
        values, text = values.reshape(len(metrics), n), text.reshape(len(metrics), n)
    for i, name in enumerate(metrics):
        base, factor = unit_scale(units_row.get(name, ""))
        column = table.column(name)
        if n:
            columns[name], _ = _metric_column(lambda c=column: c, values[i], text[i], factor)
        else:
            columns[name] = np.empty(0)
        unit_of[name] = base
    out.notes.append(f"wide layout: {table.num_rows} launches, {len(columns)} metrics")
    return ident, columns, unit_of, bad


def _launch_count(table: pa.Table, long: bool) -> tuple[int, int]:
    """(launches, rows whose ID is not a launch number): the long layout has one row per (launch, metric), and
    counts its launches as normalize pivots them (_long_launches: every export's)."""
    if long:
        rows, _, launch_ids, _ = _long_launches(table)
        return len(launch_ids), table.num_rows - len(rows)
    ids = _launch_id_values(table.column("ID"))
    valid = ids[~np.isnan(ids)]
    return len(valid), table.num_rows - len(valid)


def _rule_width(fields: list[str]) -> int | None:
    """Fields of a metric row in the ncu 2025+ details page, or None for the classic layouts.

    That page (`--page details --csv`, ncu 2025.3) appends the RULE_COLUMNS to the classic long header: metric
    rows stop after the first of them (16 of 20 fields) and only rule-finding rows fill all 20. Read against the
    full header, every metric row looked "short" and was dropped, and the launches came from rule rows alone."""
    if "Metric Name" not in fields or "Rule Name" not in fields or fields.index("Rule Name") == len(fields) - 1:
        return None
    return fields.index("Rule Name") + 1


def _first_row_is_full_metric_row(body, fields: list[str]) -> bool:
    """The first data row of a 2025 details page has every header field and no rule name: the file was re-saved
    by a tool that writes every field of every row (pandas, a spreadsheet), not as ncu writes it (metric rows stop
    after Rule Name). Such a file is read against the full header."""
    text = bytes(body[: 1 << 20]).decode("utf-8", errors="replace")
    try:
        records = csv.reader(io.StringIO(text))
        next(records, None)  # the header
        first = next(records, None)
    except csv.Error:
        return False
    return first is not None and len(first) == len(fields) and first[fields.index("Rule Name")].strip() == ""


def _named_rules(rules: pa.Table, fields: list[str]) -> pa.Array:
    """Which rows of a table read against the full header are rule findings: those with a Rule Name."""
    column = rules.column(unique_names(fields, "{name} ({n})", first=2)[fields.index("Rule Name")])
    return pc.fill_null(pc.not_equal(pc.utf8_trim_whitespace(column), ""), False)


def _split_rules(fields: list[str], width: int, full: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(metric rows, rule findings) of a 2025 details page read against the full header: a row is a rule
    finding only when its Rule Name is not empty (a tool that writes every field of every row pads metric rows)."""
    named = _named_rules(full, fields)
    names = unique_names(fields, "{name} ({n})", first=2)
    return full.filter(pc.invert(named)).select(names[:width]), full.filter(named)


def _read_padded(path: Path, body, fields: list[str], width: int) -> tuple[pa.Table, int]:
    """(every row against the full header, metric rows as ncu writes them padded with empty fields; rows with
    fewer than `width` fields, skipped): the slow, order-keeping read of a file that mixes metric rows of both
    widths (one edited in a spreadsheet). Launches stay in file order, which the long layout's pivot needs."""
    names = unique_names(fields, "{name} ({n})", first=2)
    data = bytes(body)
    text = data.decode("utf-8") if is_utf8(data) else data.decode("latin-1")
    records = csv.reader(io.StringIO(text, newline=""))
    next(records, None)  # the header
    columns: list[list[str]] = [[] for _ in names]
    short = 0
    try:
        for record in records:
            if len(record) < width:
                short += bool(record)  # (a blank line is no row)
                continue
            if len(record) > len(names) or width < len(record) < len(names):
                raise InputError(path, f"malformed CSV: a row of {len(record)} fields under a header of {len(names)}")
            record += [""] * (len(names) - len(record))
            for column, value in zip(columns, record):
                column.append(value)
    except csv.Error as exc:
        raise InputError(path, f"malformed CSV: {exc}") from None
    return pa.table({n: pa.array(c, pa.string()) for n, c in zip(names, columns)}), short


def _rule_table(path: Path, fields: list[str], rows: list[bytes]) -> pa.Table:
    """The rule-finding rows (all header fields) as a raw table of strings: findings, not launches."""
    names = unique_names(fields, "{name} ({n})", first=2)
    if not rows:
        return pa.table({n: pa.array([], pa.string()) for n in names})
    data = b"\n".join(rows) + b"\n"
    try:
        return pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(column_names=names, block_size=csv_block_size(data)),
            convert_options=pcsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise InputError(path, f"malformed rule row: {str(exc).splitlines()[0][:200]}") from None


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The ncu CSV as read: every field as text under the file's header names, no row filter.

    Tables: long layout `metrics` (one row per launch and metric, as in the file); wide layout `launches` (one
    row per launch) and `units` (the units row, when the file has one). Rows with too few fields are the only
    rows left out (counted). rows_read['kernels'] counts launches plus rows whose ID is not a launch number."""
    path = Path(path)
    data = read_csv_bytes(path)
    found = _find_header(data)
    if found is None:
        raise InputError(path, 'not an Nsight Compute CSV: no header line starting "ID" that names "Kernel Name"')
    offset, fields = found
    raw = RawTrace(format=FORMAT, source=str(path), tables={})
    data, repeated = drop_repeated_headers(data, offset)
    if offset:
        skipped = data.count(b"\n", 0, offset)
        raw.notes.append(f"skipped {skipped} preamble line(s) before the CSV header")
    body, removed = _strip_report_lines(data, offset)
    if removed:
        raw.notes.append(f"ignored {removed} ==PROF==/==WARNING== report line(s) after the CSV header")
    width = _rule_width(fields)
    every_field = width is not None and _first_row_is_full_metric_row(body, fields)
    _check_truncated(path, body, width or len(fields))
    table, short, rule_rows = _parse(path, body, fields, raw, None if every_field else width)
    rules = None
    if width is not None:
        full = table if every_field else _rule_table(path, fields, rule_rows)
        if not every_field and not pc.all(_named_rules(full, fields)).as_py():
            full, short = _read_padded(path, body, fields, width)  # a metric row with every field: keep file order
            every_field = True
        table, rules = _split_rules(fields, width, full) if every_field else (table, full)
    long = any(c in table.column_names for c in LONG_COLUMNS)
    required = ("ID", "Kernel Name", "Metric Name", "Metric Value") if long else ("ID", "Kernel Name")
    require_columns(path, table.column_names, required, "Nsight Compute CSV")
    units = None
    if not long:
        table, units = _split_units_row(table, raw)
    launches, bad = _launch_count(table, long)
    if not launches:
        raise InputError(path, "no kernel launches: the CSV has a header but no data rows")
    raw.rows_read["kernels"] = launches + bad + short + repeated
    raw.drop("kernels", "row has fewer fields than the header", short)
    raw.drop("kernels", REPEATED_HEADER, repeated)
    raw.tables = {"metrics": table} if long else {"launches": table}
    if units is not None:
        raw.tables["units"] = units
    if width is not None:
        raw.tables["rules"] = rules
        raw.notes.append(
            f"details page with rule results: {rules.num_rows} rule-finding row(s) kept in the raw 'rules' table "
            "(findings, not launches)"
        )
    raw.info = {"layout": "long" if long else "wide", "units_row": units is not None}
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """One row per kernel launch from a read ncu CSV: the long layout pivoted, units converted to base units,
    canonical names where known; rows whose ID is not a launch number are dropped and counted."""
    out = raw.start_output(None)
    if raw.info.get("layout") == "long":
        ident, metrics, units, bad = _pivot_long(raw_table(raw, "metrics"), out)
    else:
        units_row = {}
        if raw.info.get("units_row"):
            pairs = raw_table(raw, "units")
            units_row = dict(zip(pairs.column("column").to_pylist(), pairs.column("unit").to_pylist()))
        ident, metrics, units, bad = _wide_columns(raw_table(raw, "launches"), units_row, out)
    out.drop("kernels", "row ID is not a launch number", bad)
    out.kernels = launch_table(ident, metrics, units, out)
    require_durations(raw.source, out.kernels)
    rules = raw.tables.get("rules")
    if rules is not None and rules.num_rows:
        out.notes.append(f"{rules.num_rows} rule-finding row(s) of the details page are not launches (not in kernels)")
    return out


def read(path: Path) -> ReaderOutput:
    """One row per kernel launch of an ncu CSV (long or wide layout), canonical names where known."""
    return normalize(read_raw(path))
