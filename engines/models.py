"""Model loading: shipped presets (real architectures, seeded random weights), config files, model folders.

No model hub is reached. A preset is a `config.json` shipped in `engines/presets/`; weights are drawn from
a seeded normal distribution, which is enough for timing (it does not depend on weight values) and, with the
preset's `initializer_range`, keeps greedy decoding from collapsing onto one token.
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
