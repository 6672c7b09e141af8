"""Iterations of step-less traces from their repeating launch pattern (gpuvar.ingest.iterations), on planted
sequences whose loop is known."""

from __future__ import annotations

import numpy as np

from gpuvar.ingest.iterations import find_iterations


def _loop(iterations: int, seed: int = 0, prologue=("fill",), drift: bool = True) -> tuple[list[str], list[int]]:
    """curand, sigmoid, mul, then a GEMM whose library variant follows the size drawn per iteration (a split-K
    variant adds a reduction launch); returns the names and the true iteration of each launch (-1: prologue)."""
    rng = np.random.default_rng(seed)
    names, truth = list(prologue), [-1] * len(prologue)
    for i in range(iterations):
        body = ["curand<float>", "elementwise<Sigmoid>", "elementwise<Mul>"]
        big = rng.random() < 0.5
        body += ["gemm_tile128x128_k1", "splitK_reduce"] if (big and drift) else ["gemm_tile64x256_k1"]
        names += body
        truth += [i] * len(body)
    return names, truth


def test_a_loop_with_label_drift_and_a_prologue_is_found_exactly():
    names, truth = _loop(40)
    it = find_iterations(np.array(names, dtype=object))
    assert it.anchor == "curand<float>" and it.count == 40
    assert it.iteration.tolist() == truth
    body = np.array(truth) >= 0
    # the GEMM, whichever variant, sits at position 3 of every iteration
    gemm = np.array(["gemm" in n for n in names])
    assert set(it.position[gemm & body].tolist()) == {3}


def test_a_prologue_that_repeats_the_anchor_is_no_iteration():
    """The ncu random-sizes program fills a matrix with curand before its loop: that launch is not iteration 0."""
    names, truth = _loop(20, prologue=("curand<float>",), drift=False)
    it = find_iterations(np.array(names, dtype=object))
    assert it.iteration[0] == -1 and it.iteration[1] == 0 and it.count == 20


def test_a_random_launch_order_has_no_iterations():
    rng = np.random.default_rng(3)
    names = rng.choice(["a", "b", "c", "d", "e", "f"], size=5000)
    it = find_iterations(names.astype(object))
    assert it.anchor is None and (it.iteration == -1).all()


def test_a_loop_of_one_kernel_is_not_a_loop_structure():
    it = find_iterations(np.array(["k"] * 1000, dtype=object))
    assert it.anchor is None


def test_too_few_repetitions_are_not_iterations():
    names, _ = _loop(2)
    assert find_iterations(np.array(names, dtype=object)).anchor is None


def test_a_kernel_variant_taken_in_some_loops_only_is_not_the_anchor():
    """A loop whose first GEMM is `tile64` for small sizes and `tile128` for big ones, and whose second GEMM is
    always `tile128`: every name agrees with the loop everywhere, but `tile64` comes back only with a small size
    (segments of one, two, three loops) and `tile128` once or twice per loop at uneven places. The anchor is a name
    launched once per loop, and each iteration is one loop of ten launches."""
    rng = np.random.default_rng(5)
    names, truth = [], []
    for i in range(300):
        first = "gemm_tile64_kernel" if i == 0 or rng.random() < 0.5 else "gemm_tile128_kernel"  # (tile64 first)
        body = [first, "bias_act", "relu", "elementwise", "dgrad", "wgrad", "accumulate"]
        body += ["gemm_tile128_kernel", "bias_act", "relu"]
        names += body
        truth += [i] * len(body)
    it = find_iterations(np.array(names, dtype=object))
    assert it.anchor not in ("gemm_tile64_kernel", "gemm_tile128_kernel", "bias_act", "relu")
    lengths = np.bincount(it.iteration[it.iteration >= 0])
    assert it.count >= 299 and set(lengths[:-1].tolist()) == {10}  # (the last one ends with the trace)
