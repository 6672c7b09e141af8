"""Input shapes as size features (issue 34, item 3): the Kineto reader keeps `Input Dims`, `Input type` and
`Concrete Inputs` of every op, gpuvar.ingest.shapes turns them (or emit_nvtx's `sizes`) into numel, bytes, GEMM
M/N/K/batch and FLOPs, and the planted label-drift trace is recovered through them."""

from __future__ import annotations

import gzip
import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.demo.planted_shapes import GEMM_RATE, TRACE_NAME, write_planted_shapes
from gpuvar.ingest import ingest, load
from gpuvar.ingest.kineto import read_raw
from gpuvar.ingest.shapes import SIZE_COLUMNS, nvtx_op_and_dims, op_shape_features

VARLEN_SHAPES = "pytorch-kineto-trace/h100-varlen-with-input-shapes/varlen_shapes.pt.trace.json.gz"
VARLEN_NO_SHAPES = "pytorch-kineto-trace/h100-varlen-transformer-block/varlen.pt.trace.json.gz"
NSYS_EMIT_NVTX = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite"
TEXT_KEYS = ("Input Dims", "Input type", "Concrete Inputs")


def features(rows: list[tuple]) -> pd.DataFrame:
    """op_shape_features of (name, dims, types[, concrete]) rows, dims/types/concrete given as Python values
    (json-encoded here, with the spaces PyTorch writes) or as text."""

    def text(v):
        return v if v is None or isinstance(v, str) else json.dumps(v)

    cols = list(zip(*[(r + (None,) * (4 - len(r))) for r in rows]))
    return pd.DataFrame(op_shape_features(list(cols[0]), *[[text(v) for v in c] for c in cols[1:]]))


def row(frame: pd.DataFrame, i: int = 0) -> dict:
    return {k: (None if math.isnan(v) else v) for k, v in frame.iloc[i].items()}


# --- the raw reader -------------------------------------------------------------------------------------------


def test_real_trace_keeps_every_ops_shapes_as_compact_json():
    """Every cpu_op of the real varlen trace carries the three keys: the raw columns hold exactly their values
    (read independently here with json + gzip), in file order."""
    path = real_file(VARLEN_SHAPES)
    with gzip.open(path, "rt") as fh:
        ops = [e for e in json.load(fh)["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
    table = read_raw(path).tables["cpu_ops"]
    assert table.num_rows == len(ops) == 20200
    assert table.column("args.External id").to_pylist() == [e["args"]["External id"] for e in ops]
    for key in TEXT_KEYS:
        got = table.column(f"args.{key}").to_pylist()
        want = [json.dumps(e["args"][key], separators=(",", ":"), ensure_ascii=False) for e in ops]
        assert got == want, key
    assert got[0] == '["[8, 448, 768]","","","","False"]'  # aten::randn's size, as text


def test_trace_without_shapes_has_no_shape_columns():
    """Absent, not all-null: a reader of the raw tables tells 'not recorded' from the column's presence."""
    table = read_raw(real_file(VARLEN_NO_SHAPES)).tables["cpu_ops"]
    assert table.num_rows > 0 and not any(f"args.{k}" in table.column_names for k in TEXT_KEYS)
    assert "args.Input Dims" not in read_raw(real_file(VARLEN_NO_SHAPES)).tables["runtime"].column_names


def _op(ext: int, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 + ext, "dur": 1,
            "args": {"External id": ext, **args}}  # fmt: skip


MALFORMED = [
    _op(1, **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}),
    _op(2, **{"Input Dims": "[[2, 3]]", "Input type": 5, "Concrete Inputs": {"a": 1}}),  # not lists: null
    _op(3, **{"Input Dims": None}),
    _op(4, **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}),  # fmt: skip
    _op(5, **{"Input Dims": [[1]], "Input type": ["BAD"]}),  # (written with invalid UTF-8 in the string)
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 9, "dur": 9},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 1, "args": {"correlation": 1}},
]


@pytest.mark.parametrize("spacing", [None, 1])
def test_a_malformed_value_nulls_only_that_events_value(tmp_path, spacing):
    """A value that is not a list (or not decodable: invalid UTF-8 in a string) is null on its own event; the
    same event's other args, the other events and the other columns keep theirs. Both decode passes agree (the
    typed pass reads the shapes as raw JSON: any value fits)."""
    from gpuvar.ingest import kineto_pieces

    data = json.dumps(MALFORMED, indent=spacing).encode().replace(b'"BAD"', b'"\xff"')
    typed = kineto_pieces.process_piece(data)
    by_field = kineto_pieces._process_raw(data)
    ops, want = typed["host"]["cpu_ops"], by_field["host"]["cpu_ops"]
    for key in TEXT_KEYS:
        assert ops[f"args.{key}"][0] == want[f"args.{key}"][0]
        assert np.array_equal(ops[f"args.{key}"][1], want[f"args.{key}"][1])
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": ' + data + b"}")
    table = read_raw(path).tables["cpu_ops"].to_pydict()
    assert table["args.External id"] == [1, 2, 3, 4, 5, None]
    assert table["args.Input Dims"] == ["[[2,3],[3,4]]", None, None, "[[2,3],[3,4]]", "[[1]]", None]
    assert table["args.Input type"] == ['["float","float"]', None, None, '["float","float"]', None, None]
    assert table["args.Concrete Inputs"] == ['["",""]', None, None, None, None, None]


@pytest.mark.parametrize("gz", [False, True])  # workers read the file / get the piece through a pipe
def test_worker_processes_give_the_same_shape_columns(tmp_path, monkeypatch, gz):
    from gpuvar.ingest import kineto

    write_planted_shapes(tmp_path, steps=400, seed=2)
    trace = tmp_path / TRACE_NAME
    if not gz:
        plain = tmp_path / "shapes.json"
        plain.write_bytes(gzip.decompress(trace.read_bytes()))
        trace = plain
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr("gpuvar.ingest.json_stream.CHUNK", 64 << 10)
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "0")
    sequential = read_raw(trace).tables["cpu_ops"]
    monkeypatch.setenv("GPUVAR_KINETO_WORKERS", "2")
    if kineto._workers(trace) != 2:
        pytest.skip("needs 2 cores and fork")
    parallel = read_raw(trace).tables["cpu_ops"]
    assert parallel.num_rows == sequential.num_rows == 400 * 6  # five ops and a ProfilerStep range per step
    for key in TEXT_KEYS:
        a, b = parallel.column(f"args.{key}"), sequential.column(f"args.{key}")
        assert a.to_pylist() == b.to_pylist() and a.null_count == 400, key  # the ProfilerStep ranges: null
    assert parallel.equals(sequential)


def test_shape_columns_survive_the_raw_parquet_round_trip(tmp_path):
    from gpuvar.ingest.raw import roundtrip

    raw = read_raw(real_file(VARLEN_SHAPES))
    back = roundtrip(raw, tmp_path / "raw").tables["cpu_ops"]
    for key in TEXT_KEYS:
        assert back.column(f"args.{key}").to_pylist() == raw.tables["cpu_ops"].column(f"args.{key}").to_pylist()


# --- size features ----------------------------------------------------------------------------------------------


def test_hand_checked_ops_of_the_real_varlen_trace():
    """Ops of the first profiled step (L = 448, batch 8, d 768, 12 heads, fp32), FLOPs computed by hand."""
    table = read_raw(real_file(VARLEN_SHAPES)).tables["cpu_ops"]
    f = pd.DataFrame(
        op_shape_features(
            table.column("name"),
            table.column("args.Input Dims"),
            table.column("args.Input type"),
            table.column("args.Concrete Inputs"),
        )
    )
    f["ext"] = table.column("args.External id").to_pandas()
    by_ext = f.set_index("ext")

    # External id 7, aten::mm [[3584, 768], [768, 768]] float: M = 8*448 = 3584, K = N = 768;
    # FLOPs 2*3584*768*768 = 4,227,858,432; bytes (3584*768 + 768*768) * 4 = 13,369,344
    assert row(by_ext.loc[[7]]) == {
        "op_numel": 2_752_512.0, "op_bytes": 13_369_344.0, "op_m": 3584.0, "op_n": 768.0, "op_k": 768.0,
        "op_batch": 1.0, "op_flops": 4_227_858_432.0,
    }  # fmt: skip
    # External id 4, aten::matmul [[8, 448, 768], [768, 768]]: broadcast batch 8 of [448,768]x[768,768]: the
    # same 4,227,858,432 FLOPs as the mm it runs as
    assert row(by_ext.loc[[4]])["op_batch"] == 8.0 and row(by_ext.loc[[4]])["op_m"] == 448.0
    assert row(by_ext.loc[[4]])["op_flops"] == 4_227_858_432.0
    # External id 47, aten::bmm [[96, 448, 64], [96, 64, 448]] (QK^T, 8 x 12 heads): 2*96*448*448*64 =
    # 2,466,250,752; bytes 2 * 96*448*64 * 4 = 22,020,096
    assert row(by_ext.loc[[47]]) == {
        "op_numel": 2_752_512.0, "op_bytes": 22_020_096.0, "op_m": 448.0, "op_n": 448.0, "op_k": 64.0,
        "op_batch": 96.0, "op_flops": 2_466_250_752.0,
    }  # fmt: skip
    # External id 49, aten::mul ["float", "double"] [[8, 12, 448, 448], []]: the double is a 0-dim tensor
    # (a wrapped scalar, 8 bytes): numel 19,267,584; bytes 19,267,584*4 + 8; no GEMM
    assert row(by_ext.loc[[49]]) == {
        "op_numel": 19_267_584.0, "op_bytes": 77_070_344.0, "op_m": None, "op_n": None, "op_k": None,
        "op_batch": None, "op_flops": None,
    }  # fmt: skip
    # External id 1, aten::randn: no tensor input (its size is a ScalarList): nothing derivable
    assert set(row(by_ext.loc[[1]]).values()) == {None}
    # every GEMM op of the trace gets its FLOPs, and they follow the step's L (truth.csv): FLOPs of the first
    # aten::mm of each step = 2 * (8 L) * 768 * 768
    names = table.column("name").to_pandas().astype(str)
    gemm = names.isin(["aten::mm", "aten::bmm", "aten::matmul"])
    assert f.loc[gemm, "op_flops"].notna().all() and f.loc[~gemm, "op_flops"].isna().all()
    truth = pd.read_csv(real_file(VARLEN_SHAPES).with_name("truth.csv"))
    first_mm = f.loc[names == "aten::mm", "op_flops"].to_numpy()[::5]  # five aten::mm per step
    assert np.array_equal(first_mm, 2.0 * 8 * truth["seq_len"].to_numpy() * 768 * 768)


def test_matmul_follows_torch_broadcasting():
    f = features(
        [
            ("aten::matmul", [[2, 1, 5, 3], [4, 3, 6]]),  # batch [2,1] x [4] -> [2,4]: 8 GEMMs of 5x3 @ 3x6
            ("aten::matmul", [[3], [3]]),  # dot: M = N = 1
            ("aten::matmul", [[7, 3], [3]]),  # matrix-vector: N = 1
            ("aten::matmul", [[3], [2, 3, 4]]),  # vector-batched matrix: M = 1, batch 2
            ("aten::matmul", [[2, 5, 3], [4, 3, 6]]),  # batch 2 vs 4: not broadcastable
            ("aten::matmul", [[5, 3], [4, 6]]),  # K 3 vs 4
            ("aten::mm", [[5, 3], [3, 6, 1]]),  # mm needs 2-D operands
            ("aten::bmm", [[2, 5, 3], [3, 3, 6]]),  # bmm needs equal batches
        ]
    )
    mnkb = f[["op_m", "op_n", "op_k", "op_batch", "op_flops"]].to_numpy()
    assert mnkb[0].tolist() == [5, 6, 3, 8, 2 * 5 * 6 * 3 * 8]
    assert mnkb[1].tolist() == [1, 1, 3, 1, 6]
    assert mnkb[2].tolist() == [7, 1, 3, 1, 42]
    assert mnkb[3].tolist() == [1, 4, 3, 2, 48]
    assert np.isnan(mnkb[4:]).all()


def test_linear_addmm_baddbmm_and_their_byte_sizes_by_dtype():
    f = features(
        [
            # GPT-2 lm_head under bf16 autocast: input [8, 704, 768] (M = 5632), weight [32000, 768], no bias
            ("aten::linear", [[8, 704, 768], [32000, 768], []], ["c10::BFloat16", "c10::BFloat16", ""]),
            # addmm(bias [2304], [5632, 768], [768, 2304], beta, alpha): the first tensor input is the bias
            ("aten::addmm", [[2304], [5632, 768], [768, 2304], [], []], ["float"] * 3 + ["Scalar"] * 2),
            ("aten::baddbmm", [[4, 5, 6], [4, 5, 3], [4, 3, 6], [], []], ["c10::Half"] * 3 + ["Scalar"] * 2),
            ("aten::add", [[4, 8], [4, 8], []], ["double", "double", "Scalar"]),
            ("aten::add", [[4, 8], [4, 8], []], ["long int", "int", "Scalar"]),
            ("aten::add", [[4, 8], [4, 8]], ["c10::Float8_e4m3fn", "bool"]),
        ]
    )
    assert row(f, 0) == {
        "op_numel": 8 * 704 * 768, "op_bytes": (8 * 704 * 768 + 32000 * 768) * 2.0, "op_m": 5632.0,
        "op_n": 32000.0, "op_k": 768.0, "op_batch": 1.0, "op_flops": 2.0 * 5632 * 32000 * 768,
    }  # fmt: skip
    assert row(f, 1) == {
        "op_numel": 2304.0, "op_bytes": (2304 + 5632 * 768 + 768 * 2304) * 4.0, "op_m": 5632.0, "op_n": 2304.0,
        "op_k": 768.0, "op_batch": 1.0, "op_flops": 2.0 * 5632 * 2304 * 768,
    }  # fmt: skip
    assert row(f, 2)["op_flops"] == 2.0 * 5 * 6 * 3 * 4 and row(f, 2)["op_bytes"] == (120 + 60 + 72) * 2.0
    assert f["op_bytes"].tolist()[3:] == [2 * 32 * 8.0, 32 * 8.0 + 32 * 4.0, 32 * 1.0 + 32 * 1.0]


def test_bytes_need_every_tensor_type():
    f = features(
        [
            ("aten::add", [[4, 8], [4, 8]], ["float", "c10::NewType"]),  # unknown dtype
            ("aten::add", [[4, 8], [4, 8]], ["float"]),  # types do not line up with dims
            ("aten::add", [[4, 8], [4, 8]], None),  # not recorded (nsys)
            ("aten::cat", [[[2, 3], [4, 3]], []], ["TensorList", "Scalar"]),  # a TensorList's dtype is not written
            ("aten::_foreach_add_", [[], []], ["TensorList", "Scalar"]),  # its tensors not recorded either
        ]
    )
    assert f["op_bytes"].isna().all()
    assert f["op_numel"].tolist()[:4] == [32.0, 32.0, 32.0, 18.0] and math.isnan(f["op_numel"].iloc[4])


@pytest.mark.parametrize(
    "dims",
    [
        "not json",
        "[[1, 2],",
        '"abc"',
        "[[-1, 2], [2, 3]]",
        "[[1.5, 2], [2, 3]]",
        "[1, 2]",
        "{}",
        "[[true, 2], [2, 3]]",
        "[" * 5000 + "]" * 5000,
        None,
    ],
)
def test_malformed_dims_give_nan_without_touching_other_ops(dims):
    f = features([("aten::mm", dims, '["float", "float"]'), ("aten::mm", "[[2, 3], [3, 4]]", '["float", "float"]')])
    assert f.iloc[0].isna().all()
    assert f.iloc[1].tolist() == [6.0, 72.0, 2.0, 4.0, 3.0, 1.0, 48.0]


def test_convolution_from_dims_and_concrete_inputs():
    alexnet_conv1 = ([[8, 3, 224, 224], [64, 3, 11, 11], [64], [], [], [], []],
                     ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar"])  # fmt: skip
    f = features(
        [
            # conv2d(input, weight, bias, stride 4, padding 2, dilation 1, groups 1): output 55 x 55
            # (floor((224 + 4 - 10 - 1) / 4) + 1); M = 8*55*55, N = 64, K = 3*11*11
            ("aten::conv2d", *alexnet_conv1, ["", "", "", "[4, 4]", "[2, 2]", "[1, 1]", "1"]),
            # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): padding comes first
            (
                "aten::cudnn_convolution",
                [[8, 3, 224, 224], [64, 3, 11, 11], [], [], [], [], [], [], []],
                ["float", "float"] + ["ScalarList"] * 3 + ["Scalar"] * 4,
                ["", "", "[2, 2]", "[4, 4]", "[1, 1]", "1", "False", "False", "True"],
            ),
            # depthwise 3x3, padding 'same': groups 32, output 56 x 56
            (
                "aten::conv2d",
                [[2, 32, 56, 56], [32, 1, 3, 3], []],
                ["float", "float", ""],
                ["", "", "", "[1]", "same", "[1]", "32"],
            ),  # fmt: skip
            ("aten::conv2d", *alexnet_conv1),  # no Concrete Inputs: stride and padding unknown
            # convolution(..., transposed True, ...): not derived
            (
                "aten::convolution",
                [[1, 4, 8, 8], [4, 2, 3, 3], [], [], [], [], [], [], []],
                ["float", "float", ""] + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"],
                ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"],
            ),  # fmt: skip
        ]
    )
    want = [8 * 55 * 55, 64, 3 * 11 * 11, 1, 2.0 * 8 * 55 * 55 * 64 * 363]
    cols = ["op_m", "op_n", "op_k", "op_batch", "op_flops"]
    assert f.loc[0, cols].tolist() == want and f.loc[1, cols].tolist() == want
    assert f.loc[2, cols].tolist() == [2 * 56 * 56, 1, 9, 32, 2.0 * 2 * 56 * 56 * 9 * 32]
    assert f.loc[3:, cols].isna().all().all()


def test_attention_flops_as_torch_counts_them():
    q = [8, 12, 704, 64]  # GPT-2 (12 heads of 64) at L = 704
    fwd = 2.0 * 8 * 12 * 704 * 704 * (64 + 64)  # QK^T and PV: 4 B H L S E
    f = features(
        [
            ("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []]),
            ("aten::_scaled_dot_product_cudnn_attention", [q, q, q, [], [], [], [], [], []]),
            # backward: grad_out first; 5 GEMMs with the recomputed scores: 2 B H L S (3 E + 2 Ev)
            ("aten::_cudnn_attention_backward", [q, q, q, q, q, [8, 12, 704, 1]] + [[]] * 10),
            # flash's own op takes [B, L, H, E]
            ("aten::_flash_attention_forward", [[8, 704, 12, 64]] * 3 + [[]] * 6),
            ("aten::scaled_dot_product_attention", [[96, 704, 64]] * 3),  # packed 3-D: not derived
        ]
    )
    assert f["op_flops"].tolist()[:4] == [fwd, fwd, 2.0 * 8 * 12 * 704 * 704 * (3 * 64 + 2 * 64), fwd]
    assert f.loc[0, ["op_m", "op_n", "op_k", "op_batch"]].tolist() == [704, 704, 64, 96]
    assert math.isnan(f["op_flops"].iloc[4])


def test_features_are_computed_once_per_distinct_op_and_broadcast():
    """The same answer for every row of a repeated shape, whatever the input container."""
    names = np.array(["aten::mm", "aten::relu", None] * 1000, dtype=object)
    dims = pd.Categorical(["[[2, 3], [3, 4]]", "[[5, 5]]", "[[1]]"] * 1000)
    f = op_shape_features(names, dims, None)
    assert set(f) == set(SIZE_COLUMNS) and all(v.dtype == np.float64 and len(v) == 3000 for v in f.values())
    assert (f["op_flops"][0::3] == 48).all() and np.isnan(f["op_flops"][1::3]).all()
    assert (f["op_numel"][1::3] == 25).all() and (f["op_numel"][2::3] == 1).all()  # a null name: still numel
    assert op_shape_features([], [], None)["op_flops"].shape == (0,)
    with pytest.raises(ValueError, match="2 values where 3"):
        op_shape_features(["a", "b", "c"], ["[]", "[]"])


# --- nsys emit_nvtx ---------------------------------------------------------------------------------------------


def test_emit_nvtx_texts_give_op_names_and_sizes():
    """The text PyTorch's getNvtxStr writes: name[, seq = N][, op_id = M][, sizes = [...]][, input_op_ids = ...]."""
    texts = [
        "aten::mm, seq = 12, op_id = 34, sizes = [[3584, 768], [768, 768]], input_op_ids = [(33,0), (2,0)]",
        "aten::addmm, op_id = 7, sizes = [[768], [64, 768], [768, 768], [], []]",
        "aten::cat, seq = 3, op_id = 9, sizes = [[2, 3], [4, 3], []]",  # a TensorList flattened
        "aten::empty_strided, op_id = 999730",  # emit_nvtx without record_shapes (the real nsys trace)
        "autograd::engine::evaluate_function: MmBackward0, op_id = 5, sizes = [[64, 768]]",
        "ncclSend",  # not emit_nvtx
        "step 3, sizes = [[oops]]",  # unparseable sizes
        None,
    ]
    names, dims = nvtx_op_and_dims(texts)
    assert names.tolist() == [
        "aten::mm", "aten::addmm", "aten::cat", "aten::empty_strided",
        "autograd::engine::evaluate_function: MmBackward0", "ncclSend", "step 3", None,
    ]  # fmt: skip
    assert dims.tolist() == [
        "[[3584,768],[768,768]]", "[[768],[64,768],[768,768],[],[]]", "[[2,3],[4,3],[]]", None, "[[64,768]]",
        None, None, None,
    ]  # fmt: skip
    f = pd.DataFrame(op_shape_features(names, dims))  # no types in nsys: bytes unknown
    assert f["op_flops"].tolist()[:2] == [2.0 * 3584 * 768 * 768, 2.0 * 64 * 768 * 768]
    assert f["op_bytes"].isna().all() and f["op_numel"].tolist()[:3] == [3584 * 768, 768, 6]


def test_emit_nvtx_names_match_the_launching_op_of_the_real_nsys_trace():
    """The op names are the launch_op that call sites give the same ranges (emit_nvtx numbers removed)."""
    from gpuvar.ingest.host_timeline import EMIT_NVTX_SUFFIX

    path = real_file(NSYS_EMIT_NVTX)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        texts = [
            t
            for (t,) in db.execute(
                "SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id"
            )
        ]
    names, dims = nvtx_op_and_dims(texts)
    assert len(texts) > 10_000 and sum("op_id = " in t for t in texts if t) > 10_000
    assert names.tolist() == [None if t is None else EMIT_NVTX_SUFFIX.sub("", t) for t in texts]
    assert all(d is None for d in dims)  # recorded without record_shapes


# --- planted truth ----------------------------------------------------------------------------------------------


def _planted(tmp_path, steps=80, seed=5):
    write_planted_shapes(tmp_path, steps=steps, seed=seed)
    return tmp_path / TRACE_NAME, json.loads((tmp_path / "truth.json").read_text())


def test_planted_shapes_trace_ingests_balanced_with_the_dims_on_its_ops(tmp_path):
    trace, truth = _planted(tmp_path)
    report = ingest(trace, tmp_path / "out")
    k = report["tables"]["kernels"]
    assert k["rows_read"] == k["rows_written"] == 80 * 5 and k["balanced"] and not k["dropped"]
    assert any("80 steps from ProfilerStep#N ranges" in n for n in report["notes"])
    ops = read_raw(trace).tables["cpu_ops"].to_pandas()
    ops = ops[ops["cat"] == "cpu_op"]
    assert len(ops) == 400 and ops["args.Input Dims"].notna().all()
    n = np.repeat(truth["n"], 5)
    assert (ops["args.Input Dims"].to_numpy()[0::5] == [f"[[{v},768],[768,768]]" for v in truth["n"]]).all()
    assert (ops["args.Input Dims"].to_numpy()[4::5] == [f"[[{v},768],[768,3072]]" for v in n[4::5]]).all()
    again = tmp_path / "again"
    _planted(again)
    assert (again / trace.name).read_bytes() == trace.read_bytes()  # seeded: the same bytes


def test_planted_label_drift_is_recovered_through_the_input_shapes(tmp_path):
    """The kernel name of a GEMM call site drifts with the size and its grid_y falls as the size grows, but the
    ingest joins every launch to its op's input shapes (gpuvar.ingest.call_sites), which give back the planted
    FLOPs exactly and explain the duration of the drifting label; the physical call site is one GEMM."""
    trace, truth = _planted(tmp_path, steps=120, seed=7)
    _, kernels, _ = load(trace)
    launches = pd.DataFrame(truth["launches"]).sort_values("correlation").reset_index(drop=True)
    k = kernels.to_pandas().sort_values("correlation_id").reset_index(drop=True)
    assert k["kernel_name"].astype(str).tolist() == launches["kernel"].tolist()
    gemm = launches["op"].isin(["aten::mm", "aten::bmm"]).to_numpy()
    assert np.array_equal(k.loc[gemm, "op_flops"].to_numpy(), launches.loc[gemm, "flops"].to_numpy())
    assert k.loc[~gemm, "op_flops"].isna().all() and k["op_numel"].notna().all()
    # the drifting label of a per-name call site: the first gemm_64x256 launched by aten::mm in its step
    k["name_index"] = k.groupby(["step", "launch_op", "kernel_name"], observed=True).cumcount()
    site = k[(k["kernel_name"] == "gemm_64x256") & (k["launch_op"] == "aten::mm") & (k["name_index"] == 0)]
    roles = launches.loc[site.index, "role"]
    assert set(roles) == {"Wq", "MLP"}  # two different GEMMs under one label
    assert r2(site["op_flops"], site["duration"]) > 0.97  # FLOPs explain the drifting label's duration
    # the physical call site: the step's first aten::mm, whatever its kernel variant, is always the Wq GEMM;
    # its grid_y falls as the size grows (66x2 -> 132x1), a library choice; the size is the cause
    wq = k[k["call_site"] == "aten::mm#0.0"]
    assert set(launches.loc[wq.index, "role"]) == {"Wq"}
    assert wq["kernel_name"].nunique() == 2 and np.corrcoef(wq["grid_y"], wq["duration"])[0, 1] < -0.5
    assert r2(wq["op_flops"] / wq["kernel_name"].map(GEMM_RATE).astype(float), wq["duration"]) > 0.95


def r2(x, y) -> float:
    fit = np.polyfit(x, y, 1)
    return 1 - (y - np.polyval(fit, x)).var() / y.var()
