"""Ray, for the commands that take `--executor ray`: joining a cluster (or starting a local instance) and fanning a
function out over it. Importing this module imports Ray, so only those commands import it, and only when asked.

    ray start --head                          # on the first machine; it prints the address to join
    ray start --address=HEAD_IP:6379          # on every other machine
    probe bench ... --executor ray --address HEAD_IP:6379

Without an address a local instance is started for the command (no dashboard) and shut down after it. It listens on
127.0.0.1 only: Ray gives a machine's node its network address, and binds every port there, unless
$RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is off (Ray's local-only mode: the node's address is the loopback). probe turns
it off before Ray is imported (probe/__init__.py; a user's own setting wins); this module refuses to start a local
instance that would not be on the loopback, and checks the listening sockets of the instance it started. Joining by
address is unchanged by it: Ray takes a joined node's address from the cluster.

Joining sends Ray's token only where the user asked for it, as Ray documents: with RAY_AUTH_MODE=token set (the
token from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), or with --address auto, which joins the
cluster a `ray start` left on this machine. An address that nothing answers on is one line at once; one that
answers but is not a Ray cluster that lets us in is one line after CONNECT_TIMEOUT_S. docs/cluster.md says what a
real cluster needs (the token, a firewall, no dashboard) and what it costs.

The scheduling is Ray's: probe only says what each task needs (a GPU, a node's CPUs, one CPU).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import psutil
import ray

from probe import RAY_LOCAL_ONLY_VAR
from probe.errors import ProbeError

TIMEOUT_VAR = "PROBE_RAY_CONNECT_TIMEOUT_S"
CONNECT_TIMEOUT_S = 60.0  # joining a cluster or starting a local instance: a few seconds when it works
PROBE_TIMEOUT_S = 5.0  # the TCP connection to the address, first: a refused or unroutable one says so at once
POLL_S = 1.0  # how often a wait on Ray's tasks looks at whether any node is left to run them


@dataclass(frozen=True)
class Listener:
    """A socket listening for TCP connections: its address, port and the process holding it."""

    ip: str
    port: int
    pid: int
    process: str


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8 and ::1, IPv4-mapped ones (::ffff:127.0.0.1) included."""
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def listening(pid: int) -> list[Listener]:
    """The TCP sockets that process `pid` and its descendants listen on."""
    try:
        root = psutil.Process(pid)
        tree = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        return []
    out = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in tree:
            with contextlib.suppress(psutil.Error):
                out.append(Listener(c.laddr.ip, c.laddr.port, c.pid, tree[c.pid].name()))
    return out


def connect_timeout_s() -> float:
    """CONNECT_TIMEOUT_S, or $PROBE_RAY_CONNECT_TIMEOUT_S."""
    text = os.environ.get(TIMEOUT_VAR)
    try:
        seconds = float(text) if text is not None else CONNECT_TIMEOUT_S
    except ValueError:
        raise ProbeError(f"${TIMEOUT_VAR}={text!r}: give seconds, e.g. 60") from None
    if not seconds > 0:
        raise ProbeError(f"${TIMEOUT_VAR}={text!r}: give seconds above 0")
    return seconds


@contextlib.contextmanager
def session(address: str | None = None) -> Iterator[None]:
    """Ray for the block: the cluster at `address`, or a local instance started (and shut down) here. A Ray this
    process already joined (a test's, a notebook's) is used as it is and left running."""
    if ray.is_initialized():
        yield
        return
    seconds = connect_timeout_s()
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    if address:
        _answers(address)
    else:
        _refuse_a_wide_instance()
    sigterm = signal.getsignal(signal.SIGTERM)
    with _others_print_to_stderr():
        try:
            with _bounded(f"joining {where}" if address else f"starting {where}", seconds):
                # "local": a new instance, even where a `ray start` cluster runs (ray.init() would join that)
                ray.init(
                    address=address or "local",
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
        except (ConnectionError, RuntimeError, ValueError) as e:
            hint = "; a cluster with token authentication needs RAY_AUTH_MODE=token and its token" if address else ""
            raise ProbeError(f"cannot start or join {where}: {str(e).strip().splitlines()[0]}{hint}") from None
        finally:
            if sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)  # ray.init puts its own handler in; the caller's stays
        try:
            if not address:
                _check_loopback()
            yield
        finally:
            ray.shutdown()


class _MainThreadStdout:
    """sys.stdout while Ray runs: the main thread's writes (the command's output) go to stdout, other threads'
    to stderr. Ray prints the cluster's error messages ("the node ... has been marked dead") on stdout, from a
    thread of its own, which would break a --json output."""

    def __init__(self, out, err):
        self._out, self._err = out, err

    def write(self, text: str) -> int:
        return (self._out if threading.current_thread() is threading.main_thread() else self._err).write(text)

    def flush(self) -> None:
        self._out.flush()
        self._err.flush()

    def __getattr__(self, name: str):
        return getattr(self._out, name)


@contextlib.contextmanager
def _others_print_to_stderr() -> Iterator[None]:
    out = sys.stdout
    sys.stdout = _MainThreadStdout(out, sys.stderr)
    try:
        yield
    finally:
        sys.stdout = out


def _answers(address: str) -> None:
    """Something accepts a TCP connection at host:port (Ray says what else it takes: auto, ray://...)."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e) or type(e).__name__)
        raise ProbeError(f"cannot join the Ray cluster at {address}: {why}") from None


def _refuse_a_wide_instance() -> None:
    """Before a local instance starts: Ray would put it on this machine's network address."""
    ip = ray.util.get_node_ip_address()
    if not is_loopback(ip):
        raise ProbeError(
            f"a local Ray instance listens on 127.0.0.1 only, and Ray would put it on {ip} (${RAY_LOCAL_ONLY_VAR}="
            f"{os.environ.get(RAY_LOCAL_ONLY_VAR)}, or Ray was imported before probe): unset it, or start a "
            "cluster yourself and join it with --address (docs/cluster.md)"
        )


def _check_loopback() -> None:
    """After a local instance started: every port its processes listen on is on the loopback."""
    wide = [s for s in listening(os.getpid()) if not is_loopback(s.ip)]
    if wide:
        ray.shutdown()
        s = wide[0]
        raise ProbeError(
            f"the local Ray instance listened on {s.ip}:{s.port} ({s.process}), not on 127.0.0.1 only: refused (this "
            "Ray binds every interface; start a cluster yourself and join it with --address, docs/cluster.md)"
        )


@contextlib.contextmanager
def _bounded(what: str, seconds: float) -> Iterator[None]:
    """The block (one call into Ray, in this thread) ended after `seconds`, or at once by SIGINT or SIGTERM.

    While Ray waits in its C++ code for a cluster to answer, Python runs no signal handler, so Ctrl-C and SIGTERM
    would wait too (for minutes, on an address that never answers). Python's own C-level handler still writes the
    signal's number to the wakeup fd, and a watchdog thread reads it: it says why in one line on stderr and ends the
    process, 128 + the signal's number on a signal, 2 when the time ran out. Nothing is left behind: a joining driver
    holds no process, and a starting local instance's processes are ended by Ray's reaper when this process exits."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are the main thread's; a call from elsewhere is not bounded
        return
    signals, stop = os.pipe(), os.pipe()
    for fd in (*signals, *stop):
        os.set_blocking(fd, False)
    previous = signal.set_wakeup_fd(signals[1], warn_on_full_buffer=False)

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([signals[0], stop[0]], [], [], left)
            if stop[0] in ready:
                return
            for signum in os.read(signals[0], 64) if ready else b"":
                if signum in (signal.SIGINT, signal.SIGTERM):
                    print(f"probe: interrupted while {what}", file=sys.stderr, flush=True)
                    os._exit(128 + signum)
        print(f"probe: error: {what}: no answer within {seconds:g} s (${TIMEOUT_VAR})", file=sys.stderr, flush=True)
        os._exit(2)

    watchdog = threading.Thread(target=watch, name="probe-ray-connect", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        os.write(stop[1], b"x")
        watchdog.join()
        signal.set_wakeup_fd(previous)
        for fd in (*signals, *stop):
            os.close(fd)


def alive_nodes() -> dict[str, dict]:
    """The cluster's alive nodes, by node id: each one's resources."""
    return {n["NodeID"]: n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")}


def lost_reason(e: BaseException, what: str = "task") -> str:
    """A Ray error in one line: the exception the function raised, or what Ray lost under it."""
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = e.cause if isinstance(e.cause, BaseException) else e
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__
    if isinstance(e, ray.exceptions.NodeDiedError):
        return f"the node died under this {what} (Ray: {type(e).__name__})"
    return f"the worker died under this {what} (Ray: {type(e).__name__})"


def fan_out(fn: Callable, items: Sequence, num_cpus: float = 1, lost: Callable | None = None) -> list:
    """[fn(item) for item in items], each call a Ray task asking for `num_cpus`, in the items' order. A call that
    raises, or that Ray loses (its worker or its node died; no alive node has the CPUs to run it), gives
    lost(item, why) in its place, `why` in one line, and the others go on; without `lost` the first such call raises
    a ProbeError. Tasks are not retried: a lost one is named, and rerun by the user."""
    task = ray.remote(num_cpus=num_cpus, max_retries=0)(fn)
    refs = {task.remote(item): i for i, item in enumerate(items)}
    out: list = [None] * len(items)

    def give_up(i: int, why: str) -> None:
        if lost is None:
            raise ProbeError(f"a Ray task failed: {why}")
        out[i] = lost(items[i], why)

    while refs:
        done, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
        for ref in done:
            i = refs.pop(ref)
            try:
                out[i] = ray.get(ref)
            except ray.exceptions.RayError as e:
                give_up(i, lost_reason(e))
        if not done and not any(r.get("CPU", 0) >= num_cpus for r in alive_nodes().values()):
            for ref in list(refs):
                ray.cancel(ref, force=True)
                give_up(refs.pop(ref), f"no alive Ray node has {num_cpus:g} CPU to run it")
    return out
