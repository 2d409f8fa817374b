"""Typed run configuration. CLI flags are generated from these fields, so defaults live in one place."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass, field

from probe.errors import ProbeError


def _list_of(kind: type, what: str):
    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",")]
        if not text.strip() or any(not t for t in items):
            raise argparse.ArgumentTypeError(f"malformed {what} list {text!r}: use comma-separated values")
        try:
            values = tuple(kind(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"malformed {what} list {text!r}: {items} are not all {kind.__name__}s"
                                             ) from None
        return values

    return parse


int_list = _list_of(int, "integer")
str_list = _list_of(str, "name")


def knob(default, help: str, parse=None, choices=None):
    """A config field with its CLI help; `parse` turns the flag's text into the field's value."""
    return field(default=default, metadata={"help": help, "parse": parse, "choices": choices})


@dataclass(frozen=True)
class BenchConfig:
    engines: tuple[str, ...] = knob(("naive", "cached"), "comma-separated engines (or module:Class)", str_list)
    prompts: tuple[int, ...] = knob((16, 64, 256, 1024, 4096), "comma-separated prompt lengths, tokens", int_list)
    new_tokens: int = knob(256, "tokens generated per run (the write-ups: 256)")
    runs: int = knob(5, "recorded runs per cell (the write-ups: 5)")
    warmup: int = knob(2, "unrecorded warmup runs per cell (the write-ups: 2)")
    batch: tuple[int, ...] = knob((1,), "comma-separated batch sizes: sequences per forward", int_list)
    model: str = knob("tiny", "preset name, config.json or local model folder")
    dtype: str = knob("float32", "weights and activations dtype", choices=("float32", "float16", "bfloat16"))
    device: str = knob("auto", "auto (CUDA when available), cpu, cuda, cuda:1 ...")
    seed: int = knob(0, "seed for weights and prompts")
    allow_mismatch: bool = knob(False, "exit 0 even when an engine's tokens differ from naive's")
    annotate: bool = knob(False, "emit NVTX/record_function ranges during timed runs (for an attached tool)")
    threads: int = knob(0, "torch intra-op threads; 0 keeps torch's default (one per core)")
    telemetry_ms: float = knob(10.0, "telemetry sampling interval in ms (NVML on GPUs, /proc everywhere); 0: off")

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
        if self.telemetry_ms < 0:
            raise ProbeError(f"--telemetry-ms must be 0 (off) or more, got {self.telemetry_ms}")
        if not self.prompts or min(self.prompts) < 1:
            raise ProbeError(f"--prompts must be positive token counts, got {self.prompts}")
        if not self.engines:
            raise ProbeError("--engines is empty")


@dataclass(frozen=True)
class ProfileConfig:
    engine: str = knob("cached", "engine name (or module:Class)")
    prompt: int = knob(64, "prompt length, tokens")
    new_tokens: int = knob(8, "tokens generated in the recorded run")
    model: str = knob("tiny", "preset name, config.json or local model folder")
    dtype: str = knob("float32", "weights and activations dtype", choices=("float32", "float16", "bfloat16"))
    device: str = knob("auto", "auto (CUDA when available), cpu, cuda, ...")
    batch: int = knob(1, "sequences per forward")
    seed: int = knob(0, "seed for weights and prompts")
    warmup: int = knob(1, "unrecorded warmup runs before the recorded one")

    def __post_init__(self):
        if self.new_tokens < 2:
            raise ProbeError("--new-tokens must be at least 2: one prefill token plus one decode step")
        if self.prompt < 1 or self.batch < 1 or self.warmup < 0:
            raise ProbeError("--prompt and --batch must be at least 1, --warmup at least 0")


def _base_type(tp):
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def add_arguments(parser: argparse.ArgumentParser, cls, *, overrides_only: bool = False,
                  skip: tuple[str, ...] = ()) -> None:
    """Add one flag per field of dataclass `cls`. With `overrides_only`, absent flags stay absent."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        meta, tp = f.metadata, _base_type(hints[f.name])
        default = argparse.SUPPRESS if overrides_only else f.default
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        help_text = f"{meta.get('help', '')} (default: {shown})"
        if tp is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            parser.add_argument(flag, type=meta.get("parse") or tp, default=default, help=help_text,
                                choices=meta.get("choices"))


def from_args(cls, ns: argparse.Namespace, **base):
    """Build `cls` from parsed flags; `base` gives defaults that flags override."""
    values = dict(base)
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            values[f.name] = getattr(ns, f.name)
    return cls(**values)
