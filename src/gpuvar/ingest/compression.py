"""How a file's bytes reach the readers: transparent decompression and UTF-16 transcoding, by content.

Every reader reads through `open_binary` / `read_bytes` / `read_head` here, so a gzip, bzip2 or xz copy of any
supported text format reads like the original, whatever its name (the magic bytes decide). zstd is recognised
and read when the `zstandard` package is installed, else rejected naming the package. A compressed SQLite
database cannot be queried in place: it is rejected with the command that decompresses it. A UTF-16 text file
(Windows tools write them; BOM FF FE / FE FF, or a BOM-less file whose first characters are ASCII with NUL high
bytes) is transcoded to UTF-8, so CSV readers see the text they expect.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from pathlib import Path

from gpuvar.errors import InputError

MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}
DECOMPRESS_COMMAND = {"gzip": "gunzip", "bzip2": "bunzip2", "xz": "unxz", "zstd": "unzstd"}
SQLITE_MAGIC = b"SQLite format 3\x00"
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)  # what a damaged stream raises


def compression_of(head: bytes) -> str | None:
    """'gzip', 'bzip2', 'xz', 'zstd' or None, from the first bytes of a file."""
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def read_raw_head(path: Path, size: int = 8) -> bytes:
    """The first bytes as stored (compressed or not)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror})") from None


def _open_zstd(path: Path, raw):
    try:
        import zstandard
    except ModuleNotFoundError:
        raw.close()
        raise InputError(
            path, "zstd-compressed file: decompress it first (unzstd FILE) or pip install zstandard"
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)


def open_binary(path: str | Path):
    """A binary file object of the decompressed content (the file itself when it is not compressed)."""
    path = Path(path)
    kind = compression_of(read_raw_head(path))
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror})") from None
    if kind is None:
        return raw
    if kind == "gzip":
        return _Owned(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if kind == "bzip2":
        return _Owned(bz2.BZ2File(raw), raw)
    if kind == "xz":
        return _Owned(lzma.LZMAFile(raw), raw)
    return _open_zstd(path, raw)


class _Owned(io.RawIOBase):
    """A decompressing reader that also closes the underlying file."""

    def __init__(self, inner, raw):
        super().__init__()
        self._inner, self._raw = inner, raw

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(size)

    def readinto(self, buffer) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
            self._raw.close()
        super().close()


def utf16_of(head: bytes) -> str | None:
    """'utf-16-le' / 'utf-16-be' when the bytes look like UTF-16 text, else None."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) and not head.startswith(b"\xff\xfe\x00\x00"):
        return "utf-16-le" if head[:2] == b"\xff\xfe" else "utf-16-be"
    sample = head[:64] if len(head) >= 64 else head[: len(head) // 2 * 2]
    if len(sample) >= 8:
        if not any(sample[1::2]) and all(0 < b < 128 for b in sample[0::2]):
            return "utf-16-le"
        if not any(sample[0::2]) and all(0 < b < 128 for b in sample[1::2]):
            return "utf-16-be"
    return None


def _transcode(path: Path, data: bytes, encoding: str, partial: bool = False) -> bytes:
    """UTF-16 bytes (BOM dropped) -> UTF-8; a cut last character is tolerated in a head (`partial`)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        data = data[2:]
    if partial:
        data = data[: len(data) // 2 * 2]
    try:
        return data.decode(encoding, errors="strict" if not partial else "ignore").encode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"invalid {encoding.upper()} text at byte {exc.start}") from None


def read_head(path: str | Path, size: int = 65536) -> bytes:
    """First `size` decompressed bytes, as UTF-8 when the file is UTF-16 (a damaged compressed stream gives
    what could be decoded: the reader reports the damage; one of which nothing could be decoded, e.g. a bzip2
    file cut inside its first 900 kB block, is an InputError here, not an 'empty file' later)."""
    path = Path(path)
    with open_binary(path) as fh:
        out = bytearray()
        try:
            while len(out) < size:
                block = fh.read(size - len(out))
                if not block:
                    break
                out += block
        except READ_ERRORS as exc:
            if not out:
                raise _damaged(path, exc) from None
    head = bytes(out)
    encoding = utf16_of(head)
    return _transcode(path, head, encoding, partial=True) if encoding else head


def read_bytes(path: str | Path) -> bytes:
    """Whole decompressed content (UTF-16 transcoded to UTF-8); a damaged compressed stream is a one-line
    InputError naming the compression."""
    path = Path(path)
    kind = compression_of(read_raw_head(path))
    with open_binary(path) as fh:
        try:
            data = fh.read()
        except READ_ERRORS as exc:
            raise _damaged(path, exc, kind) from None
        except MemoryError:
            raise InputError(path, f"{kind} stream decompresses to more than the memory available") from None
    encoding = utf16_of(data[:64])
    return _transcode(path, data, encoding) if encoding else data


def _damaged(path: Path, exc: BaseException, kind: str | None = None) -> InputError:
    """The one-line error of a compressed stream that stops early or does not decode."""
    kind = kind or compression_of(read_raw_head(path))
    return InputError(path, f"truncated or damaged {kind} stream ({exc})")


def check_not_compressed_sqlite(path: str | Path, head: bytes) -> None:
    """InputError when `path` is compressed and its decompressed `head` is an SQLite database."""
    path = Path(path)
    kind = compression_of(read_raw_head(path))
    if kind and head.startswith(SQLITE_MAGIC):
        raise InputError(path, f"compressed SQLite database: decompress it first ({DECOMPRESS_COMMAND[kind]} FILE)")
