"""Physical call sites, launching ops and steps (gpuvar.ingest.call_sites, gpuvar.ingest.iterations) on real
traces with known structure: a call site is the launching op's occurrence in the step and the kernel's index in
it, whatever kernel variant the library picked; traces without steps get the iterations of their launch loop."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.ingest import load, normalize_trace, read_source
from gpuvar.ingest.raw import roundtrip

KINETO = "pytorch-kineto-trace"
VARLEN = f"{KINETO}/h100-varlen-transformer-block/varlen.pt.trace.json.gz"
FIXED = f"{KINETO}/h100-fixed-shape-copy-contention/fixedcontend.pt.trace.json.gz"
RESNET = f"{KINETO}/hta-v100-resnet-rank0/rank-0.pt.trace.json.gz"  # ProfilerStep#101..#105
SAMPLED = f"{KINETO}/hta-sampled-rank0/sampled_rank-0.json.gz"  # ProfilerStep#551..#552, kernel External id = corr
NSYS_NVTX = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite"
NCU = "ncu-csv/h100-random-sizes-full/full_raw.csv.gz"
ROCPROF = "rocprof-v1-csv/hpct-laplacian-kernel1-mi250x/results.csv"
COLUMNS = [
    "kernel_name",
    "kernel_short_name",
    "launch_op",
    "step",
    "op_occurrence",
    "call_index",
    "call_site",
    "launch_config",
]


def _kernels(relative: str) -> tuple[list[str], pd.DataFrame, pd.DataFrame | None]:
    out, kernels, memcpy = load(real_file(relative))
    frame = kernels.select([*COLUMNS, "grid_x", "block_x", "registers_per_thread", "duration"]).to_pandas()
    return out.notes, frame, (memcpy.select(["launch_op", "step"]).to_pandas() if memcpy is not None else None)


@pytest.fixture(scope="module")
def varlen():
    return _kernels(VARLEN)


def test_varlen_has_300_steps_numbered_like_truth(varlen):
    notes, k, memcpy = varlen
    assert k["step"].notna().all() and sorted(k["step"].unique()) == list(range(300))
    assert "300 steps from cudaDeviceSynchronize (301 calls)" in notes[-1]
    assert memcpy["step"].notna().all() and memcpy["step"].between(0, 299).all()
    truth = pd.read_csv(real_file(VARLEN).parent / "truth.csv")
    # softmax_warp_forward<..., log2 elements> is a different kernel name (and register count) per length class,
    # all launched once per step by the same op: ONE call site, whatever variant ran
    softmax = k[k["kernel_short_name"] == "softmax_warp_forward"]
    assert softmax["kernel_name"].nunique() >= 3
    assert (softmax["call_site"] == "aten::_softmax#0.0").all() and softmax["step"].is_unique
    joined = softmax.merge(truth, on="step", validate="one_to_one")
    assert len(joined) == 300
    # the softmax grid and time grow with the step's sequence length: steps line up with truth.csv
    assert joined["grid_x"].corr(joined["seq_len"], method="spearman") > 0.95
    assert joined["duration"].corr(joined["seq_len"], method="spearman") > 0.95
    # one step later (an off-by-one numbering) would not line up
    shifted = softmax.assign(step=softmax["step"] + 1).merge(truth, on="step")
    assert shifted["grid_x"].corr(shifted["seq_len"], method="spearman") < 0.5


def test_varlen_launch_ops_are_the_innermost_aten_ops(varlen):
    _, k, _ = varlen
    assert k["launch_op"].str.startswith("aten::").mean() > 0.95
    ops = k.groupby("kernel_short_name", observed=True)["launch_op"].agg(set)
    assert ops["softmax_warp_forward"] == {"aten::_softmax"}  # not the enclosing aten::softmax
    assert ops["vectorized_layer_norm_kernel"] == {"aten::native_layer_norm"}
    assert ops["elementwise_kernel"] == {"aten::copy_"}


def test_varlen_call_sites_are_the_program_s_places_not_the_library_s_variants(varlen):
    """19 launches per step, each its own call site, every one present in every step: the physical call site does
    not drift when cuBLAS picks another GEMM for another sequence length (the old per-name index did: the W1 GEMM
    and the Wq GEMM shared a label as L crossed 1152)."""
    _, k, _ = varlen
    assert k["call_site"].nunique() == 19
    assert not k.duplicated(["call_site", "step"]).any()
    assert (k.groupby("call_site")["step"].nunique() == 300).all()
    assert k["op_occurrence"].notna().all() and k["call_index"].notna().all()
    gemm = k[k["launch_op"] == "aten::mm"]
    assert sorted(gemm["call_site"].unique()) == [f"aten::mm#{i}.0" for i in range(5)]
    # some of the five mm call sites run several kernel variants over the run, and one variant serves several
    # call sites: the name is the library's choice, not the place
    assert gemm.groupby("call_site")["kernel_name"].nunique().max() >= 2
    assert gemm.groupby("kernel_name")["call_site"].nunique().max() >= 2


def test_fixed_shape_call_sites_have_one_launch_configuration_and_split_multi_use_names():
    _, k, _ = _kernels(FIXED)
    configs = k.groupby("call_site", observed=True)["launch_config"].nunique()
    assert (configs == 1).all()
    sites = k.groupby("kernel_short_name", observed=True)["call_site"].nunique()
    assert sites["elementwise_kernel"] >= 2 and sites["vectorized_elementwise_kernel"] >= 2
    # the columns separate what the name mixes: most of the name's variance lies between its call sites
    ew = k[k["kernel_short_name"] == "elementwise_kernel"]
    site_mean = ew.groupby("call_site")["duration"].transform("mean")
    assert site_mean.var() > 0.5 * ew["duration"].var()


@pytest.mark.parametrize("relative,numbers", [(RESNET, range(101, 106)), (SAMPLED, range(551, 553))])
def test_profiler_step_ranges_give_the_step_number(relative, numbers):
    notes, k, _ = _kernels(relative)
    assert sorted(k["step"].dropna().unique()) == list(numbers)
    assert k["step"].notna().mean() > 0.99
    assert "steps from ProfilerStep#N ranges" in notes[-1]
    assert k["launch_op"].notna().all() and not k["launch_op"].str.startswith("ProfilerStep").any()


def test_nsys_launch_op_is_the_innermost_nvtx_range_without_emit_nvtx_numbers():
    notes, k, memcpy = _kernels(NSYS_NVTX)
    assert k["launch_op"].notna().mean() > 0.95
    assert not k["launch_op"].str.contains("op_id =|seq =", na=False).any()
    assert {"aten::copy_", "aten::addmm"} <= set(k["launch_op"].dropna())
    assert memcpy["launch_op"].notna().mean() > 0.95
    # no step markers and no syncs: the grid never splits a call site (a grid that follows size is size)
    assert not k["call_site"].str.contains(r"\bg\d+x", regex=True).any()
    assert "call sites:" in notes[-1]


def test_ncu_iterations_follow_the_program_s_loop():
    """The ncu random-sizes program: one curand before the loop, then per iteration curand, sigmoid, mul, GEMM.
    Iterations start at the second curand; mul and sigmoid keep one call site each although their grid follows
    the size drawn per iteration."""
    notes, k, _ = _kernels(NCU)
    assert "9 iterations from the repeating launch pattern" in notes[-1]
    assert pd.isna(k["step"].iloc[0]) and k["step"].iloc[1] == 0  # the fill of `a` belongs to no iteration
    inside = k[k["step"].notna()]
    assert inside["call_site"].str.fullmatch(r"iter#[0-3]").all()
    first = inside.groupby("call_site")["kernel_short_name"].first()
    assert first["iter#0"] == "distribution_elementwise_grid_stride_kernel"
    assert first["iter#1"] == first["iter#2"] == "vectorized_elementwise_kernel"
    assert "gemm" in first["iter#3"]
    assert inside.loc[inside["call_site"] == "iter#1", "grid_x"].nunique() > 3  # size varies at one call site


def test_a_loop_of_one_kernel_has_no_iterations_and_never_splits_by_grid():
    notes, k, _ = _kernels(ROCPROF)
    assert k["step"].isna().all() and k["call_index"].isna().all() and k["launch_op"].isna().all()
    assert k["call_site"].str.fullmatch(r"b\d+x\d+x\d+ r\S+ s\S+").all()
    assert "no repeating launch pattern" in notes[-1]


@pytest.mark.parametrize("relative", [VARLEN, SAMPLED, NSYS_NVTX])
def test_call_sites_are_the_same_from_a_stored_raw_read(relative, tmp_path):
    path = real_file(relative)
    _, kernels, memcpy = load(path)
    _, again, memcpy_again = normalize_trace(roundtrip(read_source(path), tmp_path / "raw"))
    assert again.equals(kernels) and memcpy_again.equals(memcpy)


def test_demo_kineto_trace_has_steps_and_call_sites(tmp_path):
    from gpuvar.demo.kineto_writer import STEP_LAUNCHES, write_kineto_demo

    path = tmp_path / "demo.json.gz"
    write_kineto_demo(path, 4 * STEP_LAUNCHES, seed=3, rank=0)
    out, kernels, _ = load(path)
    k = kernels.select(COLUMNS).to_pandas()
    assert k["step"].tolist() == [i // STEP_LAUNCHES for i in range(4 * STEP_LAUNCHES)]
    assert k["launch_op"].notna().all() and k["call_site"].str.match(r"^\S+#\d+\.\d+$").all()
    assert "4 steps from cudaDeviceSynchronize" in out.notes[-1]


@pytest.mark.parametrize("columns", [1, 2])
def test_launches_match_the_first_of_repeated_calls_exactly(columns):
    """A launch takes the first runtime call with its key (a repeated correlation id: the first one, as the
    pandas merge after drop_duplicates did), -1 without one, and keys are compared exactly: epoch ns differing
    by 1 (which float64 cannot tell apart) are different keys."""
    import numpy as np

    from gpuvar.ingest.call_sites import _first_match

    big = 1_700_000_000_000_000_001
    have = [np.array([7, 3, 7, big, -1], np.int64)]
    want = [np.array([7, 3, 5, big - 1, big, -1], np.int64)]
    expected = [0, 1, -1, -1, 3, 4]
    if columns == 2:  # (pid, corr): the same correlation id in another process is another call
        have.insert(0, np.array([1, 1, 2, 1, 1], np.int64))
        want.insert(0, np.array([1, 1, 1, 1, 1, 2], np.int64))
        expected = [0, 1, -1, -1, 3, -1]
    assert _first_match(want, have).tolist() == expected
    assert _first_match([w[:0] for w in want], have).tolist() == []
    assert _first_match(want, [h[:0] for h in have]).tolist() == [-1] * 6


def test_a_call_gets_the_innermost_op_open_around_it():
    """The launching op by time (nsys NVTX ranges; Kineto ops without a matching External id): of the ops open
    around the call on its thread (ranges closed at both ends), the one started last, the shorter one at an equal
    start; an op that ended before the call is never its op, even under one still open."""
    import numpy as np

    from gpuvar.ingest.innermost import innermost_op

    ops = pd.DataFrame(  # (row order is not the sweep's order)
        {
            "start": [10, 0, 0, 50, 60, 0, 80, 95],
            "end": [20, 40, 100, 60, 70, 1000, 90, 100],
            "thread": [1, 1, 1, 1, 1, 2, 1, 1],
            "name": ["grandchild", "child", "parent", "sibling", "next", "other thread", "late", "last"],
        }
    )
    queries = {  # (time, thread): the op expected, None for none
        (0, 1): "child",  # equal starts: the shorter one is inside
        (15, 1): "grandchild",
        (20, 1): "grandchild",  # the range ends at the call's ns: still open
        (30, 1): "child",  # the grandchild ended
        (45, 1): "parent",
        (60, 1): "next",  # the sibling ends at the ns the next op starts: the one started last
        (75, 1): "parent",
        (85, 1): "late",
        (100, 1): "last",  # started after the call before, ends at this call's ns
        (101, 1): None,
        (-5, 1): None,
        (5, 2): "other thread",
        (5, 3): None,
    }
    keys = list(queries)[::-1]  # (queries in any order)
    times = np.array([t for t, _ in keys], np.int64)
    threads = np.array([th for _, th in keys], np.int64)
    found = innermost_op(ops, times, threads)
    names = [ops["name"].iloc[i] if i >= 0 else None for i in found]
    assert dict(zip(keys, names)) == queries


def _stack_sweep(ops: pd.DataFrame, times, threads) -> list[int]:
    """The launching op as a sweep per thread finds it (queries in time order, ops pushed by start, longest first,
    those ended popped off the top; the answer is the top): the definition innermost_op computes without the loop."""
    import numpy as np

    order = np.lexsort((-ops["end"].to_numpy(), ops["start"].to_numpy(), ops["thread"].to_numpy())).tolist()
    answers = [-1] * len(times)
    for q in sorted(range(len(times)), key=lambda q: (threads[q], times[q])):
        stack = []
        for i in (i for i in order if ops["thread"].iat[i] == threads[q] and ops["start"].iat[i] <= times[q]):
            while stack and ops["end"].iat[stack[-1]] < times[q]:
                stack.pop()
            if ops["end"].iat[i] >= times[q]:
                stack.append(i)
        while stack and ops["end"].iat[stack[-1]] < times[q]:
            stack.pop()
        answers[q] = stack[-1] if stack else -1
    return answers


def test_the_innermost_op_is_the_stack_sweeps_answer_on_any_ranges():
    """Ranges as recorded or not: nested, crossing, equal, empty, ended before they start, on several threads,
    queries at their edges and beyond; enough ops per thread for every halving of last_open's table to matter."""
    import numpy as np

    from gpuvar.ingest.innermost import innermost_op

    rng = np.random.default_rng(7)
    for trial in range(60):
        m, n, span = int(rng.integers(0, 300)), int(rng.integers(0, 120)), int(rng.integers(1, 400))
        start = rng.integers(0, span, m)
        ops = pd.DataFrame(
            {"start": start, "end": start + rng.integers(-3, span // 2 + 2, m), "thread": rng.integers(0, 3, m)}
        )
        times, threads = rng.integers(-3, span + 5, n), rng.integers(-1, 4, n)
        assert innermost_op(ops, times, threads).tolist() == _stack_sweep(ops, times, threads), trial
