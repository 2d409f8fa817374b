"""Model loading: shipped presets (real architectures, seeded random weights), config files, model folders.

No model hub is reached. A preset is a `config.json` shipped in `engines/presets/`; weights are drawn from
a seeded normal distribution, which is enough for timing (it does not depend on weight values) and, with the
preset's `initializer_range`, keeps greedy decoding from collapsing onto one token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

PRESET_DIR = Path(__file__).parent / "presets"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


class ModelError(ValueError):
    """A model spec that cannot be resolved; the message is one line, fit for a CLI error."""


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: a preset or config (random weights), or a folder with weights."""

    name: str  # short name used in file names and tables
    config_path: Path
    weights_dir: Path | None  # None: seeded random weights


def resolve(spec: str) -> ModelSource:
    """Turn `tiny`, `qwen2.5-1.5b`, `path/config.json` or `path/to/model_dir` into a ModelSource."""
    if (PRESET_DIR / f"{spec}.json").is_file():
        return ModelSource(spec, PRESET_DIR / f"{spec}.json", None)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix != ".json":
            raise ModelError(f"model file {spec!r} is not a config.json")
        return ModelSource(path.parent.name or path.stem, path, None)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise ModelError(f"model folder {spec!r} has no config.json")
        has_weights = any(any(path.glob(p)) for p in WEIGHT_PATTERNS)
        return ModelSource(path.name, config, path if has_weights else None)
    if "/" in spec or spec.endswith(".json") or path.is_absolute():
        raise ModelError(f"model path {spec!r} does not exist")
    raise ModelError(f"unknown model {spec!r}: use a preset ({', '.join(presets())}) or a local path")


def load_config(spec: str):
    """The transformers config of a model spec, without building the model."""
    from transformers import AutoConfig

    source = resolve(spec)
    try:
        raw = json.loads(source.config_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"cannot read {source.config_path}: {e}") from None
    if "model_type" not in raw:
        raise ModelError(f"{source.config_path} has no model_type")
    try:
        return AutoConfig.for_model(**raw)
    except (ValueError, KeyError) as e:
        raise ModelError(f"{source.config_path}: {str(e).splitlines()[0]}") from None


def max_positions(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    return None


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
    from transformers import AutoModelForCausalLM

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
