"""What this machine costs: the write-ups' floor experiment, the question Part 2 left open, the copy bandwidth.

1. The floor: a forward pass over a single token with no cache, where the device has almost no work, so
   what it costs is close to pure overhead. Floor forwards alternate with the cached steps of (2), so the
   two are measured under the same machine state. On a GPU the time until the forward call returns (issuing the
   work) is separated from the wait for the device to drain, as Part 1 did (18.54 of 19.32 ms was CPU), and
   the floor is also taken without a sync: forwards back to back, one sync at the end, so the host may run
   ahead of the device. The forward is the naive engine's (`engines.naive.no_cache_forward`), whose masks are
   handed over built, so no hidden sync sits inside it.
2. The same single-token forward with the cache attached, i.e. a decode step of the cached engine, timed
   piece by piece through the annotation hook: the forward's own ops, the per-layer cache writes, the
   sequence-length read-back, the mask-size query, the mask construction, sampling and the sync. Each
   piece is self time (time in the range minus the ranges nested in it), so the pieces add up to the step.

The timing annotator costs about a microsecond a range; the pieces include it, the floor does not.

3. The intra-op threads a CPU run takes (`choose_threads`): the floor timed at each candidate count, the counts
   alternating so each sees the same machine, and the fastest taken, unless other processes took the CPU meanwhile:
   then one thread, since on a shared machine two threads stall at every op's barrier whenever another job holds a
   core (measured on this 2-core VM at load 9-13: steps of 88-636 ms with two threads, stable ones with one).

4. The copy bandwidth the roofline divides by: a tensor copy far larger than any cache, timed with CUDA events
   on a GPU, and `measure_machine` puts it beside the floor as the report's `Machine`, with the datasheet's
   figure beside it on a known GPU (a copy reaches well below the datasheet, so predictions use the copy).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from engines import engine_class
from engines.models import load_model, prompt_ids, resolve_device
from engines.naive import no_cache_forward, prepared_masks
from engines.static import StaticEagerEngine
from probe import vocabulary
from probe.analysis.diagnosis.predictions import Machine, OverheadReport, Piece
from probe.analysis.diagnosis.report import ThreadChoice
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.median import MedianStep, median_step
from probe.analysis.records.telemetry import CONTENDED_CORES, cell_telemetry, contention
from probe.analysis.roofline.devices import match_device
from probe.analysis.trace import load_trace
from probe.analysis.trace.table import LAUNCH_NAMES
from probe.capture import annotate
from probe.capture.config import BenchConfig, settle, validate
from probe.capture.count import count_forward_ops
from probe.capture.loop import decode_steps, device_sync, finish, generate
from probe.capture.profile import prepare_graph_profiling
from probe.capture.telemetry.backends import CpuBackend
from probe.capture.telemetry.samplers import make_sampler
from probe.errors import ProbeError

DYNAMO_LOOKUP = "TorchDynamo Cache Lookup"  # torch.compile's range around the guard check of each call


class _Frame:
    __slots__ = ("name", "resume")

    def __init__(self, name: str, resume: int):
        self.name, self.resume = name, resume


class _Timed:
    __slots__ = ("_owner", "_name")

    def __init__(self, owner: TimingAnnotator, name: str):
        self._owner, self._name = owner, name

    def __enter__(self):
        self._owner._enter(self._name)
        return self

    def __exit__(self, *exc):
        self._owner._exit()
        return False


class TimingAnnotator:
    """An annotator that measures instead of emitting: self time per range name, one dict per decode step.

    Indexed names are folded (`cache.update#3` counts as `cache.update`).
    """

    enabled = True

    def __init__(self, clock=time.perf_counter_ns):
        self.clock = clock
        self.steps: list[dict[str, int]] = []  # per decode step: range name -> self ns
        self._stack: list[_Frame] = []
        self._current: dict[str, int] | None = None

    def __call__(self, name: str, index: int | None = None):
        return _Timed(self, name)

    def _enter(self, name: str) -> None:
        now = self.clock()
        if self._stack:
            top = self._stack[-1]
            self._charge(top.name, now - top.resume)
        if name == vocabulary.DECODE:
            self._current = defaultdict(int)
            self.steps.append(self._current)
        self._stack.append(_Frame(name, now))

    def _exit(self) -> None:
        now = self.clock()
        frame = self._stack.pop()
        self._charge(frame.name, now - frame.resume)
        if frame.name == vocabulary.DECODE:
            self._current = None
        if self._stack:
            self._stack[-1].resume = now

    def _charge(self, name: str, ns: int) -> None:
        if self._current is not None:
            self._current[name] += ns


PIECES = (  # (label, range whose self time it is)
    ("forward ops", vocabulary.FORWARD),
    ("cache writes (all layers)", vocabulary.CACHE_UPDATE),
    ("sequence-length read-back", vocabulary.CACHE_SEQ_LENGTH),
    ("mask-size query", vocabulary.CACHE_MASK_SIZES),
    ("mask construction", vocabulary.MASK),
    ("sampling", vocabulary.SAMPLE),
    ("sync", vocabulary.SYNC),
    ("loop (step range itself)", vocabulary.DECODE),
)


def floor_forward(model, token: torch.Tensor, sync, masks: dict | None) -> tuple[int, int]:
    """One single-token forward with no cache: (ns until the call returned, ns until the device drained)."""
    clock = time.perf_counter_ns
    t0 = clock()
    no_cache_forward(model, token, masks)
    t1 = clock()
    sync()
    return t1 - t0, clock() - t0


UNSYNCED_BURST = 10  # floor forwards back to back per unsynced sample


def unsynced_floor(model, token: torch.Tensor, sync, masks: dict | None) -> int:
    """ns per forward of `UNSYNCED_BURST` single-token forwards issued back to back with one sync at the end: the
    floor when nothing makes the host wait for the device."""
    t0 = time.perf_counter_ns()
    for _ in range(UNSYNCED_BURST):
        no_cache_forward(model, token, masks)
    sync()
    return (time.perf_counter_ns() - t0) // UNSYNCED_BURST


def interleaved_floor_and_steps(model, cached, prompt: torch.Tensor, steps: int, reps: int, timing: TimingAnnotator):
    """Floor forwards and the cached engine's decode steps, alternating, so both see the same machine (a
    process's speed here drifts by a third from one minute to the next). Returns the floor's (issue, total,
    unsynced) ns, the last one sample per `UNSYNCED_BURST` floors; the steps' pieces land in `timing`."""
    sync = device_sync(prompt.device)
    token = prompt[:, -1:]
    masks = prepared_masks(model)
    issue, total, unsynced = [], [], []
    with torch.inference_mode():
        for _ in range(5):  # warm the floor's path
            floor_forward(model, token, sync, masks)
        run = decode_steps(cached, prompt, steps + 1, timing)
        next(run)  # the prefill
        for i in range(max(steps, reps)):
            if i < reps:
                t_issue, t_total = floor_forward(model, token, sync, masks)
                issue.append(t_issue)
                total.append(t_total)
                if i % UNSYNCED_BURST == 0:
                    unsynced.append(unsynced_floor(model, token, sync, masks))
            if i < steps:
                next(run)
        finish(run)
    return issue, total, unsynced


def measure(
    model_spec: str = "tiny",
    dtype: str = "float32",
    device: str = "cpu",
    context: int = 64,
    steps: int = 64,
    reps: int = 50,
    seed: int = 0,
    model=None,
) -> OverheadReport:
    """The floor and a cached step piece by piece. `model` (already built from `model_spec`, `dtype` on `device`)
    saves a load; "auto" model and dtype take the device's defaults."""
    dev = resolve_device(device)
    cfg = _settled_config(model_spec, dtype, device, context, steps, dev.type)
    if model is None:
        model = load_model(cfg.model, cfg.dtype, str(dev), seed)
    naive, cached = engine_class("naive")(model), engine_class("cached")(model)
    one_token = prompt_ids(1, 1, model.config.vocab_size, seed).to(dev)
    launches, launch_kind = floor_launches(model, naive, one_token)
    prompt = prompt_ids(context, 1, model.config.vocab_size, seed).to(dev)
    cached_ops = count_forward_ops(cached, prompt).decode_ops
    generate(cached, prompt, steps + 1)  # warm
    timing = TimingAnnotator()
    issue, total, unsynced = interleaved_floor_and_steps(model, cached, prompt, steps, reps, timing)
    floor = _Floor(issue, total, unsynced, launches, launch_kind)
    step_ms, pieces = _step_pieces(timing)
    step = profiled_step(cached, prompt)
    return _overhead_report(cfg, str(dev), context, floor, _CachedStep(step_ms, cached_ops, pieces, step))


def _settled_config(
    model_spec: str, dtype: str, device: str, context: int, steps: int, device_type: str
) -> BenchConfig:
    """The measurement as a one-cell bench config, "auto" model and dtype settled for the device, and checked."""
    cfg = BenchConfig(
        engines=("cached",), prompts=(context,), new_tokens=steps + 1, model=model_spec, dtype=dtype, device=device
    )
    cfg = settle(cfg, device_type)
    validate(cfg)
    return cfg


@dataclass(frozen=True)
class _Floor:
    """The floor's samples in ns (issue, total, unsynced per forward) and what it dispatches (`floor_launches`)."""

    issue: list[int]
    total: list[int]
    unsynced: list[int]
    launches: int
    launch_kind: str


@dataclass(frozen=True)
class _CachedStep:
    """The cached decode step: its median ms by pieces, its ops per forward, the pieces, the profiled median step."""

    step_ms: float
    ops: int
    pieces: list[Piece]
    ledger: MedianStep


def _step_pieces(timing: TimingAnnotator) -> tuple[float, list[Piece]]:
    """The cached step's median ms, and each piece's median self time with its share of that step."""
    step_ms = statistics.median(sum(s.values()) for s in timing.steps) / 1e6
    pieces = []
    for name, rng in PIECES:
        median_us = statistics.median(s.get(rng, 0) for s in timing.steps) / 1e3
        pieces.append(Piece(name, rng, median_us, 100 * median_us / 1e3 / step_ms))
    return step_ms, pieces


def _overhead_report(cfg: BenchConfig, device: str, context: int, floor: _Floor, cached: _CachedStep) -> OverheadReport:
    """The floor beside the cached step: the gap, what bookkeeping explains of it, where the step's wall went."""
    floor_ms, issue_ms = statistics.median(floor.total) / 1e6, statistics.median(floor.issue) / 1e6
    bookkeeping = (
        sum(p.median_us for p in cached.pieces if p.range in (*vocabulary.CACHE_RANGES, vocabulary.MASK)) / 1e3
    )
    gap = cached.step_ms - floor_ms
    step, launches = cached.ledger, floor.launches
    wall = step.wall_us
    return OverheadReport(
        model=cfg.model,
        dtype=cfg.dtype,
        device=device,
        context_tokens=context,
        floor_ms=floor_ms,
        floor_issue_ms=issue_ms,
        floor_wait_ms=floor_ms - issue_ms,
        floor_unsynced_ms=statistics.median(floor.unsynced) / 1e6,
        launches_per_forward=launches,
        launch_kind=floor.launch_kind,
        host_us_per_launch=issue_ms * 1e3 / launches if launches else float("nan"),  # none recorded: unknown
        cached_step_ms=cached.step_ms,
        cached_launches_per_forward=cached.ops,
        pieces=cached.pieces,
        bookkeeping_ms=bookkeeping,
        gap_ms=gap,
        explained_pct=100 * bookkeeping / gap if gap > 0 else float("nan"),
        step_dispatch=step.dispatch,
        step_dispatched=step.dispatched,
        host_pct=100 * (wall - step.purpose_us["sync"]) / wall,
        device_pct=100 * step.gpu_busy_us / wall if step.gpu_busy_us is not None else None,  # None off a GPU
        compute_in_ops_pct=100 * sum(step.mechanism_us[m] for m in ("dispatch", "launch", "runtime")) / wall,
    )


def floor_launches(model, naive, token: torch.Tensor) -> tuple[int, str]:
    """What the floor forward dispatches, and what that count is of: on a GPU its kernel launch calls (from one
    profiled forward: "us per launch" divides by these), on a CPU the aten ops it dispatches (which stand in for
    launches there)."""
    if token.device.type != "cuda":
        return count_forward_ops(naive, token).prefill_ops, "aten ops dispatched"
    prepare_graph_profiling(token.device)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    masks = prepared_masks(model)
    with torch.inference_mode():
        no_cache_forward(model, token, masks)  # warm
        torch.cuda.synchronize(token.device)
        with torch.profiler.profile(activities=activities) as prof:
            no_cache_forward(model, token, masks)
            torch.cuda.synchronize(token.device)
    return sum(1 for e in prof.events() if e.name in LAUNCH_NAMES), "kernel launches"


def profiled_step(engine, prompt: torch.Tensor, steps: int = 8) -> MedianStep:
    """Profile a few decode steps under torch.profiler and reduce them to the median step's ledger."""
    annotator = annotate.Annotator()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if prompt.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prepare_graph_profiling(prompt.device)
    generate(engine, prompt, steps + 1, annotator)
    with torch.profiler.profile(activities=activities) as prof:
        generate(engine, prompt, steps + 1, annotator)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.trace.json"
        prof.export_chrome_trace(str(path))
        return median_step(analyze(load_trace(path)))


THREAD_CHOICE_S = 0.5  # how long the floors of every candidate count are timed in all: /proc/stat counts 10 ms ticks
THREAD_CHOICE_REPS = 10  # floors a candidate count gets at least


def thread_candidates(most: int) -> list[int]:
    """1, 2, 4, ... below `most` (torch's default: one per core), and `most`."""
    counts = [1]
    while counts[-1] * 2 < most:
        counts.append(counts[-1] * 2)
    return counts + ([most] if most > 1 else [])


def choose_threads(model, most: int | None = None) -> ThreadChoice:
    """Time the floor (single-token forward, no cache) at each candidate thread count on the CPU, the counts in turn
    until each has THREAD_CHOICE_REPS floors and THREAD_CHOICE_S has passed; take the fastest, or one thread when
    other processes used CONTENDED_CORES or more meanwhile (the contention rule every cell is held to). Leaves torch
    set to the count it took."""
    candidates = thread_candidates(most or torch.get_num_threads())
    token = prompt_ids(1, 1, model.config.vocab_size).to(next(model.parameters()).device)
    masks, sync = prepared_masks(model), device_sync(token.device)
    times: dict[int, list[int]] = {n: [] for n in candidates}  # count -> its floors, ns
    cpu = CpuBackend()
    try:
        with torch.inference_mode():
            for n in candidates:  # warm each count's pool
                torch.set_num_threads(n)
                floor_forward(model, token, sync, masks)
            cpu.read()
            start = time.perf_counter()
            while min(map(len, times.values())) < THREAD_CHOICE_REPS or time.perf_counter() - start < THREAD_CHOICE_S:
                for n in candidates:
                    torch.set_num_threads(n)
                    times[n].append(floor_forward(model, token, sync, masks)[1])
            row = cpu.read()
    finally:
        cpu.close()
    floor = {n: statistics.median(t) / 1e6 for n, t in times.items()}  # ms
    busy = row["sys_cpu_pct"] / 100 * (os.cpu_count() or 1) - row["proc_cpu_pct"] / 100
    other = None if busy != busy else busy  # NaN: no tick elapsed
    best = min(floor, key=lambda n: (floor[n], n))
    figures = ", ".join(f"{n}: {ms:.3f} ms" for n, ms in floor.items())
    contended = other is not None and other >= CONTENDED_CORES
    if contended and best > 1:
        threads, reason = (
            1,
            (
                f"1 thread: other processes used {other:.2f} cores while the floor was timed ({figures}), and on a "
                "shared machine more threads stall at every op's barrier whenever another job holds a core"
            ),
        )
    else:
        threads = best
        reason = f"{best} thread{'s' * (best > 1)}, the floor's fastest ({figures})"
        if contended:
            reason += f"; other processes used {other:.2f} cores meanwhile"
    torch.set_num_threads(threads)
    return ThreadChoice(threads, tuple(floor.items()), other, contended, reason)


def measure_copy_bandwidth(device: str = "cpu", size_bytes: int = 256 * 2**20, repeats: int = 10) -> float:
    """This machine's copy bandwidth in bytes/s: (bytes read + bytes written) / time of one tensor copy,
    the median of `repeats` copies (the STREAM 'copy' convention).

    Unless the copy uses streaming stores, a CPU also reads each destination line before writing it, which
    this count leaves out. The buffers should be far larger than the last-level cache (or the GPU's L2).
    """
    if size_bytes < 2**20 or repeats < 1:
        raise ProbeError(f"copy bandwidth needs size_bytes >= 1 MiB and repeats >= 1, got {size_bytes}, {repeats}")
    dev = resolve_device(device)
    src = torch.ones(size_bytes // 4, dtype=torch.float32, device=dev)  # ones: its pages are touched up front
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: faults dst's pages in and loads the copy kernel
    moved = 2 * src.numel() * src.element_size()
    return statistics.median(moved / _time_copy_s(dst, src) for _ in range(repeats))


def _time_copy_s(dst, src) -> float:
    if dst.device.type == "cuda":  # events: a host timer would add the launch and sync to a ~100 µs copy
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    dst.copy_(src)
    return time.perf_counter() - t0


def measure_machine(
    model: str, dtype: str, device: str, device_name: str, loaded=None, steps: int = 32, reps: int = 30
) -> tuple[Machine, OverheadReport]:
    """The floor (`measure`, on `loaded` when given) and the measured copy bandwidth, the datasheet's beside it on
    a GPU the device table knows. Predictions divide by the measured copy: the datasheet is a peak no copy reaches."""
    start = time.perf_counter_ns()
    with make_sampler(10.0, device, torch.get_num_threads()) as sampler:
        overhead = measure(model, dtype, device, context=64, steps=steps, reps=reps, model=loaded)
    window = [(start, time.perf_counter_ns())]  # the floor is judged by the rule every cell is
    busy = contention(cell_telemetry(sampler.samples, window, 0), window, os.cpu_count() or 1)
    measured = measure_copy_bandwidth(overhead.device)
    known = match_device(device_name) if overhead.device.startswith("cuda") else None
    return (
        Machine(
            overhead.floor_ms,
            f"single-token forward, {overhead.model} {overhead.dtype}, synced",
            measured,
            f"measured copy on {device_name}",
            datasheet_bandwidth_bytes_s=known.memory_bandwidth_bytes_s if known else None,
            datasheet_source=f"{known.name} datasheet: {known.source}" if known else None,
            contended=busy.contended,
            other_cpu_cores=busy.other_cpu_cores,
        ),
        overhead,
    )


class _GuardedOnly(StaticEagerEngine):
    """The static engine's forward traced by dynamo with the eager backend: the guards a compiled step checks
    before every call, and no generated code. (A lambda of its own, so its cache entries never serve the static
    engine's compiled `_forward`.)"""

    def __init__(self, model):
        super().__init__(model)
        self._step = torch.compile(lambda ids: self._forward(ids), backend="eager", dynamic=False, fullgraph=True)


def compiled_entry_ms(model, prompt_len: int, new_tokens: int, seed: int = 0) -> float | None:
    """What entering a compiled forward costs on this model and machine, before any of its code runs: the guard
    check dynamo makes at every call (torch.compile's `TorchDynamo Cache Lookup`), over every module's parameters
    and attributes, so it grows with the model, and an eager trace holds no sign of it. The static engine's decode
    step traced with the eager backend (no code generated: 1.6 s for the tiny preset on a 2-core VM), warmed, then
    one generation profiled: the median lookup, ms (guards record no events inside it, so the profiler adds one
    range's cost). None where the static engine refuses the model."""
    if StaticEagerEngine.refusal(model.config) is not None or new_tokens < 2:
        return None
    engine = _GuardedOnly(model)
    device = next(model.parameters()).device
    prompt = prompt_ids(prompt_len, 1, model.config.vocab_size, seed).to(device)
    for _ in range(2):  # trace, then run warm
        generate(engine, prompt, new_tokens)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate(engine, prompt, new_tokens)
    lookups = [e.cpu_time_total for e in prof.events() if e.name == DYNAMO_LOOKUP]
    return statistics.median(lookups) / 1e3 if lookups else None
