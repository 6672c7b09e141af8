"""Findings: the variance decomposition, verdicts that track correctness, leakage rules, the findings page.

Planted truths (gpuvar.demo.planted_findings): the unit of a finding is the launching op, its call sites are the
op's occurrences in the step, and a kernel name is a feature (the library's variant), never the place."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.causal.options import causal_options
from gpuvar.causal.share_test import DECLINED, EXPLAINED, NOT_EXPLAINED, residual_dependence, share_test
from gpuvar.demo.planted_findings import CALL_SITE_NS, call_site_mix, heteroscedastic, label_drift
from gpuvar.findings.decompose import decompose, pooled_shares
from gpuvar.findings.report import category_of, dataset_findings, short_name


def _one(frame: pd.DataFrame):
    (dec,) = decompose(frame)
    return dec


def test_heteroscedastic_noise_is_explained_not_flagged():
    """Noise proportional to size: the share is the size's, and the location-scale residual check passes."""
    dec = _one(heteroscedastic())
    assert dec.verdict.verdict == EXPLAINED
    assert dec.size >= 0.9 and dec.between == 0
    assert [d.feature for d in dec.drivers] == ["grid_x"] and dec.drivers[0].sign == 1
    assert dec.verdict.residuals_depend is False
    assert category_of(dec) == "size"


def test_residual_check_still_catches_a_nonlinear_remainder():
    """The location-scale check must not pass everything: a quadratic effect fitted linearly leaves structure."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 300)
    y = x**2 + 0.02 * rng.standard_normal(300)
    assert residual_dependence(x[:, None], y, seed=0) < 0.01


def test_call_site_mix_is_between_call_site_variance_not_a_cause():
    frame = call_site_mix()
    dec = _one(frame)
    assert dec.between > 0.99
    assert dec.size == 0 and dec.context == 0
    assert dec.verdict.verdict == NOT_EXPLAINED
    assert category_of(dec) == "call-site differences"
    record = dataset_findings("mix", frame, [dec], pooled_shares([dec]))
    assert record["findings"] == [] and record["nothing_actionable"]
    assert record["call_site_differences"][0]["call_sites"] == len(CALL_SITE_NS)


def test_without_call_sites_the_same_mix_reads_as_problem_size():
    """What the old name-level target did: grid_x 'explains' differences that are really different calls."""
    frame = call_site_mix().drop(columns=["call_site", "launch_config"], errors="ignore")
    frame["call_site"] = "?"
    dec = _one(frame)
    assert dec.between == 0 and dec.size > 0.9  # the trap the call sites remove


def test_shares_add_up_to_one():
    frame = pd.concat([heteroscedastic(), call_site_mix(), label_drift(steps=60)], ignore_index=True)
    for dec in decompose(frame):
        assert sum(dec.shares().values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(pooled_shares(decompose(frame)).values()) == pytest.approx(1.0, abs=1e-9)


def test_label_drift_is_size_with_a_plus_sign_at_physical_call_sites():
    """One GEMM op, two call sites, two kernel variants picked by size: the variant serves the MLP GEMM for short
    sequences and the projection for long ones, and the capped grid's grid_y falls as the size grows. Per
    physical call site the GEMMs follow the size with a + sign; no grid dimension is claimed with a − sign."""
    frame = label_drift()
    by_group = {d.group: d for d in decompose(frame)}
    mm = by_group["aten::mm"]
    assert set(mm.kernels) == set(frame.loc[frame["launch_op"] == "aten::mm", "kernel_name"])
    assert mm.call_sites == 2 and len(mm.kernels) == 2
    assert mm.verdict.verdict == EXPLAINED and mm.verdict.share >= 0.95
    assert mm.drivers[0].kind == "size" and mm.drivers[0].sign == 1
    assert not [d for d in mm.drivers if d.feature.startswith("grid") and d.sign < 0]
    record = dataset_findings("drift", frame, list(by_group.values()), pooled_shares(list(by_group.values())))
    (gemm,) = [f for f in record["findings"] if f["group"] == "aten::mm"]
    assert gemm["category"] == "size" and gemm["advice"] == "size"


def test_step_time_follows_the_planted_sequence_length():
    from gpuvar.findings.decompose import groups_of
    from gpuvar.findings.steps import step_level

    frame = label_drift()
    record = step_level(frame, groups_of(frame))
    assert record["steps"] == 300 and record["shares"]["size"] >= 0.95
    assert {o["group"] for o in record["ops"][:2]} == {"aten::mm", "aten::mul"}
    assert sum(o["share"] for o in record["ops"]) == pytest.approx(1.0)
    time = frame.groupby("step")["duration"].sum()
    assert record["gpu_time_ns"]["max"] == time.max() and record["gpu_time_ns"]["median"] == time.median()


def test_a_step_level_over_more_steps_than_its_fit_cap_fits_a_sample_and_says_so(monkeypatch):
    """Above STEP_FIT_CAP steps the share tests fit a seeded sample (the planted size still found, the headline
    naming the sample); the step times and the shares by op stay those of every step."""
    from gpuvar.findings import steps
    from gpuvar.findings.decompose import groups_of

    frame = label_drift()
    whole = steps.step_level(frame, groups_of(frame))
    monkeypatch.setattr(steps, "STEP_FIT_CAP", 120)
    sampled = steps.step_level(frame, groups_of(frame))
    assert whole.get("steps_fitted") is None and sampled["steps_fitted"] == 120
    assert sampled["shares"]["size"] >= 0.9 and sampled["verdicts"]["size"]["rows"] == 120
    assert sampled["ops"] == whole["ops"] and sampled["gpu_time_ns"] == whole["gpu_time_ns"]
    assert "fitted on a sample of 120 steps" in steps.headline(sampled)
    assert sampled == steps.step_level(frame, groups_of(frame))  # seeded: the same sample every time


def test_pure_noise_is_not_explained():
    frame = heteroscedastic()
    rng = np.random.default_rng(5)
    frame["duration"] = np.round(50_000 * (1 + 0.1 * rng.standard_normal(len(frame)))).astype(np.int64)
    dec = _one(frame)
    assert dec.verdict.verdict == NOT_EXPLAINED
    assert dec.unexplained > 0.9


def test_too_few_launches_are_declined():
    result = share_test(np.arange(5.0)[:, None], np.arange(5.0), ["x"])
    assert result.verdict == DECLINED and "too few" in result.reason


def test_one_launch_is_nothing_to_compare_never_stable():
    frame = heteroscedastic(steps=1)
    (dec,) = decompose(frame)
    record = dataset_findings("one", frame, [dec], pooled_shares([dec]))
    assert record["stable"] == [] and record["findings"] == []
    assert record["not_compared"][0]["reason"].startswith("too few launches")


def test_short_names_keep_the_function():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)>(int)"
    assert "vectorized_elementwise_kernel" in short_name(name)


def test_findings_cli_writes_the_page(tmp_path, run_cli):
    frame = pd.concat([heteroscedastic(), call_site_mix()], ignore_index=True)
    ingest = tmp_path / "ingest"
    ingest.mkdir()
    frame.to_parquet(ingest / "kernels.parquet")
    result = run_cli("findings", str(ingest), "--name", "planted", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "out" / "findings.json").read_text())["datasets"][0]
    assert record["findings"][0]["group"] == "aten::planted"
    assert record["findings"][0]["kernels"] == [{"kernel": "planted_scaled_kernel", "launches": 300}]
    assert record["findings"][0]["verdict"]["verdict"] == EXPLAINED
    page = (tmp_path / "out" / "findings.md").read_text()
    assert "explained" in page and "Call-site differences" in page
    table = pd.read_csv(tmp_path / "out" / "decomposition.csv")
    assert set(table["group"]) == {"aten::planted", "aten::add"}
    kernel_names = {k["kernel"] for k in record["kernels"]}  # the per-kernel-name view is kept as a table
    assert kernel_names == {"planted_scaled_kernel", "planted_elementwise_kernel"}
    again = run_cli("findings", str(ingest), "--name", "planted", "-o", str(tmp_path / "again"))
    assert again.returncode == 0
    assert record["findings"][0]["evidence"]["figure"] == "figures/01.png"
    for name in ("findings.json", "findings.md", "decomposition.csv", "figures/01.png"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()


def test_findings_of_a_missing_ingest_is_one_line(tmp_path, run_cli):
    result = run_cli("findings", str(tmp_path / "nope"), "-o", str(tmp_path / "out"))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "kernels.parquet" in result.stderr


# --- leakage on a real Nsight Compute file ------------------------------------------------------------------


def test_no_elapsed_normalised_rate_is_a_feature_on_real_ncu():
    from gpuvar.causal.prepare import select_features
    from gpuvar.ingest import load

    path = real_file("ncu-csv/h100-random-sizes-full/full_raw.csv.gz")
    _, kernels, _ = load(path)
    frame = kernels.to_pandas()
    chosen, rejected = select_features(frame, "kernel_variability", "kernel_name", "auto")
    leaky = [c for c in chosen if "pct_of_peak_sustained_elapsed" in c or "per_second" in c or "throughput" in c]
    assert not leaky
    rates = [c for c in frame.columns if "pct_of_peak_sustained_elapsed" in c]
    assert rates, "the real file has elapsed-normalised rates"
    assert all("rate per elapsed time" in rejected[c] or "cycle count" in rejected[c] for c in rates)


def test_binning_by_call_site_removes_call_site_differences(tmp_path, run_cli):
    """targets.variability_group: call_site: the target is the deviation from the call site's mean."""
    frame = call_site_mix()
    frame["launch_config"] = "g1x1x1 b256x1x1 r32 s0"
    frame.to_parquet(tmp_path / "kernels.parquet")
    for group in ("kernel", "call_site"):
        out = tmp_path / group
        result = run_cli("bin", str(tmp_path / "kernels.parquet"), "--group", group, "--top-k", "1000", "-o", str(out))
        assert result.returncode == 0, result.stderr
        rows = pd.read_parquet(out / "topk_rows.parquet")
        spread = rows.groupby("call_site")["kernel_variability"].mean().abs().max()
        if group == "kernel":
            assert spread > 100_000  # call-site differences are in the target
        else:
            assert spread < 1_000  # only each call site's own run-to-run noise is left


def test_causal_outputs_are_written_at_a_machine_stable_precision(tmp_path):
    """Issue 22 item 10: 17-digit floats differed between machines of one kind (SIMD paths); 12 digits do not."""
    import re

    from gpuvar.causal.discover import discover_all

    frame = heteroscedastic()
    frame["kernel_variability"] = frame["duration"] - frame["duration"].mean()
    frame["bin"] = np.arange(len(frame)) // 10
    discover_all(frame, causal_options(target="kernel_variability", group_by=None, bootstrap=0), tmp_path)
    number = re.compile(r"(\d+)\.(\d+)")
    seen = 0
    for path in tmp_path.rglob("*"):
        if path.suffix in (".csv", ".graphml", ".json"):
            for match in number.finditer(path.read_text()):
                significant = (match.group(1) + match.group(2)).lstrip("0")
                assert len(significant) <= 12, (path.name, match.group(0))
                seen += 1
    assert seen > 10


@pytest.mark.parametrize("layout", ["raw", "details"])
@pytest.mark.parametrize("iterations,launches", [(9, 36), (100, None)])
def test_planted_ncu_random_sizes_findings_are_size_or_not_compared(tmp_path, layout, iterations, launches):
    """The ncu random-sizes program (gpuvar.demo.planted_ncu_random_sizes) in both Nsight Compute layouts: with 36
    launches nothing is compared (never 'call-site differences'); with a few hundred, sigmoid, mul and the GEMM
    place are explained by size with a + sign, by no time-like counter."""
    from gpuvar.causal.roles import counter_kind
    from gpuvar.demo.planted_ncu_random_sizes import write_random_sizes
    from gpuvar.ingest import load

    planted = write_random_sizes(tmp_path / "rs.csv", iterations=iterations, layout=layout, launches=launches)
    _, kernels, _ = load(planted["path"])
    frame = kernels.to_pandas()
    decs = decompose(frame)
    record = dataset_findings("rs", frame, decs, pooled_shares(decs))
    assert record["call_site_differences"] == []
    by_group = {d.group: d for d in decs}
    for site in ("iter#1", "iter#2", "iter#3"):
        dec = by_group[site]
        if iterations < 20:
            assert dec.verdict.verdict == DECLINED
            continue
        assert dec.verdict.verdict == EXPLAINED, (site, dec.verdict.record())
        assert dec.drivers[0].kind == "size" and dec.drivers[0].sign == 1
        assert all(counter_kind(d.feature) != "time" for d in dec.drivers)


def _noise_frame(name: str = "planted_kernel", op: str = "aten::planted") -> pd.DataFrame:
    frame = heteroscedastic()
    rng = np.random.default_rng(5)
    frame["duration"] = np.round(50_000 * (1 + 0.3 * rng.exponential(size=len(frame)))).astype(np.int64)
    frame["grid_x"] = 64
    frame["kernel_name"], frame["launch_op"] = name, op
    return frame


@pytest.mark.parametrize(
    "vendor,wanted,unwanted",
    [("AMD", ["rocm-smi --setperfdeterminism", "rocprofv3"], ["nvidia-smi", "Nsight"]),
     ("NVIDIA", ["nvidia-smi -lgc", "Nsight Compute"], ["rocm-smi"])],
)  # fmt: skip
def test_unexplained_advice_names_the_vendor_s_tools(vendor, wanted, unwanted):
    """An AMD user told to run nvidia-smi cannot act on it: the clock and counter advice follows the vendor."""
    frame = _noise_frame()
    decs = decompose(frame)
    record = dataset_findings("v", frame, decs, pooled_shares(decs), vendor=vendor)
    (finding,) = record["findings"]
    assert finding["advice"] == "unexplained"
    text = finding["verify"] + record["shared_advice"]["unexplained"]["do"]
    assert all(w in text for w in wanted) and not any(u in text for u in unwanted)


def test_collective_kernels_point_at_the_rank_analysis_not_at_clocks():
    frame = _noise_frame(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "c10d::allreduce_"
    )
    decs = decompose(frame)
    record = dataset_findings("c", frame, decs, pooled_shares(decs), vendor="NVIDIA")
    (finding,) = record["findings"]
    assert finding["collective"] and finding["advice"] == "collective"
    assert "rank analysis" in record["shared_advice"]["collective"]["do"] and "nvidia-smi" not in finding["verify"]


@pytest.mark.parametrize(
    "fmt,devices,vendor",
    [("rocpd-sqlite", None, "AMD"), ("nsys-sqlite", None, "NVIDIA"), ("pytorch-kineto", "AMD Instinct MI250X", "AMD"),
     ("pytorch-kineto", "NVIDIA H100 80GB HBM3", "NVIDIA"), ("pytorch-kineto", None, "unknown")],
)  # fmt: skip
def test_vendor_from_format_and_devices(fmt, devices, vendor):
    from gpuvar.findings.advice import vendor_of

    assert vendor_of(fmt, devices) == vendor


def test_two_instantiations_of_one_kernel_get_names_that_tell_them_apart():
    from gpuvar.findings.report import distinct_names

    a = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, MulFunctor<float> > >(int)"
    b = "void at::native::vectorized_elementwise_kernel<2, at::native::AUnaryFunctor<float, MulFunctor<float> > >(int)"
    c = "gemm_kernel"
    short = "vectorized_elementwise_kernel[AUnaryFunctor, MulFunctor]"
    names = distinct_names({a: short, b: short, c: "gemm_kernel"})
    assert names == {a: f"{short} ‹4›", b: f"{short} ‹2›", c: "gemm_kernel"}


def test_a_slow_rank_among_few_is_context_and_among_many_is_left_out_with_a_note():
    """The planted slow rank (gpuvar.demo.planted_findings.slow_rank). Among 4 ranks (160 launches per call site)
    the context test names it. Among 64 ranks, 63 rank indicators cannot be estimated in a call site of 80
    launches: rank is left out of the context features, and the record and the page say so."""
    from gpuvar.demo.planted_findings import SLOW_RANK, slow_rank
    from gpuvar.findings.page import dataset_section

    few = _one(slow_rank(ranks=4, steps=40))
    assert few.rank_left_out is None and few.verdict.verdict == EXPLAINED and few.context > 0.9 * (1 - few.between)
    assert [d.feature for d in few.drivers] == [f"rank={SLOW_RANK}"] and few.drivers[0].sign == 1
    frame = slow_rank(ranks=64, steps=20, seed=1).sample(frac=1 / 16, random_state=0).sort_index()
    many = _one(frame)
    assert many.rank_left_out.startswith("64 ranks, a median of ")
    assert many.context == 0 and not any(d.feature.startswith("rank=") for d in many.drivers)
    record = dataset_findings("job", frame, [many], pooled_shares([many]))
    (note,) = record["context_notes"]
    assert note.startswith("rank is not among the context features of 1 of 1 group(s) (64 ranks")
    assert f"Context features: {note}." in "\n".join(dataset_section(record)).replace("\\", "")
    assert "context_notes" not in dataset_findings("job", slow_rank(), [few], pooled_shares([few]))
