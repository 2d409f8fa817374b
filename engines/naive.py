"""No cache: every step feeds the whole sequence so far back through the model (Part 1)."""

from __future__ import annotations

import torch

from engines.base import Engine


class NaiveEngine(Engine):
    name = "naive"
    recomputes = True

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        self.ids = input_ids  # (B, P)
        return self._forward()

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        self.ids = torch.cat([self.ids, next_ids], dim=1)  # (B, T+1): step i recomputes all P+i positions
        return self._forward()

    def _forward(self) -> torch.Tensor:
        # logits_to_keep=1: only the last position goes through the output matmul, as in the write-ups.
        out = self.model(input_ids=self.ids, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1, :]  # (B, V)
