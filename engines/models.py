"""Model loading: shipped presets (real architectures, seeded random weights), config files, model folders.

No model hub is reached. A preset is a `config.json` shipped in `engines/presets/`; weights are drawn from
a seeded normal distribution, which is enough for timing (it does not depend on weight values) and, with the
preset's `initializer_range`, keeps greedy decoding from collapsing onto one token.

The two presets' ranges, checked on this CPU (seed 0, cached engine, greedy):
- `tiny` (hidden 256, 4 layers): 0.02 repeats one token forever; 0.1 varies them.
- `qwen2.5-1.5b` keeps the real model's 0.02: with hidden 1536 and 28 layers the tokens vary. float32, prompt 16:
  22 distinct of 24; bfloat16: 46 of 48 at prompt 16, 16 of 16 at prompt 256; float16: 46 of 48 and 16 of 16.
  Every logit finite in both half dtypes, |logit| at most 4.3, the residual stream's largest value 18.9 (float16
  overflows at 65504). Larger ranges grow activations fast (0.1: residual peak 2374 in float32), for nothing.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from engines.configs import ModelError, load_config, resolve

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ModelError(f"unknown device {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} requested but CUDA is not available")
    return dev


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_model(spec: str, dtype: str = "float32", device: str = "auto", seed: int = 0):
    """Build (random weights) or load (folder with weights) a causal LM in eval mode with SDPA attention."""
    source = resolve(spec)
    torch_dtype, dev = resolve_dtype(dtype), resolve_device(device)
    if source.weights_dir is not None:
        model = AutoModelForCausalLM.from_pretrained(
            source.weights_dir, dtype=torch_dtype, attn_implementation="sdpa"
        ).to(dev)
    else:
        config = load_config(spec)
        torch.manual_seed(seed)
        # Building on the target device makes the 1.5B init take seconds on a GPU instead of ~30 s on a CPU.
        with dev:
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype, attn_implementation="sdpa")
    return model.eval()


def prompt_ids(length: int, batch: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """Deterministic prompts of exactly `length` tokens, one distinct row per sequence: (B, P) int64."""
    rows = []
    for row in range(batch):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + row)
        rows.append(torch.randint(2, vocab_size, (length,), generator=gen))
    return torch.stack(rows)
