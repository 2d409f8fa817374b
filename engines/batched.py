"""B sequences per decode forward, each in its own row of cache slots, admitted one at a time.

A server admits requests as they arrive: each sequence is prefilled on its own into its row of every
layer's buffer, at its own length, and then every decode step runs all rows in one forward. Rows may have
different lengths, so each row carries its own position and its own mask; a row never attends to slots
past its own length. The host cost of a forward is paid once per step for all B sequences, which is the
point of batching (Part 2's prediction: step time near flat in B, throughput near B x single-sequence).

transformers uses a 4-D mask as it is given, so the decode mask is built here for each layer type: a row sees its
own slots, and on a sliding layer only the last `sliding_window` of them (what transformers' own sliding-window
mask keeps: slot > position - window). A model whose config lists `layer_types` takes one mask per type; one
without takes a single mask, windowed when the config sets a window. ALiBi models (bloom) read their position
biases off a 2-D mask, so they get the rows' 2-D mask and build the rest themselves.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin

from engines.base import (
    ATTENTION_TYPES,
    QUERY_AT_KEY_LENGTH,
    STATE_TYPES,
    Engine,
    cache_kwarg,
    layer_types,
    model_type,
    text_config,
)

ALIBI = {"bloom"}  # families whose forward builds ALiBi biases from a 2-D attention mask
MASK_FORMATS = ("sdpa", "eager")  # sdpa takes a boolean mask (True: attend); eager adds it to the scores


class SlotLayer(CacheLayerMixin):
    is_sliding = False

    def __init__(self, owner: SlotCache):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, cap = self.owner.rows, self.owner.capacity
        dtype, device = key_states.dtype, key_states.device
        self.keys = torch.zeros(  # (B, H_kv, L, D)
            rows, key_states.shape[1], cap, key_states.shape[-1], dtype=dtype, device=device
        )
        self.values = torch.zeros(rows, value_states.shape[1], cap, value_states.shape[-1], dtype=dtype, device=device)
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        row = self.owner.active_row
        if row is not None:  # admission: one sequence's prompt into its own row
            n = key_states.shape[-2]
            self.keys[row, :, :n].copy_(key_states[0])
            self.values[row, :, :n].copy_(value_states[0])
            return self.keys[row : row + 1, :, :n], self.values[row : row + 1, :, :n]
        # decode: row b writes its one new position at its own length
        rows, pos = self.owner.row_index, self.owner.positions  # (B,), (B,)
        self.keys[rows, :, pos] = key_states[:, :, 0]  # (B, H_kv, D)
        self.values[rows, :, pos] = value_states[:, :, 0]
        width = self.owner.width
        return self.keys[:, :, :width], self.values[:, :, :width]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.owner.active_row is not None:
            return query_length, 0  # admission: a fresh row has nothing before the prompt
        return self.owner.width, 0  # decode: the slots any row may read

    def get_seq_length(self) -> int:
        return 0 if self.owner.active_row is not None else self.owner.width - 1

    def get_max_length(self) -> int:
        return self.owner.capacity


class SlotCache(Cache):
    def __init__(self, num_layers: int, rows: int, capacity: int, device: torch.device):
        self.rows, self.capacity = rows, capacity
        self.active_row: int | None = None
        self.row_index = torch.arange(rows, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)  # next slot of each row
        self.lengths: list[int] = [0] * rows  # the same, on the host, to size the mask without a sync
        self.width = 0  # slots any row may read this step: max length + 1
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])


class BatchedEngine(Engine):
    name = "batched"
    cache: SlotCache | None

    def __init__(self, model: PreTrainedModel):
        super().__init__(model)
        self._kw = cache_kwarg(model)
        config = text_config(model.config)
        self._types = getattr(config, "layer_types", None)  # given: the model takes one mask per layer type
        self._window = getattr(config, "sliding_window", None) or None  # Qwen2-MoE sets 0 for none
        self._alibi = model_type(model.config) in ALIBI
        self._query_at_key_length = QUERY_AT_KEY_LENGTH.get(model_type(model.config))
        self._attn = model.config._attn_implementation
        if self._attn not in MASK_FORMATS:
            raise ValueError(f"batched builds {' and '.join(MASK_FORMATS)} masks; {self._attn} takes its own")

    @classmethod
    def refusal(cls, config) -> str | None:
        types = set(layer_types(config))
        if state := sorted(types & STATE_TYPES):
            return (
                f"batched keeps K/V slots per row; {model_type(config)}'s {', '.join(state)} layers keep a "
                "recurrent state per sequence, which its rows cannot hold"
            )
        if other := sorted(types - ATTENTION_TYPES):
            return f"batched has no slots for {', '.join(other)} layers"
        if "chunked_attention" in types:
            return "batched builds full and sliding masks only, not chunked attention's"
        return None

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        return self.admit(list(input_ids), max_len - input_ids.shape[1])

    def admit(self, prompts: list[torch.Tensor], new_tokens: int) -> torch.Tensor:
        """Prefill each 1-D prompt alone into its own row; return every row's last logits (B, V)."""
        if self._query_at_key_length and len({p.shape[0] for p in prompts}) > 1:
            raise ValueError(
                f"{self._query_at_key_length}: rows of different lengths would put the shorter rows' "
                "queries at the longest row's position"
            )
        device = prompts[0].device
        capacity = max(p.shape[0] for p in prompts) + new_tokens
        self.cache = cache = SlotCache(self.model.config.num_hidden_layers, len(prompts), capacity, device)
        logits = []
        for row, prompt in enumerate(prompts):
            cache.active_row = row
            logits.append(self._forward(prompt[None, :]))
            cache.lengths[row] = prompt.shape[0]
        cache.active_row = None
        cache.positions.copy_(torch.tensor(cache.lengths))
        return torch.cat(logits)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        cache = self.cache
        if cache is None:
            raise RuntimeError("batched: decode before any prefill or admit")
        cache.width = max(cache.lengths) + 1
        logits = self._forward(next_ids, position_ids=cache.positions[:, None], attention_mask=self._masks(cache))
        cache.positions += 1
        cache.lengths = [n + 1 for n in cache.lengths]
        return logits

    def _masks(self, cache: SlotCache) -> torch.Tensor | dict[str, torch.Tensor]:
        """Each row's slots, as the model takes them: a 2-D row mask (ALiBi), one 4-D mask a layer type, or one."""
        slots = torch.arange(cache.width, device=cache.positions.device)
        pos = cache.positions[:, None]  # (B, 1)
        own = slots[None, :] <= pos  # (B, width): a row's own slots, the new one included
        if self._alibi:
            return own.long()
        full = own[:, None, None, :]  # (B, 1, 1, width)
        if self._window is None:
            windowed = full
        else:  # transformers' sliding_window_overlay: kv > q - window
            windowed = (own & (slots[None, :] > pos - self._window))[:, None, None, :]
        if self._attn == "eager":  # additive: 0 where a row attends, the dtype's lowest elsewhere
            low = torch.finfo(self.model.dtype).min
            full, windowed = (
                torch.zeros_like(m, dtype=self.model.dtype).masked_fill(~m, low) for m in (full, windowed)
            )
        if self._types is None:
            return full if self._window is None else windowed
        return {kind: windowed if kind == "sliding_attention" else full for kind in set(self._types)}

    def _forward(self, ids: torch.Tensor, **kwargs) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._kw: self.cache}, **kwargs)
        return out.logits[:, -1, :]  # (B, V)
