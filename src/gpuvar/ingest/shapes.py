"""Size features of the op that launched the work, from the input shapes a trace records (issue 34, item 3).

Why: cuBLAS and cuDNN GEMMs run persistent grids, and grid-stride kernels a constant grid, so the launch
configuration does not carry the problem size (on the H100 traces the grid explained 0.34-0.53 of a GEMM's
duration variance, the sequence length 0.98-1.00). The program's op does: PyTorch writes its input shapes.

These are SIZE features: the program sets them before the kernel is launched. They may cause the kernel's
launch configuration, its counters and its duration, never the reverse (role `launch`, tier 0, in
data/feature_roles.csv, pattern `op_.*`).

Sources (both give an op name and a dims text, the JSON text of one list per input):
  * Kineto, `torch.profiler.profile(record_shapes=True)`: each cpu_op's args `Input Dims` (`[[3584, 768],
    [768, 768]]`; `[]` for a scalar, None or a 0-dim tensor; a list of shapes for a TensorList), `Input type`
    (`["float", "c10::BFloat16", "Scalar", ""]`: a tensor's dtype, else a kind) and `Concrete Inputs` (scalars
    and int lists as text, `"[1, 1]"`; "" for tensors). The raw `cpu_ops` table keeps them as text columns
    `args.Input Dims`, `args.Input type`, `args.Concrete Inputs` (gpuvar.ingest.kineto).
  * Nsight Systems, `torch.autograd.profiler.emit_nvtx(record_shapes=True)`: the NVTX range text
    `aten::mm, seq = 12, op_id = 34, sizes = [[3584, 768], [768, 768]], input_op_ids = [(33,0), (2,0)]`
    (PyTorch's getNvtxStr, torch/csrc/profiler/util.cpp; `seq` only for ops with a sequence number, `sizes`
    only with record_shapes, lists flattened into their tensors' shapes). No types: op_bytes is NaN there.
    `nvtx_op_and_dims` splits such texts.

`op_shape_features(op_names, dims_texts, types_texts=None, concrete_texts=None)` returns, aligned with the
inputs, float64 arrays (NaN: not derivable from what was recorded):
  op_numel  elements of the first tensor input that has a dimension (a 0-dim tensor is a wrapped scalar: 1
            when it is the only kind of tensor input). A TensorList counts its tensors' elements together,
            NaN where they are not recorded (Kineto writes `[]` for most). NaN without tensor inputs
            (aten::empty, aten::randn: their size is in Concrete Inputs).
  op_bytes  sum over the tensor inputs of numel x element size of its `Input type`. NaN when a tensor
            input's type is not a known dtype (a TensorList: its dtype is not written), when types are not
            recorded (nsys) or do not line up with the dims, or without tensor inputs. Inputs only: the
            output is not recorded.
  op_m, op_n, op_k, op_batch, op_flops  the GEMM of the op, op_flops = 2 * M * N * K * batch:
    aten::mm, _scaled_mm, _int_mm  [M,K] x [K,N];     aten::addmm(_), _addmm_activation  (bias, [M,K], [K,N])
    aten::bmm  [B,M,K] x [B,K,N];                     aten::baddbmm(_), addbmm(_)  (bias, [B,M,K], [B,K,N])
    aten::matmul, dot, mv, addmv(_)  by torch.matmul's rules: a 1-D first operand is [1,K] (M = 1), a 1-D
      second one [K,1] (N = 1), the batch dimensions broadcast (each pair equal or one of them 1); batch is
      their product;
    aten::linear  (input [..., K], weight [N, K]): M = the product of the input's leading dims, batch 1;
    convolution (aten::convolution, _convolution, conv1d/2d/3d, cudnn_convolution, miopen_convolution,
      mkldnn_convolution) as its implicit GEMM: input [N, C, *spatial] (or unbatched [C, *spatial]), weight
      [Cout, C/groups, *kernel], output spatial size floor((in + 2 padding - dilation (kernel - 1) - 1) /
      stride) + 1 (padding 'same': in; 'valid': 0): M = N * prod(output spatial), N = Cout / groups,
      K = C/groups * prod(kernel), batch = groups. Stride, padding, dilation and groups are read from
      Concrete Inputs: NaN where the trace has none (older PyTorch, nsys) or they do not parse, and for a
      transposed convolution (not derived);
    attention (aten::scaled_dot_product_attention, _scaled_dot_product_{flash,efficient,cudnn}_attention,
      _cudnn_attention_forward, with q [B,H,L,E], k [B,Hk,S,E], v [B,Hk,S,Ev]; _flash_attention_forward and
      _efficient_attention_forward with [B,L,H,E]; their _backward ops with q, k, v after grad_out): M = L,
      N = S, K = E, batch = B*H, and op_flops as torch.utils.flop_counter counts them: 2*B*H*L*S*(E + Ev)
      forward (QK^T and PV: 4*B*H*L*S*E when Ev = E), 2*B*H*L*S*(3E + 2Ev) backward (with the recomputed
      scores), causal masking not discounted. Packed variable-length (3-D) inputs: NaN (their lengths are in
      tensor values, not dims).
    NaN for every other op, and where operand dims do not fit the op (rank, K or batch mismatch).
A dims text that is not a list of inputs, each a list of non-negative integers (or a TensorList's list of
such lists), gives NaN in every column for that op only, never an error.

The work is done once per distinct (name, dims, types, concrete) combination and broadcast back: shapes
repeat from step to step, so a trace of 10^6 ops costs a few thousand parses.
"""

from __future__ import annotations

import math
import re

import msgspec
import numpy as np
import pandas as pd

SIZE_COLUMNS = ("op_numel", "op_bytes", "op_m", "op_n", "op_k", "op_batch", "op_flops")
_NAN7 = (math.nan,) * 7

# Tensor dtype names as PyTorch writes them (caffe2::TypeMeta::name(): the demangled C++ type, so gcc's
# "long int" and clang's "long" are both seen) -> bytes per element.
ELEMENT_BYTES = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "long long": 8,
    "__int64": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "unsigned short": 2,
    "short unsigned int": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "long unsigned int": 8,
    "unsigned long long": 8,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::qint8": 1,
    "c10::quint8": 1,
    "c10::qint32": 4,
    "c10::quint4x2": 1,
    "c10::quint2x4": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,
}
# What `Input type` says for an input that is not a tensor (the profiler's own words, and IValue tag kinds)
NOT_TENSOR = frozenset(
    "Scalar ScalarList GenericList String Device Bool Int Double ComplexDouble SymInt SymFloat SymBool None Tuple "
    "Generator Layout ScalarType MemoryFormat Object PyObject Stream Storage Capsule Future Await Blob Quantizer "
    "Uninitialized Enum GenericDict RRef IntList DoubleList BoolList".split()
) | {""}
TENSOR_LIST = "TensorList"

# op name -> (kind, positions of its operands among the inputs)
_GEMM = {
    **{name: ("mm", (0, 1)) for name in ("aten::mm", "aten::_scaled_mm", "aten::_int_mm")},
    **{name: ("mm", (1, 2)) for name in ("aten::addmm", "aten::addmm_", "aten::_addmm_activation")},
    "aten::bmm": ("bmm", (0, 1)),
    **{name: ("bmm", (1, 2)) for name in ("aten::baddbmm", "aten::baddbmm_", "aten::addbmm", "aten::addbmm_")},
    **{name: ("matmul", (0, 1)) for name in ("aten::matmul", "aten::dot", "aten::vdot", "aten::mv")},
    **{name: ("matmul", (1, 2)) for name in ("aten::addmv", "aten::addmv_")},
    "aten::linear": ("linear", (0, 1)),
}
# convolution op -> (stride, padding, dilation, transposed, groups) positions among its inputs (None: absent)
_CONV = {
    "aten::convolution": (3, 4, 5, 6, 8),
    "aten::_convolution": (3, 4, 5, 6, 8),
    "aten::conv1d": (3, 4, 5, None, 6),
    "aten::conv2d": (3, 4, 5, None, 6),
    "aten::conv3d": (3, 4, 5, None, 6),
    "aten::cudnn_convolution": (3, 2, 4, None, 5),
    "aten::miopen_convolution": (4, 3, 5, None, 6),
    "aten::mkldnn_convolution": (4, 3, 5, None, 6),
}
# attention op -> (q position, layout of q/k/v, backward)
_ATTENTION = {
    **{
        name: (0, "bhle", False)
        for name in (
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_attention_math",
            "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_efficient_attention",
            "aten::_scaled_dot_product_cudnn_attention",
            "aten::_cudnn_attention_forward",
        )
    },
    "aten::_flash_attention_forward": (0, "blhe", False),
    "aten::_efficient_attention_forward": (0, "blhe", False),
    **{
        name: (1, "bhle", True)
        for name in (
            "aten::_scaled_dot_product_flash_attention_backward",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
            "aten::_scaled_dot_product_efficient_attention_backward",
            "aten::_scaled_dot_product_cudnn_attention_backward",
            "aten::_cudnn_attention_backward",
        )
    },
    "aten::_flash_attention_backward": (1, "blhe", True),
    "aten::_efficient_attention_backward": (1, "blhe", True),
}

# emit_nvtx's suffix (the same rule gpuvar.ingest.call_sites uses to name the launching op) and its sizes
NVTX_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$", re.S)
NVTX_SIZES = re.compile(r",\s*sizes\s*=\s*(\[[\[\]\d,\s-]*\])\s*(?=,\s*input_op_ids\s*=|$)")

_DECODE = msgspec.json.Decoder()


def op_shape_features(op_names, dims_texts, types_texts=None, concrete_texts=None) -> dict[str, np.ndarray]:
    """Size features (SIZE_COLUMNS, float64, NaN where not derivable) of ops from their recorded input shapes.

    op_names: op names (`aten::mm`); dims_texts: JSON text of each op's `Input Dims` (or emit_nvtx sizes);
    types_texts: JSON text of `Input type`, or None where not recorded; concrete_texts: JSON text of
    `Concrete Inputs` (convolution stride, padding, dilation, groups), or None. Each is array-like of one
    entry per op (list, numpy, pandas Series or Categorical, pyarrow array); a null entry is a missing value.
    See the module docstring for every column's meaning."""
    columns = [op_names, dims_texts, types_texts, concrete_texts]
    n = len(op_names)
    codes, uniques = [], []
    for values in columns:
        if values is None:
            codes.append(np.full(n, -1, np.int64))
            uniques.append([])
            continue
        if len(values) != n:
            raise ValueError(f"op_shape_features: {len(values)} values where {n} op names were given")
        c, u = _factorize(values)
        codes.append(c)
        uniques.append(u)
    combo = codes[0]
    for c, u in zip(codes[1:], uniques[1:]):  # one code per distinct combination, pairwise (no overflow)
        combo, _ = pd.factorize((combo + 1) * (len(u) + 1) + (c + 1))
    combo = np.asarray(combo, dtype=np.int64)
    _, first = np.unique(combo, return_index=True)  # the first row of each combination (codes 0..k-1)
    parsed: dict = {}
    table = np.empty((len(first), len(SIZE_COLUMNS)), np.float64)
    for j, row in enumerate(first):
        name, dims, types, concrete = ((u[c[row]] if c[row] >= 0 else None) for c, u in zip(codes, uniques))
        table[j] = _features(
            name if isinstance(name, str) else None,
            _parsed(dims, parsed),
            _parsed(types, parsed),
            _parsed(concrete, parsed),
        )
    values = table[combo] if n else np.zeros((0, len(SIZE_COLUMNS)))
    return {name: np.ascontiguousarray(values[:, i]) for i, name in enumerate(SIZE_COLUMNS)}


def nvtx_op_and_dims(texts) -> tuple[np.ndarray, np.ndarray]:
    """NVTX range texts of emit_nvtx -> (op names, dims texts), object arrays aligned with `texts`.

    The op name is the text without emit_nvtx's ", seq = ..., op_id = ..., sizes = ..., input_op_ids = ..."
    suffix (the launching op's name as gpuvar.ingest.call_sites gives it; a text without the suffix is its own
    name). The dims text is the `sizes` list as compact JSON (`[[3584,768],[768,768]]`, the form of the Kineto
    raw columns), None where the text has no sizes (emit_nvtx without record_shapes, a user range) or they do
    not parse. A null text gives (None, None)."""
    codes, uniques = _factorize(texts)
    names, dims = [], []
    for text in uniques:
        if not isinstance(text, str):
            names.append(None)
            dims.append(None)
            continue
        names.append(NVTX_SUFFIX.sub("", text))
        found = NVTX_SIZES.search(text)
        value = _json(found.group(1)) if found else None
        dims.append(msgspec.json.encode(value).decode() if isinstance(value, list) else None)
    lookup_names = np.array(names + [None], dtype=object)
    lookup_dims = np.array(dims + [None], dtype=object)
    return lookup_names[codes], lookup_dims[codes]


def _factorize(values) -> tuple[np.ndarray, list]:
    """(int64 codes, -1 for null; distinct values) of any array-like (pyarrow arrays via pandas)."""
    if hasattr(values, "to_pandas") and not isinstance(values, (pd.Series, pd.Categorical)):
        values = values.to_pandas()
    if not isinstance(values, (pd.Series, pd.Categorical, pd.Index)):
        values = pd.Series(np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values)
    codes, uniques = pd.factorize(values)
    return np.asarray(codes, dtype=np.int64), list(uniques)


def _json(text):
    try:
        return _DECODE.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, TypeError):
        return None


def _parsed(text, cache: dict):
    """A JSON text decoded once per distinct text (None where null or not JSON)."""
    if not isinstance(text, (str, bytes)):
        return None
    if text not in cache:
        cache[text] = _json(text)
    return cache[text]


def _is_shape(value) -> bool:
    return isinstance(value, list) and all(type(d) is int and d >= 0 for d in value)


def _inputs(dims, types) -> list[tuple] | None:
    """Each input as (kind, shape, element bytes): kind 'tensor' (shape a list), 'list' (shape a list of
    shapes), 'other' (not a tensor) or 'unknown' (type not recorded or not known); element bytes None where not
    known. None when the dims are malformed."""
    if not isinstance(dims, list):
        return None
    if not (isinstance(types, list) and len(types) == len(dims) and all(isinstance(t, str) for t in types)):
        types = None
    out = []
    for i, entry in enumerate(dims):
        kind = None if types is None else types[i]
        if kind == TENSOR_LIST:
            if not (isinstance(entry, list) and all(_is_shape(s) for s in entry)):
                return None
            out.append(("list", entry, None))
        elif not _is_shape(entry):  # (a TensorList whose type is not recorded: malformed for this reader)
            return None
        elif kind in ELEMENT_BYTES:
            out.append(("tensor", entry, ELEMENT_BYTES[kind]))
        elif kind in NOT_TENSOR:
            out.append(("other", entry, None))
        else:
            out.append(("unknown", entry, None))
    return out


def _features(name, dims, types, concrete) -> tuple:
    inputs = _inputs(dims, types)
    if inputs is None:
        return _NAN7
    numel, nbytes = _numel_bytes(inputs, types is not None)
    gemm = _gemm(name, inputs, concrete)
    return (numel, nbytes, *gemm)


def _numel_bytes(inputs: list, typed: bool) -> tuple[float, float]:
    """op_numel and op_bytes (module docstring). An input whose type is unknown is a tensor when it has
    dimensions (nsys records no types; an empty entry there is a scalar or None)."""
    tensors = [(k, s, b) for k, s, b in inputs if k in ("tensor", "list") or (k == "unknown" and s)]
    if not tensors:
        return math.nan, math.nan
    numel = math.nan
    for kind, shape, _ in tensors:
        if kind == "list":  # a TensorList: its tensors' elements together (NaN where they are not recorded)
            numel = float(sum(math.prod(s) for s in shape)) if shape else math.nan
            break
        if shape:
            numel = float(math.prod(shape))
            break
    else:
        numel = 1.0  # only 0-dim tensors
    if not typed or any(b is None for _, _, b in tensors) or any(k == "unknown" for k, _, _ in inputs):
        return numel, math.nan
    return numel, float(sum(math.prod(s) * b for _, s, b in tensors))


def _operand(inputs: list, i: int) -> list | None:
    """The shape of tensor input i (None where absent or not a tensor)."""
    if i >= len(inputs):
        return None
    kind, shape, _ = inputs[i]
    return shape if kind in ("tensor", "unknown") else None


def _gemm(name, inputs: list, concrete) -> tuple:
    """(M, N, K, batch, FLOPs) of the op, NaN where it is not one of ours or its dims do not fit."""
    if name in _GEMM:
        kind, (ia, ib) = _GEMM[name]
        a, b = _operand(inputs, ia), _operand(inputs, ib)
        if a is None or b is None:
            return _NAN7[:5]
        mnkb = {"mm": _mm, "bmm": _bmm, "matmul": _matmul, "linear": _linear}[kind](a, b)
        return _with_flops(mnkb)
    if name in _CONV:
        return _with_flops(_conv(_CONV[name], inputs, concrete))
    if name in _ATTENTION:
        return _attention(_ATTENTION[name], inputs)
    return _NAN7[:5]


def _with_flops(mnkb) -> tuple:
    if mnkb is None:
        return _NAN7[:5]
    m, n, k, batch = mnkb
    return (float(m), float(n), float(k), float(batch), 2.0 * m * n * k * batch)


def _mm(a: list, b: list):
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    return a[0], b[1], a[1], 1


def _bmm(a: list, b: list):
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    return a[1], b[2], a[2], a[0]


def _matmul(a: list, b: list):
    """torch.matmul: 1-D operands padded ([K] -> [1,K] first, [K,1] second), batch dims broadcast."""
    if not a or not b:
        return None
    a2 = a if len(a) >= 2 else [1, *a]
    b2 = b if len(b) >= 2 else [*b, 1]
    if a2[-1] != b2[-2]:
        return None
    batch = 1
    ba, bb = a2[:-2], b2[:-2]
    for i in range(1, max(len(ba), len(bb)) + 1):
        x = ba[-i] if i <= len(ba) else 1
        y = bb[-i] if i <= len(bb) else 1
        if x != y and 1 not in (x, y):
            return None
        batch *= max(x, y) if 0 not in (x, y) else 0
    return a2[-2], b2[-1], a2[-1], batch


def _linear(x: list, weight: list):
    """F.linear: input [..., K], weight [N, K] (a 1-D weight [K]: N = 1)."""
    if not x or len(weight) not in (1, 2) or x[-1] != weight[-1]:
        return None
    return math.prod(x[:-1]), (weight[0] if len(weight) == 2 else 1), x[-1], 1


def _concrete_value(concrete, i):
    """Concrete Inputs entry i: an int list ('[1, 1]'), an int ('1'), a bool ('True'/'False'), a padding mode
    ('same'/'valid'), else None."""
    if i is None or not isinstance(concrete, list) or i >= len(concrete) or not isinstance(concrete[i], str):
        return None
    text = concrete[i].strip().strip("'\"").strip()
    if text in ("True", "true", "False", "false"):
        return text.lower() == "true"
    if text in ("same", "valid"):
        return text
    value = _json(text)
    if type(value) is int or (isinstance(value, list) and all(type(v) is int for v in value)):
        return value
    return None


def _conv(spec: tuple, inputs: list, concrete):
    """Implicit-GEMM (M, N, K, groups) of a convolution, None where not derivable (module docstring)."""
    i_stride, i_padding, i_dilation, i_transposed, i_groups = spec
    x, w = _operand(inputs, 0), _operand(inputs, 1)
    if x is None or w is None or len(w) < 3:
        return None
    spatial = len(w) - 2
    if len(x) == spatial + 1:  # unbatched input
        x = [1, *x]
    if len(x) != spatial + 2:
        return None
    stride, padding, dilation = (_concrete_value(concrete, i) for i in (i_stride, i_padding, i_dilation))
    groups = _concrete_value(concrete, i_groups)
    transposed = _concrete_value(concrete, i_transposed) if i_transposed is not None else False
    if transposed is not False or type(groups) is not int or groups < 1:
        return None
    stride, dilation = _expand(stride, spatial), _expand(dilation, spatial)
    if stride is None or dilation is None or min(stride, default=1) < 1 or min(dilation, default=1) < 1:
        return None
    n, c, sizes = x[0], x[1], x[2:]
    cout, cin_g, kernel = w[0], w[1], w[2:]
    if cin_g * groups != c or cout % groups:
        return None
    if padding == "same":
        out = list(sizes)
    else:
        padding = [0] * spatial if padding == "valid" else _expand(padding, spatial)
        if padding is None:
            return None
        out = [
            (s + 2 * p - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in zip(sizes, padding, dilation, kernel, stride)
        ]
    if min(out, default=1) < 1:
        return None
    return n * math.prod(out), cout // groups, cin_g * math.prod(kernel), groups


def _expand(value, spatial: int):
    """An int-list conv parameter for `spatial` dims (a single value stands for all, as PyTorch expands it)."""
    if type(value) is int:
        value = [value]
    if not isinstance(value, list) or len(value) not in (1, spatial):
        return None
    return value * spatial if len(value) == 1 else value


def _attention(spec: tuple, inputs: list) -> tuple:
    iq, layout, backward = spec
    q, k, v = (_operand(inputs, iq + j) for j in range(3))
    if q is None or k is None or v is None or not (len(q) == len(k) == len(v) == 4):
        return _NAN7[:5]
    if layout == "blhe":  # [B, L, H, E] -> [B, H, L, E]
        q, k, v = ([s[0], s[2], s[1], s[3]] for s in (q, k, v))
    b, h, length, e = q
    _, hk, s, ek = k
    _, hv, sv, ev = v
    if not (q[0] == k[0] == v[0] and e == ek and s == sv and hk == hv and hk and h % hk == 0):
        return _NAN7[:5]
    flops = 2.0 * b * h * length * s * ((3 * e + 2 * ev) if backward else (e + ev))
    return (float(length), float(s), float(e), float(b * h), flops)
