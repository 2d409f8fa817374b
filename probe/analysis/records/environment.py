"""The environment a measurement was taken in, typed: versions, device, CPU, the code's commit.

`probe.capture.env.environment()` records one where torch runs; results files and trace sidecars carry it as JSON,
and the analysis side reads it back here, torch-free. Which differences matter is a rule with one home each:

- `identity()`: what the run history calls one environment (its `env_id`): torch, transformers, the device kind
  and name, the driver, the CPU;
- `differs_for_counts(other)`: what changes launch counts legitimately (torch, transformers, the device), so that
  probe compare shows counts but does not gate them;
- `differs_for_timings(other)`: what makes timings incomparable beyond that (the CPU model, torch's threads);
- `differs_for_resume(other)`: what a resumed sweep must share with the cells it keeps (torch, transformers, the
  device's name, the dtype).

Each returns typed `EnvDifference`s, so no caller parses a warning's text. `git_state(folder)` reads a checkout's
commit and whether tracked files are modified; it is the one implementation (probe's own checkout for the
environment, the current folder's for the run history).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

DIRTY = "-dirty"  # how files before schema 5 marked modified tracked files: a suffix on `git_commit`


@dataclass(frozen=True)
class Clock:
    """Both clocks read at one instant: steps and telemetry use perf_counter_ns, traces use the epoch. Results
    files and sidecars carry it beside their environment."""

    perf_counter_ns: int
    epoch_ns: int


@dataclass(frozen=True)
class EnvDifference:
    key: str  # the field, or "device" for the device kind and name together
    ours: object  # this side's value (the baseline's, the held folder's)
    theirs: object  # the other side's

    def __str__(self) -> str:
        return f"{self.key} differs: {self.ours} vs {self.theirs}"


@dataclass(frozen=True)
class Environment:
    """Where a result was measured. Every field may be None: a file that did not record it."""

    torch: str | None = None
    transformers: str | None = None
    python: str | None = None
    device: str | None = None  # "cpu", "cuda:0"
    device_name: str | None = None  # "cpu", "NVIDIA H100 80GB HBM3"
    cuda: str | None = None  # torch's CUDA version
    driver: str | None = None  # the NVIDIA driver (recorded by the run history, where NVML answers)
    cpu_model: str | None = None
    cpu_count: int | None = None
    torch_threads: int | None = None
    dtype: str | None = None
    attn_implementation: str | None = None  # the attention the model ran (--attn, as transformers resolved it)
    commit: str | None = None  # probe's own checkout
    dirty: bool | None = None  # tracked files modified at the time
    platform: str | None = None
    executor: Literal["ray"] | None = None  # "ray": the cells ran on a Ray cluster; None: in this process
    workers: int | None = None  # --executor ray: the workers that ran the cells

    @property
    def device_kind(self) -> str | None:
        return self.device.split(":")[0] if self.device is not None else None

    def identity(self) -> str:
        """The run history's env_id: a hash of torch, transformers, the device kind and name, the driver and the
        CPU (the same hash histories written before this type hold)."""
        key = {
            "torch": self.torch,
            "transformers": self.transformers,
            "device": self.device_kind,
            "device_name": self.device_name,
            "driver": self.driver,
            "cpu_model": self.cpu_model,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def differs_for_counts(self, other: Environment) -> list[EnvDifference]:
        """torch, transformers, or the device (kind and name): launch counts legitimately change with them."""
        out = _differences(self, other, ("torch", "transformers"), skip_unknown=False)
        ours, theirs = self._device_text(), other._device_text()
        if ours != theirs:
            out.append(EnvDifference("device", ours, theirs))
        return out

    def differs_for_timings(self, other: Environment) -> list[EnvDifference]:
        """The CPU model or torch's threads, where both sides recorded them: timings from other machines."""
        return _differences(self, other, ("cpu_model", "torch_threads"), skip_unknown=True)

    def differs_for_resume(self, other: Environment) -> list[EnvDifference]:
        """What the cells a resumed sweep keeps and the ones it adds must share."""
        return _differences(self, other, ("torch", "transformers", "device_name", "dtype"), skip_unknown=False)

    def _device_text(self) -> str | None:
        if self.device is None and self.device_name is None:
            return None
        return f"{self.device_kind or '?'} ({self.device_name or '?'})"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc) -> Environment:
        """An environment as a results file or sidecar holds it. Fields it does not know are ignored; files before
        schema 5 held the commit as `git_commit`, suffixed "-dirty" when tracked files were modified: read here,
        once. ValueError, naming the field, for a value of the wrong type."""
        if not isinstance(doc, dict):
            raise ValueError(f"an environment is a JSON object, not {type(doc).__name__}")
        known = {k: v for k, v in doc.items() if k in _FIELDS}
        old = doc.get("git_commit")
        if isinstance(old, str) and "commit" not in known:
            known["commit"], known["dirty"] = old.removesuffix(DIRTY) or None, old.endswith(DIRTY)
        try:
            return msgspec.convert(known, cls)
        except msgspec.ValidationError as e:
            raise ValueError(f"environment: {e}") from None


_FIELDS = frozenset(f.name for f in dataclasses.fields(Environment))


def _differences(ours: Environment, theirs: Environment, keys, skip_unknown: bool) -> list[EnvDifference]:
    out = []
    for key in keys:
        a, b = getattr(ours, key), getattr(theirs, key)
        if a != b and not (skip_unknown and (a is None or b is None)):
            out.append(EnvDifference(key, a, b))
    return out


# What reading a checkout's state must not start: git status runs the repository's fsmonitor command and its
# filters' clean commands (a checkout someone else prepared names them), may write the index (its hooks), asks each
# submodule for its own status (with the submodule's configuration: so a submodule counts as modified only when its
# commit moved), and in a partial clone fetches missing objects. Given as GIT_CONFIG_COUNT pairs, which need no
# quoting of a key.
_QUIET_GIT = {"core.fsmonitor": "false", "core.hooksPath": "/dev/null", "protocol.allow": "never"}


def git_state(folder: str | Path) -> tuple[str | None, bool | None]:
    """HEAD of the repository `folder` lies in, and whether tracked files are modified; (None, None) outside one
    (or without git), and dirty None when the status cannot be read. Runs no command the repository configures
    (fsmonitor, hooks, filter drivers) and trusts no more directories than git does."""

    def git(*args: str, config: dict[str, str] = _QUIET_GIT) -> subprocess.CompletedProcess | None:
        overrides = list(config.items())
        env = os.environ | {"GIT_CONFIG_COUNT": str(len(overrides)), "GIT_OPTIONAL_LOCKS": "0"}
        env |= {"GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0"}
        for i, (key, value) in enumerate(overrides):
            env |= {f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": value}
        try:
            return subprocess.run(
                ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, env=env
            )
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
            return None

    head = git("rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return None, None
    drivers = git("config", "-z", "--name-only", "--get-regexp", r"^filter\.")
    if drivers is None or drivers.returncode not in (0, 1):  # 1: no filter configured
        return head.stdout.strip(), None
    quiet = dict(_QUIET_GIT)
    for key in drivers.stdout.split("\0"):
        driver = key[len("filter.") : key.rfind(".")]
        if driver:
            quiet |= {f"filter.{driver}.clean": "", f"filter.{driver}.process": ""}
    status = git("status", "--porcelain", "--untracked-files=no", "--ignore-submodules=dirty", config=quiet)
    return head.stdout.strip(), (bool(status.stdout.strip()) if status and status.returncode == 0 else None)
