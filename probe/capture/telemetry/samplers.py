"""Telemetry samplers: a thread of this process, or a child process watching it through /proc and NVML.

Both read their backends every `interval_ms` on a fixed schedule and keep one row a read: `t_ns`
(time.perf_counter_ns, the clock of probe.capture.loop.Generation) plus figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from probe.analysis.records.telemetry import Row
from probe.capture.telemetry.backends import Backend, CpuBackend, NvmlBackend, _cuda_ids, open_backends
from probe.errors import first_line

DEFAULT_INTERVAL_MS = 10.0  # its cost to a step: benchmarks/telemetry_overhead.py
STOP_POLL_S = 0.02  # the longest a stop waits on a sleeping sampler, whatever the interval
JOIN_TIMEOUT_S = 5.0  # a hung driver call must not hang the caller's exit; the thread is a daemon anyway


# ---- the sampler thread -------------------------------------------------------------------------------------


def next_tick(t0_ns: int, period_ns: int, k: int, now_ns: int) -> tuple[int, int, int]:
    """After tick k of the schedule t0 + k * period: (next tick, ns to wait for it, ticks skipped).

    The schedule is fixed, so time spent sampling never accumulates into drift; a tick already past (a slow
    read, a descheduled thread) is skipped rather than fired in a burst.
    """
    nxt = k + 1
    if t0_ns + nxt * period_ns <= now_ns:
        nxt = (now_ns - t0_ns) // period_ns + 1
    return nxt, t0_ns + nxt * period_ns - now_ns, nxt - k - 1


def _print_note(note: str) -> None:
    print(note, file=sys.stderr)


class _Sampling:
    """What both samplers share: notes passed on as they come, and the context-manager protocol."""

    notes: list[str]
    on_note: Callable[[str], None]

    def _note(self, note: str) -> None:
        self.notes.append(note)
        try:
            self.on_note(note)
        except Exception:
            pass

    def start(self) -> _Sampling:  # each sampler's own
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Sampler(_Sampling):
    """Samples `backends` every `interval_ms` in a daemon thread, as a context manager.

    The first row is taken on entry and the last on exit, in the caller's thread, so the rows span everything
    the block times. The thread shares nothing with the caller but an append-only list: no lock the decode loop
    takes, only the GIL for its own short Python work (NVML's ctypes calls release it). A backend that raises is
    dropped with a one-line note; the others go on. The sampler closes its backends on exit.
    """

    def __init__(
        self,
        interval_ms: float = DEFAULT_INTERVAL_MS,
        backends: Sequence[Backend] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        on_note: Callable[[str], None] = _print_note,
    ):
        if not interval_ms > 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self.interval_ns = round(interval_ms * 1e6)
        self.backends = list(backends) if backends is not None else [CpuBackend()]
        self.clock = clock  # stamps rows; the schedule itself always runs on perf_counter_ns
        self.on_note = on_note
        self.notes: list[str] = []
        self.missed = 0  # ticks skipped because the thread was late
        self.busy_ns = 0  # wall time inside sample(), GIL waits included, for the overhead benchmark
        self.thread_cpu_ns = 0  # CPU time the sampling thread used, set when it ends
        self._rows: list[Row] = []
        self._live = list(self.backends)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def samples(self) -> list[Row]:
        return list(self._rows)  # a snapshot: the thread may still be appending

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def sample(self) -> Row:
        """Read every live backend once and keep the row, stamped at the middle of the reads."""
        t0, start = time.perf_counter_ns(), self.clock()
        row: Row = {}
        for backend in list(self._live):
            try:
                row.update(backend.read())
            except Exception as e:
                self._live.remove(backend)
                self._note(
                    f"telemetry: {backend.name} figures stop here after "
                    f"{first_line(e, with_type=True)}; others continue"
                )
        row = {"t_ns": (start + self.clock()) // 2, **row}
        self._rows.append(row)  # list.append is atomic under the GIL; readers take a snapshot
        self.busy_ns += time.perf_counter_ns() - t0
        return row

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("a Sampler runs once; make a new one")
        t0 = time.perf_counter_ns()
        self.sample()
        self._thread = threading.Thread(target=self._loop, args=(t0,), name="probe-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None or self._closed:
            return
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        self._closed = True
        if self._thread.is_alive():  # a read hangs in the driver: leave the daemon and its backends alone
            self._note(f"telemetry: sampler thread still busy after {JOIN_TIMEOUT_S:g} s; left behind")
            return
        if self._live:
            self.sample()
        for backend in self.backends:
            backend.close()

    def _loop(self, t0_ns: int) -> None:
        try:
            k = 0
            while True:
                k, wait_ns, skipped = next_tick(t0_ns, self.interval_ns, k, time.perf_counter_ns())
                self.missed += skipped
                if self._sleep_until(time.perf_counter_ns() + wait_ns):
                    return
                self.sample()
        except BaseException as e:  # the thread must never take the run down; say so and stop sampling
            self._live.clear()  # nor may the exit row raise the same thing in the caller's thread
            self._note(f"telemetry: sampler thread stopped early after {first_line(e, with_type=True)}")
        finally:
            self.thread_cpu_ns = time.thread_time_ns()

    def _sleep_until(self, deadline_ns: int) -> bool:
        """Sleep to the deadline, waking every STOP_POLL_S to check for stop; True when stop was asked.

        A plain sleep, not Event.wait: on this kind of VM a wake from Event.wait costs ~70 us of CPU against
        ~35 us from time.sleep, and the sampler wakes 100 times a second.
        """
        while not self._stop.is_set():
            left_ns = deadline_ns - time.perf_counter_ns()
            if left_ns <= 0:
                return False
            time.sleep(min(left_ns / 1e9, STOP_POLL_S))
        return True


class ProcessSampler(_Sampling):
    """The same sampling, run in a child process that watches this one through /proc (and NVML).

    A sampling thread shares the GIL with the decode loop: each of its 100 wake-ups a second makes the loop
    hand the GIL over and wait for it back, which cost the tiny CPU model 2-3% of its step here. A child
    process takes nothing from the loop but a slice of a core. Rows use the same clock (perf_counter_ns is
    CLOCK_MONOTONIC on Linux, shared by every process), so they line up with `Generation` times as before.
    The child takes its first row before the block starts and its last after it ends.
    """

    def __init__(
        self,
        interval_ms: float = DEFAULT_INTERVAL_MS,
        device: object = "cpu",
        on_note: Callable[[str], None] = _print_note,
    ):
        if not interval_ms > 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self.interval_ms, self.device, self.on_note = interval_ms, str(device), on_note
        self.notes: list[str] = []
        self.missed = 0
        self.thread_cpu_ns = 0
        self._rows: list[Row] = []
        self._child: subprocess.Popen[str] | None = None

    @property
    def samples(self) -> list[Row]:
        return list(self._rows)

    def start(self) -> ProcessSampler:
        cmd = [
            sys.executable,
            "-m",
            "probe.capture.telemetry.samplers",
            "--pid",
            str(os.getpid()),
            "--interval-ms",
            repr(self.interval_ms),
            "--device",
            self.device,
        ]
        if self.device.startswith("cuda"):
            index, uuid = _cuda_ids(self.device)  # torch is already loaded here; the child must not load it
            cmd += ["--gpu-index", str(index)] + (["--gpu-uuid", uuid] if uuid else [])
        self._child = child = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
        )  # Ctrl-C goes to the loop, which stops us
        if child.stdout is None or child.stdout.readline().strip() != "ready":  # PIPE: stdout is there
            self._finish()
        return self

    def stop(self) -> None:
        if self._child is None:
            return
        stdin = self._child.stdin  # a pipe: start opens it
        try:
            if stdin is not None:
                stdin.write("stop\n")
                stdin.flush()
        except OSError:
            pass
        self._finish()

    def _finish(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            out, _ = child.communicate(timeout=JOIN_TIMEOUT_S)
            doc = json.loads(out.strip().splitlines()[-1])
        except Exception as e:  # a child that died or hung: say so, never take the run down
            child.kill()
            self._note(
                f"telemetry: sampler process failed ({first_line(e, with_type=True)}); no figures for this block"
            )
            return
        self._rows = [{**r, "t_ns": int(r["t_ns"])} for r in doc["rows"]]
        self.missed, self.thread_cpu_ns = doc["missed"], doc["thread_cpu_ns"]
        for note in doc["notes"]:
            self._note(note)


def make_sampler(interval_ms: float, device: object, busy_cores: int, on_note: Callable[[str], None] = _print_note):
    """The sampler bench and profile use, chosen by what benchmarks/telemetry_overhead.py measured here:

    - a core to spare (a GPU run, whose host loop is one thread; or fewer torch threads than cores): a child
      process, which costs the loop nothing measurable (it needs /proc);
    - torch's threads on every core (a CPU run with default threads): a thread of this process, whose GIL
      handoffs cost a few percent but less than a process preempting one of torch's threads.
    """
    spare = str(device).startswith("cuda") or busy_cores < (os.cpu_count() or 1)
    if spare and os.path.exists("/proc/self/stat"):
        return ProcessSampler(interval_ms, device, on_note)
    backends, note = open_backends(device)
    if note:
        on_note(note)
    return Sampler(interval_ms, backends, on_note=on_note)


def _child_gpu(args: argparse.Namespace) -> tuple[list[Backend], list[str]]:
    """The child's GPU backend (NVML on a CUDA device), or the note that says why there is none."""
    if not args.device.startswith("cuda"):
        return [], [f"telemetry: device {args.device} has no NVML figures; recording CPU figures only"]
    try:
        return [NvmlBackend(args.gpu_index, args.gpu_uuid)], []
    except Exception as e:
        return [], [
            f"telemetry: NVML unavailable ({first_line(e, with_type=True)}); "
            "recording CPU figures only, no GPU figures or energy"
        ]


def _child_rows(cpu: CpuBackend, snapshots: list[tuple], own_cpu_ns: list[int], gpu_rows: list[Row]) -> list[Row]:
    """The raw reads parsed into rows, each with the child's own CPU as a rate (`sampler_cpu_pct`, like
    proc_cpu_pct: a row's value holds over the interval before it)."""
    rows = [{"t_ns": snap[0], **cpu.parse(snap), **gpu} for snap, gpu in zip(snapshots, gpu_rows, strict=True)]
    for k in range(len(rows)):
        wall = rows[k]["t_ns"] - rows[k - 1]["t_ns"] if k else 0
        rows[k]["sampler_cpu_pct"] = 100.0 * (own_cpu_ns[k] - own_cpu_ns[k - 1]) / wall if wall > 0 else math.nan
    return rows


def _child_main(argv: list[str] | None = None) -> None:
    """`python -m probe.capture.telemetry.samplers --pid P ...`: sample process P until a line arrives on stdin,
    then print {"rows", "notes", "missed", "thread_cpu_ns"} as one JSON line."""
    args = _child_args(argv)
    backends, notes = _child_gpu(args)
    reads = _ChildReads(CpuBackend(pid=args.pid), backends, notes)
    _sample_until_told(reads, round(args.interval_ms * 1e6))
    rows = _child_rows(reads.cpu, reads.snapshots, reads.own_cpu_ns, reads.gpu_rows)
    for backend in (*backends, reads.cpu):
        backend.close()
    doc = {"rows": rows, "notes": notes, "missed": reads.missed, "thread_cpu_ns": reads.loop_cpu_ns}
    print(json.dumps(doc), flush=True)


def _child_args(argv: list[str] | None) -> argparse.Namespace:
    """The child's command line: the process to watch, the interval, the device and its NVML index and UUID."""
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--interval-ms", type=float, default=DEFAULT_INTERVAL_MS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--gpu-index", type=int, default=0)
    p.add_argument("--gpu-uuid", default=None)
    return p.parse_args(argv)


class _ChildReads:
    """The child's reads, raw as taken, and what its sampling loop counted (ticks missed, its CPU time)."""

    # The loop keeps raw reads only (two preads and a clock, ~20 us) and parses them after the block: every
    # microsecond it spends awake is taken from a core the decode loop may want.

    def __init__(self, cpu: CpuBackend, backends: list[Backend], notes: list[str]):
        self.cpu, self.backends, self.notes = cpu, backends, notes
        self.snapshots: list[tuple] = []
        self.gpu_rows: list[Row] = []
        # this child's own CPU time: /proc/stat counts it, the contention rule takes it off
        self.own_cpu_ns: list[int] = []
        self.missed = 0  # ticks skipped because the loop was late
        self.loop_cpu_ns = 0  # CPU time the sampling thread used, set when it ends

    def take(self) -> None:
        """One read: each live GPU backend (one that raises is dropped with a note), the CPU snapshot, own CPU."""
        gpu: Row = {}
        for backend in list(self.backends):
            try:
                gpu.update(backend.read())
            except Exception as e:
                self.backends.remove(backend)
                self.notes.append(
                    f"telemetry: {backend.name} figures stop here after "
                    f"{first_line(e, with_type=True)}; others continue"
                )
        self.snapshots.append(self.cpu.snapshot())
        self.own_cpu_ns.append(time.process_time_ns())
        self.gpu_rows.append(gpu)

    def loop(self, t0: int, period: int, stop: threading.Event) -> None:
        """Read on the schedule t0 + k * period until `stop` is set, skipping ticks already past."""
        k = 0
        while not stop.is_set():
            k, wait_ns, skipped = next_tick(t0, period, k, time.perf_counter_ns())
            self.missed += skipped
            time.sleep(wait_ns / 1e9)
            if not stop.is_set():
                self.take()
        self.loop_cpu_ns = time.thread_time_ns()


def _sample_until_told(reads: _ChildReads, period: int) -> None:
    """Read now, then every `period` ns in a thread from "ready" until a line arrives on stdin, then once more."""
    stop = threading.Event()
    t0 = time.perf_counter_ns()
    reads.take()
    thread = threading.Thread(target=reads.loop, args=(t0, period, stop), daemon=True)
    thread.start()
    print("ready", flush=True)
    sys.stdin.readline()
    stop.set()
    thread.join(JOIN_TIMEOUT_S)
    reads.take()


if __name__ == "__main__":
    _child_main()
