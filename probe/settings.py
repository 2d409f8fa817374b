"""The run's settings, typed and torch-free: a sweep's (`BenchConfig`) and a profiled run's (`ProfileConfig`).

CLI flags are generated from these fields (probe.flags), so a default lives in one place. Results files and trace
sidecars hold them as JSON (`to_json`, `from_json`), so the analysis side reads them as the same types the capture
side ran with. What needs the device or a model config is elsewhere: `probe.capture.config.settle` replaces "auto"
by the device's default, `probe.capture.config.validate` checks what needs no weights.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from engines.configs import ATTENTION, DTYPE_NAMES
from probe.errors import ProbeError
from probe.flags import int_list, knob, str_list
from probe.here import AUTO

DTYPE_CHOICES = (AUTO, *DTYPE_NAMES)
MODEL_HELP = "preset name, config.json or local model folder; auto: qwen2.5-1.5b on a GPU, tiny on a CPU"
DTYPE_HELP = "weights and activations dtype; auto: float16 on a GPU, float32 on a CPU"
ATTN_HELP = "attention implementation; auto: transformers' choice (SDPA where the family has it, else eager)"


def check_text(value: str, flag: str) -> None:
    """A name probe records (a model path, an engine spec) must be text: a path that is not UTF-8 reaches Python as
    lone surrogates, which no results file, table or history can hold, so it is refused before any work."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProbeError(f"{flag} {value!r} is not UTF-8 text: rename it (probe records it in its files)") from None


@dataclass(frozen=True)
class BenchConfig:
    engines: tuple[str, ...] = knob(
        ("naive", "cached"), "comma-separated engines (or module:Class)", str_list, resumable=True
    )
    prompts: tuple[int, ...] = knob(
        (16, 64, 256, 1024, 4096), "comma-separated prompt lengths, tokens", int_list, resumable=True
    )
    new_tokens: int = knob(256, "tokens generated per run (the write-ups: 256)")
    runs: int = knob(5, "recorded runs per cell (the write-ups: 5)")
    warmup: int = knob(2, "unrecorded warmup runs per cell (the write-ups: 2)")
    batch: tuple[int, ...] = knob((1,), "comma-separated batch sizes: sequences per forward", int_list, resumable=True)
    model: str = knob(AUTO, MODEL_HELP)
    dtype: str = knob(AUTO, DTYPE_HELP, choices=DTYPE_CHOICES)
    attn: str = knob(AUTO, ATTN_HELP, choices=ATTENTION)
    device: str = knob("auto", "auto (CUDA when available), cpu, cuda, cuda:1 ...")
    seed: int = knob(0, "seed for weights and prompts")
    allow_mismatch: bool = knob(False, "exit 0 even when an engine's tokens differ from naive's", resumable=True)
    annotate: bool = knob(False, "emit NVTX/record_function ranges during timed runs (for an attached tool)")
    threads: int = knob(
        0,
        "torch intra-op threads; 0: torch's default (one per core), except that probe run on a CPU takes the count "
        "the floor runs fastest at, and 1 when other processes take the CPU",
    )
    telemetry_ms: float = knob(10.0, "telemetry sampling interval in ms (NVML on GPUs, /proc everywhere); 0: off")
    naive_prompts: tuple[int, ...] = knob(
        (),
        "prompt lengths naive is timed at (default: all); the others still get naive's tokens as reference",
        int_list,
        resumable=True,
    )
    sync_pairs: int = knob(3, "CUDA: pairs of runs (synced every step, synced once) for the sync cost; 0: skip")

    def __post_init__(self):
        self._check_counts()
        self._check_sweep()
        _check_common(self)
        for engine in self.engines:
            check_text(engine, "--engines")

    def _check_counts(self) -> None:
        """Each cell's counts: tokens, runs, batch sizes, warmup, threads and the telemetry interval in range."""
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

    def _check_sweep(self) -> None:
        """What the sweep covers: its prompts and engines, naive's prompts among them, the sync-cost pairs."""
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

    def resume_conflict(self, held: BenchConfig) -> tuple[str, object, object] | None:
        """The first field, other than those a resumed sweep may change (knob(..., resumable=True)), whose value
        `held` (the folder's config) and this differ in: (name, held's value, this one's); None when none does."""
        for f in dataclasses.fields(self):
            ours, theirs = getattr(held, f.name), getattr(self, f.name)
            if not f.metadata.get("resumable") and ours != theirs:
                return f.name, ours, theirs
        return None

    def to_json(self) -> dict:
        return _to_json(self)

    @classmethod
    def from_json(cls, doc) -> BenchConfig:
        return _from_json(cls, doc)


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
    threads: int = knob(0, "torch intra-op threads, as probe bench sets them; 0 keeps torch's default (one per core)")

    def __post_init__(self):
        if self.threads < 0:
            raise ProbeError(f"--threads must be 0 (torch's default) or more, got {self.threads}")
        if self.new_tokens < 2:
            raise ProbeError("--new-tokens must be at least 2: one prefill token plus one decode step")
        if self.prompt < 1 or self.batch < 1 or self.warmup < 0:
            raise ProbeError("--prompt and --batch must be at least 1, --warmup at least 0")
        _check_common(self)
        check_text(self.engine, "--engine")

    def to_json(self) -> dict:
        return _to_json(self)

    @classmethod
    def from_json(cls, doc) -> ProfileConfig:
        return _from_json(cls, doc)


def _check_common(cfg: BenchConfig | ProfileConfig) -> None:
    if cfg.dtype not in DTYPE_CHOICES:  # the flag's choices say so too; a file read back is held to the same
        raise ProbeError(f"unknown dtype {cfg.dtype!r}: use one of {', '.join(DTYPE_CHOICES)}")
    check_text(cfg.model, "--model")
    check_text(cfg.device, "--device")


Config = TypeVar("Config", BenchConfig, ProfileConfig)

# probe run's budget (probe.capture.pipeline runs it), by device type. Why these: the CPU budget keeps the whole job to
# a few minutes on 2 cores while still spanning the range where naive's recomputation overtakes the host floor; the
# GPU budget is the write-ups' own. On a CPU the intra-op threads are the count the floor measures fastest
# (probe.capture.machine.choose_threads), one where other processes take the CPU.
CPU_DEFAULTS = dict(model="tiny", dtype="float32", prompts=(16, 64, 256, 1024), new_tokens=128, runs=5, warmup=2)
GPU_DEFAULTS = dict(
    model="qwen2.5-1.5b", dtype="float16", prompts=(16, 64, 256, 1024, 4096), new_tokens=256, runs=5, warmup=2
)
# --quick: three engines over the prompt range, 32 tokens (31 decode steps a run), 2 timed runs after the parity
# pass, 2 ABBA pairs for the sync cost. On a GPU naive is timed only up to 512 (at 4096 it is a reference run
# only); cached and static span the write-ups' 16..4096. docs/gpu/README.md budgets the GPU run.
QUICK = dict(engines=("naive", "cached", "static"), new_tokens=32, runs=2, warmup=1, sync_pairs=2)
QUICK_CPU = dict(CPU_DEFAULTS, **QUICK, prompts=(16, 128, 1024))
QUICK_GPU = dict(GPU_DEFAULTS, **QUICK, prompts=(16, 512, 4096), naive_prompts=(16, 512))


def defaults_for(device_type: str, quick: bool) -> dict:
    """What probe run (--quick) uses on a device of `device_type` where a flag is absent."""
    if quick:
        return QUICK_GPU if device_type == "cuda" else QUICK_CPU
    return GPU_DEFAULTS if device_type == "cuda" else CPU_DEFAULTS


def _to_json(cfg: BenchConfig | ProfileConfig) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def _from_json(cls: type[Config], doc) -> Config:
    """A config as a results file or sidecar holds it, its types and ranges checked as the flags are: fields it
    does not know are ignored, missing ones (a file written before they existed) take their defaults. ValueError,
    in one line naming the field, for anything else."""
    if not isinstance(doc, dict):
        raise ValueError(f"a config is a JSON object, not {type(doc).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return msgspec.convert({k: v for k, v in doc.items() if k in names}, cls)
    except (msgspec.ValidationError, ProbeError) as e:
        raise ValueError(str(e)) from None
