"""Telemetry backends: each reads one set of figures (see probe.capture.telemetry for the table).

CPU and process figures come from /proc (psutil elsewhere); GPU figures from NVML on NVIDIA GPUs.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import psutil
import pynvml

from probe.errors import first_line


class Backend(Protocol):
    name: str

    def read(self) -> dict[str, float]: ...

    def close(self) -> None: ...


def peak_rss_bytes() -> int:
    """This process's peak resident set since it started or since `reset_peak_rss()`: VmHWM on Linux (ru_maxrss
    elsewhere, which survives exec and cannot be reset)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
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
            self._proc = psutil.Process(pid)
        self._prev: tuple[int, float, float, float] | None = None  # (wall_ns, cpu_ns, busy, total)

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
        row = {"rss_bytes": float(rss), "threads": float(threads), "proc_cpu_pct": math.nan, "sys_cpu_pct": math.nan}
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
        fields = stat[stat.rindex(b")") + 2 :].split(None, 22)  # the name may hold spaces; [0] is field 3
        threads, rss = int(fields[17]), int(fields[21]) * self._page_bytes
        cpu_ns = (int(fields[11]) + int(fields[12])) * self._tick_ns  # utime + stime
        # "cpu  user nice system idle iowait irq softirq steal guest guest_nice": guest is inside user
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, machine.split(None, 9)[1:9])
        busy = user + nice + system + irq + softirq + steal
        return rss, threads, busy, busy + idle + iowait, cpu_ns

    def _psutil_counters(self) -> tuple[int, int, float, float, float]:
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
        return {
            "sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "mem_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
        }

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
            nvml = pynvml
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
    # torch as the caller loaded it: a CUDA device implies it is loaded, and the sampler child process, which
    # only receives the ids, must not load it.
    torch = sys.modules.get("torch")
    if torch is None:
        return int(index_text or 0), None
    try:
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
            note = (
                f"telemetry: NVML unavailable ({first_line(e, with_type=True)}); "
                "recording CPU figures only, no GPU figures or energy"
            )
    else:
        note = f"telemetry: device {device} has no NVML figures; recording CPU figures only, no GPU figures or energy"
    try:
        backends.append(CpuBackend())
    except Exception as e:
        note = f"{note}; " if note else "telemetry: "
        note += f"CPU figures unavailable ({first_line(e, with_type=True)})"
    return backends, note
