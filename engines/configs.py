"""Model configs without torch: shipped presets, config files and model folders, read as JSON and checked.

A preset is a `config.json` shipped in `engines/presets/`. `read_config` reads a spec's config.json as plain JSON
(no transformers, no torch: the analysis side counts bytes from it through `engines.arch`); `load_config` turns it
into its family's transformers config (transformers 5.24's configuration module imports torch). Both check the
sizes first: a size that is not a positive integer, or a layer count no model has, is one line before any list,
module or tensor is built for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PRESET_DIR = Path(__file__).parent / "presets"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# --attn: transformers' attention implementations; auto is transformers' own choice (SDPA where the family supports
# it, else eager), and the one it chose is what a run records.
ATTENTION = ("auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
SHAPE_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "n_layer",
    "n_embd",
    "n_head",
    "n_positions",
    "n_inner",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "ffn_dim",
    "ffn_hidden_size",
    "moe_intermediate_size",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "kv_lora_rank",
    "window_size",
    "state_size",
)
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
# The largest released decoders have under 200 layers. transformers builds per-layer lists as it reads a config
# and a module a layer as it builds one (num_hidden_layers of 1e12 hung `probe roofline`, its memory growing), so a
# count this far past any model is refused before anything is built for it.
MAX_LAYERS = 10_000


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


def check_sizes(raw: dict, where: str = "config") -> None:
    """Every size a config.json sets is a positive integer, and its layer count one a model can have."""
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise ModelError(f"{where} has no model_type")
    for key in SHAPE_KEYS:  # transformers takes any JSON value here; a model built from a string would not
        value = raw.get(key)
        if value is not None and (type(value) is not int or value < 1):
            raise ModelError(f"{where}: {key} must be a positive integer, got {value!r}")
    for key in LAYER_KEYS:  # each a SHAPE_KEYS entry, so null (the family's default) or a count checked above
        if (value := raw.get(key)) is not None and value > MAX_LAYERS:
            raise ModelError(f"{where}: {key} is {value:,}; probe reads at most {MAX_LAYERS:,} layers")


def config_from_dict(raw: dict, where: str = "config"):
    """A config.json's dict as its family's transformers config, family defaults filled in."""
    # transformers loads here, when a config is first read, not when this module is imported: a CLI that
    # only builds its flags from configs stays fast.
    from transformers import AutoConfig

    check_sizes(raw, where)
    try:
        config = AutoConfig.for_model(**raw)
    except Exception as e:  # transformers validates in its own ways (huggingface_hub's strict dataclasses, ...)
        raise ModelError(f"{where}: {' '.join(str(e).split())[:300]}") from None
    for key in SHAPE_KEYS:  # and defaults filled in must be sizes too
        value = getattr(config, key, None)
        if value is not None and (type(value) is not int or value < 1):
            raise ModelError(f"{where}: {key} must be a positive integer, got {value!r}")
    return config


def read_config(spec: str) -> dict:
    """A model spec's config.json as a plain dict, its sizes checked: no transformers, no torch."""
    source = resolve(spec)
    try:
        raw = json.loads(source.config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else e
        raise ModelError(f"cannot read {source.config_path}: {why}") from None
    check_sizes(raw, str(source.config_path))
    return raw


def load_config(spec: str):
    """The transformers config of a model spec, without building the model."""
    return config_from_dict(read_config(spec), str(resolve(spec).config_path))


def max_positions(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    return None
