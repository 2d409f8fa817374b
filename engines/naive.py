"""No cache: every step feeds the whole sequence so far back through the model (Part 1)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from engines.base import Engine


def prepared_masks(model: PreTrainedModel) -> dict | None:
    """The attention masks of a causal, unpadded forward with no cache, built ahead of the call: none at all, keyed
    by layer type, the form transformers' own generate hands a model (`create_masks_for_generate`).

    Why: left to build them itself with neither a cache nor a mask, transformers looks for packed sequences in the
    position ids with a tensor `.all()`, which on CUDA is a device-to-host copy and a stream sync inside every
    forward, outside the loop's `sync` range. No mask is also what it would have chosen: SDPA then runs causal
    over T > 1 positions (upper-left aligned, which equals lower-right when queries and keys are the same
    positions) and unmasked over one. Only for SDPA and when every layer attends to the whole sequence; None
    otherwise (the model builds its masks as usual, sync included).
    """
    config = model.config.get_text_config()
    types = getattr(config, "layer_types", None)
    if not types or set(types) != {"full_attention"} or config._attn_implementation != "sdpa":
        return None
    return {"full_attention": None}


def no_cache_forward(model: PreTrainedModel, ids: torch.Tensor, masks: dict | None) -> torch.Tensor:
    """One forward over all of `ids` (B, T) with no cache; the last position's logits (B, V). The floor's forward
    (`probe overhead`) is this one at T = 1."""
    kwargs = {} if masks is None else {"attention_mask": masks}
    # logits_to_keep=1: only the last position goes through the output matmul, as in the write-ups.
    out = model(input_ids=ids, use_cache=False, logits_to_keep=1, **kwargs)
    return out.logits[:, -1, :]  # (B, V)


class NaiveEngine(Engine):
    name = "naive"
    recomputes = True

    def __init__(self, model: PreTrainedModel):
        super().__init__(model)
        self._masks = prepared_masks(model)

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        self.ids = input_ids  # (B, P)
        return no_cache_forward(self.model, self.ids, self._masks)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        self.ids = torch.cat([self.ids, next_ids], dim=1)  # (B, T+1): step i recomputes all P+i positions
        return no_cache_forward(self.model, self.ids, self._masks)
