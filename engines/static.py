"""Static shapes, so a decode step can be captured once and replayed (what Part 1 predicted comes next).

The cache is transformers' StaticCache: fixed (B, H_kv, max_len, D) buffers written in place at a
position held as a device tensor, with a mask over the whole buffer instead of a growing view. Nothing in
the step reads a value back to the host, so nothing syncs inside the loop, and every decode step has the
same shapes. On CUDA the step is compiled with mode="reduce-overhead", which captures it as a CUDA graph
(one graph launch per step); on a CPU it is compiled with inductor. `static-eager` is the same engine
uncompiled, so what compilation buys can be measured side by side.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import StaticCache

from engines.base import Engine, cache_kwarg

# One compiled graph per (batch, max_len) a process meets; the default limit (8) would silently send a longer
# sweep back to eager, so the limit is raised and hitting it is an error.
RECOMPILE_LIMIT = 64
# Calls of the compiled step at a new shape before any real one: compile; on CUDA, cudagraph trees then run
# once more to warm up, record on the next call and replay from the one after.
WARM_CALLS = 3


class StaticEagerEngine(Engine):
    name = "static-eager"

    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self._kw = cache_kwarg(model)
        self._shape: tuple[int, int] | None = None
        self._step = self._forward

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        shape = (input_ids.shape[0], max_len)
        if shape != self._shape:  # new buffers only when the shape changes: a captured graph keeps its addresses
            self.cache = StaticCache(config=self.model.config, max_cache_len=max_len)
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

    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self._cuda = next(model.parameters()).device.type == "cuda"
        _allow_recompiles(RECOMPILE_LIMIT)
        # Every size fixed (dynamic=False): otherwise, since torch 2.10, the second shape in a process makes the
        # cache length symbolic and every later prompt runs a dynamic graph unlike the first. fullgraph=True: a
        # graph break would split the step into pieces with host code between them. reduce-overhead = CUDA graphs.
        mode = "reduce-overhead" if self._cuda else "default"
        self._compiled = torch.compile(self._forward, mode=mode, dynamic=False, fullgraph=True)
        self._step = self._compiled_step

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
