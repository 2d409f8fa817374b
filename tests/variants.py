"""Engine variants used by tests through the `module:Class` engine spec."""

from __future__ import annotations

import torch

from engines.cached import CachedEngine


class WrongTokensEngine(CachedEngine):
    """Flips the argmax on every decode step: parity must catch it."""

    name = "wrong"

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        logits = super().decode(next_ids)
        return -logits
