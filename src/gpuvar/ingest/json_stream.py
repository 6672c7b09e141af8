"""Stream a Chrome-trace JSON object (`{"traceEvents": [...], ...}`) in bounded memory.

Traces of hundreds of MB are common, so the `traceEvents` array is never held whole: it is cut into pieces of
about `chunk` bytes, each a run of complete array elements, and each piece is handed to a decoder as
`[piece]`. A cut is guessed at the last `}`, `,`, `{` sequence of the window (how every writer separates event
objects) and proven by the decode itself: the JSON grammar only accepts `[piece]` when the piece ends exactly
after an element, so a guess that falls inside a string or a nested object fails to decode and an earlier guess
is tried. When guessing fails (or at the end of the array) a tokenizer that skips string literals finds the
element boundaries exactly. The other top-level keys (small: `deviceProperties`, `distributedInfo`, ...) are
decoded with the standard library and kept in `top`, wherever they appear relative to the array.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

from gpuvar.errors import InputError
from gpuvar.ingest.compression import READ_ERRORS

CHUNK = 8 << 20
_WS = re.compile(rb"[ \t\r\n]*")
_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]')
_GUESSES = 4
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


class DecodeFailed(Exception):
    """Raised by a piece decoder when the bytes are not valid JSON (the splitter then tries another cut)."""


class TraceStream:
    """Pieces of the `traceEvents` array of the JSON document read from binary file object `fh`.

    `pieces(decode)` yields decode(b"[" + piece + b"]") for consecutive pieces; `top` holds every other
    top-level key once the generator is exhausted. A bare top-level array is read as the event array.

    mapped=True (for a plain, uncompressed file whose pieces other processes read themselves): the file is
    memory-mapped instead of read, so that cutting pieces touches only the bytes around each cut; the pieces
    handed to `remote` are then memoryviews of the mapping, and the pages read here are released as the
    stream moves on (madvise), so memory stays bounded.

    A file that changes while it is read (another process rewrites or truncates it) is a one-line InputError.
    Touching a mapped page beyond a truncated end would end the process with SIGBUS (exit 135, no message), so in
    mapped mode the file's size and modification time are checked before each access to the mapping, and the
    bytes decoded here are copied out with pread (a short read is the change, not a fault); what is left is a
    window of a few microseconds (a search for the next cut). Other modes are checked when the array ends, and
    before a syntax error is reported (a file cut short reads as malformed).
    """

    def __init__(self, fh, path: Path, chunk: int | None = None, array_key: str = "traceEvents", mapped: bool = False):
        self.fh, self.path, self.chunk, self.array_key = fh, Path(path), chunk or CHUNK, array_key
        self.buf, self.pos, self.eof, self.offset = b"", 0, False, 0
        self.keep: int | None = None  # absolute offset the buffer must keep while a piece's span is being cut
        self.top: dict = {}
        self.found_array = False
        self.mapped, self.released = False, 0
        self.fd, self.stat = _regular_file(fh)  # (size, mtime) when reading began: a change is an error
        if mapped and self.fd is not None:
            try:
                self.buf = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
                self.mapped = self.eof = True  # (offset stays 0: buf is the whole file)
            except (OSError, ValueError):  # empty
                self.buf = b""

    def _changed(self) -> InputError | None:
        """The error to raise when the file is no longer what reading began with (None: unchanged, or unknown)."""
        if self.stat is None:
            return None
        try:
            now = os.fstat(self.fd)
        except OSError:
            return None
        if (now.st_size, now.st_mtime_ns) == self.stat:
            return None
        return InputError(
            self.path,
            f"the file changed while it was read ({self.stat[0]} bytes when reading began, {now.st_size} now): "
            "read it once it is complete",
        )

    def _check(self) -> None:
        """Mapped: before touching the mapping, stop with one line if the file changed (a page beyond a truncated
        end would be SIGBUS)."""
        if self.mapped and (error := self._changed()) is not None:
            raise error

    def _bytes(self, start: int, end: int) -> bytes:
        """buf[start:end]; mapped: read with pread, so that a file truncated meanwhile is a short read (an error),
        never a fault."""
        if not self.mapped:
            return self.buf[start:end]
        end = min(end, len(self.buf))
        data = os.pread(self.fd, max(0, end - start), start) if end > start else b""
        if len(data) != max(0, end - start):
            raise self._changed() or InputError(self.path, "the file changed while it was read (a short read)")
        return data

    def _release(self) -> None:
        """Mapped: let the pages before pos go (read-only file pages: dropping them loses nothing)."""
        if self.mapped and _DONTNEED is not None:
            upto = self.pos - self.pos % mmap.PAGESIZE
            if upto - self.released >= 64 * mmap.PAGESIZE:
                self.buf.madvise(_DONTNEED, self.released, upto - self.released)
                self.released = upto

    # --- buffer -------------------------------------------------------------------------------------------

    def _fill(self, need: int) -> None:
        """Make at least `need` bytes available after pos (fewer at end of file)."""
        while len(self.buf) - self.pos < need and not self.eof:
            try:
                data = self.fh.read(max(self.chunk, need))
            except READ_ERRORS as exc:  # a damaged or truncated compressed stream
                raise InputError(self.path, f"cannot decompress the file: {exc}") from None
            if not data:
                self.eof = True
                break
            drop = self.pos if self.keep is None else max(0, min(self.pos, self.keep - self.offset))
            self.offset += drop
            self.buf = self.buf[drop:] + data
            self.pos -= drop

    def _error(self, what: str, at: int | None = None) -> InputError:
        changed = self._changed()  # a file cut short (or rewritten) while it was read: say that instead
        if changed is not None:
            return changed
        where = self.offset + (self.pos if at is None else at)
        return InputError(self.path, f"malformed JSON at byte {where} of the decompressed content: {what}")

    def _skip_ws(self) -> bytes:
        """Skip whitespace; return the next byte (b'' at end of file) without consuming it."""
        self._check()
        while True:
            self._fill(1)
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]

    def _expect(self, chars: bytes) -> bytes:
        ch = self._skip_ws()
        if not ch or ch not in chars:
            found = repr(ch.decode("latin-1")) if ch else "end of file"
            wanted = " or ".join(repr(c) for c in chars.decode())
            raise self._error(f"expected {wanted}, found {found}")
        self.pos += 1
        return ch

    def _value(self):
        """Decode one JSON value at pos with the standard library (small top-level values only)."""
        decoder = json.JSONDecoder()
        size = 65536
        self._check()
        while True:
            self._fill(size)
            window = self._bytes(self.pos, self.pos + size).decode("utf-8", "surrogateescape")
            try:
                value, end = decoder.raw_decode(window)
                complete = end < len(window) or (self.eof and self.pos + size >= len(self.buf))
            except json.JSONDecodeError as exc:
                if self.eof and self.pos + size >= len(self.buf):
                    raise self._error(exc.msg, self.pos + len(window[: exc.pos].encode("utf-8", "surrogateescape")))
                complete = False
            if complete:
                self.pos += len(window[:end].encode("utf-8", "surrogateescape"))
                return value
            size *= 2

    # --- document -----------------------------------------------------------------------------------------

    def pieces(
        self, decode: Callable[[bytes], object], remote: Callable[[bytes], Future] | None = None, depth: int = 3
    ) -> Iterator:
        """decode(b"[" + piece + b"]") of consecutive pieces, in order.

        With `remote` ((piece, offset of its first byte in the decompressed content) -> Future of
        decode(b"[" + piece + b"]"), None when not valid JSON), up to `depth` pieces cut by the fast guess are
        decoded elsewhere (worker processes, which may read the piece from the file themselves at that offset)
        while the next are read. A piece
        whose guess was wrong comes back None: it and the pieces after it are put back and read here, proven by
        `decode`, as without `remote`."""
        self._fill(3)
        if self.buf[:3] == b"\xef\xbb\xbf":
            self.pos = 3
        first = self._expect(b"{[")
        if first == b"[":
            self.found_array = True
            yield from self._array(decode, remote, depth)
        else:
            yield from self._object(decode, remote, depth)
        if self._skip_ws():
            raise self._error("trailing data after the JSON document")
        if (changed := self._changed()) is not None:  # read whole, but not one version of the file
            raise changed

    def _object(self, decode, remote, depth) -> Iterator:
        if self._skip_ws() == b"}":
            self.pos += 1
            return
        while True:
            if self._skip_ws() != b'"':
                raise self._error("expected a key string")
            key = self._value()
            self._expect(b":")
            if self._skip_ws() == b"[" and key == self.array_key:
                self.pos += 1
                self.found_array = True
                yield from self._array(decode, remote, depth)
            else:
                self.top[key] = self._value()
            if self._expect(b",}") == b"}":
                return

    def _array(self, decode, remote=None, depth: int = 3) -> Iterator:
        """Yield decoded pieces until the closing bracket of the array (consumed)."""
        pending: deque = deque()  # ((whitespace before, piece, separator after): the bytes as read; its future)
        while True:
            while remote is not None and len(pending) < depth:
                self.keep = self.offset + self.pos  # the whitespace the guess skips goes back too on unread
                cut = self._next_guess()
                start, self.keep = self.keep - self.offset, None
                if cut is None:
                    self.pos = start  # the whitespace it skipped is read below: no byte is lost if pieces go back
                    break
                # the one copy (none when mapped): sent as it is (the worker adds the brackets)
                piece = memoryview(self.buf)[self.pos : cut + 1] if self.mapped else self.buf[self.pos : cut + 1]
                at = self.offset + self.pos
                head, self.pos = self.buf[start : self.pos], self.buf.find(b",", cut) + 1  # (_CUT saw the ',')
                pending.append(((head, piece, self.buf[cut + 1 : self.pos]), remote(piece, at)))
            if pending:
                span, future = pending.popleft()
                try:
                    result = future.result()
                except Exception:  # noqa: BLE001 - a lost worker: redo here, where any error surfaces plainly
                    result, remote = None, None
                if result is not None:
                    del span
                    self._release()
                    yield result
                    continue
                for _, later in pending:
                    later.cancel()
                self._unread([span, *(s for s, _ in pending)])
                del span
                pending.clear()
            ch = self._skip_ws()
            if ch == b"]":
                self.pos += 1
                return
            if not ch:
                raise self._error(f"unterminated {self.array_key} array (file truncated?)")
            self._fill(self.chunk)
            at = self.offset + self.pos
            decoded, _ = self._guess(decode)
            if decoded is None:
                decoded, _ = self._exact(decode)
            if decoded:
                self._release()
                yield decoded
            elif self.offset + self.pos == at and self._skip_ws() != b"]":  # never loop without progress
                raise self._error(f"unreadable {self.array_key} element")

    def _unread(self, spans: list) -> None:
        """Put the bytes of `spans` (each a tuple of byte strings: what was taken, in order, up to pos) back in
        front of pos."""
        size = sum(len(part) for parts in spans for part in parts)
        if self.mapped:  # still there: step back
            self.pos -= size
            return
        data = b"".join(b"".join(parts) for parts in spans)
        self.offset += self.pos - size
        self.buf = data + self.buf[self.pos :]
        self.pos = 0

    def _next_guess(self) -> int | None:
        """Index of the last '}' of the window that is followed by ',' and '{' (a likely cut), unproven."""
        if self._skip_ws() in (b"]", b""):
            return None
        self._fill(self.chunk)
        self._check()
        end = min(len(self.buf), self.pos + self.chunk)
        brace = self.buf.rfind(b"}", self.pos, end)
        while brace >= 0 and not _CUT.match(self.buf, brace):
            brace = self.buf.rfind(b"}", self.pos, brace)
        return brace if brace >= 0 else None

    def _guess(self, decode):
        """Fast path: cut at the last '},{' of the window that decodes; (None, False) when none does."""
        end = min(len(self.buf), self.pos + self.chunk)
        hi = end
        for _ in range(_GUESSES):
            self._check()
            brace = self.buf.rfind(b"}", self.pos, hi)
            while brace >= 0 and not _CUT.match(self.buf, brace):
                brace = self.buf.rfind(b"}", self.pos, brace)
            if brace < 0:
                return None, False
            try:
                decoded = decode(b"[" + self._bytes(self.pos, brace + 1) + b"]")
            except DecodeFailed:
                hi = brace
                continue
            self.pos = self.buf.find(b",", brace) + 1  # (_CUT saw the ',')
            return decoded, False
        return None, False

    def _exact(self, decode):
        """Slow path: tokenize (strings skipped) to the last element boundary of the window, or the array end."""
        size = self.chunk
        while True:
            self._fill(size)
            end = min(len(self.buf), self.pos + size)
            # mapped: a copy of the window (pread), offsets kept in buf's terms by `base`
            buf, base = (self._bytes(self.pos, end), self.pos) if self.mapped else (self.buf, 0)
            depth, boundary, closed = 0, None, None
            for m in _TOKEN.finditer(buf, self.pos - base, end - base):
                tok = m.group()
                if tok == b'"':  # string not terminated inside the window
                    break
                if tok in (b"{", b"["):
                    depth += 1
                elif tok in (b"}", b"]"):
                    depth -= 1
                    if depth < 0:
                        if tok != b"]":
                            raise self._error("unbalanced '}' in the event array", m.start() + base)
                        closed = m.start() + base
                        break
                    if depth == 0:
                        boundary = m.end() + base
            if closed is not None:
                piece, after = buf[self.pos - base : closed - base], closed  # the array's ']' stays for _array
            elif boundary is not None and not (self.eof and end == len(self.buf)):
                piece, after = buf[self.pos - base : boundary - base], boundary
            elif self.eof and end == len(self.buf):
                raise self._error(f"unterminated {self.array_key} array (file truncated?)", end)
            else:
                size *= 2
                continue
            try:
                decoded = decode(b"[" + piece + b"]") if piece.strip() else []
            except DecodeFailed as exc:
                raise self._error(f"invalid {self.array_key} element ({exc})") from None
            self.pos = after
            if closed is None:
                self._expect(b",")
            return decoded, False


def _regular_file(fh) -> tuple[int | None, tuple[int, int] | None]:
    """(descriptor, (size, mtime_ns)) of the regular file `fh` reads (a decompressor's too); (None, None) for a
    pipe, a buffer in memory or anything without a descriptor."""
    try:
        fd = fh.fileno()
        status = os.fstat(fd)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None, None
    if not stat.S_ISREG(status.st_mode):
        return None, None
    return fd, (status.st_size, status.st_mtime_ns)
