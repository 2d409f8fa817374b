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
from probe import vocabulary
from probe.capture import annotate


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
    annotator=annotate.NULL,
    sync_each_step: bool = True,
) -> Generation:
    """Greedy-decode `new_tokens` tokens after `prompt` (B, P). Step i's input is step i-1's argmax."""
    with torch.inference_mode():
        return finish(decode_steps(engine, prompt, new_tokens, annotator, sync_each_step))


def lockstep(engines: list[Engine], prompt: torch.Tensor, new_tokens: int) -> list[Generation]:
    """Generate with several engines at once, one step of each in turn (the order reversed every step, ABBA),
    so every engine's step n runs under the same machine state: drift cancels at the scale of one step.
    Each step is timed on its own, as in `generate`; the runs' `total_ns` span the whole interleaving."""
    with torch.inference_mode():  # held outside, so the runs' own guards nest in any order
        runs = [decode_steps(e, prompt, new_tokens) for e in engines]
        for i in range(new_tokens):  # the prefill, then every decode step
            for run in runs if i % 2 == 0 else runs[::-1]:
                next(run)
        return [finish(run) for run in runs]


def finish(run: decode_steps) -> Generation:
    """Run a `decode_steps` to its end and return its Generation."""
    for _ in run:
        pass
    if run.result is None:  # the loop sets it as it ends, so only a loop that raised has none, and it raised here
        raise RuntimeError("decode_steps ended without a Generation")
    return run.result


class decode_steps:
    """The loop itself, one step per `next()`: the prefill first, then each decode step. `.result` holds the
    Generation once it is exhausted. Wrap it in `torch.inference_mode()`."""

    def __init__(
        self,
        engine: Engine,
        prompt: torch.Tensor,
        new_tokens: int,
        annotator=annotate.NULL,
        sync_each_step: bool = True,
    ):
        self.result: Generation | None = None
        self._gen = self._loop(engine, prompt, new_tokens, annotator, sync_each_step)

    def __iter__(self):
        return self

    def __next__(self) -> None:
        return next(self._gen)

    def _loop(self, engine, prompt, new_tokens, ann, sync_each_step):
        clock = time.perf_counter_ns
        sync = device_sync(prompt.device)
        step_sync = sync if sync_each_step else (lambda: None)

        def step(call, *args):
            with ann(vocabulary.FORWARD):
                logits = call(*args)  # (B, V)
            with ann(vocabulary.SAMPLE):
                token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
            with ann(vocabulary.SYNC):
                step_sync()
            return token

        tokens, steps = [], []
        with annotate.instrument(engine.model, ann, engine.captures_decode), ann(vocabulary.RUN):
            start = clock()
            with ann(vocabulary.PREFILL):
                token = step(engine.prefill, prompt, prompt.shape[1] + new_tokens)
            ttft = clock() - start
            tokens.append(token)
            yield
            for i in range(new_tokens - 1):
                t0 = clock()
                with ann(vocabulary.DECODE, i):
                    token = step(engine.decode, token)
                steps.append(clock() - t0)
                tokens.append(token)
                yield
            sync()
            total = clock() - start
        self.result = Generation(torch.cat(tokens, dim=1).cpu(), start, ttft, tuple(steps), total)
