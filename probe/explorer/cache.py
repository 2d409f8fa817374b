"""A cache bounded by bytes, for the explorer's loaders that hold large results (a trace's event table, a step laid
out on one clock, telemetry samples). Streamlit's caches bound the count of entries only: one window of a
million-event step is ~150 MB, so a cache of 64 of them grows by that much with every window looked at.

`sized_cache(max_bytes)` keeps the entries last used while their sizes (`nbytes`, measured once, when an entry is
made) add up to at most `max_bytes`, dropping the least recently used first. An entry larger than the whole bound
is still kept, alone, until the next one comes: the page that asked for it holds it anyway, and a trace that big
would otherwise be read again on every rerun. Shared by every session of the server (as st.cache_resource is), so
its entries are never changed by whoever gets them. Streamlit-free: `busy` is the spinner a miss shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pandas as pd

_SAMPLE = 64  # items of a long sequence measured; their mean size stands for the rest
_MAX_DEPTH = 12  # nesting measured item by item; deeper values count their own object only


class SizedCache:
    """Values by key, least recently used first, their `nbytes` summed in `total_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()  # Streamlit runs each session's script in a thread of its own

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value kept for `key`, else `make()`, kept (made outside the lock: two sessions may both make it)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
        value = make()
        size = nbytes(value)
        with self._lock:
            if key in self._entries:
                self.total_bytes -= self._entries.pop(key)[1]
            self._entries[key] = (value, size)
            self.total_bytes += size
            while self.total_bytes > self.max_bytes and len(self._entries) > 1:
                self.total_bytes -= self._entries.popitem(last=False)[1][1]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.total_bytes = 0


def sized_cache(max_bytes: int, busy: Callable[[], contextlib.AbstractContextManager] | None = None):
    """A function's results cached by its (hashable) arguments in a SizedCache of `max_bytes`, which the wrapped
    function carries as `.cache`; `busy()` wraps each call that makes a value (a spinner)."""

    def wrap(fn):
        cache = SizedCache(max_bytes)

        @functools.wraps(fn)
        def cached(*args):
            def make():
                with busy() if busy is not None else contextlib.nullcontext():
                    return fn(*args)

            return cache.get(args, make)

        cached.cache = cache  # type: ignore[attr-defined]
        return cached

    return wrap


def nbytes(value: Any, depth: int = 0) -> int:
    """The bytes `value` holds, estimated: a numpy array by its buffer, a pandas frame by memory_usage(deep=True), a
    dataclass (its attributes, cached ones too), tuple, list, set or dict by its items, a long one by _SAMPLE of them
    spread evenly times its length; anything else by sys.getsizeof. Objects two values share are counted in both."""
    if isinstance(value, np.ndarray):
        return value.nbytes + (_items(value.ravel(), depth) if value.dtype == object else 0)
    if isinstance(value, pd.DataFrame | pd.Series | pd.Index):
        return int(np.sum(value.memory_usage(deep=True)))
    own = sys.getsizeof(value)
    if depth >= _MAX_DEPTH or isinstance(value, str | bytes | int | float | bool | type(None)):
        return own
    if dataclasses.is_dataclass(value) and hasattr(value, "__dict__"):
        return own + sys.getsizeof(vars(value)) + sum(nbytes(v, depth + 1) for v in vars(value).values())
    if isinstance(value, list | tuple):
        return own + _items(value, depth)
    if isinstance(value, set | frozenset):
        return own + _items(list(itertools.islice(value, _SAMPLE)), depth, len(value))
    if isinstance(value, dict):
        keys = list(itertools.islice(value, _SAMPLE))
        return own + _items(keys, depth, len(value)) + _items([value[k] for k in keys], depth, len(value))
    return own


def _items(items, depth: int, count: int | None = None) -> int:
    """The items' bytes: each one's while they are few, else the mean of _SAMPLE spread evenly times `count`."""
    n = len(items) if count is None else count
    if not len(items):
        return 0
    step = max(1, len(items) // _SAMPLE)
    sample = items[::step][:_SAMPLE]
    measured = sum(nbytes(v, depth + 1) for v in sample)
    return measured if len(sample) == n else measured * n // len(sample)
