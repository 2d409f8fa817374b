"""Deterministic launch counts: aten ops dispatched per forward, counted with a TorchDispatchMode.

On a CPU every dispatched aten op is the analogue of a kernel launch: the host pays for it whether or not
there is work inside. The count per forward is a property of the model code, not of timing, so it is the
same in every run and every process, which is what makes it a gate for CI. On this machine it equals the
profiler's count of top-level `cpu_op` events inside a `forward` range (a test checks it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engines.base import Engine


class OpCounter(TorchDispatchMode):
    """Counts every aten op that reaches the Python dispatch key, by schema name (`aten::addmm`)."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func._schema.name] += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class ForwardCounts:
    engine: str
    prompt_tokens: int
    prefill_ops: int
    decode_ops: int
    prefill_by_op: dict[str, int] = field(default_factory=dict)
    decode_by_op: dict[str, int] = field(default_factory=dict)


def count_forward_ops(engine: Engine, prompt: torch.Tensor, warm_steps: int = 1) -> ForwardCounts:
    """Ops per forward for the prefill and for one decode step (after `warm_steps` uncounted steps)."""
    length = prompt.shape[1]
    with torch.inference_mode():
        with OpCounter() as prefill:
            logits = engine.prefill(prompt, length + warm_steps + 1)
        token = logits.argmax(-1, keepdim=True)
        for _ in range(warm_steps):  # the first decode step can differ (lazy initialisation in a cache)
            token = engine.decode(token).argmax(-1, keepdim=True)
        with OpCounter() as decode:
            engine.decode(token)
    return ForwardCounts(
        engine.name,
        length,
        sum(prefill.counts.values()),
        sum(decode.counts.values()),
        dict(sorted(prefill.counts.items())),
        dict(sorted(decode.counts.items())),
    )
