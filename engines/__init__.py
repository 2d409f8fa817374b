"""Decode engines built on HF transformers. They import nothing from `probe`."""

from __future__ import annotations

import importlib

from engines.base import Engine
from engines.batched import BatchedEngine
from engines.cached import CachedEngine
from engines.naive import NaiveEngine
from engines.static import StaticEagerEngine, StaticEngine

ENGINES: dict[str, type[Engine]] = {
    e.name: e for e in (NaiveEngine, CachedEngine, StaticEngine, StaticEagerEngine, BatchedEngine)
}


class EngineError(ValueError):
    """An engine name that cannot be resolved; one line, fit for a CLI error."""


def engine_class(name: str) -> type[Engine]:
    """A registered engine by name, or any Engine subclass as `package.module:ClassName`."""
    if name in ENGINES:
        return ENGINES[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise EngineError(f"cannot load engine {name!r}: {e}") from None
        if isinstance(cls, type) and issubclass(cls, Engine):
            return cls
        raise EngineError(f"{name!r} is not an Engine subclass")
    raise EngineError(f"unknown engine {name!r}: use one of {', '.join(ENGINES)} or module:Class")
