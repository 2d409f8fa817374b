"""Interleaved A/B: two engines measured in one process, step by step in turn, then compared.

On a shared machine the speed of a whole process drifts: here the same cached decode step measured 2.5 to
3.7 ms from one process to the next, so two separate sessions (a stored baseline against a run made later)
disagree by more than any threshold a useful timing gate can use, and the U test, which sees only the noise
inside each session, calls that drift a regression (benchmarks/compare_noise.py: most self-comparisons
alerted). Alternating whole runs still left drift within a run. So the two engines decode in lockstep
(probe.capture.loop.lockstep): one step of each in turn, the order reversed every step, so both see the same
machine at the scale of one step, and what is left is the difference between them. The counts are measured
as the bench does (probe.count), so the launch gate is the same.
"""

from __future__ import annotations

import dataclasses

import torch

from engines import engine_class
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.results import BenchResults, Cell
from probe.analysis.samples import SampleSet, from_results
from probe.capture.cell import measured_cell
from probe.capture.config import validate
from probe.capture.env import environment
from probe.capture.loop import Generation, lockstep
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
    cells: dict[str, list[Cell]] = {"base": [], "current": []}
    for length in sorted(cfg.prompts):
        for batch in sorted(cfg.batch):
            prompt = prompt_ids(length, batch, model.config.vocab_size, cfg.seed).to(device)
            engines = {"base": engine_class(base)(model), "current": engine_class(current)(model)}
            gens: dict[str, list[Generation]] = {"base": [], "current": []}
            for i in range(cfg.warmup + cfg.runs):
                sides = order if i % 2 == 0 else order[::-1]
                for side, gen in zip(sides, lockstep([engines[s] for s in sides], prompt, cfg.new_tokens), strict=True):
                    if i >= cfg.warmup:
                        gens[side].append(gen)
            for side in cells:
                cells[side].append(measured_cell(engines[side], prompt, gens[side], 0, "not measured"))
    env = environment(device, cfg.dtype)
    base_set, current_set = (
        from_results(BenchResults(cells[side], env, cfg, complete=True), name, with_engine=False)
        for side, name in (("base", base), ("current", current))
    )
    return base_set, current_set
