"""Prediction next to measurement: the write-ups' method as a report.

1. Derive what a step should cost: max(host floor, traffic / bandwidth), from this machine's measured floor
   (`probe overhead`) and bandwidth (measured copy bandwidth on a CPU; the device table on a known GPU).
2. Put the measured ITL beside it.
3. Name the term the gap points at.

It also checks the write-ups' two closing predictions against this machine's measurements:
- Part 1: removing per-step host overhead (a captured static step) is worth more at short prompts than the
  cache is.
- Part 2: with B sequences per forward the step stays near flat, so aggregate throughput grows about as
  B x single-sequence tokens/s, until cache traffic uses up the bandwidth (the roofline's batch limit).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from probe.analysis.diagnosis.verdict import Context, Diagnosis, predict_batch
from probe.analysis.ledger.build import TraceAnalysis, steady
from probe.analysis.ledger.digest import StepDigest
from probe.analysis.records.files import read_json
from probe.analysis.records.results import BenchResults, Cell
from probe.analysis.records.telemetry import ENERGY_WINDOW_NOTE
from probe.analysis.roofline.formulas import batch_limit, predict_step_ms
from probe.errors import ProbeError

HOLDS = 0.15  # |measured / predicted - 1| within this: the prediction holds (Part 2 missed by 12-15%)
FLAT = 1.25  # a batched step within 25% of the batch-1 step counts as "near flat"
LINEAR = 0.75  # aggregate throughput at least 75% of B x single-sequence counts as "roughly linear"


@dataclass(frozen=True)
class Machine:
    """What the predictions stand on, measured where the run happened."""

    floor_ms: float  # single-token forward, no cache (probe overhead)
    floor_source: str
    bandwidth_bytes_s: float  # what predictions divide by: a measured copy
    bandwidth_source: str
    datasheet_bandwidth_bytes_s: float | None = None  # the vendor's peak, shown beside it on a known GPU
    datasheet_source: str | None = None


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op threads a CPU run took (probe.capture.machine.choose_threads), and why, in one line."""

    threads: int
    floor_ms: tuple[tuple[int, float], ...]  # (candidate count, its median floor in ms), each count tried
    other_cpu_cores: float | None  # what other processes used while the floors ran (None: not measured)
    contended: bool
    reason: str


@dataclass(frozen=True)
class Prediction:
    engine: str
    prompt_tokens: int
    batch: int
    context: int  # mean cached positions over the decode steps
    traffic_ms: float
    floor_ms: float
    predicted_ms: float
    binding: str  # "host" | "bandwidth"
    measured_ms: float  # ITL p50
    ratio: float  # measured / predicted
    points_at: str
    host_source: str = "eager floor"  # what floor_ms is: the eager floor, or the engine's own host cost (HostCost)


@dataclass(frozen=True)
class Verdict:
    claim: str
    source: str
    supported: bool | None  # None: this run has not measured what the claim needs
    evidence: str
    numbers: dict = field(default_factory=dict)


def points_at(ratio: float, binding: str, recompute: bool) -> str:
    if ratio < 1 - HOLDS:
        return f"{binding} term too high: the step beats it"
    if ratio <= 1 + HOLDS:
        return f"{binding}: the prediction holds"
    if recompute:
        return "compute: each step recomputes all P+i positions, which neither term counts"
    if binding == "host":
        return "host floor: the step does work the floor's forward does not (bookkeeping, sampling, sync)"
    return "bandwidth term not reached: per-step overhead or compute binds instead"


@dataclass(frozen=True)
class Check:
    """A prediction the step diagnosis made from one engine's profiled trace, held against the cell that measures
    it: the ratio is measured / predicted (1 is exact)."""

    prediction: str
    predicted_ms: float | None
    measured_ms: float | None
    ratio: float | None
    evidence: str


def prediction_checks(results: BenchResults, diagnoses: dict[str, Diagnosis], prompt: int) -> list[Check]:
    """The diagnosis's what-ifs against measurement (probe.analysis.diagnosis.verdict, the same code `probe analyze`
    runs):
    the cached engine's trace predicts the static engine's step (capturing the forward in a graph), and B = 1
    predicts B = 2 (the batch what-if's model at B = 2)."""
    cached = diagnoses.get("cached")
    static, two = _cell(results, "static", prompt), _cell(results, "batched", prompt, 2)
    to_static, to_two = f"the cached trace predicts the static step at p{prompt}", f"B=1 predicts B=2 at p{prompt}"
    if cached is None or cached.bound == "cpu_only":
        why = "no profiled cached trace" if cached is None else "a CPU trace: no graph to capture, no GPU side"
        return [
            Check(to_static, None, None, None, f"not checked: {why}"),
            Check(to_two, None, None, None, f"not checked: {why}"),
        ]
    out = []
    w = next((w for w in cached.what_if if w.change == "capture the forward in a CUDA graph"), None)
    if static is None:
        out.append(Check(to_static, None, None, None, "not checked: no static cell at this prompt"))
    elif w is None:
        out.append(Check(to_static, None, None, None, "not checked: the diagnosis offers no capture (it buys nothing)"))
    else:
        out.append(_check(to_static, w.predicted_step_ms, static, w.arithmetic))
    if two is None:
        out.append(Check(to_two, None, None, None, "not checked: no batched B=2 cell"))
    else:
        out.append(
            _check(to_two, predict_batch(cached.evidence, 2, Context()) / 1e6, two, "host work stays, GPU work doubles")
        )
    return out


def _check(prediction: str, predicted_ms: float, cell: Cell, how: str) -> Check:
    measured = cell.itl_p50_ms
    note = " (the cell ran contended: the ratio is not a verdict)" if cell.contended else ""
    return Check(prediction, predicted_ms, measured, measured / predicted_ms, f"{how}; measured ITL p50{note}")


@dataclass(frozen=True)
class HostCost:
    """An engine's own host cost per step, where the eager floor does not describe it: a captured step dispatches
    `dispatches` calls (one graph launch), each at the floor's host cost per kernel launch."""

    dispatches: float
    per_dispatch_ms: float
    source: str

    @property
    def ms(self) -> float:
        return self.dispatches * self.per_dispatch_ms


def captured_host_cost(captured: bool, overhead: OverheadReport | None) -> HostCost | None:
    """The host cost of a captured engine's step: one graph launch, at the floor's host cost per kernel launch. None
    where the step is not captured (a CPU compiles the static engine but captures no graph: the eager floor stays,
    and a compiled step that beats it reads so) or no floor was measured."""
    if not captured or overhead is None or not overhead.host_us_per_launch > 0:  # NaN: no launch was recorded
        return None
    us = overhead.host_us_per_launch
    return HostCost(1.0, us / 1e3, f"1 graph launch a step x {us:.2f} us (the floor's per kernel launch)")


def predictions(
    results: BenchResults, arch, machine: Machine, host: dict[str, HostCost] | None = None
) -> list[Prediction]:
    """One row a cell: max(host term, traffic / bandwidth) against its ITL. The host term is the eager floor,
    except for the engines in `host` (a captured step), which are predicted from their own host cost."""
    dtype = results.dtype
    rows = []
    for c in results.cells:
        context = c.prompt_tokens + c.new_tokens // 2
        own = (host or {}).get(c.engine)
        floor = own.ms if own is not None else machine.floor_ms
        traffic = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, 0.0)[0]
        predicted, binding = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, floor)
        ratio = c.itl_p50_ms / predicted
        rows.append(
            Prediction(
                c.engine,
                c.prompt_tokens,
                c.batch,
                context,
                traffic,
                floor,
                predicted,
                binding,
                c.itl_p50_ms,
                ratio,
                points_at(ratio, binding, c.recomputes),
                own.source if own is not None else "eager floor",
            )
        )
    return rows


def _cell(results: BenchResults, engine: str, prompt: int, batch: int = 1) -> Cell | None:
    return next((c for c in results.cells if (c.engine, c.prompt_tokens, c.batch) == (engine, prompt, batch)), None)


def _cells(results: BenchResults, engines: tuple[str, ...], prompt: int) -> list[Cell] | None:
    """The batch-1 cells of `engines` at `prompt`, in that order; None when one is missing."""
    cells = [c for e in engines if (c := _cell(results, e, prompt)) is not None]
    return cells if len(cells) == len(engines) else None


def host_overhead_verdict(results: BenchResults) -> Verdict:
    """Part 1: at short prompts, removing host overhead (static) buys more than the cache did."""
    claim = "removing per-step host overhead is worth more at short prompts than the cache is"
    source = "Part 1, Bottleneck and Prediction"
    prompts = sorted({c.prompt_tokens for c in results.cells if c.batch == 1})
    trio = next(filter(None, (_cells(results, ("naive", "cached", "static"), p) for p in prompts)), None)
    if trio is None:
        return Verdict(claim, source, None, "needs naive, cached and static cells at one prompt length")
    naive, cached, static = trio
    short = naive.prompt_tokens
    cache_gain = naive.itl_p50_ms / cached.itl_p50_ms
    static_gain = cached.itl_p50_ms / static.itl_p50_ms
    numbers = {
        "prompt": short,
        "naive_itl_ms": naive.itl_p50_ms,
        "cached_itl_ms": cached.itl_p50_ms,
        "static_itl_ms": static.itl_p50_ms,
        "cache_speedup": cache_gain,
        "static_speedup": static_gain,
    }
    evidence = (
        f"at p{short}: the cache took the step from {naive.itl_p50_ms:.2f} to {cached.itl_p50_ms:.2f} ms "
        f"({cache_gain:.2f}x); a static step took it from {cached.itl_p50_ms:.2f} to "
        f"{static.itl_p50_ms:.2f} ms ({static_gain:.2f}x)"
    )
    return Verdict(claim, source, static_gain > cache_gain, evidence, numbers)


def batching_verdict(results: BenchResults, arch, machine: Machine | None, engine: str = "batched") -> Verdict:
    """Part 2: step time near flat in B, aggregate tok/s about B x single, up to the bandwidth's batch limit."""
    claim = "with B sequences per forward the step stays near flat and throughput grows about B x"
    source = "Part 2, Bottleneck and Prediction"
    if machine is None:
        return Verdict(claim, source, None, "needs this machine's bandwidth, which was not measured")
    cells = sorted((c for c in results.cells if c.engine == engine), key=lambda c: (c.prompt_tokens, c.batch))
    prompt = next(
        (c.prompt_tokens for c in cells if c.batch == 1 and sum(d.prompt_tokens == c.prompt_tokens for d in cells) > 1),
        None,
    )
    if prompt is None:
        return Verdict(claim, source, None, f"needs {engine} cells at batch 1 and larger at one prompt length")
    by_batch = {c.batch: c for c in cells if c.prompt_tokens == prompt}
    one = by_batch[1]
    if one.contended:
        return Verdict(
            claim,
            source,
            None,
            f"not judged: the B=1 cell at p{prompt}, the reference every scaling is taken against, ran contended "
            f"({one.other_cpu_cores:.2f} cores of other work beside it)",
        )
    rows = {
        b: {
            "itl_ms": c.itl_p50_ms,
            "step_ratio": c.itl_p50_ms / one.itl_p50_ms,
            "tok_s": c.decode_tok_s,
            "scaling": c.decode_tok_s / (b * one.decode_tok_s),
        }
        for b, c in sorted(by_batch.items())
    }
    dtype = results.dtype
    limit = batch_limit(arch, dtype, one.itl_p50_ms, prompt + one.new_tokens, machine.bandwidth_bytes_s)
    holds = {b: r["step_ratio"] <= FLAT and r["scaling"] >= LINEAR for b, r in rows.items()}
    parts = ", ".join(
        f"B={b}: {r['itl_ms']:.2f} ms ({r['step_ratio']:.2f}x), {r['tok_s']:.0f} tok/s "
        f"({r['scaling']:.0%} of B x single)"
        for b, r in rows.items()
    )
    impossible = [b for b, r in rows.items() if r["scaling"] > 1 + HOLDS]
    if impossible:
        worst = max(impossible, key=lambda b: rows[b]["scaling"])
        return Verdict(
            claim,
            source,
            None,
            f"not judged: at p{prompt}, B={worst} reads {rows[worst]['scaling']:.0%} of B x single, and a batch cannot "
            "beat B sequences run one at a time: a measurement error (a contended or noisy cell), not a finding. "
            + parts,
            {"prompt": prompt, "by_batch": rows},
        )
    upto = max((b for b in rows if all(holds[c] for c in rows if c <= b)), default=1)
    reach = (
        "it holds at every B measured"
        if all(holds.values())
        else f"it holds up to B={upto} (step within {FLAT:.2f}x, throughput at least {LINEAR:.0%} of B x single)"
    )
    evidence = (
        f"at p{prompt}: {parts}; {reach}. Bandwidth allows B up to {limit.max_batch} within a "
        f"{one.itl_p50_ms:.2f} ms step at {machine.bandwidth_bytes_s / 1e9:.1f} GB/s"
    )
    numbers = {"prompt": prompt, "by_batch": rows, "holds_up_to_batch": upto, "bandwidth_max_batch": limit.max_batch}
    return Verdict(claim, source, all(holds.values()), evidence, numbers)


@dataclass(frozen=True)
class Piece:
    name: str
    range: str
    median_us: float
    share_pct: float


@dataclass(frozen=True)
class OverheadReport:
    """`probe overhead`: the floor, and a cached decode step timed piece by piece (probe.capture.machine)."""

    model: str
    dtype: str
    device: str
    context_tokens: int
    floor_ms: float  # single-token forward, no cache, including the device drain
    floor_issue_ms: float  # until the forward call returned: the host's share
    floor_wait_ms: float  # the drain after it: the device's share
    launches_per_forward: int  # aten ops dispatched by the floor forward
    launch_kind: str
    host_us_per_launch: float
    cached_step_ms: float  # median decode step of the cached engine, timed piece by piece
    cached_launches_per_forward: int
    pieces: list[Piece] = field(default_factory=list)
    bookkeeping_ms: float = 0.0  # cache writes + read-back + mask-size query + mask construction
    gap_ms: float = 0.0  # cached step - floor: what Part 2 attributed to bookkeeping without measuring
    explained_pct: float = 0.0  # bookkeeping / gap
    # From a profiled cached decode (median step): how much of the step is host work and how much device
    # work. GPU: device busy vs wall, and the host's share = wall less the sync wait. CPU: there is no device;
    # the split is compute inside aten ops (ops + attention) against everything around them.
    step_dispatch: str = ""  # "launches" (kernel launches per decode step) | "top-level ops"
    step_dispatched: float = 0.0
    host_pct: float = 0.0
    device_pct: float | None = None
    compute_in_ops_pct: float = 0.0
    floor_unsynced_ms: float | None = None  # per forward, back to back with one sync at the end (None: old files)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> OverheadReport:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in doc.items() if k in names}
        fields["pieces"] = [Piece(**p) for p in doc.get("pieces", [])]
        return cls(**fields)


@dataclass(frozen=True)
class StepCounts:
    """What one engine's profiled decode step dispatched and kept the GPU doing: medians over the trace's decode
    steps (`probe analyze`'s ledger). The write-ups counted these by hand from a CUDA trace."""

    engine: str
    trace: str  # the file's name: the figures' source
    tool: str  # "torch.profiler" | "nsys"
    steps: int
    on_gpu: bool
    wall_us: float
    top_level_ops: float  # host ops dispatched (the CPU's stand-in for launches)
    launches: float  # kernel launch calls
    graph_launches: float
    kernels: float  # kernels run for the step; a graph's replayed kernels count in the step that launched it
    gpu_busy_us: float | None  # None on a CPU trace
    gpu_idle_us: float | None
    batch: int = 1  # sequences per forward in the profiled run (report.json files before it: 1)

    @property
    def lost_kernels(self) -> bool:
        """A GPU trace whose steps launch work and hold no kernel: the profiler lost them (CUPTI), and every GPU
        figure of it would read as a measured zero."""
        return self.on_gpu and self.launches + self.graph_launches > 0 and self.kernels == 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def engine_label(engine: str, batch: int = 1) -> str:
    """An engine's column in the report: its name, and B where its profiled run batched ("batched B=4")."""
    return engine if batch == 1 else f"{engine} B={batch}"


def step_counts(
    engine: str, analysis: TraceAnalysis, trace: str, tool: str = "torch.profiler", batch: int = 1
) -> StepCounts:
    steps = steady(analysis.steps)

    def median(name: str) -> float:
        return float(np.median([getattr(s, name) for s in steps]))

    gpu = analysis.on_gpu
    return StepCounts(
        engine,
        trace,
        tool,
        len(steps),
        gpu,
        median("wall_ns") / 1e3,
        median("top_level_ops"),
        median("launches"),
        median("graph_launches"),
        median("kernels"),
        median("gpu_busy_ns") / 1e3 if gpu else None,
        median("gpu_idle_ns") / 1e3 if gpu else None,
        batch,
    )


@dataclass(frozen=True)
class Figure:
    """One row of what the write-ups measured by hand: a value per engine (None: not measured here), its source."""

    name: str
    unit: str
    values: dict[str, float | None]
    source: str


def hand_figures(results: BenchResults, report: Report, prompt: int) -> list[Figure]:
    """The write-ups' hand measurements, from this run: per engine at `prompt` (the profiled one), each figure
    with where it comes from. GPU figures are None on a CPU run, never 0."""
    counts = {e: c for e, c in report.steps.items() if c.tool == "torch.profiler"}
    engines = list(counts) or sorted({c.engine for c in results.cells})
    # each column at its profiled run's batch, so a B=4 trace's figures stand beside the B=4 cell's
    cells = {
        e: _cell(results, counts[e].engine, prompt, counts[e].batch) if e in counts else _cell(results, e, prompt)
        for e in engines
    }

    def from_cells(get) -> dict[str, float | None]:
        return {e: (get(c) if c is not None else None) for e, c in cells.items()}

    def from_counts(get, gpu_only: bool = True) -> dict[str, float | None]:
        return {e: (get(counts[e]) if e in counts and (counts[e].on_gpu or not gpu_only) else None) for e in engines}

    gpu = any(c.on_gpu for c in counts.values())
    traces = _trace_names(counts)
    runs = next((c for c in cells.values() if c is not None), None)
    bench = f"bench at p{prompt}, " + (f"{runs.runs} runs x {runs.new_tokens - 1} steps" if runs else "no cell")
    rows = [
        Figure("step (ITL p50)", "ms", from_cells(lambda c: c.itl_p50_ms), bench),
        Figure("profiled step", "ms", from_counts(lambda c: c.wall_us / 1e3, False), f"median decode step of {traces}"),
    ]
    if gpu:
        rows += _gpu_figures(from_counts, traces)
    else:
        rows.append(
            Figure(
                "aten ops dispatched per step (no GPU: the CPU's launches)",
                "",
                from_counts(lambda c: c.top_level_ops, False),
                f"CPU trace: {traces}",
            )
        )
    rows += _nsys_figures(report, engines)
    rows.append(_energy_figure(cells))
    sync = from_cells(lambda c: c.sync_overhead_ms)
    rows.append(
        Figure(
            "per-step sync cost",
            "ms",
            sync,
            "bench: runs synced every step against runs synced once, ABBA pairs, median"
            if any(v is not None for v in sync.values())
            else "CUDA only (a CPU has nothing to wait for)",
        )
    )
    return rows


def _gpu_figures(from_counts, traces: str) -> list[Figure]:
    """What a CUDA trace counts per step: launches, graph launches, kernels (a graph's replayed ones), busy, idle."""
    return [
        Figure("kernel launches per step", "", from_counts(lambda c: c.launches), f"CUDA trace: {traces}"),
        Figure("graph launches per step", "", from_counts(lambda c: c.graph_launches), f"CUDA trace: {traces}"),
        Figure(
            "kernels per step (replayed ones for a graph)",
            "",
            from_counts(lambda c: c.kernels),
            f"CUDA trace, joined to their launch by correlation: {traces}",
        ),
        Figure("GPU busy per step", "ms", from_counts(lambda c: c.gpu_busy_us / 1e3), f"CUDA trace: {traces}"),
        Figure("GPU idle per step", "ms", from_counts(lambda c: c.gpu_idle_us / 1e3), f"CUDA trace: {traces}"),
    ]


def _nsys_figures(report: Report, engines: list[str]) -> list[Figure]:
    """The counts of the Nsight Systems traces, per engine column (none where nsys did not run)."""
    nsys = {engine_label(c.engine, c.batch): c for c in report.steps.values() if c.tool == "nsys" and c.on_gpu}
    if not nsys:
        return []
    where = "Nsight Systems export: " + ", ".join(sorted(c.trace for c in nsys.values()))
    return [
        Figure(
            f"{label} per step (nsys)", "", {e: (getattr(nsys[e], name) if e in nsys else None) for e in engines}, where
        )
        for label, name in (
            ("kernel launches", "launches"),
            ("graph launches", "graph_launches"),
            ("kernels", "kernels"),
        )
    ]


def _energy_figure(cells: dict[str, Cell | None]) -> Figure:
    """Energy per token per column; None where not measured, or where the decode phases were too short for NVML's
    power window to measure them (the source says which)."""
    shown, measured, unreliable = {}, [], []
    for e, c in cells.items():
        t = c.telemetry if c is not None else None
        if t is not None and t.energy_per_token_j is not None:
            measured.append(t)
        if t is not None and t.energy_reliable is False:
            unreliable.append(e)
        shown[e] = t.energy_per_token_j if t is not None and t.energy_reliable is not False else None
    if any(v is not None for v in shown.values()):
        where = f"NVML ({measured[0].energy_source}) over the bench's decode phases"
    else:
        where = "not shown" if measured else "no NVML here"
    if unreliable:
        where += (
            f"; unreliable for {', '.join(unreliable)}: decode phases shorter than NVML's power window "
            f"({ENERGY_WINDOW_NOTE})"
        )
    return Figure("energy per token", "J", shown, where)


def _trace_names(counts: dict[str, StepCounts]) -> str:
    """The traces' names, as one pattern when they differ only by the engine's name."""
    names = sorted({c.trace for c in counts.values()})
    patterns = {c.trace.replace(f"_{c.engine}_", "_<engine>_", 1) for c in counts.values()}
    if len(names) > 1 and len(patterns) == 1:
        return patterns.pop()
    return ", ".join(names) or "no trace"


REPORT_FILE, REPORT_MD = "report.json", "report.md"


@dataclass(frozen=True)
class SelfCheck:
    """Whether the profiler records kernels, checked before the timed work: an eager forward and a CUDA-graph
    replay profiled, their kernels counted, then counted again after as many profiler sessions as the run opens
    (CUPTI can stop collecting for the whole process after its teardown while graphs are alive). On a CPU the CUDA
    part is skipped and only the host ops are counted."""

    device: str
    sessions: int  # profiler sessions opened between the two counts
    cpu_ops_before: int  # host ops the eager forward recorded
    cpu_ops_after: int
    eager_kernels_before: int | None = None  # None: not checked (no CUDA device)
    eager_kernels_after: int | None = None
    graph_kernels_before: int | None = None
    graph_kernels_after: int | None = None
    teardown_cupti: str = ""  # what the run did about TEARDOWN_CUPTI, and why
    note: str = ""  # one line: what was checked, or what was skipped and why

    @property
    def kernels_lost(self) -> bool:
        """True when a count that had kernels fell (to none, or fewer) after the sessions, or had none at all."""
        pairs = [
            (self.eager_kernels_before, self.eager_kernels_after),
            (self.graph_kernels_before, self.graph_kernels_after),
        ]
        return any(b is not None and (not b or a is None or a < b) for b, a in pairs)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Report:
    machine: Machine | None  # None: measuring the machine failed (named in `failed`)
    predictions: list[Prediction]
    verdicts: list[Verdict]
    overhead: OverheadReport | None = None
    ledgers: dict[str, StepDigest] = field(default_factory=dict)  # engine label -> its profiled median decode step
    steps: dict[str, StepCounts] = field(default_factory=dict)  # "label" or "label (nsys)" -> its step's counts
    notes: list[str] = field(default_factory=list)  # what could not be measured, one line each
    warnings: list[str] = field(default_factory=list)  # what the traces' ledgers and the self-check warned
    failed: dict[str, str] = field(default_factory=dict)  # part of the run -> its error, one line
    self_check: SelfCheck | None = None
    diagnoses: dict[str, Diagnosis] = field(default_factory=dict)  # engine label -> its profiled median step's
    checks: list[Check] = field(default_factory=list)  # the diagnosis's predictions against the cells
    # The run as it stands: "running", "complete", "interrupted" or "failed: <error>"; what it has not measured yet,
    # one line each; the command that finishes it (None once complete); the threads a CPU run chose.
    status: str = "complete"
    missing: list[str] = field(default_factory=list)
    resume: str | None = None
    threads: ThreadChoice | None = None

    @property
    def lost_kernels(self) -> list[str]:
        """The traces (and the self-check) whose GPU kernels went missing: the run must not exit 0 on them."""
        lost = [key for key, c in self.steps.items() if c.lost_kernels]
        return lost + (["self-check"] if self.self_check is not None and self.self_check.kernels_lost else [])

    def to_json(self) -> dict:
        return {
            "machine": dataclasses.asdict(self.machine) if self.machine else None,
            "predictions": [dataclasses.asdict(p) for p in self.predictions],
            "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
            "overhead": self.overhead.to_json() if self.overhead else None,
            "ledgers": {engine: d.to_json() for engine, d in self.ledgers.items()},
            "steps": {key: c.to_json() for key, c in self.steps.items()},
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "failed": dict(self.failed),
            "self_check": self.self_check.to_json() if self.self_check else None,
            "diagnoses": {label: d.to_json() for label, d in self.diagnoses.items()},
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "status": self.status,
            "missing": list(self.missing),
            "resume": self.resume,
            "threads": dataclasses.asdict(self.threads) if self.threads else None,
        }

    @classmethod
    def from_json(cls, doc) -> Report:
        """report.json, its types checked field by field (msgspec); ValueError naming the field when malformed."""
        if not isinstance(doc, dict):
            raise ValueError("a report is a JSON object")
        overhead, ledgers = doc.get("overhead"), doc.get("ledgers") or {}
        if not isinstance(ledgers, dict):
            raise ValueError("`ledgers` is not an object")
        try:
            return cls(
                msgspec.convert(doc.get("machine"), Machine | None),
                msgspec.convert(doc.get("predictions"), list[Prediction]),
                msgspec.convert(doc.get("verdicts") or [], list[Verdict]),
                OverheadReport.from_json(overhead) if overhead else None,
                {str(engine): StepDigest.from_json(d) for engine, d in ledgers.items()},
                msgspec.convert(doc.get("steps") or {}, dict[str, StepCounts]),
                msgspec.convert(doc.get("notes") or [], list[str]),
                msgspec.convert(doc.get("warnings") or [], list[str]),
                msgspec.convert(doc.get("failed") or {}, dict[str, str]),
                msgspec.convert(doc.get("self_check"), SelfCheck | None),
                {str(k): Diagnosis.from_json(d) for k, d in (doc.get("diagnoses") or {}).items()},
                msgspec.convert(doc.get("checks") or [], list[Check]),
                msgspec.convert(doc.get("status") or "complete", str),
                msgspec.convert(doc.get("missing") or [], list[str]),
                msgspec.convert(doc.get("resume"), str | None),
                msgspec.convert(doc.get("threads"), ThreadChoice | None),
            )
        except (msgspec.ValidationError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(str(e)) from None


def load_report(folder) -> Report | None:
    """A run folder's report.json as a typed Report; None when the folder has none; ProbeError if unreadable."""
    path = Path(folder) / REPORT_FILE
    if not Path(folder).is_dir() or not path.is_file():
        return None
    try:
        return Report.from_json(read_json(path))  # one line for a file that is not JSON, too deep or not UTF-8
    except ValueError as e:
        raise ProbeError(f"{path} is not a probe report ({e})") from None
