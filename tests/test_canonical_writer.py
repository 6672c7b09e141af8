"""canonical_io.CanonicalWriter: a canonical table written in sorted parts is the file write_canonical makes of the
whole table (the ingest in pieces relies on it: tests/test_nsys_pieces.py compares whole ingests, but their
tables are shorter than one 256 Ki-row group, so the row-group cuts are checked here with small groups)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from gpuvar.canonical_io import CanonicalWriter, write_canonical
from gpuvar.demo.planted_pieces import write_pieces_trap
from gpuvar.ingest import ingest
from gpuvar.ingest.nsys_pieces import PieceSettings


@pytest.fixture(scope="module")
def canonical(tmp_path_factory):
    folder = tmp_path_factory.mktemp("canonical")
    write_pieces_trap(folder / "trap.sqlite", loops=150, seed=1)
    ingest(folder / "trap.sqlite", folder / "ingest", pieces=PieceSettings(above=None))
    return pq.read_table(folder / "ingest" / "kernels.parquet").replace_schema_metadata(None).combine_chunks()


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("sizes", [[37, 150, 1, 300], [100, 100, 100], [1000]])
def test_parts_make_the_whole_tables_file(canonical, tmp_path, sizes, background):
    """Also with each row group encoded in a thread (background: the ingest in pieces)."""
    meta = {"source": "trap.sqlite", "format": "nsys-sqlite"}
    write_canonical(canonical, tmp_path / "whole.parquet", meta, row_group_rows=100)
    with CanonicalWriter(tmp_path / "parts.parquet", meta, row_group_rows=100, background=background) as writer:
        at = 0
        for size in sizes + [canonical.num_rows]:
            writer.add(canonical.slice(at, size))
            at += size
            if at >= canonical.num_rows:
                break
    assert pq.ParquetFile(tmp_path / "parts.parquet").metadata.num_row_groups == -(-canonical.num_rows // 100)
    assert (tmp_path / "parts.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_a_failed_write_leaves_no_file(canonical, tmp_path):
    target = tmp_path / "kernels.parquet"
    with pytest.raises(ValueError, match="columns differ"):
        with CanonicalWriter(target, {}, row_group_rows=100) as writer:
            writer.add(canonical.slice(0, 250))
            writer.add(canonical.slice(250, 10).drop_columns(["start"]))
    assert list(tmp_path.iterdir()) == []


def test_an_error_in_the_background_encoding_is_raised_and_leaves_no_file(canonical, tmp_path, monkeypatch):
    """A row group that fails to encode in the writer's thread (a full disk) fails the write in the caller with the
    one line naming the file, and the temporary file goes."""
    import pyarrow.parquet as parquet

    from gpuvar.errors import StageError

    def full(self, table, row_group_size=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parquet.ParquetWriter, "write_table", full)
    target = tmp_path / "kernels.parquet"
    with pytest.raises(StageError, match=r"cannot write .*kernels\.parquet: No space left on device"):
        with CanonicalWriter(target, {}, row_group_rows=100, background=True) as writer:
            for at in range(0, 400, 50):
                writer.add(canonical.slice(at, 50))
    assert list(tmp_path.iterdir()) == []


def _sorted_by_engine(table):
    import pyarrow.compute as pc

    keys = [(c, "ascending", "at_end") for c in ("start", "launch_id") if c in table.column_names]
    return table.take(pc.sort_indices(table, sort_keys=keys))


@pytest.mark.parametrize("seed", range(6))
def test_the_canonical_sort_is_the_engines_stable_sort_and_skips_rows_in_order(seed):
    """sort_canonical leaves a table whose rows are already in order as it is (no copy: the merged table of many
    ranks ties starts across ranks, and the binning job writes its chosen rows in that order), and sorts any
    other as Arrow's stable sort on (start, launch_id) does: ties in start, in both keys, nulls, several chunks."""
    import numpy as np
    import pyarrow as pa

    from gpuvar.canonical_io import sort_canonical

    rng = np.random.default_rng(seed)
    n = 500
    start = np.sort(rng.integers(0, 40, n))  # many ties
    launch = rng.integers(0, 8, n)
    order = np.lexsort((launch, start))
    rows = pa.table({"start": start[order], "launch_id": launch[order], "row": np.arange(n)})
    rows = pa.concat_tables([rows.slice(0, 123), rows.slice(123)])  # two chunks
    assert sort_canonical(rows) is rows
    assert sort_canonical(rows.select(["start", "row"])).column("row").equals(rows.column("row"))
    shuffled = rows.take(rng.permutation(n))
    assert sort_canonical(shuffled).equals(_sorted_by_engine(shuffled))
    swapped = rows.take(np.r_[np.arange(n)][::-1])  # ties now in falling launch id (and falling starts)
    assert sort_canonical(swapped).equals(_sorted_by_engine(swapped))
    falling = np.lexsort((-launch, start))  # starts in order, launch ids falling within a tie
    ties = pa.table({"start": start[falling], "launch_id": launch[falling], "row": np.arange(n)})
    assert sort_canonical(ties).equals(_sorted_by_engine(ties))
    assert not sort_canonical(ties).equals(ties)
    late = rows.set_column(0, "start", pa.array(np.r_[start[order][:-1], 0].tolist()[:-1] + [None], pa.int64()))
    assert sort_canonical(late).equals(_sorted_by_engine(late))
