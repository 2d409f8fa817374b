"""A chrome trace read in pieces, so that a file of any size costs the memory of one piece at a time.

A trace is `FRAME [e1, e2, ..., en] REST`: FRAME is everything up to the `[` of its `traceEvents` array (just
`[` in the JSON Array Format), REST the array's end and whatever keys follow it. The events in between are cut
into pieces of about PIECE_BYTES at a `}, {` between two events, each handed on as `[piece]`; the last events
stay with REST, and `FRAME + (last events) + REST` is itself a whole JSON document: the trace with only its last
events, from which the top-level keys are read wherever they sit.

A cut is only a guess (`}, {` can sit inside a string, or between objects nested in an event's args); the
consumer decodes `[piece]` and says whether it was whole values. `[prefix]` decodes only when the prefix ends
exactly between two top-level events, so every accepted cut is a true one, and a refused piece is merged with
the next one, its size at least doubled each time (linear work). Text that finds no true cut within
MAX_UNCUT_BYTES is refused with a one-line error, so no input makes the reader hold more than that.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from probe.errors import ProbeError

PIECE_BYTES = 8 << 20  # ~30k torch events: small next to the table they fill, large enough to amortize a decode
MAX_UNCUT_BYTES = 512 << 20  # no event, nor a trace's keys, is near this; a stream of text without cuts stops here
_FRAME = re.compile(rb'\A\s*(?:\[|\{.*?"traceEvents"\s*:\s*\[)', re.DOTALL)
_CUT = re.compile(rb"\}\s*,\s*\{")
_LOOKAHEAD = 1 << 20  # read this far past a piece's end before looking for its cut
_BOM = b"\xef\xbb\xbf"


def split(
    stream: io.BufferedIOBase, whole: Callable[[bytes], bool], source: str, frame_ok: Callable[[bytes], bool]
) -> bytes:
    """Hand each middle piece of the events array to `whole`, as the text of a JSON array (`whole` returns False
    when it is not whole values: then a longer piece is tried), and return the rest as one document:
    FRAME + last events + REST (the whole file when no frame is found)."""
    buf = bytearray(_read(stream, PIECE_BYTES))
    if buf.startswith(_BOM):
        del buf[:3]
    while buf and buf.isspace() and (block := _read(stream, PIECE_BYTES)):
        buf[:] = block  # leading whitespace of any length is JSON's: skipped, a block at a time
    if buf.lstrip()[:1] not in (b"{", b"["):
        return bytes(buf)  # not a JSON object or array: the first block is enough for the decoder to say what it is
    m = _FRAME.match(buf)
    if m is None or not frame_ok(bytes(buf[: m.end()])):
        return bytes(_read_rest(stream, buf, source))  # not laid out as a trace: read it whole, the decoder says why
    frame = bytes(buf[: m.end()])
    del buf[: m.end()]
    cuts = _Cuts(stream, buf, source)
    want = PIECE_BYTES
    while (cut := cuts.after(want)) is not None:
        end = cut.start() + 1  # the piece ends with the event's "}"
        if whole(_array(buf, end)):
            del buf[: cut.end() - 1]  # the next piece starts with the next event's "{"
            want = PIECE_BYTES
        else:
            want = 2 * end
    return frame + bytes(buf)


class _Cuts:
    """Finds the next possible cut in a buffer that it fills from the stream as far as the search needs."""

    def __init__(self, stream: io.BufferedIOBase, buf: bytearray, source: str):
        self.stream, self.buf, self.source = stream, buf, source
        self.eof = False
        self.block = bytearray(PIECE_BYTES)  # read into the same memory each time: no fresh pages to fault in

    def fill(self) -> None:
        """Append the next block of the stream to the buffer (or note its end)."""
        n = self.stream.readinto(self.block) or 0
        self.eof = n == 0
        with memoryview(self.block) as view, view[:n] as block:
            self.buf += block
        if len(self.buf) > MAX_UNCUT_BYTES:
            raise ProbeError(
                f"{self.source}: not JSON, or not a trace: no event boundary in {_mib(len(self.buf))} of text"
            )

    def after(self, want: int) -> re.Match | None:
        """The first `}, {` at or after `want` (reading on as needed); None when the stream ends first."""
        buf, start = self.buf, want
        while not self.eof and len(buf) < want + _LOOKAHEAD:
            self.fill()
        while (cut := _CUT.search(buf, min(start, len(buf)))) is None and not self.eof:
            start = max(want, buf.rfind(b"}"))  # a cut still to come starts at the last "}" or later
            self.fill()
        return cut


def _array(buf: bytearray, end: int) -> bytes:
    """`[` + buf[:end] + `]`, copied once (the views are released before `buf` changes again)."""
    with memoryview(buf) as view, view[:end] as piece:
        return b"".join((b"[", piece, b"]"))


def _read(stream: io.BufferedIOBase, n: int) -> bytes:
    return stream.read(n) or b""


def _read_rest(stream: io.BufferedIOBase, buf: bytearray, source: str) -> bytearray:
    """The whole document, for a file not laid out as a trace (the decoder then says what it is instead)."""
    while block := _read(stream, PIECE_BYTES):
        buf += block
        if len(buf) > MAX_UNCUT_BYTES:
            raise ProbeError(
                f"{source}: not a trace this reader can stream (no traceEvents array in its first "
                f"{_mib(PIECE_BYTES)}) and over {_mib(MAX_UNCUT_BYTES)}"
            )
    return buf


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"
