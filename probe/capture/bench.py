"""The benchmark runner: W warmup and R recorded runs per (engine, prompt) cell, with token parity.

Conventions are the write-ups': TTFT is the median over runs; ITL p50/p90 are taken over every decode step
of every run; decode tokens/s excludes prefill; total is the mean wall time of a run. The serving figures beside
them follow vLLM's definitions (probe.analysis.results). Results are saved after every cell, so an interrupted
sweep keeps what finished, and `resume` continues a folder from the cells it holds.

A sweep is planned as cells (`CellSpec`), and a `CellRunner` runs them one at a time in its process: the model
loaded once, naive's references kept, telemetry sampled per cell. A cell that raises becomes a `FailedCell` with its
error, and the sweep goes on. `bench` runs every cell here; `probe.capture.raysweep` hands them to a runner per GPU
(or per node) of a Ray cluster. Either way `Sweep` collects the cells, in the order they finish, into the same
results folder.

The first warmup run of every cell is its parity pass (probe.capture.parity): untimed, it reads every step's
logits. It runs even with --warmup 0, so a compiled engine never compiles inside a timed run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from engines import check_serves, engine_class
from engines.base import Engine
from engines.configs import load_config
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.results import RESULTS_FILE, BenchResults, Cell, Clock, FailedCell, Parity, load_results
from probe.analysis.telemetry import TELEMETRY_FILE, cell_telemetry, contention, decode_windows, write_samples
from probe.capture import annotate as A
from probe.capture.config import BenchConfig, settle, validate
from probe.capture.count import count_forward_ops
from probe.capture.env import environment
from probe.capture.loop import Generation, generate
from probe.capture.parity import Checked, checked_run, judge, parity_mode
from probe.capture.telemetry.backends import peak_rss_bytes, reset_peak_rss
from probe.capture.telemetry.samplers import make_sampler
from probe.errors import ProbeError


def check_writable(folder: Path) -> None:
    """Fail in one line, before any work, when `folder` cannot be written. The test file is created exclusively
    (tempfile), so nothing already at a path there, such as a planted symlink, is ever written through."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".probe-write-test."):
            pass
    except OSError as e:
        raise ProbeError(f"cannot write to output folder {folder}: {e.strerror or e}") from None


class PeakMemory:
    """Peak memory over a block: CUDA's allocator peak, or the process's peak RSS (VmHWM, reset per cell)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind = "cuda_allocated" if device.type == "cuda" else "cpu_rss"

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()

    def peak(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return peak_rss_bytes()


ProgressFn = Callable[[str, int], None]  # (description, runs completed since last call)


class Telemetry:
    """A runner's device and process telemetry: one sampler per cell, its raw rows handed back with the cell."""

    def __init__(self, cfg: BenchConfig, device: torch.device):
        self.interval_ms, self.device = cfg.telemetry_ms, device
        self.said: set[str] = set()

    def note_once(self, note: str) -> None:  # "NVML missing" is said once per sweep, not once per cell
        if note not in self.said:
            self.said.add(note)
            print(note, file=sys.stderr)

    def sampler(self):
        if not self.interval_ms:
            return contextlib.nullcontext(None)
        return make_sampler(self.interval_ms, self.device, torch.get_num_threads(), self.note_once)

    def summarize(self, sampler, gens: list[Generation]) -> dict:
        """The cell's typed telemetry fields (Cell.telemetry, Cell.decode_windows_ns, the contention figures);
        {} when off."""
        if sampler is None:
            return {}
        windows = decode_windows(gens)
        tokens = sum(g.tokens.shape[0] * (g.tokens.shape[1] - 1) for g in gens)  # decode tokens only
        summary = cell_telemetry(sampler.samples, windows, tokens)
        busy = contention(summary, windows, os.cpu_count() or 1)
        return {
            "telemetry": summary,
            "decode_windows_ns": [list(w) for w in windows],
            "other_cpu_cores": busy.other_cpu_cores,
            "contended": busy.contended,
        }


def settled(cfg):
    """`cfg` (a BenchConfig or ProfileConfig) with "auto" model and dtype set for the device it will run on."""
    return settle(cfg, resolve_device(cfg.device).type)


def run_cell(
    engine: Engine,
    prompt: torch.Tensor,
    cfg: BenchConfig,
    mem: PeakMemory,
    annotator,
    references: References,
    progress: ProgressFn,
    telemetry: Telemetry,
) -> tuple[Cell, list[dict]]:
    """One cell: its parity pass, warmups and recorded runs. Returns the cell and its raw telemetry rows."""
    label = f"{engine.name} p{prompt.shape[1]}"
    mode = parity_mode(cfg.dtype)
    own = engine.name == "naive" and prompt.shape[0] == 1  # naive at batch 1 is its own reference
    with telemetry.sampler() as sampler:  # its rows span the warmups too; summaries keep the decode phases
        reference = None if own else references.rows(prompt.shape[1], prompt.shape[0], progress)
        forced = None if reference is None or mode == "exact" else reference.tokens
        checked = checked_run(engine, prompt, cfg.new_tokens, forced)  # the first warmup: untimed
        progress(f"{label} parity", 1)
        if own:
            reference = references.store(prompt.shape[1], checked)
        for _ in range(cfg.warmup - 1):
            generate(engine, prompt, cfg.new_tokens, annotator)
            progress(f"{label} warmup", 1)
        mem.reset()
        gens: list[Generation] = []
        for _ in range(cfg.runs):
            gens.append(generate(engine, prompt, cfg.new_tokens, annotator))
            progress(f"{label} run", 1)
    peak = mem.peak()
    extra = telemetry.summarize(sampler, gens)
    if mode == "exact":  # exact parity is judged on what the timed runs produced
        checked = dataclasses.replace(checked, argmax=gens[0].tokens)
    parity = judge(mode, checked, reference.tokens, reference.finite)
    sync_cost = None
    if prompt.device.type == "cuda" and cfg.sync_pairs:
        sync_cost = sync_cost_ms(
            lambda: generate(engine, prompt, cfg.new_tokens, annotator).total_ns,
            lambda: generate(engine, prompt, cfg.new_tokens, annotator, sync_each_step=False).total_ns,
            cfg.sync_pairs,
            cfg.new_tokens - 1,
        )
        progress(f"{label} sync cost", 2 * cfg.sync_pairs)
    cell = measured_cell(engine, prompt, gens, None, peak, mem.kind, sync_cost, extra, parity)
    return cell, list(sampler.samples) if sampler is not None else []


def sync_cost_ms(synced: Callable[[], int], unsynced: Callable[[], int], pairs: int, steps: int) -> float:
    """Part 1's sync cost per step: runs synced every step against runs synced once at the end, `pairs` pairs in
    ABBA order (synced first, then unsynced first, ...) so drift falls on both alike; the median over pairs of
    (synced - unsynced) total ns / `steps`, in ms."""
    diffs = []
    for i in range(pairs):
        if i % 2 == 0:
            a = synced()
            b = unsynced()
        else:
            b = unsynced()
            a = synced()
        diffs.append((a - b) / steps)
    return statistics.median(diffs) / 1e6


def measured_cell(
    engine: Engine,
    prompt: torch.Tensor,
    gens: list[Generation],
    reference: list[list[int]] | None,
    peak_mem_bytes: int,
    peak_mem_kind: str,
    sync_overhead_ms: float | None = None,
    extra: dict | None = None,
    parity: Parity | None = None,
) -> Cell:
    """A cell from recorded runs, with the engine's deterministic op counts (none for a captured step)."""
    cell = Cell.from_runs(
        engine=engine.name,
        prompt_tokens=prompt.shape[1],
        batch=prompt.shape[0],
        ttft_ms=[g.ttft_ns / 1e6 for g in gens],
        itl_ms=[[s / 1e6 for s in g.step_ns] for g in gens],
        total_ms=[g.total_ns / 1e6 for g in gens],
        tokens=[g.tokens.tolist() for g in gens],
        peak_mem_bytes=peak_mem_bytes,
        peak_mem_kind=peak_mem_kind,
        reference=reference,
        sync_overhead_ms=sync_overhead_ms,
        parity=parity,
    )
    cell = dataclasses.replace(cell, recomputes=engine.recomputes, **(extra or {}))
    if engine.captures_decode:
        return cell
    counts = count_forward_ops(engine, prompt)
    return dataclasses.replace(
        cell,
        decode_ops=counts.decode_ops,
        prefill_ops=counts.prefill_ops,
        decode_ops_by_op=counts.decode_by_op,
        prefill_ops_by_op=counts.prefill_by_op,
    )


def runs_per_cell(cfg: BenchConfig, device: torch.device) -> int:
    sync_runs = 2 * cfg.sync_pairs if device.type == "cuda" else 0
    return max(cfg.warmup, 1) + cfg.runs + sync_runs


def cell_count(cfg: BenchConfig) -> int:
    return sum(cfg.times(e, p) for p in cfg.prompts for e in cfg.engines) * len(cfg.batch)


@dataclass(frozen=True)
class Reference:
    """Naive's free-running tokens for B sequences, each from its own batch-1 run, and whether each step's logits
    were finite: (B, N) tensors on the CPU."""

    tokens: torch.Tensor
    finite: torch.Tensor


RefRows = dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]  # (length, row) -> naive's (tokens, finite), (N,)


class References:
    """Each sequence's naive reference, computed once (an untimed checked run) and only when needed. Rows computed
    elsewhere (another worker's naive cell) can be handed in with `add`."""

    def __init__(self, model, cfg: BenchConfig, device: torch.device):
        self.model, self.cfg, self.device = model, cfg, device
        self.rows_: RefRows = {}

    def add(self, rows: RefRows) -> None:
        for key, row in rows.items():
            self.rows_.setdefault(key, row)

    def store(self, length: int, checked: Checked) -> Reference:
        """A batch-1 naive cell's own parity pass, kept as row 0's reference."""
        self.rows_.setdefault((length, 0), (checked.argmax[0], checked.finite[0]))
        return self.rows(length, 1)

    def rows(self, length: int, batch: int, progress: ProgressFn = lambda d, n: None) -> Reference:
        for row in range(batch):
            if (length, row) not in self.rows_:
                progress(f"naive p{length} row {row} reference", 0)
                prompt = prompt_ids(length, row + 1, self.model.config.vocab_size, self.cfg.seed)[row:].to(self.device)
                checked = checked_run(engine_class("naive")(self.model), prompt, self.cfg.new_tokens)
                self.rows_[(length, row)] = (checked.argmax[0], checked.finite[0])
        rows = [self.rows_[(length, row)] for row in range(batch)]
        return Reference(torch.stack([t for t, _ in rows]), torch.stack([f for _, f in rows]))


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
    def key(self) -> tuple[str, int, int, int]:
        return self.name, self.prompt_tokens, self.new_tokens, self.batch

    @property
    def label(self) -> str:
        return f"{self.name} p{self.prompt_tokens}" + (f" b{self.batch}" if self.batch > 1 else "")


def plan(cfg: BenchConfig, classes: dict[str, type]) -> list[CellSpec]:
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
    check_serves(classes.values(), load_config(cfg.model))  # an engine that cannot serve the family: one line, now
    return [CellSpec(i, e, classes[e].name, p, b, cfg.new_tokens) for i, (e, p, b) in enumerate(cells)]


def one_line(e: BaseException) -> str:
    """An exception as a cell records it: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@dataclass
class Outcome:
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
        self.cfg = settled(cfg)
        self.classes, self.device = validate(self.cfg), resolve_device(self.cfg.device)
        self.annotator = A.Annotator() if self.cfg.annotate else A.NULL
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if model is None:
            model = load_model(self.cfg.model, self.cfg.dtype, str(self.device), self.cfg.seed, self.cfg.attn)
        self.model = model
        self.mem, self.telemetry = PeakMemory(self.device), Telemetry(self.cfg, self.device)
        self.references = References(model, self.cfg, self.device)
        self.host, self.device_label = socket.gethostname(), device_label or str(self.device)

    def environment(self) -> dict:
        return environment(self.device, self.cfg.dtype) | {
            "attn_implementation": self.model.config._attn_implementation
        }

    def run(self, spec: CellSpec, progress: ProgressFn = lambda d, n: None, references: RefRows | None = None):
        """One cell. An exception (an OOM, an engine that refuses the shape) becomes a FailedCell; the runner stays
        usable for the next cell. KeyboardInterrupt goes through."""
        self.references.add(references or {})
        before = set(self.references.rows_)
        where = dict(host=self.host, device=self.device_label, attn=self.model.config._attn_implementation)
        try:
            engine = self.classes[spec.engine](self.model)
            engine.reserve(spec.batch, max(self.cfg.prompts) + self.cfg.new_tokens)  # one buffer length a run
            prompt = prompt_ids(spec.prompt_tokens, spec.batch, self.model.config.vocab_size, self.cfg.seed)
            cell, samples = run_cell(
                engine,
                prompt.to(self.device),
                self.cfg,
                self.mem,
                self.annotator,
                self.references,
                progress,
                self.telemetry,
            )
            outcome = Outcome(spec, dataclasses.replace(cell, **where), samples)
        except Exception as e:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # after an OOM, the next cell starts from a clean allocator
            outcome = Outcome(spec, FailedCell(*spec.key, error=one_line(e), **where))
        outcome.references = {k: v for k, v in self.references.rows_.items() if k not in before}
        return outcome


class Sweep:
    """A sweep's results as cells arrive, in any order: kept in the sweep's order, and with `out` saved after every
    cell (results.json, cells.parquet / .csv, telemetry.parquet). On `resume` it starts from the finished cells
    `out` already holds (its failed cells run again); telemetry rows keep their cell's position in results.json."""

    def __init__(self, cfg: BenchConfig, specs: list[CellSpec], env: dict, out: Path | None, resume: bool = False):
        self.specs, self.out = specs, out
        # Both clocks at one instant: telemetry rows and steps use perf_counter_ns, traces use the epoch.
        clock = Clock(time.perf_counter_ns(), time.time_ns())
        self.results = BenchResults([], env, _config_dict(cfg), clock=clock)
        self.done: dict[int, Cell | FailedCell] = {}
        self.samples: dict[int, list[dict]] = {}
        if resume and out is not None and (out / RESULTS_FILE).is_file():
            self._resume(out)
        self.todo = [s for s in specs if not isinstance(self.done.get(s.position), Cell)]

    def _resume(self, out: Path) -> None:
        held = check_resume(out, self.results, self.specs)
        position = {s.key: s.position for s in self.specs}
        rows = pd.read_parquet(out / TELEMETRY_FILE) if (out / TELEMETRY_FILE).is_file() else None
        for i, cell in enumerate(held.cells):
            self.done[position[cell.key]] = cell
            if rows is not None and "cell" in rows.columns:
                self.samples[position[cell.key]] = rows[rows["cell"] == i].drop(columns="cell").to_dict("records")

    def add(self, outcome: Outcome) -> BenchResults:
        self.done[outcome.spec.position] = outcome.cell
        self.samples[outcome.spec.position] = outcome.samples
        return self._save()

    def finish(self) -> BenchResults:
        self.results.complete = True
        return self._save()

    def _save(self) -> BenchResults:
        order = sorted(self.done)
        self.results.cells = [self.done[i] for i in order if isinstance(self.done[i], Cell)]
        self.results.failed = [self.done[i] for i in order if isinstance(self.done[i], FailedCell)]
        if self.out is not None:
            kept = [i for i in order if isinstance(self.done[i], Cell)]
            rows = [{**r, "cell": n} for n, i in enumerate(kept) for r in self.samples.get(i, ())]
            with _signals_deferred():  # an interrupt lands after both files, never between them
                if rows:
                    write_samples(rows, self.out / TELEMETRY_FILE)
                self.results.save(self.out)  # last: results.json is what --resume and readers trust
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


# What --resume may change: the cells (it adds the missing ones) and what is done with a parity verdict.
RESUMABLE = frozenset({"engines", "prompts", "batch", "naive_prompts", "allow_mismatch"})
SAME_ENV = ("torch", "transformers", "device_name", "dtype")  # a resumed sweep is measured in one environment


def check_resume(out: Path, now: BenchResults, specs: list[CellSpec]) -> BenchResults:
    """The results `out` holds, when `now`'s sweep (its config, its env unless that is still {}) can continue them:
    the same configuration but for the cells, every held cell among `specs`, the same environment. Otherwise a
    one-line ProbeError saying what differs."""
    held = load_results(out)
    why = None
    for key in sorted(set(held.config) | set(now.config)):
        if key not in RESUMABLE and held.config.get(key) != now.config.get(key):
            why = f"its {key} was {held.config.get(key)!r}, now {now.config.get(key)!r}"
            break
    for key in SAME_ENV if now.env and why is None else ():
        if held.env.get(key) != now.env.get(key):
            why = f"it was measured with {key} {held.env.get(key)!r}, this is {now.env.get(key)!r}"
            break
    keys = {s.key for s in specs}
    if why is None and (missing := [c for c in held.cells if c.key not in keys]):
        why = f"it holds cells this sweep does not ({', '.join(c.label for c in missing[:3])})"
    if why:
        raise ProbeError(f"cannot resume {out}: {why}")
    return held


def precheck_resume(cfg: BenchConfig, out: Path) -> None:
    """check_resume on the configuration alone, before a model is built or a worker started."""
    if (out / RESULTS_FILE).is_file():
        cfg = settled(cfg)
        check_resume(out, BenchResults([], {}, _config_dict(cfg)), plan(cfg, validate(cfg)))


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
    cfg = settled(cfg)
    specs = plan(cfg, validate(cfg))
    if out is not None:
        check_writable(out)
    runner = CellRunner(cfg, model)
    sweep = Sweep(cfg, specs, runner.environment(), out, resume)
    for spec in sweep.todo:
        on_cell(sweep.add(runner.run(spec, progress)))
    return sweep.finish()


def _config_dict(cfg: BenchConfig) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def mismatches(results: BenchResults) -> list[Cell]:
    """Cells whose parity verdict failed: tokens not naive's (exact) or beyond a near-tie (teacher-forced), or
    non-finite logits."""
    return [c for c in results.cells if c.tokens_match_naive is False]
