"""The two consoles every command prints through. Its own module, so a command that prints only a trace's tables
(`probe analyze`) loads rich and nothing else of the render layer (no pandas)."""

from __future__ import annotations

from rich.console import Console


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False, width=160)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)
