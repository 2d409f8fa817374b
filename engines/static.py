"""Static shapes, so a decode step can be captured once and replayed (what Part 1 predicted comes next).

The cache is transformers' StaticCache: fixed (B, H_kv, max_len, D) buffers written in place at a
position held as a device tensor, with a mask over the whole buffer instead of a growing view. Nothing in
the step reads a value back to the host, so nothing syncs inside the loop, and every decode step has the
same shapes. On CUDA the step is compiled with mode="reduce-overhead", which captures it as a CUDA graph
(one graph launch per step); on a CPU it is compiled with inductor. `static-eager` is the same engine
uncompiled, so what compilation buys can be measured side by side.

Each sequence's buffer holds its prompt and new tokens (`max_len`), as the cached engine's does, so a decode step
attends over what the cell asked for and no more: a run-wide buffer sized for the longest prompt made a 16-token
prompt attend over 1,056 slots, and static's step then measured the buffer, not the host overhead it removes (issue
32). The step compiles once per (batch, length) a process meets; a sweep of P prompt lengths compiles P times.

Sliding-window layers keep every position and mask: transformers' StaticSlidingWindowLayer tracks its fill as a
Python int (`cumulative_length_int`), which torch.compile guards on, so it recompiled at every decode step (one
compile a position). Here a sliding layer is a plain StaticLayer the length of the buffer, and the model's own
sliding-window mask hides what lies outside the window, so the step's shapes and guards never change.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import (
    LinearAttentionAndStaticFullAttentionLayer,
    StaticCache,
    StaticLayer,
    get_layer_types_and_kwargs,
)

from engines.base import QUERY_AT_KEY_LENGTH, TRANSFORMERS, Engine, cache_kwarg, model_type

# One compiled graph per (batch, max_len) a process meets; the default limit (8) would silently send a longer
# sweep back to eager, so the limit is raised and hitting it is an error.
RECOMPILE_LIMIT = 64
# Calls of the compiled step at a new shape before any real one: compile; on CUDA, cudagraph trees then run
# once more to warm up, record on the next call and replay from the one after.
WARM_CALLS = 3
# Layer types whose static layer tracks its length on the host; each gets a full-length layer of the same kind.
FULL_LENGTH = {"sliding_attention": StaticLayer, "chunked_attention": StaticLayer}
FULL_LENGTH_HYBRID = {"hybrid_sliding": LinearAttentionAndStaticFullAttentionLayer}


def static_cache(config, max_len: int) -> StaticCache:
    """transformers' StaticCache of `max_len` positions, with every sliding layer as a full-length StaticLayer."""
    cache = StaticCache(config=config, max_cache_len=max_len)
    types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    for i, kind in enumerate(types):
        if kind in FULL_LENGTH:
            cache.layers[i] = FULL_LENGTH[kind](max_cache_len=max_len)
        elif kind in FULL_LENGTH_HYBRID:
            cache.layers[i] = FULL_LENGTH_HYBRID[kind](max_cache_len=max_len)
    return cache


class StaticEagerEngine(Engine):
    name = "static-eager"

    def __init__(self, model: PreTrainedModel):
        super().__init__(model)
        self._kw = cache_kwarg(model)
        self._shape: tuple[int, int] | None = None
        self._step: Callable[[torch.Tensor], torch.Tensor] = self._forward

    @classmethod
    def refusal(cls, config) -> str | None:
        if reason := QUERY_AT_KEY_LENGTH.get(model_type(config)):
            return f"{reason}, which a fixed-size buffer puts at the buffer's end, not at the query"
        if model_type(config) == "bloom" and TRANSFORMERS < (5, 24):
            return (
                "transformers before 5.24 (5.17 measured) builds BLOOM's ALiBi bias from the attention mask's "
                "length, not the static cache's, so bias and scores disagree in shape"
            )
        return None

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        shape = (input_ids.shape[0], max_len)
        # new buffers only when the shape changes (no cache yet: no shape yet): a captured graph keeps its addresses
        if self.cache is None or shape != self._shape:
            self.cache = static_cache(self.model.config, shape[1])
            self._shape = shape
        else:
            self.cache.reset()  # zero in place; the position tensors go back to 0
        return self._forward(input_ids)  # prefill stays eager: its shape changes with the prompt

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        return self._step(next_ids)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._kw: self.cache})
        return out.logits[:, -1, :]  # (B, V)


class StaticEngine(StaticEagerEngine):
    name = "static"
    captures_decode = True

    def __init__(self, model: PreTrainedModel):
        super().__init__(model)
        self._cuda = next(model.parameters()).device.type == "cuda"
        _allow_recompiles(RECOMPILE_LIMIT)
        # Every size fixed (dynamic=False): otherwise, since torch 2.10, the second shape in a process makes the
        # cache length symbolic and every later prompt runs a dynamic graph unlike the first. fullgraph=True: a
        # graph break would split the step into pieces with host code between them. reduce-overhead = CUDA graphs.
        mode = "reduce-overhead" if self._cuda else "default"
        self._compiled = torch.compile(self._forward, mode=mode, dynamic=False, fullgraph=True)
        self._step = self._compiled_step

    @classmethod
    def refusal(cls, config) -> str | None:
        if model_type(config) == "opt":
            return (
                "opt builds its learned positions from a mask of past_seen_tokens + T positions, and a static "
                "cache's length is a device tensor: a data-dependent shape torch.compile cannot guard on"
            )
        return super().refusal(config)

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        if (input_ids.shape[0], max_len) != self._shape:
            self._warm(input_ids.shape[0], max_len, input_ids.device)
        return super().prefill(input_ids, max_len)  # same shape now: resets the cache the warm-up wrote

    def _warm(self, batch: int, max_len: int, device: torch.device) -> None:
        """Compile (and on CUDA capture and replay) the step at a new shape on a scratch sequence, so no decode
        step a caller times is ever a compilation or a capture."""
        token = torch.zeros(batch, 1, dtype=torch.long, device=device)  # (B, 1)
        super().prefill(token, max_len)  # new buffers; position 0 written
        for _ in range(min(WARM_CALLS, max_len - 1)):
            self._compiled_step(token)

    def _compiled_step(self, next_ids: torch.Tensor) -> torch.Tensor:
        if self._cuda:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs may be overwritten now
        return self._compiled(next_ids)


def _allow_recompiles(limit: int) -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # renamed in torch 2.7
    setattr(config, name, max(getattr(config, name), limit))
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True
