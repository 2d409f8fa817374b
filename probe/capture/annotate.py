"""Emitting the annotation vocabulary (probe.vocabulary): every range as NVTX and as torch.profiler ranges.

Each name is emitted twice, as an NVTX range (through the `nvtx` package, which works without a GPU, or
`torch.cuda.nvtx` where only that exists) and as a torch.profiler `record_function` range, so the same
names appear in Nsight Systems and torch.profiler traces. Indexed ranges are labelled `name#index`.
The cache ranges come from patching transformers' Cache methods and mask builders for the duration of a
run (`instrument`), so the engines stay free of instrumentation.

Cost: with annotations switched off the loop uses `NULL`, a shared no-op context, and no method is
patched. Switched on but with no tool attached, a range costs one check: `record_function` only runs
while torch.profiler does (unguarded it costs ~10 us a call), and NVTX only when a tool has injected
itself (nsys sets NVTX_INJECTION64_PATH for the program it runs). benchmarks/annotation_overhead.py
measures what is left.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator

import torch
from transformers.cache_utils import Cache

try:
    import nvtx  # works without a GPU; torch.cuda.nvtx raises on a CPU build of torch
except ImportError:
    nvtx = None

from probe.vocabulary import CACHE_MASK_SIZES, CACHE_SEQ_LENGTH, CACHE_UPDATE, MASK, label

MASK_FUNCTIONS = ("create_causal_mask", "create_sliding_window_causal_mask")


def nvtx_tool_attached() -> bool:
    """Whether an NVTX tool (Nsight Systems, ...) is loaded into this process: NVTX finds its tool through
    these variables, which nsys sets for the program it launches. Without one, every NVTX call is a no-op
    in the C library anyway, so skipping it changes nothing but the cost. PROBE_NVTX=1 forces it on."""
    env = os.environ
    return bool(env.get("NVTX_INJECTION64_PATH") or env.get("NVTX_INJECTION32_PATH") or env.get("PROBE_NVTX") == "1")


def _nvtx_functions() -> tuple[Callable[[str], object], Callable[[], object]] | None:
    if nvtx is not None:
        return nvtx.push_range, nvtx.pop_range
    if torch.cuda.is_available():
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return None


class _Range:
    __slots__ = ("_annotator", "_label", "_record")

    def __init__(self, annotator: Annotator, text: str):
        self._annotator, self._label, self._record = annotator, text, None

    def __enter__(self):
        if self._annotator.push is not None:
            self._annotator.push(self._label)
        # Guarded: an unguarded record_function costs ~10 us even with no profiler running.
        if torch.autograd._profiler_enabled():
            self._record = torch.autograd.profiler.record_function(self._label)
            self._record.__enter__()
        return self

    def __exit__(self, *exc):
        if self._record is not None:
            self._record.__exit__(*exc)
            self._record = None
        if self._annotator.pop is not None:
            self._annotator.pop()
        return False


class Annotator:
    """Emits the vocabulary's ranges to NVTX (when a tool is attached) and torch.profiler (when it runs)."""

    enabled = True
    _null = contextlib.nullcontext()

    def __init__(self, nvtx: bool | None = None):
        fns = _nvtx_functions() if (nvtx_tool_attached() if nvtx is None else nvtx) else None
        self.push: Callable[[str], object] | None = fns[0] if fns else None
        self.pop: Callable[[], object] | None = fns[1] if fns else None

    def __call__(self, name: str, index: int | None = None) -> contextlib.AbstractContextManager:
        if self.push is None and not torch.autograd._profiler_enabled():
            return self._null  # no tool listening: one C call, no range object
        return _Range(self, label(name, index))


class NullAnnotator:
    """Annotations switched off: one shared no-op context, nothing patched."""

    enabled = False
    _null = contextlib.nullcontext()

    def __call__(self, name: str, index: int | None = None) -> contextlib.AbstractContextManager:
        return self._null


NULL = NullAnnotator()


def _wrap(fn: Callable, annotator: Annotator, name: str, index_arg: int | None = None) -> Callable:
    if index_arg is None:

        def wrapped(*args, **kwargs):
            with annotator(name):
                return fn(*args, **kwargs)
    else:

        def wrapped(*args, **kwargs):
            index = args[index_arg] if len(args) > index_arg else kwargs.get("layer_idx")
            with annotator(name, index):
                return fn(*args, **kwargs)

    return functools.update_wrapper(wrapped, fn, assigned=(), updated=())  # sets only __wrapped__


@contextlib.contextmanager
def instrument(model: torch.nn.Module, annotator, captured: bool = False) -> Iterator[None]:
    """Wrap the cache bookkeeping and mask construction that transformers runs inside a forward.

    The engines stay free of instrumentation: this patches transformers' `Cache` methods (every cache type
    routes through them) and the mask builders imported by the model's module, for the duration of the
    block only. Nothing is patched when annotations are off, or when the decode step is compiled/captured
    (host ranges inside a graph would break it and measure nothing).
    """
    if not annotator.enabled or captured:
        yield
        return
    targets: list[tuple[object, str, Callable]] = [
        (Cache, "update", _wrap(Cache.update, annotator, CACHE_UPDATE, index_arg=3)),
        (Cache, "get_seq_length", _wrap(Cache.get_seq_length, annotator, CACHE_SEQ_LENGTH)),
        (Cache, "get_mask_sizes", _wrap(Cache.get_mask_sizes, annotator, CACHE_MASK_SIZES)),
    ]
    modules = {sys.modules[type(m).__module__] for m in model.modules() if type(m).__module__ in sys.modules}
    for module in modules:
        for fn_name in MASK_FUNCTIONS:
            if callable(getattr(module, fn_name, None)):
                targets.append((module, fn_name, _wrap(getattr(module, fn_name), annotator, MASK)))
    saved = [
        (owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr))
        for owner, attr, _ in targets
    ]
    try:
        for owner, attr, wrapped in targets:
            setattr(owner, attr, wrapped)
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)
