"""The benchmark runner: W warmup and R recorded runs per (engine, prompt) cell, with token parity.

Conventions are the write-ups': TTFT is the median over runs; ITL p50/p90 are taken over every decode step
of every run; decode tokens/s excludes prefill; total is the mean wall time of a run. The serving figures beside
them follow vLLM's definitions (probe.analysis.results). Results are saved after every cell, so an interrupted
sweep keeps what finished.

The first warmup run of every cell is its parity pass (probe.capture.parity): untimed, it reads every step's
logits. It runs even with --warmup 0, so a compiled engine never compiles inside a timed run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engines import engine_class
from engines.base import Engine
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.results import BenchResults, Cell, Clock, Parity
from probe.analysis.telemetry import cell_telemetry, decode_windows, write_samples
from probe.capture import annotate as A
from probe.capture.config import BenchConfig, settle, validate
from probe.capture.count import count_forward_ops
from probe.capture.env import environment
from probe.capture.loop import Generation, generate
from probe.capture.parity import Checked, checked_run, judge, parity_mode
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
    cell_index: int,
) -> Cell:
    label = f"{engine.name} p{prompt.shape[1]}"
    mode = parity_mode(cfg.dtype)
    own = engine.name == "naive" and prompt.shape[0] == 1  # naive at batch 1 is its own reference
    with telemetry.sampler() as sampler:  # its rows span the warmups too; summaries keep the decode phases
        reference = None if own else references.rows(prompt.shape[1], prompt.shape[0])
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
    extra = telemetry.summarize(sampler, gens, cell_index)
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
    return measured_cell(engine, prompt, gens, None, peak, mem.kind, sync_cost, extra, parity)


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


class References:
    """Each sequence's naive reference, computed once (an untimed checked run) and only when needed."""

    def __init__(self, model, cfg: BenchConfig, device: torch.device, progress: ProgressFn):
        self.model, self.cfg, self.device, self.progress = model, cfg, device, progress
        self.rows_: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def store(self, length: int, checked: Checked) -> Reference:
        """A batch-1 naive cell's own parity pass, kept as row 0's reference."""
        self.rows_.setdefault((length, 0), (checked.argmax[0], checked.finite[0]))
        return self.rows(length, 1)

    def rows(self, length: int, batch: int) -> Reference:
        for row in range(batch):
            if (length, row) not in self.rows_:
                self.progress(f"naive p{length} row {row} reference", 0)
                prompt = prompt_ids(length, row + 1, self.model.config.vocab_size, self.cfg.seed)[row:].to(self.device)
                checked = checked_run(engine_class("naive")(self.model), prompt, self.cfg.new_tokens)
                self.rows_[(length, row)] = (checked.argmax[0], checked.finite[0])
        rows = [self.rows_[(length, row)] for row in range(batch)]
        return Reference(torch.stack([t for t, _ in rows]), torch.stack([f for _, f in rows]))


def bench(
    cfg: BenchConfig,
    out: Path | None = None,
    progress: ProgressFn = lambda d, n: None,
    on_cell: Callable[[BenchResults], None] = lambda r: None,
    model=None,
) -> BenchResults:
    """Run the sweep. With `out`, results are saved after every cell. `model`, when given, is used instead of
    building cfg's model again (it must be that model, in that dtype, on that device)."""
    cfg = settled(cfg)
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
    if model is None:
        model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed)
    mem = PeakMemory(device)
    references = References(model, cfg, device, progress)
    # naive first: at batch 1 its own tokens are every other engine's reference
    order = sorted(classes, key=lambda n: classes[n].name != "naive")
    for length in sorted(cfg.prompts):
        for batch in sorted(cfg.batch):
            prompt = prompt_ids(length, batch, model.config.vocab_size, cfg.seed).to(device)
            for name in order:
                if not cfg.times(classes[name].name, length):
                    continue
                engine = classes[name](model)
                index = len(results.cells)
                results.cells.append(
                    run_cell(engine, prompt, cfg, mem, annotator, references, progress, telemetry, index)
                )
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
    """Cells whose parity verdict failed: tokens not naive's (exact) or beyond a near-tie (teacher-forced), or
    non-finite logits."""
    return [c for c in results.cells if c.tokens_match_naive is False]
