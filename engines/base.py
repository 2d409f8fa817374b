"""The engine interface: a prefill and a decode step, nothing else.

Engines hold no timing or profiling code. The decode loop in `probe.capture.loop` is written once and wraps each
call; it also does the sampling, so an engine only maps token ids to next-token logits.

An engine that cannot serve a family says so before it runs: `refusal(config)` is one line naming what it lacks
(the sweep asks at plan time and records the refusal instead of a cell), None when it can.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import ClassVar

import torch
import transformers
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, get_layer_types_and_kwargs

# Layer types with a per-token K/V cache, and those with a constant state (transformers' cache names).
ATTENTION_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
STATE_TYPES = frozenset({"linear_attention", "conv", "hybrid", "hybrid_sliding"})
# Families whose attention finds a query's position from the key length (a causal table sliced at key_length -
# query_length): right only when the keys a layer is handed end at the query.
# The installed transformers, (major, minor): the engines are tested on 5.17 (the GPU machine's) and 5.24.
TRANSFORMERS = tuple(int(part) for part in transformers.__version__.split(".")[:2])
QUERY_AT_KEY_LENGTH = {
    "gpt_neo": "gpt_neo's local layers slice their own causal table at the key length (modeling_gpt_neo)",
}


def cache_kwarg(model) -> str:
    """The forward's name for the cache argument: `cache` from transformers 5.24; before, `cache_params` for the
    state-space families (Mamba in 5.17) and `past_key_values` for the rest."""
    names = inspect.signature(model.forward).parameters
    return next((n for n in ("cache", "cache_params") if n in names), "past_key_values")


def text_config(config):
    return config.get_text_config(decoder=True)


def model_type(config) -> str:
    return text_config(config).model_type


def layer_types(config) -> list[str]:
    """Each layer's cache type as transformers names it: full_attention, sliding_attention, linear_attention, ..."""
    return get_layer_types_and_kwargs(text_config(config))[0]


class Engine(ABC):
    name: ClassVar[str]
    # True when the decode step runs inside a compiled or captured region, where host-side ranges
    # around cache calls would break the graph and measure nothing.
    captures_decode: ClassVar[bool] = False
    # True when every step runs the whole sequence so far (no cache): its cost grows with the prompt.
    recomputes: ClassVar[bool] = False

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.cache: Cache | None = None  # the transformers Cache the model writes into, when the engine has one

    @classmethod
    def refusal(cls, config) -> str | None:
        """Why this engine cannot serve a model of this transformers config, in one line; None when it can."""
        return None

    @abstractmethod
    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        """Run the prompt (B, P); return the last position's logits (B, V). `max_len` = P + new tokens."""

    @abstractmethod
    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        """Feed one new token per sequence (B, 1); return next-token logits (B, V)."""
