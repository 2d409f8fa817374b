"""A step's sequences, tokens and phase from the shapes it recorded (`record_shapes=True`): the one definition.

**What a step read.** The first `aten::embedding` on the step's own thread in its window: its indices [B, T] say
the step's forward read B sequences of T tokens each (`StepLedger.recorded_tokens`; the roofline's tokens,
probe.analysis.roofline.step.shape_tokens, and the batching what-if's current batch read it). A step without one,
or whose indices are not two counts of at least 1, says nothing.

**Its phase** (`shape_kinds`), only where the step's kind names none (`PHASELESS`: a ProfilerStep range, an
iteration, a `--steps` step or an engine step whose marker gives no kind); a kind a marker gave (probe's
`prefill`/`decode#i`, vLLM's, SGLang's, TensorRT-LLM's counts) is never changed:

- T == 1: **decode**, B sequences of one new token each.
- T > 1 and the next step reads [B', 1]: **prefill**, the prompt's forward that decoding follows; unless its
  attention says it extends a cache (`first_keys`): its first `aten::scaled_dot_product_attention` reads more keys
  than the step's T and more than the step before it read. A prefill's keys are its own tokens (a dynamic cache
  starts empty) or the whole preallocated cache (a static one: as many as the step before read); a step whose keys
  grew past its own tokens appends to a cache it did not start: prompt lookup's or an assistant's verify round,
  a later chunk of a chunked prefill. Its kind stays.
- T > 1 in a **chunked prefill** (`chunked_runs`): a run of at least three steps of one B, each T > 1, the first
  starting its cache (its attention's keys are its own tokens), each next one's keys the step before's plus its
  own tokens (it appends its chunk to the cache the run wrote), all but the last of one T and the last no longer,
  and the next step reads [B', 1]: each is a **prefill**, one prompt's chunks (HF `generate(prefill_chunk_size=)`).
  Without the chunks' keys (no shapes, a static cache's preallocated keys) only the last is read, by the rule
  above. Two steps are no run: a prefill and a prompt lookup's first verify round read [1, P] then [1, c] with
  the keys so grown.
- T > 1 in a run of at least three steps of one B whose T grows by one a step ([B, T], [B, T + 1], [B, T + 2]):
  **decode without a KV cache**. Each step re-reads the whole sequence to make one new token (HF
  `generate(use_cache=False)`, a hand loop that feeds back the whole sequence): one new token a sequence, so a
  decode step, whose recorded tokens are all B x T it recomputes. The run's first step is one too: it does the
  same work as the rest, one token shorter. Two steps are no run: prompt lookup's verify rounds read [1, 4] then
  [1, 5] (three and four candidates) between single-token steps.
- Otherwise the kind stays: a lone [B, T > 1], or one followed by another T > 1 that is not one longer, says what
  the step read but not that it is a prefill (a training step, an encoder's forward and a step holding a whole
  `generate` read [B, T] as well). A step without a recorded shape keeps its kind: nothing is guessed.

These readings are of one pattern, a loop of prefills each followed by single-token steps, or of sequences growing
a token a step, and they are made only where the pattern holds: where they give a phase to more than half of the
phaseless steps that recorded a shape. Where most of those steps fit neither (an assisted `generate`'s iterations
each read [1, 2], the assistant's candidates, and only its last, the target alone, reads [1, 1]), the loop is
another one, and no step takes a phase from its shapes: the one step that fits would otherwise be called the loop's
only decode step, and so its steady state.

What it cannot tell: a step that holds several decode forwards (a ProfilerStep every ten tokens) reads [B, 1] first
and is called decode; the diagnosis's caveat on a step that calls its outermost module several times says so
(probe.analysis.diagnosis.conditions).
"""

from __future__ import annotations

import numpy as np

from probe import vocabulary
from probe.analysis.intervals import assign
from probe.analysis.ledger.steps import StepTokens
from probe.analysis.ledger.units import SDPA, keys_read
from probe.analysis.trace import Kind, Trace
from probe.counts import shape_counts

EMBEDDING = "aten::embedding"  # embedding(weight, indices): its indices are [batch, tokens]
PHASELESS = frozenset({"profiler_step", "step", "iteration"})  # the kinds that name no phase


def _first_dims(trace: Trace, name: str, start: np.ndarray, end: np.ndarray, pid: np.ndarray, tid: np.ndarray):
    """Per step (by position), the recorded input dims of its first op named `name`: on the step's thread, in its
    window [start, end] (sorted by start, as the steps are). Steps without one are left out."""
    ops = trace.rows(Kind.CPU_OP)
    ops = ops[trace.name_ids(lambda s: s == name)[trace.name_id[ops]] & (trace.shape_id[ops] >= 0)]
    at = assign(trace.ts_ns[ops], start, end)
    out: dict[int, tuple] = {}
    for row, i in zip(ops.tolist(), at.tolist(), strict=True):  # sorted by start: the first of a step wins
        if i >= 0 and i not in out and (int(trace.pid[row]), int(trace.tid[row])) == (int(pid[i]), int(tid[i])):
            out[i] = trace.shapes[int(trace.shape_id[row])].dims
    return out


def first_embeddings(
    trace: Trace, start: np.ndarray, end: np.ndarray, pid: np.ndarray, tid: np.ndarray
) -> dict[int, tuple[int, int]]:
    """Per step (by position), its first `aten::embedding`'s recorded indices (batch, tokens). Steps without one
    are left out."""
    out = {}
    for i, dims in _first_dims(trace, EMBEDDING, start, end, pid, tid).items():
        if (indices := shape_counts(dims[1] if len(dims) > 1 else None, 2)) is not None:
            out[i] = (indices[0], indices[1])
    return out


def first_keys(trace: Trace, start: np.ndarray, end: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> dict[int, int]:
    """Per step (by position), how many keys its first `aten::scaled_dot_product_attention` read: S of its key
    [B, H, S, E]. Steps without one (no shapes, another attention) are left out."""
    out = {}
    for i, dims in _first_dims(trace, SDPA, start, end, pid, tid).items():
        if (keys := keys_read(dims)) is not None:
            out[i] = keys
    return out


def recorded_tokens(batch: int, tokens: int) -> StepTokens:
    """What a step's first embedding [batch, tokens] says it processed: `batch` sequences of `tokens` each."""
    return StepTokens(batch, batch * tokens, None, f"recorded shapes ({EMBEDDING} [{batch}, {tokens}])")


def shape_kind(
    kind: str, shape: tuple[int, int] | None, after: tuple[int, int] | None, growing: bool, extends: bool = False
) -> str:
    """One step's kind by the module docstring's rule, from its recorded [B, T], the next step's (None: none),
    whether it lies in a run of steps growing by one token (`growing_runs`) and whether its attention appends to a
    cache it did not start (`extends`)."""
    if kind not in PHASELESS or shape is None:
        return kind
    if shape[1] == 1:
        return vocabulary.DECODE
    if after is not None and after[1] == 1 and not extends:
        return vocabulary.PREFILL
    if growing:
        return vocabulary.DECODE  # without a KV cache: the whole sequence re-read for one new token
    return kind


def growing_runs(n: int, shapes: dict[int, tuple[int, int]], least: int = 3) -> set[int]:
    """The steps (by position, of `n`) in a run of at least `least` consecutive steps of one B whose T grows by one
    a step."""
    out: set[int] = set()
    run = [0]
    for i in range(1, n + 1):
        prev, cur = shapes.get(i - 1), shapes.get(i)
        if i < n and prev is not None and cur is not None and cur == (prev[0], prev[1] + 1):
            run.append(i)
            continue
        if len(run) >= least:
            out.update(run)
        run = [i]
    return out


def shape_kinds(kinds: list[str], shapes: dict[int, tuple[int, int]], keys: dict[int, int] | None = None) -> list[str]:
    """Every step's kind, each phaseless one given its phase by its recorded shape where the rule says one, where
    the readings hold for most of the phaseless steps with a shape (the module docstring). `keys`: per step, the
    keys its first attention read (`first_keys`)."""
    keys = keys or {}
    growing = growing_runs(len(kinds), shapes)
    chunks = chunked_runs(len(kinds), shapes, keys)
    read = [
        vocabulary.PREFILL
        if i in chunks and kind in PHASELESS
        else shape_kind(kind, shapes.get(i), shapes.get(i + 1), i in growing, _extends(i, shapes.get(i), keys))
        for i, kind in enumerate(kinds)
    ]
    shaped = [i for i, kind in enumerate(kinds) if kind in PHASELESS and i in shapes]
    phased = sum(read[i] != kinds[i] for i in shaped)
    return read if 2 * phased > len(shaped) else list(kinds)


def chunked_runs(n: int, shapes: dict[int, tuple[int, int]], keys: dict[int, int], least: int = 3) -> set[int]:
    """The steps (by position, of `n`) in a chunked prefill (the module docstring): runs of at least `least` steps of
    one B and T > 1, the first's keys its own T, each next one's the step before's plus its own T, all but the last
    of one T and the last no longer, followed by a step reading [B', 1]."""
    out: set[int] = set()
    i = 0
    while i < n:
        first, k = shapes.get(i), keys.get(i)
        if first is None or first[1] < 2 or k != first[1]:
            i += 1
            continue
        j = i
        while (
            (cur := shapes.get(j + 1)) is not None
            and cur[0] == first[0]
            and cur[1] > 1
            and shapes[j][1] == first[1]
            and cur[1] <= first[1]
            and keys.get(j + 1) == keys[j] + cur[1]
        ):
            j += 1
        after = shapes.get(j + 1)
        if j + 1 - i >= least and after is not None and after[1] == 1:
            out.update(range(i, j + 1))
        i = j + 1
    return out


def _extends(i: int, shape: tuple[int, int] | None, keys: dict[int, int]) -> bool:
    """Whether step `i`'s attention appends to a cache it did not start: it read more keys than its own tokens and
    more than step i - 1 read (both recorded)."""
    mine, before = keys.get(i), keys.get(i - 1)
    return shape is not None and mine is not None and before is not None and mine > shape[1] and mine > before
