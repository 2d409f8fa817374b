"""Settling a run's configuration for a device, and the checks that need no weights. The configuration types
themselves are probe.settings' (torch-free, shared with the analysis side); this module loads no torch either, so
every command can build its flags from it. `validate` loads the engines it names.

The order: `settle` first (it replaces "auto" by the device's default model and dtype, which `validate` needs),
then `validate`. probe.capture.sweep.settle_here settles for the device this process resolves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import TYPE_CHECKING

from engines import engine_class
from engines.configs import DTYPE_NAMES, PRESET_DIR, max_positions, resolve
from probe.analysis.records.files import model_config, read_json
from probe.errors import ProbeError
from probe.here import DEVICE_DEFAULTS
from probe.settings import AUTO, DTYPE_CHOICES, DTYPE_HELP, MODEL_HELP, BenchConfig, Config, ProfileConfig

if TYPE_CHECKING:  # engines.base imports torch, which this module must not
    from engines.base import Engine

__all__ = [  # the settings are imported from here by the commands that predate probe.settings
    "AUTO",
    "DTYPE_CHOICES",
    "DTYPE_HELP",
    "MODEL_HELP",
    "BenchConfig",
    "ProfileConfig",
    "model_name",
    "settle",
    "validate",
]


def settle(cfg: Config, device_type: str) -> Config:
    """`cfg` (a BenchConfig or ProfileConfig) with an "auto" model or dtype replaced by the default of
    `device_type` ("cuda", "cpu")."""
    model, dtype = DEVICE_DEFAULTS.get(device_type, DEVICE_DEFAULTS["cpu"])
    return dataclasses.replace(
        cfg, model=model if cfg.model == AUTO else cfg.model, dtype=dtype if cfg.dtype == AUTO else cfg.dtype
    )


def validate(cfg: BenchConfig) -> dict[str, type[Engine]]:
    """Every check that needs no model weights, so bad input fails in a second, not after a load: the engines
    (their classes, by name), the dtype, the model's config and its position limit. The device is checked where
    it is resolved (engines.models.resolve_device); "auto" model and dtype must be `settle`d first."""
    if AUTO in (cfg.model, cfg.dtype):
        raise ProbeError("model and dtype 'auto' are settled by the device first (probe.capture.config.settle)")
    classes = {name: engine_class(name) for name in cfg.engines}
    if cfg.dtype not in DTYPE_NAMES:
        raise ProbeError(f"unknown dtype {cfg.dtype!r}: use one of {', '.join(DTYPE_NAMES)}")
    config = model_config(cfg.model)
    limit = max_positions(config)
    longest = max(cfg.prompts) + cfg.new_tokens
    if limit is not None and longest > limit:
        raise ProbeError(
            f"prompt {max(cfg.prompts)} + {cfg.new_tokens} new tokens = {longest} positions exceeds "
            f"the model's maximum of {limit}"
        )
    return classes


def model_name(spec: str) -> str:
    """What file names call a model: a preset by its name, a folder with weights by the folder's name, any other
    config by its model_type and a short hash of its bytes (configs/llama.json and configs/mistral.json would
    otherwise both be "configs", and one's traces overwrite the other's)."""
    source = resolve(spec)
    if source.weights_dir is not None or source.config_path.parent == PRESET_DIR:
        return source.name
    raw = read_json(source.config_path, "model config")
    kind = re.sub(r"[^A-Za-z0-9.-]+", "-", str(raw.get("model_type") or "model")) if isinstance(raw, dict) else "model"
    return f"{kind}-{hashlib.sha256(source.config_path.read_bytes()).hexdigest()[:8]}"
