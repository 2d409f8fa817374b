"""probe overhead: the timing annotator's arithmetic, and the floor experiment on the tiny model."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from probe import vocabulary
from probe.analysis.diagnosis.predictions import OverheadReport
from probe.capture import machine
from probe.capture.machine import PIECES, TimingAnnotator, choose_threads, measure, thread_candidates
from tests.conftest import floor_ops_by_profiler


def test_timing_annotator_charges_self_time_per_step():
    ticks = iter([0, 10, 15, 40, 45, 100, 100, 130, 200, 260])
    timing = TimingAnnotator(clock=lambda: next(ticks))
    with timing(vocabulary.DECODE, 0):  # enter at 0
        with timing(vocabulary.FORWARD):  # 10
            with timing(vocabulary.CACHE_UPDATE, 3):  # 15
                pass  # exit 40
        # forward exit 45; back in decode
        with timing(vocabulary.SAMPLE):  # 100
            pass  # 100
    # decode exit 130
    with timing(vocabulary.DECODE, 1):  # 200
        pass  # 260
    first, second = timing.steps
    assert dict(first) == {
        vocabulary.DECODE: 10 + 55 + 30,
        vocabulary.FORWARD: 5 + 5,
        vocabulary.CACHE_UPDATE: 25,
        vocabulary.SAMPLE: 0,
    }
    assert sum(first.values()) == 130  # self times partition the step
    assert dict(second) == {vocabulary.DECODE: 60}


@pytest.fixture(scope="module")
def report():
    return measure("tiny", "float32", "cpu", context=16, steps=8, reps=5)


def test_floor_report_is_complete(report):
    assert report.launches_per_forward == floor_ops_by_profiler() and report.launch_kind == "aten ops dispatched"
    assert report.host_us_per_launch == pytest.approx(report.floor_issue_ms * 1e3 / report.launches_per_forward)
    assert report.floor_ms >= report.floor_issue_ms > 0
    assert report.cached_launches_per_forward > report.launches_per_forward  # bookkeeping adds ops
    assert [p.range for p in report.pieces] == [r for _, r in PIECES]
    by_range = {p.range: p.median_us for p in report.pieces}
    assert by_range[vocabulary.CACHE_UPDATE] > 0 and by_range[vocabulary.MASK] > 0 and by_range[vocabulary.FORWARD] > 0
    assert report.bookkeeping_ms == pytest.approx(
        sum(by_range[r] for r in (*vocabulary.CACHE_RANGES, vocabulary.MASK)) / 1e3
    )


def test_profiled_step_split(report):
    assert report.step_dispatch == "top-level ops" and report.device_pct is None  # a CPU trace
    assert report.step_dispatched == report.cached_launches_per_forward + 1  # the forward's ops + the argmax
    assert 0 < report.compute_in_ops_pct < 100 and report.host_pct == pytest.approx(100, abs=1)


def test_floor_is_taken_with_and_without_a_sync(report):
    assert report.floor_unsynced_ms is not None and report.floor_unsynced_ms > 0


def test_predictions_divide_by_a_measured_copy_with_the_datasheet_beside_it(monkeypatch):
    """A fake GPU: `measure` and the copy return fakes (no CUDA here) for a device torch would call an H200."""
    from probe.capture import machine

    fake_overhead = OverheadReport.from_json({"model": "tiny", "dtype": "float16", "device": "cuda:0", **FAKE_FLOOR})
    monkeypatch.setattr(machine, "measure", lambda *a, **k: fake_overhead)
    monkeypatch.setattr(machine, "measure_copy_bandwidth", lambda device: 3.9e12)  # a fake measured copy
    m, _ = machine.measure_machine("tiny", "float16", "cuda", "NVIDIA H200")
    assert m.bandwidth_bytes_s == 3.9e12 and m.bandwidth_source == "measured copy on NVIDIA H200"
    assert m.datasheet_bandwidth_bytes_s == 4.8e12 and m.datasheet_source.startswith("H200 datasheet")
    cpu, _ = machine.measure_machine("tiny", "float16", "cuda", "cpu")
    assert cpu.datasheet_bandwidth_bytes_s is None


FAKE_FLOOR = dict(
    context_tokens=64,
    floor_ms=2.0,
    floor_issue_ms=1.5,
    floor_wait_ms=0.5,
    launches_per_forward=100,
    launch_kind="kernel launches",
    host_us_per_launch=15.0,
    cached_step_ms=3.0,
    cached_launches_per_forward=120,
)


def test_us_per_launch_divides_by_kernel_launches_on_a_gpu(monkeypatch):
    """Issue 24 §3: on a GPU the floor forward's count is its kernel launch calls, not its aten ops. A fake CUDA
    forward (no GPU here): the profiler stand-in records two cudaLaunchKernel calls among three aten ops."""
    import torch

    from probe.capture import machine

    class FakeProfile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            names = ["aten::mm", "cudaLaunchKernel", "aten::relu", "cudaLaunchKernel", "aten::add"]
            return [SimpleNamespace(name=n) for n in names]

    monkeypatch.setattr(machine, "no_cache_forward", lambda model, token, masks: None)
    monkeypatch.setattr(machine, "prepared_masks", lambda model: None)
    monkeypatch.setattr(machine, "prepare_graph_profiling", lambda device: False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    token = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    assert machine.floor_launches(None, None, token) == (2, "kernel launches")


def test_thread_candidates_double_up_to_one_a_core():
    assert [thread_candidates(n) for n in (1, 2, 6, 8)] == [[1], [1, 2], [1, 2, 4, 6], [1, 2, 4, 8]]


class OtherProcesses:
    """CpuBackend's reads as choose_threads takes them, with `cores` used by other processes: the machine's CPU is
    this process's one core plus theirs."""

    def __init__(self, cores: float):
        self.cores = cores

    def __call__(self):
        return self

    def read(self) -> dict[str, float]:
        return {"sys_cpu_pct": (1 + self.cores) / (os.cpu_count() or 1) * 100, "proc_cpu_pct": 100.0}

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("other", "threads", "reason"),
    [(0.0, 4, "4 threads, the floor's fastest ("), (1.5, 1, "1 thread: other processes used 1.50 cores while")],
)
def test_a_cpu_run_takes_the_floors_fastest_thread_count_and_one_under_contention(
    tiny, monkeypatch, other, threads, reason
):
    """Issue 36 §1: on a loaded 2-core machine two threads thrashed (steps of 88-636 ms) where one was stable. Here
    the floor is made fastest at 4 threads; what other processes use decides between 4 and the one thread."""
    monkeypatch.setattr(machine, "THREAD_CHOICE_S", 0.0)
    monkeypatch.setattr(machine, "CpuBackend", OtherProcesses(other))
    monkeypatch.setattr(machine, "floor_forward", lambda *a: (0, 4_000_000 // torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        choice = choose_threads(tiny, most=4)
        assert torch.get_num_threads() == choice.threads == threads  # torch left at the count taken
    finally:
        torch.set_num_threads(before)
    assert choice.floor_ms == ((1, 4.0), (2, 2.0), (4, 1.0)) and choice.other_cpu_cores == pytest.approx(other)
    assert choice.contended == (other > 0) and choice.reason.startswith(reason)
