"""Device telemetry sampled in a background thread while the decode loop runs, and its per-cell summaries.

A `Sampler` reads its backends every `interval_ms` on a fixed schedule and keeps one row per read: `t_ns`
(time.perf_counter_ns, the clock of `probe.loop.Generation`, so rows line up with steps and traces) plus
named figures with their units in the names. Pure functions then summarise the rows over the decode phases.

| figure             | backend | source                                                  | kind    |
|--------------------|---------|---------------------------------------------------------|---------|
| gpu_mem_used_bytes | nvml    | nvmlDeviceGetMemoryInfo().used                          | level   |
| gpu_util_pct       | nvml    | nvmlDeviceGetUtilizationRates().gpu (kernel busy %)     | level   |
| mem_util_pct       | nvml    | nvmlDeviceGetUtilizationRates().memory (DRAM busy %)    | level   |
| sm_clock_mhz       | nvml    | nvmlDeviceGetClockInfo(NVML_CLOCK_SM)                   | level   |
| mem_clock_mhz      | nvml    | nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)                  | level   |
| power_w            | nvml    | field NVML_FI_DEV_POWER_INSTANT, else GetPowerUsage, mW | level   |
| energy_j           | nvml    | nvmlDeviceGetTotalEnergyConsumption, mJ (Volta+)        | counter |
| rss_bytes          | cpu     | /proc/self/stat rss (psutil elsewhere)                  | level   |
| proc_cpu_pct       | cpu     | process CPU time / wall time; 100 = one core busy       | rate    |
| sys_cpu_pct        | cpu     | /proc/stat busy / total ticks; 100 = every core busy    | rate    |
| threads            | cpu     | /proc/self/stat num_threads: OS threads of this process | level   |

The kind decides the honest time-weighted mean over a window. A level is a value at an instant, linear between
rows. A rate is the average over the interval since the previous row, constant over that interval. A counter is
cumulative: only differences mean something. A missing figure is absent or NaN in rows and None in summaries,
never 0.

Resolution caveats: NVML's utilization is a busy fraction over its own period (1/6 s to 1 s, per product), so
rows 10 ms apart repeat it. GetPowerUsage averages over 1 s on Ampere and newer, which is why the instant field
comes first. /proc/stat counts 10 ms ticks: one `sys_cpu_pct` row is coarse, but its time-weighted mean over a
window is exact but for the two rows at its edges. Likewise the kernel brings another running thread's CPU time
up to date only at its scheduler ticks, so a single 10 ms `proc_cpu_pct` row can even read above 100 x cores:
the errors cancel in the mean, not in the peak, so read rate peaks as "busiest 10 ms, give or take a tick".
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

LEVEL, RATE, COUNTER = "level", "rate", "counter"
FIGURES: dict[str, str] = {
    "gpu_mem_used_bytes": LEVEL, "gpu_util_pct": LEVEL, "mem_util_pct": LEVEL, "sm_clock_mhz": LEVEL,
    "mem_clock_mhz": LEVEL, "power_w": LEVEL, "energy_j": COUNTER,
    "rss_bytes": LEVEL, "proc_cpu_pct": RATE, "sys_cpu_pct": RATE, "threads": LEVEL,
}
DEFAULT_INTERVAL_MS = 10.0  # the default; its cost to a step: benchmarks/telemetry_overhead.py
STOP_POLL_S = 0.02  # the longest a stop waits on a sleeping sampler, whatever the interval
JOIN_TIMEOUT_S = 5.0  # a hung driver call must not hang the caller's exit; the thread is a daemon anyway

Row = dict[str, float]  # "t_ns" (an int, perf_counter_ns) plus figures
Window = tuple[int, int]  # [start_ns, end_ns] in perf_counter_ns


class Backend(Protocol):
    name: str

    def read(self) -> dict[str, float]: ...

    def close(self) -> None: ...


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def peak_rss_bytes() -> int:
    """This process's peak resident set since it started or since `reset_peak_rss()`: VmHWM on Linux (ru_maxrss
    elsewhere, which survives exec and cannot be reset)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets the peak RSS the kernel tracks for this process."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


# ---- CPU and process figures --------------------------------------------------------------------------------


def _pread_holding_gil() -> Callable[[int, int], bytes] | None:
    """pread(fd, size) at offset 0 through ctypes.PyDLL, which keeps the GIL during the call, or None.

    A /proc read takes microseconds and never blocks. os.pread releases the GIL for it and then has to win it
    back from a decode loop that is running Python: two handoffs a read, each a thread switch the loop may wait
    on. Holding the GIL trades them for the read itself.
    """
    try:
        import ctypes

        call = ctypes.PyDLL(None, use_errno=True).pread
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
    call.restype = ctypes.c_ssize_t
    buf = ctypes.create_string_buffer(4096)

    def pread(fd: int, size: int) -> bytes:
        n = call(fd, buf, size, 0)
        if n < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return ctypes.string_at(buf, n)

    return pread


class CpuBackend:
    """Process RSS, thread count and CPU time, and the machine's CPU time: /proc on Linux, psutil elsewhere.

    /proc is read through descriptors kept open, with the GIL held (see `_pread_holding_gil`). On the 2-core dev
    VM a row costs ~17 us warm and ~95 us in the sampling thread (cold caches every 10 ms), against ~70 and
    ~260 us for the same figures through psutil.
    """

    name = "cpu"

    def __init__(self, procfs: bool = True, pid: int | None = None):
        """`pid`: another process to watch (the sampler process watches the decode loop's); None: this one."""
        self._fds: tuple[int, int] | None = None
        self._proc = None
        self._other = pid is not None and pid != os.getpid()
        self._procfs = procfs and os.path.exists("/proc/self/stat")
        if self._procfs:
            stat = f"/proc/{pid}/stat" if self._other else "/proc/self/stat"
            self._fds = (os.open(stat, os.O_RDONLY), os.open("/proc/stat", os.O_RDONLY))
            self._page_bytes = os.sysconf("SC_PAGE_SIZE")
            self._tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
            self._pread = _pread_holding_gil() or (lambda fd, size: os.pread(fd, size, 0))
        else:
            import psutil

            self._proc = psutil.Process(pid)
        self._prev: tuple[int, int, float, float] | None = None  # (wall_ns, cpu_ns, busy, total)

    def read(self) -> dict[str, float]:
        return self.parse(self.snapshot())

    def snapshot(self) -> tuple:
        """One row's raw reads, as cheap as they come; `parse` turns snapshots, taken in order, into rows."""
        wall = time.perf_counter_ns()
        own = None if self._other else time.process_time_ns()  # every thread of this process, in ns
        if self._fds is None:
            return wall, own, self._psutil_counters()
        return wall, own, (self._pread(self._fds[0], 4096), self._pread(self._fds[1], 256))

    def parse(self, snapshot: tuple) -> dict[str, float]:
        wall, own, raw = snapshot
        rss, threads, busy, total, cpu_ns = self._counters(raw) if self._procfs else raw
        cpu = own if own is not None else cpu_ns  # another process's CPU time comes in clock ticks
        row = {"rss_bytes": float(rss), "threads": float(threads), "proc_cpu_pct": math.nan,
               "sys_cpu_pct": math.nan}
        if self._prev is not None:
            wall0, cpu0, busy0, total0 = self._prev
            if wall > wall0:
                row["proc_cpu_pct"] = 100.0 * (cpu - cpu0) / (wall - wall0)
            if total > total0:  # no tick elapsed: unknown, not 0
                row["sys_cpu_pct"] = 100.0 * (busy - busy0) / (total - total0)
        self._prev = (wall, cpu, busy, total)
        return row

    def _counters(self, raw: tuple[bytes, bytes]) -> tuple[int, int, float, float, float]:
        """(rss bytes, threads, machine busy, machine total (any one unit), process CPU ns) from /proc text."""
        stat, machine = raw
        fields = stat[stat.rindex(b")") + 2:].split(None, 22)  # the name may hold spaces; [0] is field 3
        threads, rss = int(fields[17]), int(fields[21]) * self._page_bytes
        cpu_ns = (int(fields[11]) + int(fields[12])) * self._tick_ns  # utime + stime
        # "cpu  user nice system idle iowait irq softirq steal guest guest_nice": guest is inside user
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, machine.split(None, 9)[1:9])
        busy = user + nice + system + irq + softirq + steal
        return rss, threads, busy, busy + idle + iowait, cpu_ns

    def _psutil_counters(self) -> tuple[int, int, float, float, float]:
        import psutil

        if self._proc is None:
            raise RuntimeError("read after close")
        with self._proc.oneshot():
            rss, threads = self._proc.memory_info().rss, self._proc.num_threads()
            times = self._proc.cpu_times()
        t = psutil.cpu_times()
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        return rss, threads, total - t.idle - getattr(t, "iowait", 0.0), total, (times.user + times.system) * 1e9

    def close(self) -> None:
        fds, self._fds, self._proc = self._fds, None, None
        for fd in fds or ():
            os.close(fd)


# ---- NVIDIA GPUs through NVML -------------------------------------------------------------------------------

_NVML_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t


def _nvml_reads(n, h) -> list[tuple[Callable[[], dict[str, float]], ...]]:
    """Each group of figures with its readers, best first; NvmlBackend keeps the first that works."""

    def memory():
        return {"gpu_mem_used_bytes": float(n.nvmlDeviceGetMemoryInfo(h).used)}

    def utilization():
        u = n.nvmlDeviceGetUtilizationRates(h)
        return {"gpu_util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}

    def clocks():
        return {"sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                "mem_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))}

    def power_instant():  # GetPowerUsage averages over 1 s on Ampere+; 10 ms rows want the instant value
        v = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_POWER_INSTANT])[0]
        if v.nvmlReturn != 0:
            raise RuntimeError(f"NVML_FI_DEV_POWER_INSTANT returned {v.nvmlReturn}")
        return {"power_w": float(getattr(v.value, _NVML_VALUE_MEMBERS[v.valueType])) / 1e3}

    def power_usage():
        return {"power_w": n.nvmlDeviceGetPowerUsage(h) / 1e3}

    def energy():
        return {"energy_j": n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3}

    return [(memory,), (utilization,), (clocks,), (power_instant, power_usage), (energy,)]


def _first_working(readers: Iterable[Callable[[], dict[str, float]]]) -> Callable[[], dict[str, float]] | None:
    for read in readers:
        try:
            read()
            return read
        except Exception:  # NotSupported, NoPermission, or an older pynvml without the call
            continue
    return None


class NvmlBackend:
    """One NVIDIA GPU through NVML. Figures the GPU does not support (e.g. energy before Volta) are left out."""

    name = "nvml"

    def __init__(self, index: int = 0, uuid: str | None = None, nvml=None):
        """`uuid` (NVML's "GPU-..." form) wins over `index`, which NVML counts in PCI order, not CUDA's."""
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        nvml.nvmlInit()
        try:
            groups = _nvml_reads(nvml, self._handle(index, uuid))
            found = [_first_working(group) for group in groups]
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self._reads = [r for r in found if r is not None]
        self.unsupported = [g[0].__name__ for g, r in zip(groups, found, strict=True) if r is None]

    def _handle(self, index: int, uuid: str | None):
        if uuid is not None:
            try:
                return self._nvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception:
                pass
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def read(self) -> dict[str, float]:
        row: dict[str, float] = {}
        for read in self._reads:  # each NVML call is a ctypes call, which releases the GIL
            row.update(read())
        return row

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def _cuda_ids(device: str) -> tuple[int, str | None]:
    """The CUDA device's index and NVML UUID; the UUID survives CUDA_VISIBLE_DEVICES and CUDA's ordering."""
    index_text = device.partition(":")[2]
    try:
        import torch

        index = int(index_text) if index_text else torch.cuda.current_device()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:
        return int(index_text or 0), None
    return index, uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def open_backends(device: object = "cpu", nvml=None) -> tuple[list[Backend], str | None]:
    """The backends that work for `device` (str or torch.device), and a one-line note on what is missing."""
    backends: list[Backend] = []
    note = None
    if str(device).startswith("cuda"):
        try:
            backends.append(NvmlBackend(*_cuda_ids(str(device)), nvml=nvml))
        except Exception as e:
            note = f"telemetry: NVML unavailable ({_one_line(e)}); recording CPU figures only, no GPU figures or energy"
    else:
        note = f"telemetry: device {device} has no NVML figures; recording CPU figures only, no GPU figures or energy"
    try:
        backends.append(CpuBackend())
    except Exception as e:
        note = f"{note}; " if note else "telemetry: "
        note += f"CPU figures unavailable ({_one_line(e)})"
    return backends, note


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

    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS, backends: Sequence[Backend] | None = None,
                 clock: Callable[[], int] = time.perf_counter_ns, on_note: Callable[[str], None] = _print_note):
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
                self._note(f"telemetry: {backend.name} figures stop here after {_one_line(e)}; others continue")
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
            self._note(f"telemetry: sampler thread stopped early after {_one_line(e)}")
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



# ---- summaries: pure functions of rows and windows ----------------------------------------------------------


class ProcessSampler(_Sampling):
    """The same sampling, run in a child process that watches this one through /proc (and NVML).

    A sampling thread shares the GIL with the decode loop: each of its 100 wake-ups a second makes the loop
    hand the GIL over and wait for it back, which cost the tiny CPU model 2-3% of its step here. A child
    process takes nothing from the loop but a slice of a core. Rows use the same clock (perf_counter_ns is
    CLOCK_MONOTONIC on Linux, shared by every process), so they line up with `Generation` times as before.
    The child takes its first row before the block starts and its last after it ends.
    """

    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS, device: object = "cpu",
                 on_note: Callable[[str], None] = _print_note):
        if not interval_ms > 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self.interval_ms, self.device, self.on_note = interval_ms, str(device), on_note
        self.notes: list[str] = []
        self.missed = 0
        self.thread_cpu_ns = 0
        self._rows: list[Row] = []
        self._child = None

    @property
    def samples(self) -> list[Row]:
        return list(self._rows)

    def start(self) -> ProcessSampler:
        import subprocess

        cmd = [sys.executable, "-m", "probe.telemetry", "--pid", str(os.getpid()), "--interval-ms",
               repr(self.interval_ms), "--device", self.device]
        if self.device.startswith("cuda"):
            index, uuid = _cuda_ids(self.device)  # torch is already loaded here; the child must not load it
            cmd += ["--gpu-index", str(index)] + (["--gpu-uuid", uuid] if uuid else [])
        self._child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       start_new_session=True)  # Ctrl-C goes to the loop, which stops us
        if self._child.stdout.readline().strip() != "ready":
            self._finish()
        return self

    def stop(self) -> None:
        if self._child is None:
            return
        try:
            self._child.stdin.write("stop\n")
            self._child.stdin.flush()
        except OSError:
            pass
        self._finish()

    def _finish(self) -> None:
        import json

        child, self._child = self._child, None
        try:
            out, _ = child.communicate(timeout=JOIN_TIMEOUT_S)
            doc = json.loads(out.strip().splitlines()[-1])
        except Exception as e:  # a child that died or hung: say so, never take the run down
            child.kill()
            self._note(f"telemetry: sampler process failed ({_one_line(e)}); no figures for this block")
            return
        self._rows = [{**r, "t_ns": int(r["t_ns"])} for r in doc["rows"]]
        self.missed, self.thread_cpu_ns = doc["missed"], doc["thread_cpu_ns"]
        for note in doc["notes"]:
            self._note(note)



def make_sampler(interval_ms: float, device: object, busy_cores: int,
                 on_note: Callable[[str], None] = _print_note):
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


def _child_main(argv: list[str] | None = None) -> None:
    """`python -m probe.telemetry --pid P ...`: sample process P until a line arrives on stdin, then print
    {"rows", "notes", "missed", "thread_cpu_ns"} as one JSON line."""
    import argparse
    import json

    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--interval-ms", type=float, default=DEFAULT_INTERVAL_MS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--gpu-index", type=int, default=0)
    p.add_argument("--gpu-uuid", default=None)
    args = p.parse_args(argv)
    notes: list[str] = []
    backends: list[Backend] = []
    if args.device.startswith("cuda"):
        try:
            backends.append(NvmlBackend(args.gpu_index, args.gpu_uuid))
        except Exception as e:
            notes.append(f"telemetry: NVML unavailable ({_one_line(e)}); recording CPU figures only, "
                         "no GPU figures or energy")
    else:
        notes.append(f"telemetry: device {args.device} has no NVML figures; recording CPU figures only")
    cpu = CpuBackend(pid=args.pid)
    # The loop keeps raw reads only (two preads and a clock, ~20 us) and parses them after the block: every
    # microsecond it spends awake is taken from a core the decode loop may want.
    snapshots: list[tuple] = []
    gpu_rows: list[Row] = []
    period, stop = round(args.interval_ms * 1e6), threading.Event()
    missed = 0

    def take() -> None:
        gpu: Row = {}
        for backend in list(backends):
            try:
                gpu.update(backend.read())
            except Exception as e:
                backends.remove(backend)
                notes.append(f"telemetry: {backend.name} figures stop here after {_one_line(e)}; others continue")
        snapshots.append(cpu.snapshot())
        gpu_rows.append(gpu)

    loop_cpu_ns = 0

    def loop(t0: int) -> None:
        nonlocal missed, loop_cpu_ns
        k = 0
        while not stop.is_set():
            k, wait_ns, skipped = next_tick(t0, period, k, time.perf_counter_ns())
            missed += skipped
            time.sleep(wait_ns / 1e9)
            if not stop.is_set():
                take()
        loop_cpu_ns = time.thread_time_ns()

    t0 = time.perf_counter_ns()
    take()
    thread = threading.Thread(target=loop, args=(t0,), daemon=True)
    thread.start()
    print("ready", flush=True)
    sys.stdin.readline()
    stop.set()
    thread.join(JOIN_TIMEOUT_S)
    take()
    rows = [{"t_ns": snap[0], **cpu.parse(snap), **gpu} for snap, gpu in zip(snapshots, gpu_rows, strict=True)]
    for backend in (*backends, cpu):
        backend.close()
    print(json.dumps({"rows": rows, "notes": notes, "missed": missed, "thread_cpu_ns": loop_cpu_ns}),
          flush=True)


def decode_windows(generations: Iterable) -> list[Window]:
    """Each run's decode phase, [start + ttft, start + total], from `probe.loop.Generation`s."""
    return [(g.start_ns + g.ttft_ns, g.start_ns + g.total_ns) for g in generations]


def _merge(windows: Iterable[Window]) -> list[Window]:
    merged: list[list[int]] = []
    for a, b in sorted(w for w in windows if w[1] > w[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _columns(samples) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(t_ns sorted, {figure: float array with NaN for missing}) from rows or a DataFrame of them."""
    if hasattr(samples, "columns"):
        t = samples["t_ns"].to_numpy(np.int64)
        cols = {c: samples[c].to_numpy(np.float64) for c in samples.columns if c != "t_ns"}
    else:
        rows = list(samples)
        t = np.array([r["t_ns"] for r in rows], dtype=np.int64)
        names = dict.fromkeys(k for r in rows for k in r if k != "t_ns")
        cols = {n: np.array([r.get(n, math.nan) for r in rows], dtype=np.float64) for n in names}
    order = np.argsort(t, kind="stable")
    return t[order], {n: v[order] for n, v in cols.items()}


def _relative(t: np.ndarray, spans: list[Window]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Times as float ns from the first row: exact in float64, unlike raw perf_counter_ns near 2**53."""
    origin = int(t[0]) if len(t) else 0
    return (t - origin).astype(np.float64), [(float(a - origin), float(b - origin)) for a, b in spans]


def _level(t: np.ndarray, v: np.ndarray, spans) -> tuple[float, float, float]:
    """(integral, covered duration, peak) of the piecewise-linear signal through the valid rows."""
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    area = covered = 0.0
    peak = -math.inf
    if not len(t):
        return area, covered, peak
    for a, b in spans:
        a, b = max(a, t[0]), min(b, t[-1])
        if b <= a:
            continue
        inner = (t > a) & (t < b)
        ts = np.concatenate(([a], t[inner], [b]))
        vs = np.concatenate((np.interp([a], t, v), v[inner], np.interp([b], t, v)))
        area += float(np.sum((vs[1:] + vs[:-1]) / 2 * np.diff(ts)))
        covered += b - a
        peak = max(peak, float(vs.max()))
    return area, covered, peak


def _rate(t: np.ndarray, v: np.ndarray, spans) -> tuple[float, float, float]:
    """(integral, covered duration, peak) of the signal that holds row k's value over (t[k-1], t[k]]."""
    starts, ends, vals = t[:-1], t[1:], v[1:]
    ok = ~np.isnan(vals)
    starts, ends, vals = starts[ok], ends[ok], vals[ok]
    area = covered = 0.0
    peak = -math.inf
    for a, b in spans:
        overlap = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0.0, None)
        area += float(np.sum(overlap * vals))
        covered += float(np.sum(overlap))
        if (overlap > 0).any():
            peak = max(peak, float(vals[overlap > 0].max()))
    return area, covered, peak


def summarize(samples, windows: Iterable[Window]) -> dict[str, float | None]:
    """`<figure>_mean` (time-weighted) and `<figure>_peak` over the union of `windows`, for every figure.

    Each figure is summarised over the part of the windows its rows cover; None where they cover none (a GPU
    figure on a CPU run, a backend dropped before the windows). Counters (energy_j) go to `energy_joules`.
    """
    t, cols = _columns(samples)
    t, spans = _relative(t, _merge(windows))
    out: dict[str, float | None] = {}
    for name in dict.fromkeys([*FIGURES, *cols]):
        kind = FIGURES.get(name, LEVEL)
        if kind == COUNTER:
            continue
        mean = peak = None
        if name in cols and len(t):
            area, covered, top = (_rate if kind == RATE else _level)(t, cols[name], spans)
            if covered > 0:
                mean, peak = area / covered, top
        out[f"{name}_mean"], out[f"{name}_peak"] = mean, peak
    return out


def _counter_delta(t: np.ndarray, e: np.ndarray, spans) -> float | None:
    ok = ~np.isnan(e)
    t, e = t[ok], e[ok]
    if len(t) < 2 or not spans or spans[0][0] < t[0] or spans[-1][1] > t[-1]:
        return None
    return float(sum(np.interp(b, t, e) - np.interp(a, t, e) for a, b in spans))


def _energy(samples, windows: Iterable[Window]) -> tuple[float | None, str | None]:
    t, cols = _columns(samples)
    t, spans = _relative(t, _merge(windows))
    if "energy_j" in cols and (joules := _counter_delta(t, cols["energy_j"], spans)) is not None:
        return joules, "counter"
    if "power_w" in cols and len(t) and spans:
        area, covered, _ = _level(t, cols["power_w"], spans)
        if covered == sum(b - a for a, b in spans):  # energy over part of the windows would be an undercount
            return area / 1e9, "power_integral"  # W * ns -> J
    return None, None


def energy_joules(samples, windows: Iterable[Window]) -> float | None:
    """Energy over the windows: the energy counter's difference where present, else the trapezoid integral
    of power_w. None when neither signal covers every window."""
    return _energy(samples, windows)[0]


def cell_telemetry(samples, windows: Iterable[Window], tokens: int) -> dict[str, float | str | None]:
    """Everything a results cell records: the summaries, decode energy, its source, and J per `tokens`."""
    windows = list(windows)
    joules, source = _energy(samples, windows)
    t, _ = _columns(samples)
    inside = sum(int(np.count_nonzero((t >= a) & (t <= b))) for a, b in _merge(windows))
    return {
        **summarize(samples, windows),
        "decode_energy_j": joules,
        "energy_source": source,  # "counter" | "power_integral" | None
        "energy_per_token_j": joules / tokens if joules is not None and tokens > 0 else None,
        "samples_in_windows": inside,
    }


def samples_frame(samples):
    """The rows as a DataFrame: `t_ns` (int64), then every known figure (NaN where missing), then others."""
    import pandas as pd

    t, cols = _columns(samples)
    names = list(dict.fromkeys([*FIGURES, *cols]))
    data = {"t_ns": t, **{n: cols.get(n, np.full(len(t), np.nan)) for n in names}}
    return pd.DataFrame(data, columns=["t_ns", *names])


def write_samples(samples, path: str | Path) -> Path:
    """Write the rows to Parquet atomically, so a Ctrl-C never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    samples_frame(samples).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    _child_main()
