"""Compressed and UTF-16 inputs: read like the original whatever their name; compressed SQLite and damaged
streams rejected on one line naming the file."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest
from conftest import real_file

from gpuvar.errors import InputError
from gpuvar.ingest import ingest
from gpuvar.ingest.compression import read_bytes, read_head

NCU = "ncu-csv/roofline-profiler-rtx5070/saxpy.csv"
ROCPROF = "rocprof-v1-csv/hpct-laplacian-kernel1-mi250x/results.csv"
NSYS = "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite"
COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def rows(report: dict) -> dict:
    return {name: (t["rows_read"], t["rows_written"]) for name, t in report["tables"].items()}


@pytest.mark.parametrize("relative", [NCU, ROCPROF])
def test_gzipped_real_csv_ingests_like_the_original(relative, tmp_path):
    original = real_file(relative)
    packed = tmp_path / (original.name + ".gz")
    packed.write_bytes(gzip.compress(original.read_bytes()))
    plain, zipped = ingest(original, tmp_path / "plain"), ingest(packed, tmp_path / "zipped")
    assert zipped["format"] == plain["format"]
    assert rows(zipped) == rows(plain) and plain["tables"]["kernels"]["rows_written"] > 0


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compression_is_detected_by_content_not_name(kind, tmp_path):
    original = real_file(ROCPROF)
    disguised = tmp_path / "results.csv"  # compressed bytes under a plain CSV name
    disguised.write_bytes(COMPRESSORS[kind](original.read_bytes()))
    assert read_bytes(disguised) == original.read_bytes()
    assert rows(ingest(disguised, tmp_path / "out")) == rows(ingest(original, tmp_path / "ref"))


def test_plain_file_named_gz_is_read_as_plain(tmp_path):
    original = real_file(NCU)
    misnamed = tmp_path / "saxpy.csv.gz"
    misnamed.write_bytes(original.read_bytes())
    assert ingest(misnamed, tmp_path / "out")["format"] == "ncu-csv"


@pytest.mark.parametrize("bom", [True, False])
def test_utf16_csv_is_transcoded(bom, tmp_path):
    original = real_file(ROCPROF)
    text = original.read_bytes().decode("utf-8-sig")
    utf16 = tmp_path / "results_utf16.csv"
    utf16.write_bytes(text.encode("utf-16") if bom else text.encode("utf-16-le"))
    assert read_head(utf16).startswith(text[:50].encode())
    assert rows(ingest(utf16, tmp_path / "out")) == rows(ingest(original, tmp_path / "ref"))


def test_gzipped_utf16_ncu_csv(tmp_path):
    original = real_file(NCU)
    path = tmp_path / "saxpy.csv.gz"
    path.write_bytes(gzip.compress(original.read_bytes().decode("utf-8-sig").encode("utf-16")))
    assert rows(ingest(path, tmp_path / "out")) == rows(ingest(original, tmp_path / "ref"))


def test_invalid_utf16_names_the_encoding(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"\xff\xfe" + "Index,KernelName,grd,wgr\n".encode("utf-16-le") + b"\x00\xd8\x41\x00")
    with pytest.raises(InputError, match="invalid UTF-16-LE text"):
        ingest(path, tmp_path / "out")


@pytest.mark.parametrize("kind,command", [("gz", "gunzip"), ("bz2", "bunzip2"), ("xz", "unxz")])
def test_compressed_sqlite_says_decompress_first(kind, command, tmp_path):
    path = tmp_path / f"trace.sqlite.{kind}"
    path.write_bytes(COMPRESSORS[kind](real_file(NSYS).read_bytes()))
    with pytest.raises(InputError) as err:
        ingest(path, tmp_path / "out")
    message = str(err.value)
    assert message == f"{path}: compressed SQLite database: decompress it first ({command} FILE)"


def test_truncated_gzip_is_one_line_naming_the_file(tmp_path):
    data = gzip.compress(real_file(ROCPROF).read_bytes())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        ingest(path, tmp_path / "out")
    assert str(err.value).startswith(f"{path}: truncated or damaged gzip stream") and "\n" not in str(err.value)


@pytest.mark.parametrize("suffix, kind", [("gz", "gzip"), ("bz2", "bzip2"), ("xz", "xz")])
@pytest.mark.parametrize("keep", [8, 40, "first block"])  # 8: just past the longest magic (xz)
def test_a_stream_cut_before_anything_decodes_is_truncated_not_empty(tmp_path, suffix, kind, keep):
    """Issue 22 item 9: a bzip2 file cut inside its first (900 kB) block decodes to nothing and was reported as
    'empty file'; so were gzip and xz files cut in their first bytes."""
    data = COMPRESSORS[suffix](real_file(ROCPROF).read_bytes() * 4)
    cut = len(data) // 2 if keep == "first block" else keep
    path = tmp_path / f"cut.csv.{suffix}"
    path.write_bytes(data[:cut])
    with pytest.raises(InputError) as err:
        ingest(path, tmp_path / "out")
    assert str(err.value).startswith(f"{path}: truncated or damaged {kind} stream ("), str(err.value)
    assert "\n" not in str(err.value)


def test_zstd_without_the_package_names_it(tmp_path):
    try:
        import zstandard  # noqa: F401
    except ModuleNotFoundError:
        path = tmp_path / "trace.csv.zst"
        path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)
        with pytest.raises(InputError, match="zstd-compressed file: decompress it first"):
            ingest(path, tmp_path / "out")
    else:
        pytest.skip("zstandard is installed: zstd files are read")
