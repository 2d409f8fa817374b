"""A preallocated contiguous KV cache plugged into transformers' Cache API (Part 2).

One key and one value buffer per layer, allocated once at the full size of the run (prompt + new tokens).
Each `update` writes the new positions in place and hands attention a view of the filled slots only, so
attention never reads a slot that has not been written. The model itself does the bookkeeping the write-up
describes: it reads the sequence length back for positions and asks the cache for the mask sizes.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from engines.base import Engine, cache_kwarg


class ContiguousLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0  # a Python int: reading it back costs no device sync

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        # The shapes (B, H_kv, T, D) come from the first write; the buffers are sized for the whole run.
        b, h, _, d = key_states.shape
        opts = dict(dtype=key_states.dtype, device=key_states.device)
        self.keys = torch.empty(b, h, self.capacity, d, **opts)  # (B, H_kv, P+N, D)
        self.values = torch.empty(b, h, self.capacity, value_states.shape[-1], **opts)
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"cache full: {end} positions > capacity {self.capacity}")
        self.keys[:, :, start:end].copy_(key_states)
        self.values[:, :, start:end].copy_(value_states)
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]  # filled slots only

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0  # (kv_length, kv_offset)

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def reset(self) -> None:
        self.length = 0


class ContiguousCache(Cache):
    def __init__(self, num_layers: int, capacity: int):
        super().__init__(layers=[ContiguousLayer(capacity) for _ in range(num_layers)])


class CachedEngine(Engine):
    name = "cached"

    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self._kw = cache_kwarg(model)

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        self.cache = ContiguousCache(self.model.config.num_hidden_layers, max_len)
        return self._forward(input_ids)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        return self._forward(next_ids)  # one position per sequence; the rest is read from the cache

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._kw: self.cache})
        return out.logits[:, -1, :]  # (B, V)
