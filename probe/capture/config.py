"""Typed run configuration, and the checks that need no weights. CLI flags are generated from these fields
(probe.flags), so defaults live in one place. Importing this module loads no torch, so every command can
build its flags from it; `validate` loads the engines it names."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from engines import engine_class
from engines.configs import ATTENTION, DTYPE_NAMES, load_config, max_positions
from probe.errors import ProbeError
from probe.flags import int_list, knob, str_list

AUTO = "auto"
# What "auto" means for --model and --dtype, by device type: on a GPU the write-ups' own model and dtype; on a
# CPU a preset small enough to sweep in minutes, in float32 (exact token parity).
DEVICE_DEFAULTS = {"cuda": ("qwen2.5-1.5b", "float16"), "cpu": ("tiny", "float32")}
DTYPE_CHOICES = (AUTO, *DTYPE_NAMES)
MODEL_HELP = "preset name, config.json or local model folder; auto: qwen2.5-1.5b on a GPU, tiny on a CPU"
DTYPE_HELP = "weights and activations dtype; auto: float16 on a GPU, float32 on a CPU"
ATTN_HELP = "attention implementation; auto: transformers' choice (SDPA where the family has it, else eager)"


@dataclass(frozen=True)
class BenchConfig:
    engines: tuple[str, ...] = knob(("naive", "cached"), "comma-separated engines (or module:Class)", str_list)
    prompts: tuple[int, ...] = knob((16, 64, 256, 1024, 4096), "comma-separated prompt lengths, tokens", int_list)
    new_tokens: int = knob(256, "tokens generated per run (the write-ups: 256)")
    runs: int = knob(5, "recorded runs per cell (the write-ups: 5)")
    warmup: int = knob(2, "unrecorded warmup runs per cell (the write-ups: 2)")
    batch: tuple[int, ...] = knob((1,), "comma-separated batch sizes: sequences per forward", int_list)
    model: str = knob(AUTO, MODEL_HELP)
    dtype: str = knob(AUTO, DTYPE_HELP, choices=DTYPE_CHOICES)
    attn: str = knob(AUTO, ATTN_HELP, choices=ATTENTION)
    device: str = knob("auto", "auto (CUDA when available), cpu, cuda, cuda:1 ...")
    seed: int = knob(0, "seed for weights and prompts")
    allow_mismatch: bool = knob(False, "exit 0 even when an engine's tokens differ from naive's")
    annotate: bool = knob(False, "emit NVTX/record_function ranges during timed runs (for an attached tool)")
    threads: int = knob(0, "torch intra-op threads; 0 keeps torch's default (one per core)")
    telemetry_ms: float = knob(10.0, "telemetry sampling interval in ms (NVML on GPUs, /proc everywhere); 0: off")
    naive_prompts: tuple[int, ...] = knob(
        (),
        "prompt lengths naive is timed at (default: all); the others still get naive's tokens as reference",
        int_list,
    )
    sync_pairs: int = knob(3, "CUDA: pairs of runs (synced every step, synced once) for the sync cost; 0: skip")

    def __post_init__(self):
        for name in ("new_tokens", "runs"):
            if getattr(self, name) < 1:
                raise ProbeError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.batch or min(self.batch) < 1:
            raise ProbeError(f"--batch must be positive sizes, got {self.batch}")
        if self.new_tokens < 2:
            raise ProbeError("--new-tokens must be at least 2: one prefill token plus one decode step")
        if self.warmup < 0:
            raise ProbeError(f"--warmup must be 0 or more, got {self.warmup}")
        if self.threads < 0:
            raise ProbeError(f"--threads must be 0 (torch's default) or more, got {self.threads}")
        if not math.isfinite(self.telemetry_ms) or self.telemetry_ms < 0:
            raise ProbeError(f"--telemetry-ms must be 0 (off) or more, got {self.telemetry_ms}")
        if not self.prompts or min(self.prompts) < 1:
            raise ProbeError(f"--prompts must be positive token counts, got {self.prompts}")
        if not self.engines:
            raise ProbeError("--engines is empty")
        if not set(self.naive_prompts) <= set(self.prompts):
            raise ProbeError(f"--naive-prompts {self.naive_prompts} must be among --prompts {self.prompts}")
        if self.sync_pairs < 0:
            raise ProbeError(f"--sync-pairs must be 0 (skip) or more, got {self.sync_pairs}")

    def times(self, engine: str, prompt: int) -> bool:
        """Whether the sweep times `engine` at `prompt` (naive only at --naive-prompts, when given)."""
        return engine != "naive" or not self.naive_prompts or prompt in self.naive_prompts


@dataclass(frozen=True)
class ProfileConfig:
    engine: str = knob("cached", "engine name (or module:Class)")
    prompt: int = knob(64, "prompt length, tokens")
    new_tokens: int = knob(8, "tokens generated in the recorded run")
    model: str = knob(AUTO, MODEL_HELP)
    dtype: str = knob(AUTO, DTYPE_HELP, choices=DTYPE_CHOICES)
    attn: str = knob(AUTO, ATTN_HELP, choices=ATTENTION)
    device: str = knob("auto", "auto (CUDA when available), cpu, cuda, ...")
    batch: int = knob(1, "sequences per forward")
    seed: int = knob(0, "seed for weights and prompts")
    warmup: int = knob(1, "unrecorded warmup runs before the recorded one")

    def __post_init__(self):
        if self.new_tokens < 2:
            raise ProbeError("--new-tokens must be at least 2: one prefill token plus one decode step")
        if self.prompt < 1 or self.batch < 1 or self.warmup < 0:
            raise ProbeError("--prompt and --batch must be at least 1, --warmup at least 0")


def settle(cfg, device_type: str):
    """`cfg` (a BenchConfig or ProfileConfig) with an "auto" model or dtype replaced by the device's default."""
    model, dtype = DEVICE_DEFAULTS.get(device_type, DEVICE_DEFAULTS["cpu"])
    return dataclasses.replace(
        cfg, model=model if cfg.model == AUTO else cfg.model, dtype=dtype if cfg.dtype == AUTO else cfg.dtype
    )


def validate(cfg: BenchConfig) -> dict[str, type]:
    """Every check that needs no model weights, so bad input fails in a second, not after a load: the engines
    (their classes, by name), the dtype, the model's config and its position limit. The device is checked where
    it is resolved (engines.models.resolve_device); "auto" model and dtype must be `settle`d first."""
    if AUTO in (cfg.model, cfg.dtype):
        raise ProbeError("model and dtype 'auto' are settled by the device first (probe.capture.config.settle)")
    classes = {name: engine_class(name) for name in cfg.engines}
    if cfg.dtype not in DTYPE_NAMES:
        raise ProbeError(f"unknown dtype {cfg.dtype!r}: use one of {', '.join(DTYPE_NAMES)}")
    config = load_config(cfg.model)
    limit = max_positions(config)
    longest = max(cfg.prompts) + cfg.new_tokens
    if limit is not None and longest > limit:
        raise ProbeError(
            f"prompt {max(cfg.prompts)} + {cfg.new_tokens} new tokens = {longest} positions exceeds "
            f"the model's maximum of {limit}"
        )
    return classes
