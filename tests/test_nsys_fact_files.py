"""The sweep's fact files (gpuvar.ingest.nsys_fact_files): what goes in, in any order, comes back by rowid range; and the
first start of each step the pieces carry for the step offsets (gpuvar.ingest.step_store.FirstStarts)."""

import numpy as np

from gpuvar.ingest.nsys_fact_files import BUCKET_BITS, FactFiles

RECORD = np.dtype([("rowid", np.int64), ("op", np.int64), ("size", np.float64)])


def _records(rowids):
    records = np.empty(len(rowids), RECORD)
    records["rowid"] = rowids
    records["op"] = rowids * 3
    records["size"] = np.where(rowids % 5 == 0, np.nan, rowids / 7)
    return records


def test_ranges_come_back_in_rowid_order_whatever_order_they_went_in(tmp_path):
    rng = np.random.default_rng(0)
    rowids = rng.choice(np.arange(1, 5 << BUCKET_BITS), size=20_000, replace=False)
    files = FactFiles(tmp_path, "k", RECORD)
    for part in np.array_split(rowids, 7):  # batches, each spread over several buckets
        files.add(_records(part))
    assert files.rows == len(rowids)
    everything = np.sort(rowids)
    for lo, hi in [(0, None), (1, 2), (65_000, 200_000), ((1 << BUCKET_BITS), (2 << BUCKET_BITS)), (3, 3)]:
        got = files.columns_between(lo, hi)
        wanted = everything[(everything >= lo) & (everything < (hi if hi is not None else np.inf))]
        np.testing.assert_array_equal(got["rowid"], wanted)
        np.testing.assert_array_equal(got["op"], wanted * 3)
        np.testing.assert_array_equal(got["size"], _records(wanted)["size"])  # NaN kept as NaN
    whole = np.concatenate(list(files.buckets()))
    np.testing.assert_array_equal(whole["rowid"], everything)


def test_an_empty_store_reads_as_no_rows(tmp_path):
    files = FactFiles(tmp_path, "k", RECORD)
    assert len(files.columns_between(0, None)["rowid"]) == 0
    assert list(files.buckets()) == []


def test_scattered_rowids_are_looked_up_a_bucket_at_a_time(tmp_path):
    """The sweep looks up the iterations of a batch's launches, in call order, thread after thread: rowids from
    anywhere in the trace. Each is found, or said missing, whatever the order."""
    files = FactFiles(tmp_path, "k", RECORD)
    stored = np.arange(0, 6 << BUCKET_BITS, 3)
    files.add(_records(stored[::-1]))
    wanted = np.array([5 << BUCKET_BITS, 3, 4, 0, (2 << BUCKET_BITS) + 1, 9, 6 << BUCKET_BITS, 3], np.int64)
    records, found = files.lookup(wanted)
    np.testing.assert_array_equal(found, (wanted % 3 == 0) & (wanted < 6 << BUCKET_BITS))
    np.testing.assert_array_equal(records["op"][found], wanted[found] * 3)
    assert files.lookup(np.zeros(0, np.int64))[1].shape == (0,)


def test_first_starts_are_those_a_dict_keeps():
    """The step offsets' first start of each (device, step), carried from piece to piece in sorted arrays
    (step_store.FirstStarts), is what a dict filled by setdefault with each piece's least starts gives: steps new,
    seen again, coming back out of order, on several devices."""
    from gpuvar.ingest.step_store import FirstStarts

    rng = np.random.default_rng(4)
    carried, kept = FirstStarts(), {}
    for piece in range(40):
        n = 300
        device = rng.integers(0, 3, n)
        step = np.where(rng.random(n) < 0.9, piece * 10 + rng.integers(0, 25, n), rng.integers(0, 400, n))
        start = rng.integers(0, 10**12, n)
        local = {}
        for d, s, t in zip(device.tolist(), step.tolist(), start.tolist()):
            local[(d, s)] = min(local.get((d, s), t), t)
        first = {key: kept.setdefault(key, value) for key, value in local.items()}
        wanted = np.array([first[(d, s)] for d, s in zip(device.tolist(), step.tolist())])
        np.testing.assert_array_equal(carried.first(device, step, start), wanted)
