"""The decode loop, written once. It wraps every engine call in the annotation vocabulary and times it.

Timing follows the write-ups: on CUDA the loop synchronizes once per step (inside the `sync` range), so a
step's host time and its device time both land inside the step. On CPU the sync is a no-op but the range is
still emitted, so every trace has the same shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engines.base import Engine
from probe import annotate as A


@dataclass(frozen=True)
class Generation:
    """One run: the tokens and the times, in integer nanoseconds of `time.perf_counter_ns`."""

    tokens: torch.Tensor  # (B, N) on the CPU
    start_ns: int  # perf_counter_ns when the run began
    ttft_ns: int  # prefill + first sample (+ sync)
    step_ns: tuple[int, ...]  # the N-1 decode steps
    total_ns: int

    @property
    def decode_ns(self) -> int:
        return sum(self.step_ns)


def device_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def generate(
    engine: Engine,
    prompt: torch.Tensor,
    new_tokens: int,
    annotator=A.NULL,
    sync_each_step: bool = True,
) -> Generation:
    """Greedy-decode `new_tokens` tokens after `prompt` (B, P). Step i's input is step i-1's argmax."""
    ann, clock = annotator, time.perf_counter_ns
    sync = device_sync(prompt.device)
    step_sync = sync if sync_each_step else (lambda: None)

    def step(call, *args):
        with ann(A.FORWARD):
            logits = call(*args)  # (B, V)
        with ann(A.SAMPLE):
            token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        with ann(A.SYNC):
            step_sync()
        return token

    tokens, steps = [], []
    with torch.inference_mode(), A.instrument(engine.model, ann, engine.captures_decode), ann(A.RUN):
        start = clock()
        with ann(A.PREFILL):
            token = step(engine.prefill, prompt, prompt.shape[1] + new_tokens)
        ttft = clock() - start
        tokens.append(token)
        for i in range(new_tokens - 1):
            t0 = clock()
            with ann(A.DECODE, i):
                token = step(engine.decode, token)
            steps.append(clock() - t0)
            tokens.append(token)
        sync()
        total = clock() - start
    return Generation(torch.cat(tokens, dim=1).cpu(), start, ttft, tuple(steps), total)
