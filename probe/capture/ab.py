"""Interleaved A/B: two engines measured in one process, step by step in turn, then compared.

On a shared machine the speed of a whole process drifts: here the same cached decode step measured 2.5 to
3.7 ms from one process to the next, so two separate sessions (a stored baseline against a run made later)
disagree by more than any threshold a useful timing gate can use, and the U test, which sees only the noise
inside each session, calls that drift a regression (benchmarks/compare_noise.py: most self-comparisons
alerted). Alternating whole runs still left drift within a run. So the two engines decode in lockstep
(probe.capture.loop.lockstep): one step of each in turn, the order reversed every step, so both see the same
machine at the scale of one step, and what is left is the difference between them. The counts are measured
as the bench does (probe.capture.count), so the launch gate is the same, and so is the contention rule: each side's
cells carry the telemetry of their decode phases, and a contended one is not judged.

`interleaved_steps`, which measures `probe run`'s what-if checks, alternates whole generations instead: a what-if
predicts a step among its own, and a step run right after another engine's runs on what that one left in the caches.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

from engines import engine_class
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.diagnosis.predictions import Measured, Side
from probe.analysis.records.results import BenchResults, Cell
from probe.analysis.regression.samples import SampleSet, from_results
from probe.capture.cell import CellSampler, measured_cell
from probe.capture.config import validate
from probe.capture.env import environment
from probe.capture.loop import Generation, generate, lockstep
from probe.capture.sweep import settle_here
from probe.settings import BenchConfig


def interleaved(cfg: BenchConfig, base: str, current: str, flip: bool = False) -> tuple[SampleSet, SampleSet]:
    """Runs of `base` and `current` alternate at every prompt length (`current` first when `flip`)."""
    cfg = settle_here(cfg)
    validate(dataclasses.replace(cfg, engines=(base, current)))
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed)
    order = ("current", "base") if flip else ("base", "current")
    telemetry = CellSampler(cfg, device)
    cells: dict[str, list[Cell]] = {"base": [], "current": []}
    for length in sorted(cfg.prompts):
        for batch in sorted(cfg.batch):
            prompt = prompt_ids(length, batch, model.config.vocab_size, cfg.seed).to(device)
            engines = {"base": engine_class(base)(model), "current": engine_class(current)(model)}
            gens: dict[str, list[Generation]] = {"base": [], "current": []}
            with telemetry.sampler() as sampler:  # the contention rule needs the CPU figures of the decode phases
                for i in range(cfg.warmup + cfg.runs):
                    sides = order if i % 2 == 0 else order[::-1]
                    runs = lockstep([engines[s] for s in sides], prompt, cfg.new_tokens)
                    for side, gen in zip(sides, runs, strict=True):
                        if i >= cfg.warmup:
                            gens[side].append(gen)
            for side in cells:
                cell = measured_cell(engines[side], prompt, gens[side], 0, "not measured")
                figures = telemetry.summarize(sampler, gens[side])
                cells[side].append(figures.on(cell) if figures is not None else cell)
    env = environment(device, cfg.dtype)
    base_set, current_set = (
        from_results(BenchResults(cells[side], env, cfg, complete=True), name, with_engine=False)
        for side, name in (("base", base), ("current", current))
    )
    return base_set, current_set


def interleaved_steps(cfg: BenchConfig, model, sides: list[Side], prompt_len: int) -> dict[Side, Measured]:
    """Each side's median decode step, all measured in one process: `cfg.warmup + cfg.runs` rounds, each side's
    whole generation in turn (at its own batch and threads), the order reversed every round; and whether other
    processes took the CPU during its decode phases (the contention rule of every cell). Whole generations, not
    one step of each in turn: a what-if is priced on a step that ran among its own (the profiled baseline, the
    bench), and a step run right after another engine's runs on what that one left in the caches. On the tiny
    preset (a 2-core CPU) stepping cached and static in turn measured them at 1.17x and 1.33x their own ITL."""
    device = next(model.parameters()).device
    telemetry = CellSampler(cfg, device)
    engines = [engine_class(s.engine)(model) for s in sides]
    prompts = [prompt_ids(prompt_len, s.batch, model.config.vocab_size, cfg.seed).to(device) for s in sides]
    threads, before = cfg.threads or torch.get_num_threads(), torch.get_num_threads()
    gens: list[list[Generation]] = [[] for _ in sides]
    try:
        with telemetry.sampler() as sampler:
            for i in range(cfg.warmup + cfg.runs):
                for j in list(range(len(sides)))[:: 1 if i % 2 == 0 else -1]:
                    torch.set_num_threads(sides[j].threads or threads)
                    gen = generate(engines[j], prompts[j], cfg.new_tokens)
                    if i >= cfg.warmup:
                        gens[j].append(gen)
    finally:
        torch.set_num_threads(before)
    out = {}
    for side, recorded in zip(sides, gens, strict=True):
        figures = telemetry.summarize(sampler, recorded)
        step_ms = statistics.median(ns for g in recorded for ns in g.step_ns) / 1e6
        out[side] = Measured(
            step_ms, figures.contended if figures else None, figures.other_cpu_cores if figures else None
        )
    return out
