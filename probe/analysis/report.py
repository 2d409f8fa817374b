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

from probe.analysis.files import read_json
from probe.analysis.ledger import StepDigest, TraceAnalysis, steady_steps
from probe.analysis.results import BenchResults, Cell
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


def predictions(results: BenchResults, arch, machine: Machine) -> list[Prediction]:
    dtype = results.dtype
    rows = []
    for c in results.cells:
        context = c.prompt_tokens + c.new_tokens // 2
        traffic = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, 0.0)[0]
        predicted, binding = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, machine.floor_ms)
        ratio = c.itl_p50_ms / predicted
        rows.append(
            Prediction(
                c.engine,
                c.prompt_tokens,
                c.batch,
                context,
                traffic,
                machine.floor_ms,
                predicted,
                binding,
                c.itl_p50_ms,
                ratio,
                points_at(ratio, binding, c.recomputes),
            )
        )
    return rows


def _cell(results: BenchResults, engine: str, prompt: int, batch: int = 1) -> Cell | None:
    return next((c for c in results.cells if (c.engine, c.prompt_tokens, c.batch) == (engine, prompt, batch)), None)


def host_overhead_verdict(results: BenchResults) -> Verdict:
    """Part 1: at short prompts, removing host overhead (static) buys more than the cache did."""
    claim = "removing per-step host overhead is worth more at short prompts than the cache is"
    source = "Part 1, Bottleneck and Prediction"
    prompts = sorted({c.prompt_tokens for c in results.cells if c.batch == 1})
    short = next((p for p in prompts if all(_cell(results, e, p) for e in ("naive", "cached", "static"))), None)
    if short is None:
        return Verdict(claim, source, None, "needs naive, cached and static cells at one prompt length")
    naive, cached, static = (_cell(results, e, short) for e in ("naive", "cached", "static"))
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


def batching_verdict(results: BenchResults, arch, machine: Machine, engine: str = "batched") -> Verdict:
    """Part 2: step time near flat in B, aggregate tok/s about B x single, up to the bandwidth's batch limit."""
    claim = "with B sequences per forward the step stays near flat and throughput grows about B x"
    source = "Part 2, Bottleneck and Prediction"
    cells = sorted((c for c in results.cells if c.engine == engine), key=lambda c: (c.prompt_tokens, c.batch))
    prompt = next(
        (c.prompt_tokens for c in cells if c.batch == 1 and sum(d.prompt_tokens == c.prompt_tokens for d in cells) > 1),
        None,
    )
    if prompt is None:
        return Verdict(claim, source, None, f"needs {engine} cells at batch 1 and larger at one prompt length")
    by_batch = {c.batch: c for c in cells if c.prompt_tokens == prompt}
    one = by_batch[1]
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def step_counts(engine: str, analysis: TraceAnalysis, trace: str, tool: str = "torch.profiler") -> StepCounts:
    steps = steady_steps(analysis)

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
    cells = {e: _cell(results, e, prompt) for e in engines}

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
        rows += [
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
    else:
        rows.append(
            Figure(
                "aten ops dispatched per step (no GPU: the CPU's launches)",
                "",
                from_counts(lambda c: c.top_level_ops, False),
                f"CPU trace: {traces}",
            )
        )
    nsys = {c.engine: c for c in report.steps.values() if c.tool == "nsys" and c.on_gpu}
    if nsys:
        where = "Nsight Systems export: " + ", ".join(sorted(c.trace for c in nsys.values()))
        for label, name in (
            ("kernel launches", "launches"),
            ("graph launches", "graph_launches"),
            ("kernels", "kernels"),
        ):
            values = {e: (getattr(nsys[e], name) if e in nsys else None) for e in engines}
            rows.append(Figure(f"{label} per step (nsys)", "", values, where))
    energy = from_cells(lambda c: c.telemetry.energy_per_token_j if c.telemetry else None)
    source = next((c.telemetry.energy_source for c in cells.values() if c and c.telemetry), None)
    rows.append(
        Figure(
            "energy per token",
            "J",
            energy,
            f"NVML ({source}) over the bench's decode phases" if any(energy.values()) else "no NVML here",
        )
    )
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


def _trace_names(counts: dict[str, StepCounts]) -> str:
    """The traces' names, as one pattern when they differ only by the engine's name."""
    names = sorted({c.trace for c in counts.values()})
    patterns = {c.trace.replace(f"_{c.engine}_", "_<engine>_", 1) for c in counts.values()}
    if len(names) > 1 and len(patterns) == 1:
        return patterns.pop()
    return ", ".join(names) or "no trace"


REPORT_FILE, REPORT_MD = "report.json", "report.md"


@dataclass
class Report:
    machine: Machine
    predictions: list[Prediction]
    verdicts: list[Verdict]
    overhead: OverheadReport | None = None
    ledgers: dict[str, StepDigest] = field(default_factory=dict)  # engine -> its profiled median decode step
    steps: dict[str, StepCounts] = field(default_factory=dict)  # "engine" or "engine (nsys)" -> its step's counts
    notes: list[str] = field(default_factory=list)  # what could not be measured, one line each

    def to_json(self) -> dict:
        return {
            "machine": dataclasses.asdict(self.machine),
            "predictions": [dataclasses.asdict(p) for p in self.predictions],
            "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
            "overhead": self.overhead.to_json() if self.overhead else None,
            "ledgers": {engine: d.to_json() for engine, d in self.ledgers.items()},
            "steps": {key: c.to_json() for key, c in self.steps.items()},
            "notes": list(self.notes),
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
                msgspec.convert(doc.get("machine"), Machine),
                msgspec.convert(doc.get("predictions"), list[Prediction]),
                msgspec.convert(doc.get("verdicts") or [], list[Verdict]),
                OverheadReport.from_json(overhead) if overhead else None,
                {str(engine): StepDigest.from_json(d) for engine, d in ledgers.items()},
                msgspec.convert(doc.get("steps") or {}, dict[str, StepCounts]),
                msgspec.convert(doc.get("notes") or [], list[str]),
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
