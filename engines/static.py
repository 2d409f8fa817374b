"""Static shapes, so a decode step can be captured once and replayed (what Part 1 predicted comes next).

The cache is transformers' StaticCache: fixed (B, H_kv, max_len, D) buffers written in place at a
position held as a device tensor, with a mask over the whole buffer instead of a growing view. Nothing in
the step reads a value back to the host, so nothing syncs inside the loop, and every decode step has the
same shapes. On CUDA the step is compiled with mode="reduce-overhead", which captures it as a CUDA graph
(one graph launch per step); on a CPU it is compiled with inductor, where that works. `static-eager` is
the same engine uncompiled, so what compilation buys can be measured side by side.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import StaticCache

from engines.base import Engine, cache_kwarg


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
        cuda = next(model.parameters()).device.type == "cuda"
        # reduce-overhead = CUDA graphs: the whole step becomes one graph launch.
        self._compiled = torch.compile(self._forward, mode="reduce-overhead" if cuda else "default")
        self._cuda = cuda
        self._step = self._compiled_step

    def _compiled_step(self, next_ids: torch.Tensor) -> torch.Tensor:
        if self._cuda:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs may be overwritten now
        return self._compiled(next_ids)
