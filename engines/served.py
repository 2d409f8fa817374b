"""Which engine serves which decoder family: every built-in engine's own `refusal` asked of each family
`engines.arch` models, through that family's default transformers config. The one rule is the engines'; this only
asks it across the table (`probe models` prints the answer). Imports torch and transformers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformers import AutoConfig
from transformers.utils import logging

from engines import engines
from engines.arch import RULES
from engines.base import Engine


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers warns about default token ids outside a family's default vocabulary: not this table's business."""
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def refusals() -> dict[str, dict[str, str]]:
    """Built-in engine name -> {family: why it refuses that family}; a family it does not name, it serves."""
    classes: dict[str, type[Engine]] = engines()
    out: dict[str, dict[str, str]] = {name: {} for name in classes}
    with _quiet():
        for family in RULES:
            config = AutoConfig.for_model(family)
            for name, cls in classes.items():
                if why := cls.refusal(config):
                    out[name][family] = why
    return out


def families() -> list[str]:
    """The decoder families probe's roofline models and its engines were checked against."""
    return list(RULES)
