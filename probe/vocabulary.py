"""The annotation vocabulary: every range name the toolkit emits, in one torch-free place.

The capture side emits these (probe.capture.annotate, to NVTX and torch.profiler alike); the analysis side
reads them back out of traces (probe.analysis.ledger.build). Indexed ranges are labelled `name#index`.

| range | where | what it covers |
|---|---|---|
| `run` | decode loop | one whole generation: prefill and every decode step |
| `prefill` | decode loop | the prompt's forward, its sampling and its sync |
| `decode#i` | decode loop | decode step i (0-based): forward, sample, sync |
| `forward` | decode loop | the engine call (model forward and its Python) |
| `cache.update#l` | transformers `Cache.update` | the key/value write of layer l, once per layer |
| `cache.seq_length` | transformers `Cache.get_seq_length` | reading the filled length back (positions, mask offset) |
| `cache.mask_sizes` | transformers `Cache.get_mask_sizes` | the cache's answer to "how big is the mask" |
| `mask` | the model module's `create_*_mask` | building the attention mask (contains the query above) |
| `sample` | decode loop | greedy argmax over the logits |
| `sync` | decode loop | waiting for the device to drain (no-op on CPU) |
"""

from __future__ import annotations

from probe.counts import count

RUN, PREFILL, DECODE, FORWARD = "run", "prefill", "decode", "forward"
CACHE_UPDATE, CACHE_SEQ_LENGTH, CACHE_MASK_SIZES = "cache.update", "cache.seq_length", "cache.mask_sizes"
MASK, SAMPLE, SYNC = "mask", "sample", "sync"

VOCABULARY: dict[str, str] = {
    RUN: "one whole generation",
    PREFILL: "the prompt's forward, sample and sync",
    DECODE: "one decode step, labelled decode#i",
    FORWARD: "the engine call",
    CACHE_UPDATE: "one layer's key/value write, labelled cache.update#layer",
    CACHE_SEQ_LENGTH: "reading the cached sequence length back",
    CACHE_MASK_SIZES: "the cache's mask-size query",
    MASK: "attention mask construction",
    SAMPLE: "greedy sampling",
    SYNC: "waiting for the device",
}
CACHE_RANGES = (CACHE_UPDATE, CACHE_SEQ_LENGTH, CACHE_MASK_SIZES)
STEP_RANGES = (PREFILL, DECODE)


def label(name: str, index: int | None = None) -> str:
    return name if index is None else f"{name}#{index}"


def split_label(text: str) -> tuple[str, int | None]:
    """`decode#3` -> ("decode", 3); `sample` -> ("sample", None)."""
    name, sep, index = text.rpartition("#")
    value = count(index) if sep else None
    return (name, value) if value is not None else (text, None)
