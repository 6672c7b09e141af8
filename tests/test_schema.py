"""Canonical schema: documented, Table 1 names, derived columns, launch-configuration key."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from conftest import REPO

from gpuvar.schema import canonical_columns, finalize_kernels, short_kernel_name, table1_rename
from gpuvar.schema_cli import markdown


def test_docs_schema_is_generated_from_the_data_file():
    text = (REPO / "docs" / "schema.md").read_text()
    assert markdown() in text, "docs/schema.md is stale: regenerate with `gpuvar schema`"


def test_table1_names():
    cols = [
        "Grid_Size",
        "Workgroup_Size",
        "LDS_Per_Workgroup",
        "Arch_VGPR",
        "SQ_WAVES",
        "TCC_HIT_sum",
        "TCP_PENDING_STALL_CYCLES_sum",
        "TA_BUFFER_READ_WAVEFRONTS_sum",
        "sq_insts_valu",
        "MY_COUNTER",
    ]
    renamed = table1_rename(cols)
    assert renamed["TCP_PENDING_STALL_CYCLES_sum"] == "tcp_pending_stall"
    assert renamed["TA_BUFFER_READ_WAVEFRONTS_sum"] == "ta_buf_read"
    assert renamed["TCC_HIT_sum"] == "tcc_hit"
    assert renamed["sq_insts_valu"] == "sq_insts_valu"
    assert "MY_COUNTER" not in renamed


def test_finalize_derives_and_keeps_extras():
    df = pd.DataFrame(
        {
            "kernel_name": ["void ns::gemm<float>(float*, int)", "relu(float*)", "void ns::gemm<float>(float*, int)"],
            "start": [10, 20, 40],
            "end": [15, 30, 47],
            "grid_x": [4, 8, 4],
            "grid_y": [2, 1, 2],
            "grid_z": [1, 1, 1],
            "block_x": [128, 256, 128],
            "block_y": [1, 1, 1],
            "block_z": [1, 1, 1],
            "registers_per_thread": [32, 16, 32],
            "static_shared_memory": [1024, 0, 1024],
            "dynamic_shared_memory": [0, 0, 512],
            "my_counter": [1.5, 2.5, None],
        }
    )
    out = finalize_kernels(df).to_pandas()
    names = [c.column for c in canonical_columns("kernels")]
    assert list(out.columns[: len(names)]) == names and out.columns[-1] == "my_counter"
    assert out["duration"].tolist() == [5, 10, 7]
    assert out["grid_size"].tolist() == [8, 8, 8]
    assert out["workgroup_size"].tolist() == [128, 256, 128]
    assert out["lds_per_workgroup"].tolist() == [1024, 0, 1536]
    assert out["kernel_short_name"].tolist() == ["gemm", "relu", "gemm"]
    assert out["launch_config"].tolist() == [
        "g4x2x1 b128x1x1 r32 s1024",
        "g8x1x1 b256x1x1 r16 s0",
        "g4x2x1 b128x1x1 r32 s1536",
    ]
    assert out["start"].isna().sum() == 0 and out["process_id"].isna().all()


def test_columns_without_a_value_share_one_null_array_per_type():
    """A trace fills about a third of the kernel schema with nothing (no AMD registers on NVIDIA, no input shapes,
    one process): those columns must not cost 8 bytes per launch each while the ingest holds the whole trace (1 M
    Kineto kernels: ~130 MB of its peak). They stay null, with their schema types, and write the same Parquet."""
    n = 1000
    df = pd.DataFrame({"kernel_name": ["k"] * n, "start": range(n), "end": range(1, n + 1), "process_id": [None] * n})
    table = finalize_kernels(df)
    empty = [name for name, column in zip(table.column_names, table.columns) if column.null_count == n]
    assert {"process_id", "sgpr", "op_numel", "static_shared_memory"} <= set(empty)
    assert "start" not in empty and table.schema.field("sgpr").type == pa.int64()
    by_type = {}
    for name in empty:
        data = table.column(name).chunk(0).buffers()[-1]
        by_type.setdefault(str(table.schema.field(name).type), set()).add(data.address if data else None)
    assert all(len(addresses) == 1 for addresses in by_type.values()), by_type
    assert table.num_rows == n and table.column("process_id").to_pylist() == [None] * n


def test_short_names():
    assert (
        short_kernel_name("void at::native::vectorized_elementwise_kernel<4, float>(int, float)")
        == "vectorized_elementwise_kernel"
    )
    assert short_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_SendRecv"
    assert short_kernel_name("test_function_kernel") == "test_function_kernel"
