"""Findings on real H100 traces recorded with a designed cause (truth.csv and PROVENANCE.md beside each trace).

varlen: the sequence length L of each step is the only designed source of variation; it sets every problem
size, so softmax, layer norm, GELU, add and mul must be `explained` by problem size with a + sign.
contention: shapes are fixed; in 30 % of steps a 512 MiB copy runs beside the step: no launch parameter may be
claimed, the first kernel of the step (curand's normal) must be tied to the concurrent copy, the rest stable.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.findings.decompose import STABLE_CV, decompose, pooled_shares
from gpuvar.findings.report import dataset_findings
from gpuvar.findings.verdict import EXPLAINED, PARTLY

VARLEN = "pytorch-kineto-trace/h100-varlen-transformer-block"
CONTENTION = "pytorch-kineto-trace/h100-fixed-shape-copy-contention"


def _kernels(folder: str, name: str) -> pd.DataFrame:
    from gpuvar.ingest import load

    _, kernels, _ = load(real_file(f"{folder}/{name}"))
    return kernels.to_pandas()


@pytest.fixture(scope="module")
def varlen():
    kernels = _kernels(VARLEN, "varlen.pt.trace.json.gz")
    decs = decompose(kernels)
    return kernels, {d.kernel: d for d in decs}, decs


@pytest.fixture(scope="module")
def contention():
    kernels = _kernels(CONTENTION, "fixedcontend.pt.trace.json.gz")
    decs = decompose(kernels)
    return kernels, {d.kernel: d for d in decs}, decs


def _matching(by_name: dict, *parts: str, min_launches: int = 50):
    found = [d for name, d in by_name.items() if all(p in name for p in parts) and d.launches >= min_launches]
    assert found, f"no kernel named like {parts}"
    return found


@pytest.mark.parametrize(
    "parts",
    [
        ("softmax_warp_forward",),
        ("vectorized_layer_norm_kernel",),
        ("GeluCUDAKernelImpl",),
        ("CUDAFunctor_add",),
        ("MulFunctor",),
    ],
)
def test_varlen_problem_size_explains_the_elementwise_kernels(varlen, parts):
    _, by_name, _ = varlen
    for dec in _matching(by_name, *parts):
        assert dec.verdict.verdict == EXPLAINED, (dec.kernel[:60], dec.verdict.record())
        assert dec.verdict.share >= 0.9
        top = dec.drivers[0]
        assert top.kind == "size" and top.sign == 1 and top.feature.startswith("grid")


def test_varlen_call_site_share_is_reported(varlen):
    """Call-site differences are separated, not explained away: the issue measured ~14 % on this trace."""
    kernels, _, decs = varlen
    assert "call_site" in kernels.columns and kernels["step"].notna().all()
    pooled = pooled_shares(decs, kernels)
    assert 0.05 <= pooled["between"] <= 0.3
    assert sum(pooled.values()) == pytest.approx(1.0)


def test_varlen_capped_gemm_grids_are_not_claimed_as_fully_explained(varlen):
    """A GEMM launched on a capped grid (persistent tiles) does not vary its grid with L: its share must be the
    one the data supports, not a confident 'explained' from features that do not move."""
    _, by_name, _ = varlen
    for dec in _matching(by_name, "sm90_xmma_gemm", min_launches=200):
        if dec.verdict.verdict == EXPLAINED:
            assert any(d.kind == "size" for d in dec.drivers)
        else:
            assert dec.size + dec.context <= 1 - dec.between - dec.unexplained + 1e-9
        assert dec.between + dec.size + dec.context + dec.unexplained == pytest.approx(1.0)


def test_varlen_steps_line_up_with_the_recorded_sequence_lengths(varlen):
    kernels, _, _ = varlen
    truth = pd.read_csv(real_file(f"{VARLEN}/truth.csv"))
    soft = kernels[kernels["kernel_name"].str.contains("softmax_warp_forward")]
    per_step = soft.groupby("step")["duration"].sum()
    joined = truth.set_index("step")["seq_len"].reindex(per_step.index)
    rho = pd.Series(per_step.to_numpy()).corr(pd.Series(joined.to_numpy()), method="spearman")
    assert rho > 0.95


def test_contention_claims_no_launch_parameter(contention):
    kernels, _, decs = contention
    record = dataset_findings("contention", kernels, decs, pooled_shares(decs, kernels))
    for finding in record["findings"]:
        assert all(d["kind"] != "size" for d in finding["drivers"]), finding["headline"]


def test_contention_ties_the_first_kernel_to_the_concurrent_copy(contention):
    kernels, by_name, _ = contention
    (curand,) = _matching(by_name, "distribution_elementwise_grid_stride_kernel")
    assert curand.verdict.verdict in (EXPLAINED, PARTLY), curand.verdict.record()
    top = curand.drivers[0]
    assert top.kind == "context" and top.feature.startswith("ctx_copy") and top.sign == 1
    assert top.share >= 0.8  # the issue measured R^2 0.94 for the copy flag
    # the flag follows the designed truth: about the steps truth.csv marks
    truth = pd.read_csv(real_file(f"{CONTENTION}/truth.csv"))
    first = kernels[kernels["kernel_name"].str.contains("distribution_elementwise_grid_stride_kernel")]
    flagged = int((first.groupby("step")["ctx_copy_active"].max() > 0).sum())
    assert abs(flagged - int(truth["contention_copy"].sum())) <= 5


def test_contention_rest_is_stable_or_call_site_differences(contention):
    kernels, _, decs = contention
    record = dataset_findings("contention", kernels, decs, pooled_shares(decs, kernels))
    named = [f["kernel"] for f in record["findings"]]
    assert any("distribution_elementwise" in n for n in named)
    quiet = {e["kernel"] for e in record["stable"]} | {e["kernel"] for e in record["call_site_differences"]}
    for dec in decs:
        if "distribution_elementwise" in dec.kernel or dec.kernel in named:
            continue
        assert dec.kernel in quiet
        assert dec.cv_within < STABLE_CV or dec.launches < 20
    assert np.isfinite(record["kernel_time_ns"])
