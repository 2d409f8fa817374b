"""What probe compare compares: any supported input read into one typed shape, a `SampleSet`.

`load_samples(path) -> SampleSet` reads a results folder, a results.json, a baseline file (`probe baseline`)
or a trace (.json / .json.gz / .sqlite, through the ledger): per key (a bench cell, or a trace's step kind) the
launch count per step with its op-name breakdown, and the raw timing samples.

Samples. Bench results: host time per step = every raw decode-step latency of every run (`itl_runs_ms`);
TTFT and decode tokens/s = one sample per run, tokens/s computed from the run's steps as the bench does.
Cache bookkeeping time is only in traces (the ledger's cache ranges), so results folders say it is absent.
Traces: one sample per step of the kind (wall and cache time); counts are the median over those steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from probe.analysis.ledger.build import analyze
from probe.analysis.records.environment import Environment
from probe.analysis.records.files import CHROME, NSYS_SQLITE, read_json, sniff
from probe.analysis.records.results import RESULTS_FILE, BenchResults, Cell, decode_tok_s, load_results
from probe.analysis.records.sidecar import Sidecar, read_sidecar
from probe.analysis.regression.identity import ConfigIdentity
from probe.analysis.trace import DeviceInfo, load_trace
from probe.errors import ProbeError

MetricKind = Literal["count", "timing"]
SampleKind = Literal["results", "baseline", "trace"]  # a results file or folder, a `probe baseline` file, a trace


@dataclass(frozen=True)
class Metric:
    name: str  # JSON key
    label: str  # what tables say
    kind: MetricKind
    higher_is_worse: bool = True


DECODE_LAUNCHES = Metric("decode_launches", "launches/decode step", "count")
PREFILL_LAUNCHES = Metric("prefill_launches", "launches/prefill", "count")
LAUNCHES = Metric("launches", "launches/step", "count")
KERNELS = Metric("kernels", "kernels/step", "count")  # GPU traces: kernels launched per step, by name
HOST_US = Metric("host_us_per_step", "host µs/step", "timing")
CACHE_US = Metric("cache_us_per_step", "cache µs/step", "timing")
TTFT_MS = Metric("ttft_ms", "TTFT ms", "timing")
TOK_S = Metric("decode_tok_s", "decode tok/s", "timing", higher_is_worse=False)
METRICS = {m.name: m for m in (DECODE_LAUNCHES, PREFILL_LAUNCHES, LAUNCHES, KERNELS, HOST_US, CACHE_US, TTFT_MS, TOK_S)}


@dataclass(frozen=True)
class Unit:
    """What one side measured for one key: a bench cell, or one step kind of a trace."""

    key: str  # "cached p16 n32" (a cell) or "decode" (a trace's step kind)
    counts: dict[str, float]  # count metric name -> launches
    ops: dict[str, dict[str, float]]  # count metric name -> its launches by op name (absent when not recorded)
    samples: dict[str, tuple[float, ...]]  # timing metric name -> raw samples
    # Other processes took the CPU while it ran (probe.analysis.records.telemetry.contention): its timings are no
    # verdict.
    # None: not judged (no telemetry, phases too short, or a file from before the rule).
    contended: bool | None = None
    # A trace's steps one by one: (step name, count metric -> its launches by op or kernel name), so that two traces
    # of the same iterations are diffed step by step, as HTA's trace diff does (empty: bench cells, the history).
    steps: tuple[tuple[str, dict[str, dict[str, float]]], ...] = ()
    # What a step of the kind processed, as its engine marker says (work_text): two traces whose steps did different
    # work are shown, not judged (probe.analysis.regression.comparable). None: not said (or a bench cell, whose key
    # already holds its prompt, new tokens and batch).
    work: str | None = None


@dataclass(frozen=True)
class SampleSet:
    source: str
    kind: SampleKind
    env: Environment | None  # None when a trace has no sidecar
    config: ConfigIdentity  # what must agree for a comparison to mean anything: model, dtype (traces: prompt, batch)
    units: dict[str, Unit]
    notes: tuple[str, ...] = ()
    complete: bool = True  # False for an interrupted sweep: cells it never reached are missing

    @property
    def family(self) -> str:
        return "trace" if self.kind == "trace" else "results"


def cell_unit(c: Cell, with_engine: bool = True) -> Unit:
    counts, ops = {}, {}
    for metric, total, by_op in (
        (DECODE_LAUNCHES, c.decode_ops, c.decode_ops_by_op),
        (PREFILL_LAUNCHES, c.prefill_ops, c.prefill_ops_by_op),
    ):
        if total is not None:  # None: a compiled or captured step, whose ops are not dispatched one by one
            counts[metric.name] = float(total)
            if by_op:
                ops[metric.name] = {k: float(v) for k, v in by_op.items()}
    tok_s = [t for run in c.itl_runs_ms if (t := decode_tok_s(c.batch, run)) is not None]
    samples = {
        HOST_US.name: tuple(x * 1e3 for run in c.itl_runs_ms for x in run),
        TTFT_MS.name: tuple(c.ttft_runs_ms),
        TOK_S.name: tuple(tok_s),
    }
    # A cell's identity across runs; without the engine when two different engines are held to each other.
    return Unit(str(c.key) if with_engine else c.key.shape, counts, ops, samples, c.contended)


def from_results(
    results: BenchResults, source: str, kind: SampleKind = "results", with_engine: bool = True
) -> SampleSet:
    """A results file's cells as units; `with_engine=False` keys them by prompt, tokens and batch alone, so two
    different engines' cells meet (probe ab)."""
    if not results.cells:
        raise ProbeError(f"{source}: has no cells")
    units: dict[str, Unit] = {}
    for c in results.cells:
        unit = cell_unit(c, with_engine)
        if unit.key in units:
            raise ProbeError(f"{source}: two cells for {unit.key}")
        units[unit.key] = unit
    config = ConfigIdentity(model=results.config.model, dtype=results.dtype)
    notes: tuple[str, ...] = (
        f"{CACHE_US.label}: not in bench results (only a trace's ledger measures cache bookkeeping; "
        "record one with probe profile)",
    )
    if not results.complete:
        notes += (f"{source}: an interrupted sweep (complete: false); only its finished cells are compared",)
    env = results.env if results.env != Environment() else None  # a file that recorded none
    return SampleSet(source, kind, env, config, units, notes, results.complete)


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def trace_environment(meta: Sidecar | None, devices: Sequence[DeviceInfo] = ()) -> Environment | None:
    """The environment a trace ran in: its sidecar's, else the device its own deviceProperties name (kineto writes
    them; torch calls a ROCm device cuda too), else None."""
    if meta is not None:
        return meta.env
    names = list(dict.fromkeys(d.name for d in devices if d.name))
    return Environment(device="cuda", device_name=", ".join(names)) if names else None


def sidecar_contended(meta: Sidecar | None) -> bool | None:
    """What `probe profile` recorded of its own run's contention (probe.analysis.records.telemetry.contention)."""
    return meta.contended if meta is not None else None


def from_analysis(analysis, source: str, meta: Sidecar | None, devices: Sequence[DeviceInfo] = ()) -> SampleSet:
    """A ledger (probe.analysis.ledger.build.TraceAnalysis) as one unit per step kind: per-step samples, median
    counts (launches per step, or dispatched ops on a CPU-only trace: StepLedger.dispatched). `devices`: the
    trace's deviceProperties, which name the device when there is no sidecar."""
    steps = analysis.steps
    contended = sidecar_contended(meta)
    timed_cache = any(s.cache_ns for s in steps)
    units = {}
    for kind in dict.fromkeys(s.kind for s in steps):
        mine = [s for s in steps if s.kind == kind]
        launches = [s.dispatched for s in mine]
        names = sorted({n for s in mine for n in s.op_counts})
        ops = {LAUNCHES.name: {n: _median(s.op_counts.get(n, 0) for s in mine) for n in names}}
        counts = {LAUNCHES.name: _median(launches)}
        if analysis.on_gpu:  # which kernels run, and how often: a kernel that appears or multiplies alerts by name
            kernels = sorted({n for s in mine for n in s.kernel_counts})
            counts[KERNELS.name] = _median(s.kernels for s in mine)
            ops[KERNELS.name] = {n: _median(s.kernel_counts.get(n, 0) for s in mine) for n in kernels}
        samples = {HOST_US.name: tuple(s.wall_ns / 1e3 for s in mine)}
        if timed_cache:
            samples[CACHE_US.name] = tuple(s.cache_ns / 1e3 for s in mine)
        each = tuple(
            (
                s.name,
                {LAUNCHES.name: dict(s.op_counts)} | ({KERNELS.name: dict(s.kernel_counts)} if analysis.on_gpu else {}),
            )
            for s in mine
        )
        units[kind] = Unit(kind, counts, ops, samples, contended, each, work_text(mine))
    notes = () if timed_cache else (f"{source}: no cache ranges in the trace, so {CACHE_US.label} is absent",)
    # The engine is left out: a changed engine (a module:Class spec) against the stock one is the point.
    config = (
        ConfigIdentity(
            model=meta.config.model, dtype=meta.config.dtype, prompt=meta.config.prompt, batch=meta.config.batch
        )
        if meta
        else ConfigIdentity()
    )
    return SampleSet(source, "trace", trace_environment(meta, devices), config, units, notes)


def work_text(steps: Sequence) -> str | None:
    """What the steps processed, by their engine markers (StepTokens): "32 sequences, 32 new tokens, 32,753 cached"
    when every step says the same, each distinct one when they differ; None when no marker says."""
    said = [_tokens_text(s.tokens) for s in steps if s.tokens is not None]
    if len(said) < len(steps) or not said:
        return None
    distinct = list(dict.fromkeys(said))
    return distinct[0] if len(distinct) == 1 else f"{len(distinct)} different: " + " | ".join(distinct[:3])


def _tokens_text(t) -> str:
    parts = [f"{t.sequences:,} sequences"]
    if t.new_tokens is not None:
        parts.append(f"{t.new_tokens:,} new tokens")
    if t.context_tokens is not None:
        parts.append(f"{t.context_tokens:,} cached")
    return ", ".join(parts)


def load_trace_samples(path: Path) -> SampleSet:
    trace = load_trace(path)
    return from_analysis(analyze(trace), str(path), read_sidecar(path), trace.devices)


def load_samples(path: str | Path) -> SampleSet:
    """Any supported input as a SampleSet. Raises ProbeError, with a one-line reason, for unusable input."""
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{p}: no such file or folder")
    if p.is_dir():
        if not (p / RESULTS_FILE).is_file():
            raise ProbeError(f"{p}: a folder without a {RESULTS_FILE}")
        p = p / RESULTS_FILE
    try:
        if p.stat().st_size == 0:
            raise ProbeError(f"{p}: empty file")
        if sniff(p) in (CHROME, NSYS_SQLITE):
            return load_trace_samples(p)
    except OSError as e:
        raise ProbeError(f"cannot read {p}: {e.strerror or e}") from None
    results = load_results(p)
    raw = read_json(p, "results file")  # load_results has checked it is a results object
    return from_results(results, str(p), "baseline" if raw.get("baseline") else "results")
