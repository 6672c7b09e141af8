"""gpuvar.heap.whole_trace_memory: the in-memory ingest's memory settings hold only inside the block, so the stages
after it (and the bounded-memory ingest in pieces) run with the settings they had."""

import pytest

from gpuvar.heap import whole_trace_memory

hugepages = pytest.importorskip("numpy._core.multiarray")


@pytest.mark.parametrize("before", [True, False])
def test_numpy_hugepages_off_inside_and_restored_after(before):
    previous = hugepages._set_madvise_hugepage(before)
    try:
        with whole_trace_memory():
            assert hugepages._get_madvise_hugepage() is False
        assert hugepages._get_madvise_hugepage() is before
    finally:
        hugepages._set_madvise_hugepage(previous)


def test_settings_restored_when_the_ingest_fails():
    previous = hugepages._set_madvise_hugepage(True)
    try:
        with pytest.raises(ValueError), whole_trace_memory():
            raise ValueError("a bad trace")
        assert hugepages._get_madvise_hugepage() is True
    finally:
        hugepages._set_madvise_hugepage(previous)
