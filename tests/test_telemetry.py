"""Telemetry: a fake NVML with known ramps gives exact figures; the sampler thread starts, stops and survives."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from probe.analysis.records import telemetry as T
from probe.capture.telemetry import backends as B
from probe.capture.telemetry import samplers as S

T0 = 10**15  # perf_counter_ns after ~12 days up: large enough that raw float64 ns would lose precision
MS = 1_000_000


class FakeClock:
    def __init__(self):
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def seconds(self) -> float:
        return (self.now - T0) / 1e9


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """pynvml's surface as NvmlBackend uses it. Power ramps as 100 + 10 t W; the energy counter is its exact
    integral (times `counter_scale`, so a test can tell which source the energy came from)."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_FI_DEV_POWER_INSTANT = 1, 2, 186

    def __init__(
        self,
        clock: FakeClock,
        counter: bool = True,
        instant: bool = True,
        counter_scale: float = 1.0,
        init_error: Exception | None = None,
    ):
        self.clock, self.counter, self.instant, self.scale = clock, counter, instant, counter_scale
        self.init_error, self.inits = init_error, 0

    def power_w(self) -> float:
        return 100.0 + 10.0 * self.clock.seconds()

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise FakeNVMLError("NotFound")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=2 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetClockInfo(self, h, which):
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 3201}[which]

    def nvmlDeviceGetFieldValues(self, h, ids):
        if not self.instant:
            raise FakeNVMLError("NotSupported")
        assert ids == [self.NVML_FI_DEV_POWER_INSTANT]
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=self.power_w() * 1e3))]

    def nvmlDeviceGetPowerUsage(self, h):
        return 999_000  # a 1 s average in mW: must lose to the instant field when that exists

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.counter:
            raise FakeNVMLError("NotSupported")  # pre-Volta
        t = self.clock.seconds()
        return self.scale * (5e6 + 1e3 * (100.0 * t + 5.0 * t * t))  # mJ since the driver loaded


def sampled(fake: FakeNvml, clock: FakeClock, times_s) -> list[T.Row]:
    """Rows taken by hand at `times_s`, with no thread: exact times, exact values."""
    sampler = S.Sampler(backends=[B.NvmlBackend(nvml=fake)], clock=clock)
    for t in times_s:
        clock.now = T0 + round(t * 1e9)
        sampler.sample()
    return sampler.samples


def window(a_s: float, b_s: float) -> T.Window:
    return T0 + round(a_s * 1e9), T0 + round(b_s * 1e9)


EVERY_10MS = [i / 100 for i in range(101)]
ENERGY_02_07 = 100 * 0.5 + 5 * (0.7**2 - 0.2**2)  # integral of 100 + 10 t over [0.2, 0.7] s: 52.25 J


# ---- NVML figures ------------------------------------------------------------------------------------------


def test_nvml_figures_names_and_units():
    clock = FakeClock()
    clock.now = T0 + 500 * MS
    row = B.NvmlBackend(nvml=FakeNvml(clock)).read()
    assert row == {
        "gpu_mem_used_bytes": 2.0 * 2**30,
        "gpu_util_pct": 87.0,
        "mem_util_pct": 40.0,
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 3201.0,
        "power_w": 105.0,
        "energy_j": 5000.0 + 100 * 0.5 + 5 * 0.25,
    }
    assert set(row) <= set(T.FIGURES)


def test_nvml_falls_back_to_average_power_and_leaves_out_missing_counter():
    backend = B.NvmlBackend(nvml=FakeNvml(FakeClock(), counter=False, instant=False))
    row = backend.read()
    assert row["power_w"] == 999.0 and "energy_j" not in row
    assert backend.unsupported == ["energy"]


def test_backend_close_shuts_nvml_down():
    fake = FakeNvml(FakeClock())
    with S.Sampler(backends=[B.NvmlBackend(nvml=fake)]):
        assert fake.inits == 1
    assert fake.inits == 0


# ---- summaries: exact numbers ------------------------------------------------------------------------------


def test_energy_comes_from_the_counter_when_there_is_one():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock, counter_scale=2.0), clock, EVERY_10MS)
    assert T.energy_joules(rows, [window(0.2, 0.7)]) == pytest.approx(2 * ENERGY_02_07, rel=1e-12)
    figures = T.cell_telemetry(rows, [window(0.2, 0.7)], tokens=50)
    assert figures.energy_source == "counter"
    assert figures.energy_per_token_j == pytest.approx(2 * ENERGY_02_07 / 50, rel=1e-12)


def test_energy_integrates_power_without_a_counter():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock, counter=False), clock, EVERY_10MS)
    figures = T.cell_telemetry(rows, [window(0.2, 0.7)], tokens=50)
    assert figures.energy_source == "power_integral"
    assert figures.decode_energy_j == pytest.approx(ENERGY_02_07, rel=1e-12)
    assert figures.energy_per_token_j == pytest.approx(ENERGY_02_07 / 50, rel=1e-12)


def test_windows_off_the_sample_grid_interpolate_the_counter():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock), clock, EVERY_10MS)
    # a quadratic counter read every 10 ms, interpolated linearly at 0.205 and 0.705: 52.275 +- 0.25 * 0.5e-4
    joules = T.energy_joules(rows, [window(0.205, 0.705)])
    assert joules == pytest.approx(100 * 0.5 + 5 * (0.705**2 - 0.205**2), abs=1e-6)


def test_overlapping_windows_count_once():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock, counter=False), clock, EVERY_10MS)
    joules = T.energy_joules(rows, [window(0.4, 0.7), window(0.2, 0.5)])
    assert joules == pytest.approx(ENERGY_02_07, rel=1e-12)


def test_means_are_time_weighted_over_irregular_rows():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock), clock, [0, 0.1, 0.15, 0.5, 0.52, 0.9, 1.0])
    s = T.summarize(rows, [window(0.2, 0.7)])
    # power is linear in t, so the time-weighted mean is its midpoint value; the mean of the rows inside
    # (105.0, 105.2) would be 105.1
    assert s["power_w_mean"] == pytest.approx(104.5, rel=1e-12)
    assert s["power_w_peak"] == pytest.approx(107.0, rel=1e-12)
    assert s["sm_clock_mhz_mean"] == 1980.0 and s["gpu_util_pct_peak"] == 87.0


def test_rate_rows_hold_over_the_interval_before_them():
    rows = [{"t_ns": T0 + i * 10 * MS, "proc_cpu_pct": v} for i, v in enumerate([math.nan, 100.0, 50.0, 0.0])]
    s = T.summarize(rows, [(T0 + 5 * MS, T0 + 25 * MS)])
    assert s["proc_cpu_pct_mean"] == pytest.approx((5 * 100 + 10 * 50 + 5 * 0) / 20, rel=1e-12)
    assert s["proc_cpu_pct_peak"] == 100.0


def test_missing_figures_are_none_never_zero():
    rows = [{"t_ns": T0 + i * 10 * MS, "rss_bytes": 1e9, "proc_cpu_pct": math.nan} for i in range(5)]
    figures = T.cell_telemetry(rows, [(T0 + 5 * MS, T0 + 35 * MS)], tokens=10)
    assert figures.rss_bytes_mean == 1e9
    for key in (
        "power_w_mean",
        "gpu_util_pct_peak",
        "proc_cpu_pct_mean",
        "decode_energy_j",
        "energy_per_token_j",
        "energy_source",
    ):
        assert getattr(figures, key) is None, key


def test_energy_is_none_when_rows_do_not_cover_the_windows():
    clock = FakeClock()
    rows = sampled(FakeNvml(clock), clock, [i / 100 for i in range(51)])  # rows stop at 0.5 s
    assert T.energy_joules(rows, [window(0.2, 0.7)]) is None  # not the 0.2 .. 0.5 part passed off as all
    assert T.summarize(rows, [window(0.2, 0.7)])["power_w_mean"] == pytest.approx(103.5, rel=1e-12)


def test_windows_with_no_rows_give_none():
    assert T.summarize([], [window(0, 1)])["rss_bytes_mean"] is None
    assert T.cell_telemetry([], [], tokens=0).energy_per_token_j is None


def test_decode_windows_follow_generation_times():
    gen = SimpleNamespace(start_ns=T0, ttft_ns=30 * MS, total_ns=100 * MS)
    assert T.decode_windows([gen]) == [(T0 + 30 * MS, T0 + 100 * MS)]


def test_samples_round_trip_through_parquet(tmp_path):
    clock = FakeClock()
    rows = sampled(FakeNvml(clock, counter=False), clock, EVERY_10MS[:5])
    path = T.write_samples(rows, tmp_path / "run" / "telemetry.parquet")
    import pandas as pd

    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["t_ns", *T.FIGURES]
    assert frame["t_ns"].dtype == "int64" and frame["t_ns"].iloc[-1] == T0 + 40 * MS
    assert frame["energy_j"].isna().all() and frame["rss_bytes"].isna().all()
    assert T.summarize(frame, [window(0.01, 0.03)]) == T.summarize(rows, [window(0.01, 0.03)])


# ---- the schedule and the thread ---------------------------------------------------------------------------


def test_schedule_is_fixed_and_skips_late_ticks():
    assert S.next_tick(0, 10, 0, 3) == (1, 7, 0)  # on time: wait for tick 1
    assert S.next_tick(0, 10, 1, 13) == (2, 7, 0)  # a 3 ns late tick does not shift the next one
    assert S.next_tick(0, 10, 1, 35) == (4, 5, 2)  # ticks 2 and 3 passed while sampling: skipped, not burst


class Counting:
    """A backend whose one figure, `<name>_reads`, counts its reads; from read `fail_at` on, it raises."""

    def __init__(self, name: str = "counting", fail_at: int | None = None, error: type[BaseException] = RuntimeError):
        self.name, self.reads, self.closed, self.fail_at, self.error = name, 0, False, fail_at, error

    def read(self):
        self.reads += 1
        if self.fail_at is not None and self.reads >= self.fail_at:
            raise self.error("sensor went away\nsecond line")
        return {f"{self.name}_reads": float(self.reads)}

    def close(self):
        self.closed = True


def wait_for(condition, what: str, deadline_s: float = 30.0) -> None:
    """Guards against a hang; it asserts nothing about how long sampling takes."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.001)


def test_start_and_stop_bracket_the_block():
    backend = Counting()
    with S.Sampler(1.0, [backend], on_note=lambda n: None) as sampler:
        first = sampler.samples[0]["t_ns"]  # taken on entry, before the block runs
        inside = time.perf_counter_ns()
        wait_for(lambda: len(sampler.samples) >= 5, "5 rows")
        assert sampler.running
    after = time.perf_counter_ns()
    assert not sampler.running and backend.closed
    times = [r["t_ns"] for r in sampler.samples]
    assert first <= inside <= times[-1] <= after and times == sorted(times)
    assert [r["counting_reads"] for r in sampler.samples] == list(range(1, len(times) + 1))


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_exception_in_the_block_stops_and_joins_the_thread(error):
    backend = Counting()
    with pytest.raises(error), S.Sampler(1.0, [backend]) as sampler:
        wait_for(lambda: len(sampler.samples) >= 3, "3 rows")
        raise error("stop")
    assert not sampler.running and sampler._thread is not None and not sampler._thread.is_alive()
    assert backend.closed


def test_ctrl_c_stops_and_joins_the_thread():
    with pytest.raises(KeyboardInterrupt), S.Sampler(1.0, [Counting()]) as sampler:
        wait_for(lambda: len(sampler.samples) >= 3, "3 rows")
        signal.raise_signal(signal.SIGINT)  # the real signal, delivered to the main thread
        time.sleep(10)  # never reached in full: the handler raises first
    assert not sampler.running


def test_a_failing_backend_is_dropped_with_one_note():
    good, bad = Counting("good"), Counting("flaky", fail_at=3)
    notes = []
    sampler = S.Sampler(backends=[good, bad], on_note=notes.append)
    rows = [sampler.sample() for _ in range(5)]
    assert notes == ["telemetry: flaky figures stop here after RuntimeError: sensor went away; others continue"]
    assert sampler.notes == notes
    assert [r["good_reads"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r.get("flaky_reads") for r in rows] == [1, 2, None, None, None]  # absent: missing, not 0
    assert bad.reads == 3


def test_the_thread_survives_a_failing_backend():
    good, bad = Counting("good"), Counting("bad", fail_at=2)
    with S.Sampler(1.0, [good, bad], on_note=lambda n: None) as sampler:
        wait_for(lambda: good.reads >= 6, "6 reads")
        assert sampler.running
    assert len(sampler.notes) == 1 and bad.reads == 2


def test_the_thread_never_takes_the_run_down():
    class Fatal(BaseException):
        pass

    backend = Counting(fail_at=2, error=Fatal)  # not an Exception: escapes sample() inside the thread
    with S.Sampler(1.0, [backend], on_note=lambda n: None) as sampler:
        wait_for(lambda: not sampler.running, "the thread to end")
    assert sampler.notes == ["telemetry: sampler thread stopped early after Fatal: sensor went away"]
    assert [r["counting_reads"] for r in sampler.samples] == [1.0]  # the entry row; the exit row is not attempted


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        S.Sampler(0)


# ---- backends on this machine ------------------------------------------------------------------------------


def test_missing_nvml_gives_one_note_and_cpu_figures_still_recorded():
    fake = FakeNvml(FakeClock(), init_error=FakeNVMLError("NVML Shared Library Not Found"))
    backends, note = B.open_backends("cuda:0", nvml=fake)
    assert [b.name for b in backends] == ["cpu"]
    assert note.startswith("telemetry: NVML unavailable (FakeNVMLError: NVML Shared Library Not Found)")
    assert "\n" not in note
    with S.Sampler(backends=backends, on_note=lambda n: None) as sampler:
        sum(range(200_000))
    s = T.summarize(sampler.samples, [(sampler.samples[0]["t_ns"], sampler.samples[-1]["t_ns"])])
    assert s["rss_bytes_mean"] > 0 and s["threads_peak"] >= 1
    assert s["power_w_mean"] is None and s["gpu_mem_used_bytes_peak"] is None


def test_real_nvml_or_its_note():
    backends, note = B.open_backends("cuda:0")
    try:
        if note is not None:  # this machine: no driver, so pynvml raises NVMLError_LibraryNotFound
            assert [b.name for b in backends] == ["cpu"] and "NVML unavailable" in note and "\n" not in note
        else:  # a GPU machine
            row = backends[0].read()
            assert row["gpu_mem_used_bytes"] > 0 and row["sm_clock_mhz"] > 0 and row["power_w"] > 0
    finally:
        for b in backends:
            b.close()


def test_cpu_device_notes_that_gpu_figures_are_absent():
    backends, note = B.open_backends("cpu")
    assert [b.name for b in backends] == ["cpu"] and "no GPU figures" in note
    backends[0].close()


@pytest.mark.parametrize("procfs", [True, False], ids=["proc", "psutil"])
def test_real_cpu_backend_is_plausible(procfs):
    backend = B.CpuBackend(procfs=procfs)
    first = backend.read()
    assert math.isnan(first["proc_cpu_pct"])  # no previous read: unknown, not 0
    start = time.process_time_ns()
    while time.process_time_ns() - start < 50 * MS:  # burn 50 ms of CPU so every counter moves
        pass
    row = backend.read()
    backend.close()
    assert row["rss_bytes"] > 10 * 2**20 and row["threads"] >= 1
    assert row["proc_cpu_pct"] > 0
    assert 0 < row["sys_cpu_pct"] <= 100


def test_cpu_rates_from_counters():
    class Scripted(B.CpuBackend):
        ticks = iter([(100, 1000), (150, 1100), (150, 1100)])  # (busy, total)

        def _counters(self, raw):
            busy, total = next(self.ticks)
            return 4096, 3, busy, total, 0.0

    backend = Scripted()
    backend.read()
    assert backend.read()["sys_cpu_pct"] == 50.0
    assert math.isnan(backend.read()["sys_cpu_pct"])  # no tick elapsed: unknown, not 0
    backend.close()


def test_the_sampler_child_loads_no_torch():
    """The child process the ProcessSampler starts imports the samplers module; it must not pay for torch."""
    code = "import sys, probe.capture.telemetry.samplers; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sampler_thread_is_a_daemon():
    with S.Sampler(1.0, [Counting()]) as sampler:
        assert sampler._thread.daemon and sampler._thread.name == "probe-telemetry"
        assert sampler._thread in threading.enumerate()


def test_gil_holding_pread_reads_like_os_pread(tmp_path):
    read = B._pread_holding_gil()
    if read is None:
        pytest.skip("no libc pread through ctypes here; CpuBackend falls back to os.pread")
    path = tmp_path / "f"
    path.write_bytes(b"cpu  1 2 3 4\nmore")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read(fd, 4096) == os.pread(fd, 4096, 0) == b"cpu  1 2 3 4\nmore"
        assert read(fd, 4) == b"cpu "
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        read(fd, 16)  # closed: EBADF, raised rather than returned as an empty read


# ---- the child-process sampler, for real ---------------------------------------------------------------------


@pytest.mark.serial  # it reads one busy core's CPU share: a test beside it on a 2-core machine takes part of it
def test_process_sampler_watches_this_process_on_the_same_clock():
    notes = []
    before = time.perf_counter_ns()
    with S.ProcessSampler(5.0, "cpu", on_note=notes.append) as sampler:
        t0 = time.perf_counter_ns()
        while time.perf_counter_ns() - t0 < 200_000_000:  # keep one core busy for 0.2 s
            pass
        inside = time.perf_counter_ns()
    rows = sampler.samples
    assert len(rows) >= 10 and before <= rows[0]["t_ns"] <= t0 and rows[-1]["t_ns"] >= inside
    assert [r["t_ns"] for r in rows] == sorted(r["t_ns"] for r in rows)
    assert all(r["rss_bytes"] > 10 * 2**20 for r in rows)  # this process's RSS (python + torch), not the child's
    summary = T.summarize(rows, [(t0, inside)])
    assert 50 < summary["proc_cpu_pct_mean"] < 250  # one busy core, measured from outside in clock ticks
    assert summary["gpu_util_pct_mean"] is None  # not measured here: None, never 0
    assert notes == ["telemetry: device cpu has no NVML figures; recording CPU figures only"]
    # the child's own CPU, as a rate of its own: what the contention rule takes off the machine's busy time
    assert all(math.isnan(r["sampler_cpu_pct"]) for r in rows[:1]) and summary["sampler_cpu_pct_mean"] >= 0


def test_the_sampler_processs_own_cpu_is_not_contention():
    """Issue 24 §3: on 2 cores, the machine busy 40% (0.8 cores) while this process uses 50% of one core and the
    sampler child 30%: 0.8 - 0.5 - 0.3 = 0 cores of others, not the 0.3 the old rule counted (over 0.25: contended)."""
    summary = T.TelemetrySummary(sys_cpu_pct_mean=40.0, proc_cpu_pct_mean=50.0, sampler_cpu_pct_mean=30.0)
    window = [(0, 200_000_000)]
    judged = T.contention(summary, window, cores=2)
    assert judged.other_cpu_cores == pytest.approx(0.0) and judged.contended is False
    thread = dataclasses.replace(summary, sampler_cpu_pct_mean=None)  # a sampler thread: inside proc_cpu_pct already
    assert T.contention(thread, window, cores=2).other_cpu_cores == pytest.approx(0.3)


def test_make_sampler_picks_a_process_only_with_a_core_to_spare():
    cores = os.cpu_count()
    assert isinstance(S.make_sampler(10, "cpu", busy_cores=cores - 1, on_note=lambda n: None), S.ProcessSampler)
    assert isinstance(S.make_sampler(10, "cpu", busy_cores=cores, on_note=lambda n: None), S.Sampler)
