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

import os

import torch
from transformers import AutoModelForCausalLM

from engines.arch import ArchError, from_raw
from engines.configs import ATTENTION, ModelError, config_from_dict, read_config, resolve
from engines.meta import meta_params

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


def available_bytes(device: torch.device) -> int:
    """Memory a new model may take on `device`: CUDA's free memory, or the host's MemAvailable (physical memory
    where /proc/meminfo is missing)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parameter_count(raw: dict) -> int:
    """Parameters a config builds: engines.arch's formula, or a meta-device count for a family it has no rule for."""
    try:
        return from_raw(raw).params.total
    except ArchError:
        return meta_params(raw)[0].total


def check_fits(raw: dict, dtype: str, device: torch.device, where: str) -> None:
    """One line, before anything is allocated, when the weights alone cannot fit the device (a vocab of 1e10 or an
    intermediate size of 2**62 ended in an allocator traceback)."""
    need = parameter_count(raw) * DTYPES[dtype].itemsize
    have = available_bytes(device)
    if need > have:
        raise ModelError(
            f"{where}: the weights need {need / 1e9:,.1f} GB in {dtype}; {device} has {have / 1e9:,.1f} GB available"
        )


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {' '.join(text[0].split())[:300]}" if text else type(e).__name__


def load_model(spec: str, dtype: str = "float32", device: str = "auto", seed: int = 0, attn: str = "auto"):
    """Build (random weights) or load (folder with weights) a causal LM in eval mode. `attn` names the attention
    implementation (`model.config._attn_implementation` holds the one used). Sizes are checked against the device
    before anything is built, and any failure to build or load is one line (ModelError)."""
    source = resolve(spec)
    torch_dtype, dev = resolve_dtype(dtype), resolve_device(device)
    if attn not in ATTENTION:
        raise ModelError(f"unknown attention {attn!r}: use one of {', '.join(ATTENTION)}")
    raw = read_config(spec)
    check_fits(raw, dtype, dev, str(source.config_path))
    impl = None if attn == "auto" else attn
    try:
        if source.weights_dir is not None:
            # transformers declares PreTrainedModel.to with @functools.wraps(nn.Module.to), and typeshed's _Wrapped is
            # not a descriptor, so mypy takes `dev` for the unbound `self`; the call is the ordinary bound one.
            model = AutoModelForCausalLM.from_pretrained(
                source.weights_dir, dtype=torch_dtype, attn_implementation=impl
            ).to(dev)  # type: ignore[arg-type]
        else:
            config = config_from_dict(raw, str(source.config_path))
            torch.manual_seed(seed)
            # Building on the target device makes the 1.5B init take seconds on a GPU instead of ~30 s on a CPU.
            with dev:
                model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype, attn_implementation=impl)
    except ModelError:
        raise
    except Exception as e:  # transformers' and torch's own refusals (an unsupported attention, a bad pickle, OOM)
        what = f"load the weights in {source.weights_dir}" if source.weights_dir else f"build {source.config_path}"
        raise ModelError(f"cannot {what} (attention {attn}): {_one_line(e)}") from None
    return model.eval()


def prompt_ids(length: int, batch: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """Deterministic prompts of exactly `length` tokens, one distinct row per sequence: (B, P) int64."""
    rows = []
    for row in range(batch):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + row)
        rows.append(torch.randint(2, vocab_size, (length,), generator=gen))
    return torch.stack(rows)
