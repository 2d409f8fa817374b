"""Engine variants used by tests through the `module:Class` engine spec."""

from __future__ import annotations

import os
import time

import torch
from transformers.cache_utils import Cache

from engines.cached import CachedEngine, ContiguousCache, ContiguousLayer


class WrongTokensEngine(CachedEngine):
    """Flips the argmax on every decode step: parity must catch it."""

    name = "wrong"

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        logits = super().decode(next_ids)
        return -logits


class ExtraOpLayer(ContiguousLayer):
    """Copies the incoming keys once more before each write: one extra aten::clone per layer per step."""

    def update(self, key_states, value_states, *args, **kwargs):
        return super().update(key_states.clone(), value_states, *args, **kwargs)


class ExtraOpCache(ContiguousCache):
    def __init__(self, num_layers: int, capacity: int):
        Cache.__init__(self, layers=[ExtraOpLayer(capacity) for _ in range(num_layers)])


class ExtraOpCacheEngine(CachedEngine):
    """The cached engine with per-layer host work added, as a careless edit would. Named like the engine it
    modifies, so its cells match a baseline of `cached`."""

    name = "cached"

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        self.cache = ExtraOpCache(self.model.config.num_hidden_layers, max_len)
        return self._forward(input_ids)


SLOW_US_VAR = "PROBE_SLOW_US"  # microseconds of busy-waiting per decode step


class SlowCachedEngine(CachedEngine):
    """The cached engine plus a busy-wait of $PROBE_SLOW_US microseconds (default 2000) per decode step, read
    when the engine is built so a benchmark can sweep it. Busy, not sleeping: the step holds the CPU, as
    host work does. Named `cached`, so its cells match a baseline of `cached`."""

    name = "cached"

    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self.slow_ns = int(float(os.environ.get(SLOW_US_VAR, "2000")) * 1000)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        logits = super().decode(next_ids)
        deadline = time.perf_counter_ns() + self.slow_ns
        while time.perf_counter_ns() < deadline:
            pass
        return logits


class NaNLogitsEngine(CachedEngine):
    """Puts a NaN at the top logit of every decode step. argmax takes NaN as the largest value, so its tokens are
    exactly the cached engine's, naive's: only a look at the logits catches it."""

    name = "nan"

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        logits = super().decode(next_ids).clone()
        logits.scatter_(-1, logits.argmax(-1, keepdim=True), float("nan"))
        return logits


RAISE_AT_PROMPT = 16  # the prompt length at which RaisingEngine refuses to run


class RaisingEngine(CachedEngine):
    """Raises in its prefill at a prompt of RAISE_AT_PROMPT tokens, as an engine out of memory for one shape does:
    that cell fails and the others must still finish."""

    name = "raising"

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        if input_ids.shape[1] == RAISE_AT_PROMPT:
            raise RuntimeError(f"out of memory: cannot hold a prompt of {RAISE_AT_PROMPT} tokens (a test's refusal)")
        return super().prefill(input_ids, max_len)


class DyingEngine(CachedEngine):
    """Ends its whole process in its prefill at a prompt of RAISE_AT_PROMPT tokens, as a worker the OS kills does:
    on Ray the worker dies under that cell, which fails, and Ray restarts the worker for the cells after it."""

    name = "dying"

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        if input_ids.shape[1] == RAISE_AT_PROMPT:
            os._exit(3)
        return super().prefill(input_ids, max_len)


HOLD_DIR_VAR = "PROBE_HOLD_DIR"  # where HoldingEngine leaves its marker; set where the Ray cluster starts


class HoldingEngine(CachedEngine):
    """Stops in its prefill at a prompt of RAISE_AT_PROMPT tokens, once: the first cell that gets there creates
    $PROBE_HOLD_DIR/holding-p16 (exclusively) with its process id and Ray node id, then sleeps, so that a test can
    kill the node under a cell known to be running there. Every later cell (a --resume's) runs as `cached` does."""

    name = "holding"

    def prefill(self, input_ids: torch.Tensor, max_len: int) -> torch.Tensor:
        folder = os.environ.get(HOLD_DIR_VAR)
        if input_ids.shape[1] == RAISE_AT_PROMPT and folder:
            try:
                fd = os.open(os.path.join(folder, f"holding-p{RAISE_AT_PROMPT}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return super().prefill(input_ids, max_len)
            import json

            import ray

            os.write(fd, json.dumps({"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}).encode())
            os.close(fd)
            time.sleep(600)
        return super().prefill(input_ids, max_len)
