"""A preallocated contiguous KV cache plugged into transformers' Cache API (Part 2).

One key and one value buffer per attention layer, allocated once at the full size of the run (prompt + new
tokens). Each `update` writes the new positions in place and hands attention a view of the filled slots only, so
attention never reads a slot that has not been written. The model itself does the bookkeeping the write-up
describes: it reads the sequence length back for positions and asks the cache for the mask sizes.

A sliding-window layer gets the same buffer: it keeps every position and the model's sliding-window mask hides
those outside the window (no ring), so attention still reads the whole filled view. The layers that keep no
per-token K/V are delegated to transformers' own classes: a linear-attention or SSM layer (mamba, Qwen3-Next's
delta-net) keeps its conv and recurrent state in a `LinearAttentionLayer`, and a hybrid layer (Falcon-H1:
attention beside a Mamba-2 mixer) keeps its state the same way beside a contiguous K/V buffer.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin, LinearAttentionLayer

try:  # transformers 5.2x: a layer that keeps nothing. 5.17 (the GPU machine's) has none, and never asks for one
    from transformers.cache_utils import DummyLayer
except ImportError:
    DummyLayer = None  # type: ignore[assignment,misc]  # absent in transformers 5.17

from engines.base import ATTENTION_TYPES, Engine, cache_kwarg, layer_types


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
        dtype, device = key_states.dtype, key_states.device
        self.keys = torch.empty(b, h, self.capacity, d, dtype=dtype, device=device)  # (B, H_kv, P+N, D)
        self.values = torch.empty(
            b, value_states.shape[1], self.capacity, value_states.shape[-1], dtype=dtype, device=device
        )
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


# transformers' two layer bases disagree in their own typing: LinearAttentionCacheLayerMixin sets `device = None` (so
# mypy infers the type None) and makes `is_compileable` / `is_croppable` read-only properties where CacheLayerMixin
# has writable class attributes. transformers' LinearAttentionAndFullAttentionLayer combines them the same way; at
# run time the linear-attention side comes first in the MRO and its properties are the ones read.
class ContiguousHybridLayer(LinearAttentionLayer, ContiguousLayer):  # type: ignore[misc, override]
    """K/V in a contiguous buffer, the conv and SSM state in transformers' LinearAttentionLayer (as transformers'
    own LinearAttentionAndFullAttentionLayer pairs them)."""

    def __init__(self, capacity: int):
        ContiguousLayer.__init__(self, capacity)
        LinearAttentionLayer.__init__(self)

    def lazy_initialization(self, *args, **kwargs) -> None:
        if len(args) == 2 and not kwargs:  # the attention cache's first update: (keys, values)
            ContiguousLayer.lazy_initialization(self, *args)
        else:  # update_conv_state / update_recurrent_state: keyword states
            LinearAttentionLayer.lazy_initialization(self, **kwargs)

    def reset(self) -> None:
        LinearAttentionLayer.reset(self)
        ContiguousLayer.reset(self)


def _layer(kind: str, capacity: int):
    if kind in ATTENTION_TYPES:
        return ContiguousLayer(capacity)
    if kind in ("linear_attention", "conv"):
        return LinearAttentionLayer()
    if kind == "hybrid":
        return ContiguousHybridLayer(capacity)
    if kind == "dummy" and DummyLayer is not None:  # keeps nothing (an MLP-only layer, or one reading another's K/V)
        return DummyLayer()
    raise ValueError(f"cached has no layer for {kind} layers")


class ContiguousCache(Cache):
    """A layer per model layer, by its type: contiguous K/V where it attends, transformers' own classes for the
    rest (every layer full attention when no types are given)."""

    def __init__(self, num_layers: int, capacity: int, types: list[str] | None = None):
        super().__init__(layers=[_layer(kind, capacity) for kind in types or ["full_attention"] * num_layers])


class CachedEngine(Engine):
    name = "cached"

    def __init__(self, model: PreTrainedModel):
        super().__init__(model)
        self._kw = cache_kwarg(model)

    @classmethod
    def refusal(cls, config) -> str | None:
        known = ATTENTION_TYPES | {"linear_attention", "conv", "hybrid", "dummy"}
        other = sorted(set(layer_types(config)) - known)
        return f"cached has no layer for {', '.join(other)} layers" if other else None

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        types = layer_types(self.model.config)
        self.cache = ContiguousCache(len(types), max_len, types)
        return self._forward(input_ids)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        return self._forward(next_ids)  # one position per sequence; the rest is read from the cache

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._kw: self.cache})
        return out.logits[:, -1, :]  # (B, V)
