"""A sweep: its cells planned, run one at a time, and saved after every cell, so an interrupted sweep keeps what
finished and `resume` continues a folder from the cells it holds.

A sweep is planned as cells (`CellSpec`), and a `CellRunner` runs them one at a time in its process (measuring each
with probe.capture.cell): the model loaded once, naive's references kept, telemetry sampled per cell. A cell that
raises becomes a `FailedCell` with its error, and the sweep goes on. `bench` runs every cell here;
`probe.capture.raysweep` hands them to a runner per GPU (or per node) of a Ray cluster. Either way `Sweep` collects
the cells, in the order they finish, into the same results folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from engines import check_serves
from engines.base import Engine
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.records.environment import Environment
from probe.analysis.records.files import atomic_set, model_config
from probe.analysis.records.results import (
    RESULTS_FILE,
    SAVED_FILES,
    BenchResults,
    Cell,
    CellKey,
    Clock,
    FailedCell,
    load_results,
)
from probe.analysis.records.runfolder import check_writable
from probe.analysis.records.telemetry import TELEMETRY_FILE, write_samples
from probe.capture import annotate
from probe.capture.cell import CellSampler, PeakMemory, ProgressFn, References, RefRows, one_line, run_cell
from probe.capture.config import Config, settle, validate
from probe.capture.env import environment
from probe.errors import ProbeError
from probe.settings import BenchConfig


def settle_here(cfg: Config) -> Config:
    """`cfg` settled (probe.capture.config.settle) for the device its `device` resolves to in this process."""
    return settle(cfg, resolve_device(cfg.device).type)


def runs_per_cell(cfg: BenchConfig, device: torch.device) -> int:
    sync_runs = 2 * cfg.sync_pairs if device.type == "cuda" else 0
    return max(cfg.warmup, 1) + cfg.runs + sync_runs


def cell_count(cfg: BenchConfig) -> int:
    return sum(cfg.times(e, p) for p in cfg.prompts for e in cfg.engines) * len(cfg.batch)


@dataclass(frozen=True)
class CellSpec:
    """One cell of a sweep: an engine at a prompt length and a batch size."""

    position: int  # in the sweep's order: by prompt, then batch, naive first
    engine: str  # as the config names it (a name, or module:Class)
    name: str  # the engine's own name, which the cell records
    prompt_tokens: int
    batch: int
    new_tokens: int

    @property
    def key(self) -> CellKey:
        return CellKey(self.name, self.prompt_tokens, self.new_tokens, self.batch)

    @property
    def label(self) -> str:
        return self.key.label


def plan(cfg: BenchConfig, classes: dict[str, type[Engine]]) -> list[CellSpec]:
    """The sweep's cells in order: by prompt length, then batch, naive first (at batch 1 its own tokens are every
    other engine's reference)."""
    order = sorted(classes, key=lambda n: classes[n].name != "naive")
    cells = [
        (name, length, batch)
        for length in sorted(cfg.prompts)
        for batch in sorted(cfg.batch)
        for name in order
        if cfg.times(classes[name].name, length)
    ]
    check_serves(classes.values(), model_config(cfg.model))  # an engine that cannot serve the family: one line, now
    return [CellSpec(i, e, classes[e].name, p, b, cfg.new_tokens) for i, (e, p, b) in enumerate(cells)]


@dataclass
class CellOutcome:
    """What running one cell gave: the cell (or its failure), its raw telemetry rows, and the naive reference rows
    it computed (so other workers need not compute them again)."""

    spec: CellSpec
    cell: Cell | FailedCell
    samples: list[dict] = field(default_factory=list)
    references: RefRows = field(default_factory=dict)


class CellRunner:
    """Runs a sweep's cells in this process, one at a time: the model built once, naive's references kept across
    cells, telemetry sampled per cell. `device_label` names the device in each cell (on a Ray worker, the GPU's
    index on its host rather than the cuda:0 the worker sees)."""

    def __init__(self, cfg: BenchConfig, model=None, device_label: str | None = None):
        self.cfg = settle_here(cfg)
        self.classes, self.device = validate(self.cfg), resolve_device(self.cfg.device)
        self.annotator = annotate.Annotator() if self.cfg.annotate else annotate.NULL
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if model is None:
            model = load_model(self.cfg.model, self.cfg.dtype, str(self.device), self.cfg.seed, self.cfg.attn)
        self.model = model
        self.mem, self.telemetry = PeakMemory(self.device), CellSampler(self.cfg, self.device)
        self.references = References(model, self.cfg, self.device)
        self.host, self.device_label = socket.gethostname(), device_label or str(self.device)
        self.attn = self.model.config._attn_implementation

    def environment(self) -> Environment:
        return dataclasses.replace(environment(self.device, self.cfg.dtype), attn_implementation=self.attn)

    def run(self, spec: CellSpec, progress: ProgressFn = lambda d, n: None, references: RefRows | None = None):
        """One cell. An exception (an OOM, an engine that refuses the shape) becomes a FailedCell; the runner stays
        usable for the next cell. KeyboardInterrupt goes through."""
        self.references.add(references or {})
        before = set(self.references.known)
        self.mem.between_cells()  # the previous cell's leftovers are not this one's peak
        try:
            engine = self.classes[spec.engine](self.model)
            prompt = prompt_ids(spec.prompt_tokens, spec.batch, self.model.config.vocab_size, self.cfg.seed)
            cell, samples = run_cell(
                engine,
                prompt.to(self.device),
                self.cfg,
                mem=self.mem,
                annotator=self.annotator,
                references=self.references,
                telemetry=self.telemetry,
                progress=progress,
            )
            cell = dataclasses.replace(cell, host=self.host, device=self.device_label, attn=self.attn)
            outcome = CellOutcome(spec, cell, samples)
        except Exception as e:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # after an OOM, the next cell starts from a clean allocator
            failed = FailedCell.of(spec.key, one_line(e), host=self.host, device=self.device_label, attn=self.attn)
            outcome = CellOutcome(spec, failed)
        outcome.references = {k: v for k, v in self.references.known.items() if k not in before}
        return outcome


class Sweep:
    """A sweep's results as cells arrive, in any order: kept in the sweep's order, and with `out` saved after every
    cell (results.json, cells.parquet / .csv, telemetry.parquet, as one set). On `resume` it starts from the finished
    cells `out` already holds (its failed cells run again); telemetry rows keep their cell's position in
    results.json."""

    def __init__(
        self, cfg: BenchConfig, specs: list[CellSpec], env: Environment, out: Path | None, resume: bool = False
    ):
        self.specs, self.out = specs, out
        # Both clocks at one instant: telemetry rows and steps use perf_counter_ns, traces use the epoch.
        clock = Clock(time.perf_counter_ns(), time.time_ns())
        self.results = BenchResults([], env, cfg, clock=clock)
        self.done: dict[int, Cell | FailedCell] = {}
        self.samples: dict[int, list[dict]] = {}
        if resume and out is not None and (out / RESULTS_FILE).is_file():
            self._resume(out)
        self.todo = [s for s in specs if not isinstance(self.done.get(s.position), Cell)]

    def _resume(self, out: Path) -> None:
        held = check_resume(out, self.results.config, self.results.env, self.specs)
        position = {s.key: s.position for s in self.specs}
        rows = pd.read_parquet(out / TELEMETRY_FILE) if (out / TELEMETRY_FILE).is_file() else None
        for i, cell in enumerate(held.cells):
            self.done[position[cell.key]] = cell
            if rows is not None and "cell" in rows.columns:
                self.samples[position[cell.key]] = rows[rows["cell"] == i].drop(columns="cell").to_dict("records")

    def add(self, outcome: CellOutcome) -> BenchResults:
        self.done[outcome.spec.position] = outcome.cell
        self.samples[outcome.spec.position] = outcome.samples
        return self._save()

    def finish(self) -> BenchResults:
        self.results.complete = True
        return self._save()

    def _save(self) -> BenchResults:
        order = sorted(self.done)
        self.results.cells = [c for i in order if isinstance(c := self.done[i], Cell)]
        self.results.failed = [c for i in order if isinstance(c := self.done[i], FailedCell)]
        if self.out is not None:
            kept = [i for i in order if isinstance(self.done[i], Cell)]
            rows = [{**r, "cell": n} for n, i in enumerate(kept) for r in self.samples.get(i, ())]
            names = ((TELEMETRY_FILE,) if rows else ()) + SAVED_FILES  # results.json last: what readers trust
            # One set: every file written before any replaces the old one, and an interrupt lands after all of them.
            try:
                self.out.mkdir(parents=True, exist_ok=True)
                with _signals_deferred(), atomic_set(self.out, names) as paths:
                    if rows:
                        write_samples(rows, paths[TELEMETRY_FILE])
                    self.results.write(paths)
            except OSError as e:  # a full disk, a file-size limit: the folder keeps the set saved before
                raise ProbeError(
                    f"cannot save to {self.out}: {e.strerror or e}; it holds the results saved before this cell"
                ) from None
        return self.results


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT and SIGTERM that arrive during the block are handled when it ends, by the handlers that were in place
    (Python runs signal handlers in the main thread only, so elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = {sig: signal.signal(sig, lambda n, _: caught.append(n)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        if caught:  # sent again, now to the handler that was in place; one interrupt is enough to stop
            signal.raise_signal(caught[0])


def check_resume(out: Path, cfg: BenchConfig, env: Environment | None, specs: list[CellSpec]) -> BenchResults:
    """The results `out` holds, when a sweep of `cfg` (in `env`, unless that is not known yet) can continue them:
    the same configuration but for what --resume may change (knob(..., resumable=True): the cells it adds, what is
    done with a parity verdict), every held cell among `specs`, the same environment (Environment.
    differs_for_resume). Otherwise a one-line ProbeError saying what differs."""
    held = load_results(out)
    why = None
    if (conflict := cfg.resume_conflict(held.config)) is not None:
        name, was, now = conflict
        why = f"its {name} was {_shown(was)}, now {_shown(now)}"
    elif env is not None and (differences := held.env.differs_for_resume(env)):
        d = differences[0]
        why = f"it was measured with {d.key} {d.ours!r}, this is {d.theirs!r}"
    elif missing := [c for c in held.cells if c.key not in {s.key for s in specs}]:
        why = f"it holds cells this sweep does not ({', '.join(c.label for c in missing[:3])})"
    if why:
        raise ProbeError(f"cannot resume {out}: {why}")
    return held


def _shown(value) -> str:
    return repr(list(value) if isinstance(value, tuple) else value)  # as results.json and the flags hold it


def precheck_resume(cfg: BenchConfig, out: Path) -> None:
    """check_resume on the configuration alone, before a model is built or a worker started."""
    if (out / RESULTS_FILE).is_file():
        cfg = settle_here(cfg)
        check_resume(out, cfg, None, plan(cfg, validate(cfg)))


def bench(
    cfg: BenchConfig,
    out: Path | None = None,
    progress: ProgressFn = lambda d, n: None,
    on_cell: Callable[[BenchResults], None] = lambda r: None,
    model=None,
    resume: bool = False,
) -> BenchResults:
    """Run the sweep here, one cell at a time. With `out`, results are saved after every cell; with `resume`, the
    cells `out` already holds are kept and only the others run. `model`, when given, is used instead of building
    cfg's model again (it must be that model, in that dtype, on that device)."""
    cfg = settle_here(cfg)
    specs = plan(cfg, validate(cfg))
    if out is not None:
        check_writable(out)
    runner = CellRunner(cfg, model)
    sweep = Sweep(cfg, specs, runner.environment(), out, resume)
    for spec in sweep.todo:
        on_cell(sweep.add(runner.run(spec, progress)))
    return sweep.finish()


def mismatches(results: BenchResults) -> list[Cell]:
    """Cells whose parity verdict failed: tokens not naive's (exact) or beyond a near-tie (teacher-forced), or
    non-finite logits."""
    return [c for c in results.cells if c.tokens_match_naive is False]


__all__ = [
    "CellOutcome",
    "CellRunner",
    "CellSpec",
    "RefRows",
    "Sweep",
    "bench",
    "cell_count",
    "check_resume",
    "check_writable",
    "mismatches",
    "one_line",
    "plan",
    "precheck_resume",
    "runs_per_cell",
    "settle_here",
]
