"""Counter passes joined to their kernel trace (rocprof v1 `rocprof -i input.txt`, rocprofv3 counter_collection).

AMD profilers collect a few counters per run of the program: `rocprof -i input.txt` writes one CSV per pass
(`pmc_*.csv`, `data_movement.csv`, ...: the kernel-trace columns up to `obj`, then the counters, usually no
timestamps) and rocprofv3 a `counter_collection.csv`. A pass carries counters but no timing, so alone it cannot
say how long a launch took; the kernel trace (`results.csv`, `kernel_trace.csv`) carries the timing. Joined, each
launch has its duration and its counters: the paper's Table 1 data.

How a pass meets its trace: the passes are separate runs of one program, so a dispatch is known by its place in
the dispatch order, never by process or time (the pids differ between passes): rocprof v1 by `Index`, rocprofv3
by `Dispatch_Id`. The kernel name is the check that the files belong together: one dispatch with another kernel's
name means another program (or another input), and joining would attach counters to the wrong kernel, so it is a
one-line InputError naming the pass. Counters already present (a counter in two passes, a trace that has
counters) are kept under `<name>_pass<k>` (the pass's number), which gpuvar.causal.roles classifies like the
plain name. A joined launch whose grid or block differs in the pass (the pass ran another input) is counted, not
refused. What each join did goes to ingest.json (`counter_passes`: file, key, launches read, joined, unmatched,
other_launch_config, counters added)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError

# format -> the kernel trace a counter pass must come with (the message of a counter-only input)
KERNEL_TRACE_FILES = {"rocprof-csv": "results.csv", "rocprofv3-csv": "kernel_trace.csv"}
# launch configuration compared between a pass and its trace: a difference is counted (a pass of another input)
CONFIG_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
NO_TIMING = (
    "{n} launches read, no timing columns: give it together with its kernel trace (results.csv / kernel_trace.csv)"
)


def counter_only_message(launches: int) -> str:
    """What a counter pass given alone says (it exits 2 through InputError)."""
    return NO_TIMING.format(n=launches)


def join_pass(
    kernels: pd.DataFrame,
    counters: pd.DataFrame,
    counter_columns: list[str],
    *,
    key: str,
    key_label: str,
    pass_file: str,
    trace_file: str,
    number: int,
) -> tuple[pd.DataFrame, dict]:
    """`counters` (one row per dispatch of a pass) joined onto `kernels` by `key`, with the kernel-name check.

    Returns the kernels with the pass's counter columns added (every kernel row kept, in order; a dispatch the
    pass did not record gets nulls) and the join's record for ingest.json."""
    for frame, name in ((kernels, trace_file), (counters, pass_file)):
        if key not in frame.columns:
            raise InputError(name, f"no {key_label} column: cannot join the counter pass to its kernel trace")
    repeated = counters[key].duplicated(keep=False) & counters[key].notna()
    if repeated.any():
        raise InputError(
            pass_file, f"{key_label} {counters.loc[repeated, key].iloc[0]} repeats: cannot join the pass by dispatch"
        )
    config = [c for c in CONFIG_COLUMNS if c in kernels.columns and c in counters.columns and c not in counter_columns]
    right = counters[[key, "kernel_name", *config, *counter_columns]].dropna(subset=[key])
    right = right.rename(columns={"kernel_name": "_pass_kernel_name", **{c: f"_pass_{c}" for c in config}})
    taken = set(kernels.columns)
    renamed = {c: (f"{c}_pass{number}" if c in taken else c) for c in counter_columns}
    right = right.rename(columns=renamed)
    merged = kernels.merge(right, on=key, how="left", indicator=True, validate="many_to_one", sort=False)
    joined = merged.pop("_merge").eq("both").to_numpy()
    pass_names = merged.pop("_pass_kernel_name")
    differ = joined & (pass_names.astype(str).to_numpy() != merged["kernel_name"].astype(str).to_numpy())
    if differ.any():
        i = int(differ.argmax())
        raise InputError(
            pass_file,
            f"{key_label} {merged[key].iloc[i]} is {pass_names.iloc[i]!r} here but {merged['kernel_name'].iloc[i]!r} "
            f"in {Path(trace_file).name}: not a counter pass of the same program (passes join by {key_label})",
        )
    other_config = np.zeros(len(merged), dtype=bool)
    for c in config:
        mine = pd.to_numeric(merged[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        theirs = pd.to_numeric(merged.pop(f"_pass_{c}"), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            other_config |= joined & np.isfinite(mine) & np.isfinite(theirs) & (mine != theirs)
    unmatched = int((~right[key].isin(kernels[key])).sum())
    record = {
        "file": Path(pass_file).name,
        "key": key_label,
        "launches": int(len(counters)),
        "joined": int(joined.sum()),
        "unmatched": unmatched,
        "other_launch_config": int(other_config.sum()),
        "counters": [renamed[c] for c in counter_columns],
    }
    return merged, record


def note(record: dict, trace_rows: int) -> str:
    """One line for ingest.json's notes: what a pass added."""
    line = (
        f"{record['file']}: {len(record['counters'])} counter(s) joined onto {record['joined']} of {trace_rows} "
        f"launch(es) by {record['key']}"
    )
    if record["other_launch_config"]:
        line += (
            f"; {record['other_launch_config']} joined launch(es) ran another grid or block in the pass (another "
            "input?): their counters describe that launch configuration"
        )
    if record["unmatched"]:
        line += f"; {record['unmatched']} dispatch(es) of the pass matched no launch of the trace (not joined)"
    return line


def is_counter_pass(path: str | Path) -> bool:
    """Whether `path` is a counter pass by its header: a rocprof v1 CSV with counter columns, or a rocprofv3
    counter_collection CSV. Folders are whole traces, never a pass."""
    from gpuvar.ingest import amd_common, rocprof, rocprofv3
    from gpuvar.ingest.compression import read_head

    path = Path(path)
    if not path.is_file():
        return False
    try:
        header = amd_common.csv_header(read_head(path))
    except (OSError, InputError):
        return False
    if rocprofv3.kind_of(header) == "counter_collection":
        return True
    return rocprof.is_rocprof_header(header) and rocprof.has_counters(header)


def group_files(paths: list) -> list[list[Path]]:
    """The datasets among files given together (`gpuvar explain a b c`): one group of all files when one of them
    is a counter pass (a kernel trace with its passes: one trace), else one group per file (the ranks of a job)."""
    paths = [Path(p) for p in paths]
    if len(paths) > 1 and any(is_counter_pass(p) for p in paths):
        return [paths]
    return [[p] for p in paths]
