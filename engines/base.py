"""The engine interface: a prefill and a decode step, nothing else.

Engines hold no timing or profiling code. The decode loop in `probe.loop` is written once and wraps each
call; it also does the sampling, so an engine only maps token ids to next-token logits.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import ClassVar

import torch


def cache_kwarg(model) -> str:
    """The forward's name for the cache argument: `cache` from transformers 5.24, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class Engine(ABC):
    name: ClassVar[str]
    # True when the decode step runs inside a compiled or captured region, where host-side ranges
    # around cache calls would break the graph and measure nothing.
    captures_decode: ClassVar[bool] = False
    # True when every step runs the whole sequence so far (no cache): its cost grows with the prompt.
    recomputes: ClassVar[bool] = False

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.cache = None  # the transformers Cache the model writes into, when the engine has one

    @abstractmethod
    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        """Run the prompt (B, P); return the last position's logits (B, V). `max_len` = P + new tokens."""

    @abstractmethod
    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        """Feed one new token per sequence (B, 1); return next-token logits (B, V)."""
