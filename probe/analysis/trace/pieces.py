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

Two processes (`split_in_two`), where a second core can run one: a text of TWO_PROCESS_PIECES pieces or more is read
and cut by this process and by a forked one alike, each taking every cut for a true one; the other decodes the odd
pieces (first, third, ...) and sends what it made over a pipe, this one decodes the even ones and the rest, and takes
every piece's result in the file's order. A cut that was no true one, a piece the fast decode refuses, a file that
changed or a lost process ends it (`Diverged`), and the text is read again by one process, so the odd cases have one
definition: `split`'s. `PROBE_READ_PROCESSES=1` reads with one process always, `2` with two at any size.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from probe.errors import ProbeError
from probe.pool import forked

PIECE_BYTES = 8 << 20  # ~30k torch events: small next to the table they fill, large enough to amortize a decode
MAX_UNCUT_BYTES = 512 << 20  # no event, nor a trace's keys, is near this; a stream of text without cuts stops here
_FRAME = re.compile(rb'\A\s*(?:\[|\{.*?"traceEvents"\s*:\s*\[)', re.DOTALL)
_CUT = re.compile(rb"\}\s*,\s*\{")
_LOOKAHEAD = 1 << 20  # read this far past a piece's end before looking for its cut
_BOM = b"\xef\xbb\xbf"
READ_PROCESSES_ENV = "PROBE_READ_PROCESSES"
TWO_PROCESS_PIECES = 4  # below this a second process costs about what it saves (a fork, a second read of the file)


class Diverged(Exception):
    """The two processes did not read the same pieces: the text is read again by one."""


def split(
    stream: io.BufferedIOBase, whole: Callable[[memoryview], bool], source: str, frame_ok: Callable[[bytes], bool]
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
    del buf[: m.end() - 1]  # buf[0] is the array's "[": a piece is buf[:end] and a "]", handed on in place
    cuts = _Cuts(stream, buf, source)
    want = PIECE_BYTES
    while (cut := cuts.after(want)) is not None:
        end = cut.start() + 1  # the piece ends with the event's "}"; the byte at `end` is the cut's "," or a space
        if _whole_in_place(whole, buf, end):
            del buf[: cut.end() - 2]  # down to the cut's byte before the next event's "{", ...
            buf[0] = 0x5B  # ... which opens the next piece as its "["
            want = PIECE_BYTES
        else:
            want = 2 * end
    return frame[:-1] + bytes(buf)


CLOSING_TRIES = 8  # the last cuts tried in a text that stops mid-event: a cut that is no true one is rare


def closings(doc: bytes) -> Iterator[tuple[bytes, int]]:
    """A trace whose text stops before its JSON closes (a profiler stopped mid-export, a copy not finished; the JSON
    Array Format leaves its closing bracket optional): `doc` (FRAME + last events, as `split` returns it) closed as
    the documents it may have meant, best first, each with how many of its bytes it leaves out: closed where it
    stops (after a whole event: none), then at each of its last CLOSING_TRIES cuts between two events, the part
    after the cut left out. The consumer keeps the first that decodes."""
    m = _FRAME.match(doc)
    if m is None:
        return
    close = b"]" if doc[: m.end()].lstrip().startswith(b"[") else b"]}"
    yield doc.rstrip().rstrip(b",") + close, 0
    for cut in reversed(deque(_CUT.finditer(doc, m.end()), maxlen=CLOSING_TRIES)):
        yield doc[: cut.start() + 1] + close, len(doc) - cut.start() - 1
    yield doc[: m.end()] + close, len(doc) - m.end()  # not one whole event: the frame alone


def _whole_in_place(whole: Callable[[memoryview], bool], buf: bytearray, end: int) -> bool:
    """whole(buf[:end] + "]"), with no copy of the piece: the byte at `end` (the cut's) reads "]" during the call,
    through a view released after it. A consumer that kept a view into the piece (msgspec's Raw is one) makes that
    release fail loudly, never read text that has moved; unless `whole` is raising (Ctrl-C mid-decode: its frames
    still hold the views), whose exception goes on as it is."""
    kept, buf[end] = buf[end], 0x5D
    view = memoryview(buf)
    array = view[: end + 1]
    try:
        ok = whole(array)
    except BaseException:
        buf[end] = kept
        with contextlib.suppress(BufferError):
            array.release()
            view.release()
        raise
    buf[end] = kept
    array.release()
    view.release()
    return ok


def two_processes(size: int) -> bool:
    """Whether a text of about `size` bytes is read by two processes: by default when it holds TWO_PROCESS_PIECES
    pieces and a second core can run the other process; with PROBE_READ_PROCESSES=2 at any size; never with 1. And
    only where this process can fork safely: one thread (a fork copies no other thread, so a lock one held would stay
    held in the copy), and not itself a pool's daemonic process (which may have no children)."""
    raw = os.environ.get(READ_PROCESSES_ENV, "")
    if raw not in ("", "1", "2"):
        raise ProbeError(f"{READ_PROCESSES_ENV}={raw!r}: 1 (one process reads a trace) or 2 (two, where they can)")
    if raw == "1" or (not raw and (size < TWO_PROCESS_PIECES * PIECE_BYTES or _cores() < 2)):
        return False
    return _forks_safely()


def _forks_safely() -> bool:
    """A fork copies only the thread that forks: with another thread running, a lock it held would stay held in
    the copy. And a pool's daemonic process may have no children."""
    forks = "fork" in multiprocessing.get_all_start_methods()
    return forks and threading.active_count() == 1 and not multiprocessing.current_process().daemon


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def split_in_two(
    open_stream: Callable[[], io.BufferedIOBase],
    part_of: Callable[[memoryview], Any],
    take: Callable[[Any], None],
    source: str,
    frame_ok: Callable[[bytes], bool],
) -> bytes:
    """`split` of the stream `open_stream()` opens, with the pieces decoded by two processes: `part_of(array)` makes a
    piece's part (None when the array is not whole values of the fast decode's types), in a forked process for the
    odd pieces and here for the even ones, and `take(part)` gets every part in the file's order: an odd piece's is
    taken once this process has made the next even one's, so that both work from the start. Returns what `split`
    returns; raises Diverged when a piece's part is None or the other process's pieces differ or stop."""
    process, conn = forked(_odd_parts, open_stream, part_of, source, frame_ok)
    count = 0
    theirs: list[tuple[str, int, int]] = []  # the odd pieces whose parts are still to come: ("piece", count, length)

    def take_theirs() -> None:
        for tag in theirs:
            take(_received(conn, tag))
        theirs.clear()

    def whole(array: memoryview) -> bool:
        nonlocal count
        count += 1
        if count % 2:
            theirs.append(("piece", count, len(array)))
            return True
        part = part_of(array)
        if part is None:
            raise Diverged
        take_theirs()
        take(part)
        return True

    try:
        with open_stream() as stream:
            rest = split(stream, whole, source, frame_ok)
        take_theirs()
        _received(conn, ("end", count))  # the other cut as many pieces
        return rest
    finally:
        conn.close()
        process.kill()
        process.join()


def _odd_parts(conn, open_stream: Callable, part_of: Callable, source: str, frame_ok: Callable) -> None:
    """The forked process of `split_in_two`: the same cuts, the odd pieces' parts sent as ("piece", count, length,
    part), then ("end", pieces, True); ("lost", why, None) when it stops early."""
    count = 0

    def whole(array: memoryview) -> bool:
        nonlocal count
        count += 1
        if count % 2:
            part = part_of(array)
            conn.send(("piece", count, len(array), part))
            if part is None:
                raise Diverged
        return True

    try:
        with open_stream() as stream:
            split(stream, whole, source, frame_ok)
        conn.send(("end", count, True))
    except Exception as e:  # a false cut, an unreadable file, a parent gone (its end closed): it knows, or learns
        with contextlib.suppress(OSError):
            conn.send(("lost", str(e).splitlines()[0] if str(e) else type(e).__name__, None))


def _received(conn, tag: tuple) -> Any:
    """The next message's payload, which must be `tag`'s and not None; Diverged for anything else (a part that is
    None, another message, the process gone)."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        raise Diverged from None
    if message[:-1] != tag or message[-1] is None:
        raise Diverged
    return message[-1]


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
