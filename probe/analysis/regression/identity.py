"""What a measurement was taken under, as far as holding two of them to each other goes: `ConfigIdentity`.

Two uses, one record:
- `probe compare` holds two inputs to each other only when every figure both recorded agrees (the model and dtype; a
  trace's sidecar adds the prompt and the batch). Such an identity names no `kind`.
- The history keys its runs by configuration: a bench-like run's settings and cells (`kind="results"`), or a profiled
  trace's settings and shape (`kind="trace"`). Its `id` (a hash of `to_json()`, the history's config_id) and `label`
  (what a person reads) come from it.

`to_json()` is the dict the history has always hashed and stored as config_json: the same keys for the same kind, so
every config_id already in a history file stays the one a new run of that configuration gets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Literal

from probe.analysis.records.results import CellKey
from probe.analysis.records.sidecar import Tool

IdentityKind = Literal["results", "trace"]

# What each kind's to_json() holds (with its kind, and a bench-like run's cells and traces).
_RESULTS_FIELDS = ("model", "dtype", "seed", "warmup", "threads", "annotate", "telemetry_ms")
_TRACE_FIELDS = ("model", "dtype", "seed", "warmup", "prompt", "new_tokens", "batch", "tool", "engine")
_COMPARED = ("model", "dtype", "prompt", "batch")  # what a compare identity (no kind) holds


@dataclass(frozen=True)
class ConfigIdentity:
    """What must be equal for two measurements to be compared. None: not recorded (never a disagreement)."""

    kind: IdentityKind | None = None  # None: probe compare's identity of a SampleSet
    model: str | None = None
    dtype: str | None = None
    seed: int | None = None
    warmup: int | None = None
    # a bench-like run's settings
    threads: int | None = None
    annotate: bool | None = None
    telemetry_ms: float | None = None
    cells: tuple[CellKey, ...] = ()  # its cells: a sweep of other prompts, engines or token counts is another config
    traces: tuple[str, ...] = ()  # the profiled traces of a `probe run`, as their prefixes ("cached p64 n8"), sorted
    # a profiled trace's shape
    engine: str | None = None
    prompt: int | None = None
    new_tokens: int | None = None
    batch: int | None = None
    tool: Tool | None = None

    def to_json(self) -> dict:
        """The identity as the history stores it (config_json) and hashes it (config_id)."""
        if self.kind == "results":
            out = {f: getattr(self, f) for f in _RESULTS_FIELDS}
            out |= {"kind": "results", "cells": sorted(str(c) for c in self.cells)}
            return out | ({"traces": list(self.traces)} if self.traces else {})
        if self.kind == "trace":
            return {f: getattr(self, f) for f in _TRACE_FIELDS} | {"kind": "trace"}
        return {f: v for f in _COMPARED if (v := getattr(self, f)) is not None}

    @property
    def id(self) -> str:
        """The configuration's hash: the history's config_id."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:10]

    @property
    def label(self) -> str:
        """What a person reads: `tiny float32 cached,naive p16,64 n32` for a bench-like run (its settings and the
        keys of its cells), `profile tiny float32 cached p64 n8` for a profiled trace."""
        head = f"{self.model} {self.dtype}"
        if self.kind == "trace":
            batch = f" b{self.batch}" if (self.batch or 1) > 1 else ""
            return f"profile {head} {self.engine} p{self.prompt} n{self.new_tokens}{batch}"
        keys = sorted(self.cells, key=str)
        engines = list(dict.fromkeys(k.engine for k in keys))
        prompts = sorted({k.prompt_tokens for k in keys})
        news = sorted({k.new_tokens for k in keys})
        batches = sorted({k.batch for k in keys if k.batch > 1})
        text = f"{head} {','.join(engines)} p{','.join(map(str, prompts))} n{','.join(map(str, news))}"
        if batches:
            text += f" b{','.join(map(str, batches))}"
        if self.threads:
            text += f" threads={self.threads}"
        return text + (" +traces" if self.traces else "")

    def mismatch(self, other: ConfigIdentity) -> tuple[str, object, object] | None:
        """The first figure (by name) both recorded and that differs: (name, mine, other's); None when they agree."""
        for name in sorted(f.name for f in fields(self)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine not in (None, ()) and theirs not in (None, ()) and mine != theirs:
                return name, mine, theirs
        return None
