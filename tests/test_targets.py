"""Targets: kernel_variability against the whole-trace group mean, and the documented memcpy link rule."""

from __future__ import annotations

import numpy as np
import pytest

from gpuvar import targets as T
from gpuvar.errors import GpuvarError


def test_kernel_variability_is_duration_minus_group_mean():
    durations = np.array([10, 20, 30, 100, 300], dtype=np.int64)
    codes = np.array([0, 0, 0, 1, 1])
    sums, counts = T.group_sums(codes, durations, 2)
    assert (sums, counts) == ([60, 400], [3, 2])
    means = T.group_means({"a": sums[0], "b": sums[1]}, {"a": counts[0], "b": counts[1]})
    out = T.kernel_variability(durations, codes, np.array([means["a"], means["b"]]))
    np.testing.assert_array_equal(out, [-10, 0, 10, -100, 100])


def test_group_sums_are_exact_beyond_float_precision():
    big = np.array([2**62 // 4, 2**62 // 4, 3], dtype=np.int64)  # float64 bincount would round these
    sums, counts = T.group_sums(np.zeros(3, np.int64), big, 1)
    assert sums == [2**62 // 2 + 3] and counts == [3]


def test_launch_config_group_key_separates_configurations():
    assert T.group_key("k", "g1 b1", "kernel") == "k"
    assert T.group_key("k", "g1 b1", "launch_config") != T.group_key("k", "g2 b1", "launch_config")


def _keys(dev, stream, link="stream"):
    return T.link_key(np.array(dev, float), np.array(stream, float), link)


def test_link_latest_copy_on_same_stream_started_at_or_before_kernel():
    # copies: stream 7 at t=0 and t=50, stream 8 at t=40; two copies share t=50 on stream 7 (last one wins)
    m_key = _keys([0, 0, 0, 0], [7, 8, 7, 7])
    m_start = np.array([0, 40, 50, 50])
    # kernels: s7@10 -> copy 0; s7@50 -> copy 3 (ties: last in file order); s8@30 -> none; s8@40 -> copy 1;
    # s9@100 -> none (no copy on that stream); unknown stream -> none
    k_key = _keys([0, 0, 0, 0, 0, 0], [7, 7, 8, 8, 9, np.nan])
    k_start = np.array([10, 50, 30, 40, 100, 100])
    link = T.link_latest(k_key, k_start, m_key, m_start)
    np.testing.assert_array_equal(link, [0, 3, -1, 1, -1, -1])
    stall = T.memory_stall(np.array([100, 100, 5, 5, 5, 5]), np.array([30, 1, 2, 90]), link)
    np.testing.assert_array_equal(stall[[0, 1, 3]], [70, 10, 4])
    assert np.isnan(stall[[2, 4, 5]]).all()


def test_device_link_ignores_the_stream():
    m_key = _keys([0, 1], [7, 7], "device")
    k_key = _keys([0, 0, 1], [9, 9, 3], "device")
    link = T.link_latest(k_key, np.array([5, 100, 100]), m_key, np.array([10, 50]))
    np.testing.assert_array_equal(link, [-1, 0, 1])


def test_unknown_choice_is_a_one_line_error():
    with pytest.raises(GpuvarError, match="unknown link 'correlation'"):
        T.check_choice("correlation", T.LINKS, "link")


def test_every_target_the_config_accepts_is_described_once():
    """The config's target names and the Target objects agree; only memory_stall needs a copy link, and a
    column target of a paper dataset is a plain column."""
    from gpuvar.artifacts import TARGETS
    from gpuvar.targets import LINKED_COPY_COLUMNS, target

    assert {t: target(t).links_copies for t in TARGETS} == {"kernel_variability": False, "memory_stall": True}
    assert [column for column, _ in target("memory_stall").not_features] == ["linked_copy_duration"]
    assert set(dict(target("kernel_variability").not_features)) == set(LINKED_COPY_COLUMNS)
    assert target("perf_variability").links_copies is False
    assert target("kernel_variability").variance_unit == "ns²"
