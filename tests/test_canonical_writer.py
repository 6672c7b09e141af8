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


@pytest.mark.parametrize("sizes", [[37, 150, 1, 300], [100, 100, 100], [1000]])
def test_parts_make_the_whole_tables_file(canonical, tmp_path, sizes):
    meta = {"source": "trap.sqlite", "format": "nsys-sqlite"}
    write_canonical(canonical, tmp_path / "whole.parquet", meta, row_group_rows=100)
    with CanonicalWriter(tmp_path / "parts.parquet", meta, row_group_rows=100) as writer:
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
