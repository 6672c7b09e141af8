"""The size of each launch's step: the threads launched by every kernel of the same step (and rank).

Why: the step's problem size (the sequence length of a transformer step, the rows of a batch) sets the work of
every kernel in it, but some kernels do not show it in their own launch configuration: cuBLAS GEMMs run on capped,
persistent grids and grid-stride kernels on a constant grid. The elementwise kernels of the same step do show it.
So the threads launched by the whole step are a size feature of every launch in it (role `launch`, tier 0: set by
the program, data/feature_roles.csv): on the real varlen H100 trace it carries the sequence length into the GEMMs'
call sites (explained 98 % with a + sign, where their own grids explained half with a - sign), and on a trace
whose steps do not change size it is constant and drops out. Null without steps or without a launch
configuration (Nsight Compute iterations have a grid; ROCm Kineto traces have none).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMN = "step_threads"


def launch_threads(grid_size, workgroup_size=None) -> np.ndarray:
    """float64 per launch: grid_size x workgroup_size (the grid alone without a workgroup size); NaN where unknown."""
    threads = pd.to_numeric(pd.Series(grid_size), errors="coerce").astype(np.float64)
    if workgroup_size is not None:
        threads = threads * pd.to_numeric(pd.Series(workgroup_size), errors="coerce")
    return threads.to_numpy(np.float64, na_value=np.nan)


def step_threads(kernels: pd.DataFrame) -> np.ndarray:
    """float64 per row: the sum over the row's (rank, step) of grid_size x workgroup_size; NaN where unknown."""
    n = len(kernels)
    if "step" not in kernels.columns or "grid_size" not in kernels.columns:
        return np.full(n, np.nan)
    step = pd.to_numeric(kernels["step"], errors="coerce")
    threads = pd.Series(launch_threads(kernels["grid_size"], kernels.get("workgroup_size")), index=kernels.index)
    keys = [step.rename("_step")]
    if "rank" in kernels.columns:
        keys.append(kernels["rank"].rename("_rank"))
    grouped = threads.where(step.notna()).groupby(keys, dropna=False)
    total = grouped.transform("sum").where(grouped.transform("count") > 0)
    return total.where(step.notna()).to_numpy(np.float64)


def with_step_threads(kernels):
    """The canonical Arrow kernels table with COLUMN set (appended where new; NaN written as null)."""
    import pyarrow as pa

    names = [c for c in ("step", "grid_size", "workgroup_size", "rank") if c in kernels.column_names]
    values = pa.array(step_threads(kernels.select(names).to_pandas()), type=pa.float64(), from_pandas=True)
    if COLUMN in kernels.column_names:
        return kernels.set_column(kernels.column_names.index(COLUMN), COLUMN, values)
    return kernels.append_column(COLUMN, values)
