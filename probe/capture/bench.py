"""The benchmark runner: W warmup and R recorded runs per (engine, prompt) cell, with token parity.

Conventions are the write-ups': TTFT is the median over runs; ITL p50/p90 are taken over every decode step
of every run; decode tokens/s excludes prefill; total is the mean wall time of a run. Results are saved
after every cell, so an interrupted sweep keeps what finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engines import engine_class
from engines.base import Engine
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.results import BenchResults, Cell, Clock
from probe.analysis.telemetry import cell_telemetry, decode_windows, write_samples
from probe.capture import annotate as A
from probe.capture.config import BenchConfig, validate
from probe.capture.count import count_forward_ops
from probe.capture.env import environment
from probe.capture.loop import Generation, generate
from probe.capture.telemetry.backends import peak_rss_bytes, reset_peak_rss
from probe.capture.telemetry.samplers import make_sampler
from probe.errors import ProbeError

TELEMETRY_FILE = "telemetry.parquet"  # raw samples: t_ns (perf_counter_ns), one column a figure, and the cell


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
    """The sweep's device and process telemetry: one sampler per cell, raw rows kept for the run folder."""

    def __init__(self, cfg: BenchConfig, device: torch.device):
        self.interval_ms, self.device = cfg.telemetry_ms, device
        self.rows: list[dict] = []
        self.said: set[str] = set()

    def note_once(self, note: str) -> None:  # "NVML missing" is said once per sweep, not once per cell
        if note not in self.said:
            self.said.add(note)
            print(note, file=sys.stderr)

    def sampler(self):
        if not self.interval_ms:
            return contextlib.nullcontext(None)
        return make_sampler(self.interval_ms, self.device, torch.get_num_threads(), self.note_once)

    def summarize(self, sampler, gens: list[Generation], cell_index: int) -> dict:
        """The cell's typed telemetry fields (Cell.telemetry, Cell.decode_windows_ns); {} when off."""
        if sampler is None:
            return {}
        windows = decode_windows(gens)
        tokens = sum(g.tokens.shape[0] * (g.tokens.shape[1] - 1) for g in gens)  # decode tokens only
        self.rows.extend({**r, "cell": cell_index} for r in sampler.samples)
        return {
            "telemetry": cell_telemetry(sampler.samples, windows, tokens),
            "decode_windows_ns": [list(w) for w in windows],
        }

    def save(self, out: Path) -> None:
        if self.rows:
            write_samples(self.rows, out / TELEMETRY_FILE)


def run_cell(
    engine: Engine,
    prompt: torch.Tensor,
    cfg: BenchConfig,
    mem: PeakMemory,
    annotator,
    reference: list[list[int]] | None,
    progress: ProgressFn,
    telemetry: Telemetry,
    cell_index: int,
) -> Cell:
    label = f"{engine.name} p{prompt.shape[1]}"
    with telemetry.sampler() as sampler:  # its rows span the warmups too; summaries keep the decode phases
        for _ in range(cfg.warmup):
            generate(engine, prompt, cfg.new_tokens, annotator)
            progress(f"{label} warmup", 1)
        mem.reset()
        gens: list[Generation] = []
        for _ in range(cfg.runs):
            gens.append(generate(engine, prompt, cfg.new_tokens, annotator))
            progress(f"{label} run", 1)
    peak = mem.peak()
    extra = telemetry.summarize(sampler, gens, cell_index)
    sync_cost = None
    if prompt.device.type == "cuda":
        # Part 1's measurement: a run that syncs only at the end, against the per-step-synced runs.
        free = generate(engine, prompt, cfg.new_tokens, annotator, sync_each_step=False)
        synced = sum(g.total_ns for g in gens) / len(gens)
        sync_cost = (synced - free.total_ns) / (cfg.new_tokens - 1) / 1e6
        progress(f"{label} sync cost", 1)
    return measured_cell(engine, prompt, gens, reference, peak, mem.kind, sync_cost, extra)


def measured_cell(
    engine: Engine,
    prompt: torch.Tensor,
    gens: list[Generation],
    reference: list[list[int]] | None,
    peak_mem_bytes: int,
    peak_mem_kind: str,
    sync_overhead_ms: float | None = None,
    extra: dict | None = None,
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
    return cfg.warmup + cfg.runs + (1 if device.type == "cuda" else 0)


def cell_count(cfg: BenchConfig) -> int:
    return len(cfg.prompts) * len(cfg.batch) * len(cfg.engines)


class References:
    """Each sequence's tokens from its own batch-1 naive run, computed once and only when needed."""

    def __init__(self, model, cfg: BenchConfig, device: torch.device, progress: ProgressFn):
        self.model, self.cfg, self.device, self.progress = model, cfg, device, progress
        self.tokens: dict[tuple[int, int], list[int]] = {}

    def store(self, length: int, rows: list[list[int]]) -> None:
        for row, tokens in enumerate(rows):
            self.tokens.setdefault((length, row), tokens)

    def rows(self, length: int, batch: int) -> list[list[int]]:
        for row in range(batch):
            if (length, row) not in self.tokens:
                self.progress(f"naive p{length} row {row} reference", 0)
                prompt = prompt_ids(length, row + 1, self.model.config.vocab_size, self.cfg.seed)[row:].to(self.device)
                naive = engine_class("naive")(self.model)
                self.tokens[(length, row)] = generate(naive, prompt, self.cfg.new_tokens).tokens[0].tolist()
        return [self.tokens[(length, row)] for row in range(batch)]


def bench(
    cfg: BenchConfig,
    out: Path | None = None,
    progress: ProgressFn = lambda d, n: None,
    on_cell: Callable[[BenchResults], None] = lambda r: None,
) -> BenchResults:
    """Run the sweep. With `out`, results are saved after every cell."""
    classes, device = validate(cfg), resolve_device(cfg.device)
    if out is not None:
        check_writable(out)
    annotator = A.Annotator() if cfg.annotate else A.NULL
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Both clocks at one instant: telemetry rows and steps use perf_counter_ns, traces use the epoch.
    clock = Clock(time.perf_counter_ns(), time.time_ns())
    results = BenchResults([], environment(device, cfg.dtype), _config_dict(cfg), clock=clock)
    telemetry = Telemetry(cfg, device)
    model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed)
    mem = PeakMemory(device)
    references = References(model, cfg, device, progress)
    # naive first: at batch 1 its own tokens are every other engine's reference
    order = sorted(classes, key=lambda n: classes[n].name != "naive")
    for length in sorted(cfg.prompts):
        for batch in sorted(cfg.batch):
            prompt = prompt_ids(length, batch, model.config.vocab_size, cfg.seed).to(device)
            for name in order:
                engine = classes[name](model)
                own_reference = engine.name == "naive" and batch == 1
                reference = None if own_reference else references.rows(length, batch)
                cell = run_cell(engine, prompt, cfg, mem, annotator, reference, progress, telemetry, len(results.cells))
                if own_reference:
                    references.store(length, cell.tokens)
                    cell = dataclasses.replace(cell, tokens_match_naive=True)
                results.cells.append(cell)
                if out is not None:
                    results.save(out)
                    telemetry.save(out)
                on_cell(results)
    results.complete = True
    if out is not None:
        results.save(out)
    return results


def _config_dict(cfg: BenchConfig) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def mismatches(results: BenchResults) -> list[Cell]:
    return [c for c in results.cells if c.tokens_match_naive is False]
