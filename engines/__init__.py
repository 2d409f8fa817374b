"""Decode engines built on HF transformers. They import nothing from `probe`.

Importing the package loads no engine (and so no torch): `engines.configs` reads model configs on a machine
without torch, and an engine class is imported the first time it is asked for.
"""

from __future__ import annotations

import importlib
import re

# name -> "module:Class"; `engine_class` imports on demand.
BUILTIN: dict[str, str] = {
    "naive": "engines.naive:NaiveEngine",
    "cached": "engines.cached:CachedEngine",
    "static": "engines.static:StaticEngine",
    "static-eager": "engines.static:StaticEagerEngine",
    "batched": "engines.batched:BatchedEngine",
}


_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # package.module:ClassName


class EngineError(ValueError):
    """An engine name that cannot be resolved; one line, fit for a CLI error."""


def engine_class(name: str):
    """A registered engine by name, or any Engine subclass as `package.module:ClassName`."""
    spec = BUILTIN.get(name, name)
    if not _SPEC.fullmatch(spec):
        raise EngineError(f"unknown engine {name!r}: use one of {', '.join(BUILTIN)} or module:Class")
    module, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise EngineError(f"cannot load engine {name!r}: {e}") from None
    base = importlib.import_module("engines.base").Engine
    if isinstance(cls, type) and issubclass(cls, base):
        return cls
    raise EngineError(f"{name!r} is not an Engine subclass")


def check_serves(classes, config) -> None:
    """One line naming every engine in `classes` that cannot serve a model of this transformers config, and why
    (its `refusal`), before anything is built."""
    refused = [f"{cls.name} cannot serve {config.model_type}: {why}" for cls in classes if (why := cls.refusal(config))]
    if refused:
        raise EngineError("; ".join(refused))


def engines() -> dict[str, type]:
    """Every built-in engine class by name (imports them, and torch)."""
    return {name: engine_class(name) for name in BUILTIN}
