"""probe run's report: the record of a run (`Report`, report.json), its step counts and profiled traces, the hand
figures the write-ups publish recomputed from this run, and the self-check. The predictions it holds are
probe.analysis.diagnosis.predictions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from probe.analysis.diagnosis.predictions import Machine, OverheadReport, Prediction, Verdict, WhatIfCheck, cell_at
from probe.analysis.diagnosis.verdict import Diagnosis
from probe.analysis.ledger.median import MedianStep
from probe.analysis.ledger.types import TraceAnalysis, steady
from probe.analysis.records.files import read_json
from probe.analysis.records.results import BenchResults, Cell
from probe.analysis.records.runfolder import REPORT_FILE
from probe.analysis.records.sidecar import Tool
from probe.analysis.records.telemetry import ENERGY_WINDOW_NOTE
from probe.errors import ProbeError


@dataclass(frozen=True)
class StepCounts:
    """What one engine's profiled decode step dispatched and kept the GPU doing: medians over the trace's decode
    steps (`probe analyze`'s ledger). The write-ups counted these by hand from a CUDA trace."""

    engine: str
    trace: str  # the file's name: the figures' source
    tool: Tool
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
    engine: str, analysis: TraceAnalysis, trace: str, tool: Tool = "torch.profiler", batch: int = 1
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
        e: cell_at(results, counts[e].engine, prompt, counts[e].batch) if e in counts else cell_at(results, e, prompt)
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


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op threads a CPU run took (probe.capture.machine.choose_threads), and why, in one line."""

    threads: int
    floor_ms: tuple[tuple[int, float], ...]  # (candidate count, its median floor in ms), each count tried
    other_cpu_cores: float | None  # what other processes used while the floors ran (None: not measured)
    contended: bool
    reason: str


@dataclass
class Report:
    machine: Machine | None  # None: measuring the machine failed (named in `failed`)
    predictions: list[Prediction]
    verdicts: list[Verdict]
    overhead: OverheadReport | None = None
    ledgers: dict[str, MedianStep] = field(default_factory=dict)  # engine label -> its profiled median decode step
    steps: dict[str, StepCounts] = field(default_factory=dict)  # "label" or "label (nsys)" -> its step's counts
    notes: list[str] = field(default_factory=list)  # what could not be measured, one line each
    warnings: list[str] = field(default_factory=list)  # what the traces' ledgers and the self-check warned
    failed: dict[str, str] = field(default_factory=dict)  # part of the run -> its error, one line
    self_check: SelfCheck | None = None
    diagnoses: dict[str, Diagnosis] = field(default_factory=dict)  # engine label -> its profiled median step's
    what_if_checks: list[WhatIfCheck] = field(default_factory=list)  # the what-ifs held against the change made
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
            "verdicts": [v.to_json() for v in self.verdicts],
            "overhead": self.overhead.to_json() if self.overhead else None,
            "ledgers": {engine: d.to_json() for engine, d in self.ledgers.items()},
            "steps": {key: c.to_json() for key, c in self.steps.items()},
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "failed": dict(self.failed),
            "self_check": self.self_check.to_json() if self.self_check else None,
            "diagnoses": {label: d.to_json() for label, d in self.diagnoses.items()},
            "what_if_checks": [dataclasses.asdict(c) for c in self.what_if_checks],
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
                [Verdict.from_json(v) for v in msgspec.convert(doc.get("verdicts") or [], list[dict])],
                OverheadReport.from_json(overhead) if overhead else None,
                {str(engine): MedianStep.from_json(d) for engine, d in ledgers.items()},
                msgspec.convert(doc.get("steps") or {}, dict[str, StepCounts]),
                msgspec.convert(doc.get("notes") or [], list[str]),
                msgspec.convert(doc.get("warnings") or [], list[str]),
                msgspec.convert(doc.get("failed") or {}, dict[str, str]),
                msgspec.convert(doc.get("self_check"), SelfCheck | None),
                {str(k): Diagnosis.from_json(d) for k, d in (doc.get("diagnoses") or {}).items()},
                msgspec.convert(doc.get("what_if_checks") or [], list[WhatIfCheck]),
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
        return Report.from_json(read_json(path, "report"))  # one line for a file too large, not JSON, too deep, ...
    except ValueError as e:
        raise ProbeError(f"{path} is not a probe report ({e})") from None
