"""A process pool for many independent calls, torch-free: `pool_map` is [fn(item) for item in items], each call in a
process of its own, with failures kept in place (the other executor, beside probe.cluster.fan_out on Ray).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import signal
import sys
from collections.abc import Callable, Sequence

from probe.errors import ProbeError


def pool_map(fn: Callable, items: Sequence, workers: int | None = None, lost: Callable | None = None) -> list:
    """[fn(item) for item in items], in order, each call in a process of its own forked from this one, at most
    `workers` at a time (default: one a core). A call that raises (a MemoryError) or whose process dies (the OOM
    killer, a signal) gives lost(item, why) in its place, `why` in one line, and the others go on; without `lost`,
    a ProbeError. Every process ends with this one: on Linux the kernel kills them when it dies, whatever killed it
    (SIGTERM, SIGKILL), so nothing is left holding the caller's pipes; on Ctrl-C they are ended before it returns."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(items)))
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    out: list = [None] * len(items)
    todo = list(enumerate(items))
    # the parent's end of a process's pipe -> (process, index)
    running: dict[multiprocessing.connection.Connection, tuple[multiprocessing.process.BaseProcess, int]] = {}

    def give_up(i: int, why: str) -> None:
        if lost is None:
            raise ProbeError(f"{items[i]!r}: {why}")
        out[i] = lost(items[i], why)

    try:
        while todo or running:
            while todo and len(running) < workers:
                i, item = todo.pop(0)
                here, there = context.Pipe(duplex=False)
                process: multiprocessing.process.BaseProcess = context.Process(
                    target=_child, args=(fn, item, there, os.getpid()), daemon=True
                )
                process.start()
                there.close()
                running[here] = (process, i)
            for conn in running.keys() & multiprocessing.connection.wait(list(running)):  # the ready ones
                process, i = running.pop(conn)
                try:
                    ok, value = conn.recv()
                except (EOFError, OSError):  # it died before it could answer
                    process.join()
                    give_up(i, _death(process.exitcode))
                    continue
                finally:
                    conn.close()
                process.join()
                if ok:
                    out[i] = value
                else:
                    give_up(i, value)
    finally:
        for process, _ in running.values():
            process.kill()
            process.join()
    return out


def forked(fn: Callable, *args) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
    """One process forked from this one that runs fn(conn, *args) and sends on `conn` as many messages as it likes;
    the caller receives them on the connection returned, and kills and joins the process when done. Like a pool
    process, it dies with this one and leaves Ctrl-C to it."""
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe(duplex=False)
    for stream in (sys.stdout, sys.stderr):  # the copy flushes what it inherited as it exits: nothing is printed twice
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    process = context.Process(target=_streamer, args=(fn, args, there, os.getpid()), daemon=True)
    process.start()
    there.close()
    return process, here


def _streamer(fn: Callable, args: tuple, conn, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    fn(conn, *args)
    conn.close()


def _child(fn: Callable, item, conn, parent: int) -> None:
    """A pool process: dies with its parent (Linux), runs fn(item), sends (True, result) or (False, why). Ctrl-C
    reaches the whole process group: the parent stops the pool, so this process ignores it (no traceback a child)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    try:
        result = (True, fn(item))
    except Exception as e:
        text = str(e).strip().splitlines()
        result = (False, f"{type(e).__name__}: {text[0]}" if text else type(e).__name__)
    try:
        conn.send(result)
    except Exception as e:  # a result that does not pickle
        conn.send((False, f"its result could not be sent back ({type(e).__name__})"))
    conn.close()


def _die_with_parent(parent: int) -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills this process when the parent that forked it dies."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        oom = " (what the OOM killer sends)" if -exitcode == signal.SIGKILL else ""
        return f"the process analyzing it was killed by {name}{oom}"
    return f"the process analyzing it exited with status {exitcode} before it answered"
