"""Measuring one cell: one engine at one prompt length and batch, W warmup and R recorded runs, with token parity.

Conventions are the write-ups': TTFT is the median over runs; ITL p50/p90 are taken over every decode step of
every run; decode tokens/s excludes prefill; total is the mean wall time of a run. The serving figures beside them
follow vLLM's definitions (probe.analysis.records.results).

The first warmup run of every cell is its parity pass (probe.capture.parity): untimed, it reads every step's
logits. It runs even with --warmup 0, so a compiled engine never compiles inside a timed run.

Peak memory is the recorded runs' (`PeakMemory`): CUDA's allocator peak, or the process's peak RSS on a CPU. Before
each cell, what the previous cell left is let go (`PeakMemory.between_cells`: unreachable objects collected, the
allocator's cached blocks handed back), so a cell's peak is its own, not its predecessor's leftovers too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import gc
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engines import engine_class
from engines.base import Engine
from engines.models import prompt_ids
from probe.analysis.records.results import Cell, CellKey, Parity, PeakMemKind
from probe.analysis.records.telemetry import TelemetrySummary, cell_telemetry, contention, decode_windows
from probe.capture import annotate
from probe.capture.count import count_forward_ops
from probe.capture.loop import Generation, generate
from probe.capture.parity import Checked, checked_run, judge, parity_mode
from probe.capture.telemetry.backends import peak_rss_bytes, reset_peak_rss
from probe.capture.telemetry.samplers import make_sampler
from probe.settings import BenchConfig

ProgressFn = Callable[[str, int], None]  # (description, runs completed since last call)
Annotator = annotate.Annotator | annotate.NullAnnotator


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, which hands the heap's free pages back to the OS (elsewhere: None)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


class PeakMemory:
    """Peak memory over a block: CUDA's allocator peak, or the process's peak RSS (VmHWM, reset per cell)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind: PeakMemKind = "cuda_allocated" if device.type == "cuda" else "cpu_rss"

    def between_cells(self) -> None:
        """Let go of what the previous cell left: its engine's caches and anything else it left in reference cycles
        (collected now, not whenever the collector next runs), then the memory the allocator still caches (CUDA:
        empty_cache; a CPU: glibc's free pages, through malloc_trim), then the peak is reset. A cell's peak then
        counts what is alive at its start (the model) and what it allocates, never its predecessor's garbage."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
        elif _TRIM is not None:
            _TRIM(0)
        self.reset()

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()

    def peak(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return peak_rss_bytes()


@dataclass(frozen=True)
class CellTelemetry:
    """A cell's telemetry figures, each set on the Cell by its own name (`on`)."""

    summary: TelemetrySummary  # over the recorded runs' decode phases
    decode_windows_ns: list[list[int]]  # each recorded run's decode phase
    other_cpu_cores: float | None  # probe.analysis.records.telemetry.contention
    contended: bool | None

    def on(self, cell: Cell) -> Cell:
        return dataclasses.replace(
            cell,
            telemetry=self.summary,
            decode_windows_ns=self.decode_windows_ns,
            other_cpu_cores=self.other_cpu_cores,
            contended=self.contended,
        )


class CellSampler:
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

    def summarize(self, sampler, gens: list[Generation]) -> CellTelemetry | None:
        """The cell's telemetry over its recorded runs' decode phases; None when telemetry is off."""
        if sampler is None:
            return None
        windows = decode_windows(gens)
        tokens = sum(g.tokens.shape[0] * (g.tokens.shape[1] - 1) for g in gens)  # decode tokens only
        summary = cell_telemetry(sampler.samples, windows, tokens)
        busy = contention(summary, windows, os.cpu_count() or 1)
        return CellTelemetry(summary, [list(w) for w in windows], busy.other_cpu_cores, busy.contended)


@dataclass(frozen=True)
class Reference:
    """Naive's free-running tokens for B sequences, each from its own batch-1 run, and whether each step's logits
    were finite: (B, N) tensors on the CPU."""

    tokens: torch.Tensor
    finite: torch.Tensor


RefRows = dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]  # (length, row) -> naive's (tokens, finite), (N,)


class References:
    """Each sequence's naive reference, computed once (an untimed checked run) and only when needed. Rows computed
    elsewhere (another worker's naive cell) can be handed in with `add`; `known` is every row held."""

    def __init__(self, model, cfg: BenchConfig, device: torch.device):
        self.model, self.cfg, self.device = model, cfg, device
        self.known: RefRows = {}

    def add(self, rows: RefRows) -> None:
        for key, row in rows.items():
            self.known.setdefault(key, row)

    def store(self, length: int, checked: Checked) -> Reference:
        """A batch-1 naive cell's own parity pass, kept as row 0's reference."""
        self.known.setdefault((length, 0), (checked.argmax[0], checked.finite[0]))
        return self.rows(length, 1)

    def rows(self, length: int, batch: int, progress: ProgressFn = lambda d, n: None) -> Reference:
        for row in range(batch):
            if (length, row) not in self.known:
                progress(f"naive p{length} row {row} reference", 0)
                prompt = prompt_ids(length, row + 1, self.model.config.vocab_size, self.cfg.seed)[row:].to(self.device)
                checked = checked_run(engine_class("naive")(self.model), prompt, self.cfg.new_tokens)
                self.known[(length, row)] = (checked.argmax[0], checked.finite[0])
        rows = [self.known[(length, row)] for row in range(batch)]
        return Reference(torch.stack([t for t, _ in rows]), torch.stack([f for _, f in rows]))


def run_cell(
    engine: Engine,
    prompt: torch.Tensor,
    cfg: BenchConfig,
    *,
    mem: PeakMemory,
    annotator: Annotator,
    references: References,
    telemetry: CellSampler,
    progress: ProgressFn = lambda d, n: None,
) -> tuple[Cell, list[dict]]:
    """One cell: its parity pass, warmups and recorded runs. Returns the cell and its raw telemetry rows."""
    label = CellKey(engine.name, prompt.shape[1], cfg.new_tokens, prompt.shape[0]).label
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
    if mode == "exact":  # exact parity is judged on what the timed runs produced
        checked = dataclasses.replace(checked, argmax=gens[0].tokens)
    assert reference is not None  # naive's own (stored above) or computed for this cell
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
    cell = measured_cell(engine, prompt, gens, peak, mem.kind, sync_cost, parity)
    if (figures := telemetry.summarize(sampler, gens)) is not None:
        cell = figures.on(cell)
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
    peak_mem_bytes: int,
    peak_mem_kind: PeakMemKind,
    sync_overhead_ms: float | None = None,
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
        sync_overhead_ms=sync_overhead_ms,
        parity=parity,
    )
    cell = dataclasses.replace(cell, recomputes=engine.recomputes)
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


def one_line(e: BaseException) -> str:
    """An exception as a cell records it: its type and the first line of its message, as text any file can hold
    (a lone surrogate from a non-UTF-8 path is written as its escape)."""
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    return line.encode("utf-8", "backslashreplace").decode("utf-8")
