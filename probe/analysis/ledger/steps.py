"""Finding the steps of any trace, and saying which rule found them.

The rules, tried in this order; the first that finds anything wins, and `StepSet.rule` names it:

1. `--steps REGEX` when given: every range a trace holds whose name the pattern matches anywhere (a search, as
   `grep`: `--steps execute_` finds vLLM's `execute_new_1_cached_0`; `^...$` anchors it to the whole name): torch
   `user_annotation`s and NVTX ranges, `ProfilerStep#N`, cpu_ops, and Python frames (`python_function`, so
   `--steps execute_model` finds vLLM's worker frames), and with the ranges another tool's events of categories the
   reader does not know (`foreign_rows`: VizTracer's function calls, ONNX Runtime's runs, a hand-written trace's
   spans); `--steps-kind` keeps some of those kinds only
   (`STEP_KINDS`). The pattern is compiled for RE2 by probe.analysis.ledger.patterns, so no pattern can make the
   search backtrack. An explicit request comes first; one that matches nothing is a warning in `StepSet.warnings`
   (the CLI prints warnings on stderr before its tables), and the rules below apply.
2. probe's own ranges: `prefill` and `decode#i` (probe.vocabulary), when a `decode#i` is among them. probe's loop
   always marks its decode steps beside its prefill; a `prefill` range with no `decode#i` is a user's own word (a
   hand-written loop's `prefill` beside its ten `decode_step` ranges, which hold most of the work): a warning says
   it was not taken, and the rules below find the steps (the decode_step ranges, by rule 6).
3. `ProfilerStep#N`, torch's own marker (`profile.step()`): those that hold an op (`_holding_ops`; the empty one
   the last `profile.step()` opens before the profiler stops is none).
4. The per-iteration markers real engines emit, in `MARKERS` (each with the trace it was found in); then the
   engines' own step functions as Python frames, in `ENGINE_FRAMES` (vLLM V1's and V0's worker `execute_model`,
   SGLang's `run_batch`, TensorRT-LLM's `_forward_step`, nano-vllm's `step`): their code, not a trace's names.
   HF `generate`'s decoding loop (`_sample` and its kin) is a loop, not a step: its steps are the repeating unit
   inside it, or its heaviest call, each to the next (probe.analysis.ledger.units' rule 4: first where transformers
   5.x calls the prefill's forward inside a once-only `_prefill` frame, else when no unit or cycle holds).
5. Numbered ranges: the user's own iteration marker under a name of the user's, ProfilerStep#N's shape
   (`token_0_processing` .. `token_63_processing`, NVTX or user annotations): a family of at least three ranges of
   one thread under one parent range, names one text with its numbers replaced, each once, disjoint, each holding
   launches and together most of the thread's, with no launch of the parent range outside them; the outermost such
   family (probe.analysis.ledger.units.numbered_ranges, whose docstring states the rule and what it cannot tell
   apart). After the engines' markers and frames, which know their engine; before the repeating unit, which would
   read such ranges as different names. A forward's `layer_N` ranges are pieces of it: the forward's range runs
   its own work around them.
6. The outermost host unit that repeats and holds the launches (probe.analysis.ledger.units), on the host thread
   whose steps hold the most GPU work among those that launch it; where the trace records nothing for a stretch
   longer than any step (the program idle between bursts, two recordings in one file), each side of it by itself
   (`units.apart_at_idle`). In a trace that runs nothing on a GPU, each thread's cpu_ops that code called stand in
   for the launches (`units.unit_work`): a CPU loop run N times is N steps;
   in a trace of ranges alone (NVTX of a CPU program under nsys: no op either), each thread's innermost ranges do.
7. When a trace replays graphs and has no host structure at all: each graph launch (cudaGraphLaunch,
   hipGraphLaunch) starts a step, which lasts until the next graph launch on its thread (the last one until that
   thread's last event ends). A graph launch is a step only when each holds a whole forward; when the launches are
   pieces of a larger repeating unit (vLLM's piecewise graphs), rule 6 has found that unit first.
8. Otherwise the whole trace is one step, with a warning naming `--steps`: on the thread that launches the most GPU
   work (else the busiest thread), from its first event to its last, so the time before the thread's first event
   (the profiler starting, other threads' set-up) is lead-in, not host work.

Where markers nest (an outer and an inner marker for the same iteration, as SGLang's `step[...]` inside its
scheduler's batch range, or vLLM's worker `execute_model` frame around the model runner's), only the outermost
counts, so one iteration is one step. Steps run on the thread of their range; a step's window is [start, end],
both ends included.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from probe import vocabulary
from probe.analysis.ledger.gpu import attribute
from probe.analysis.ledger.patterns import Pattern, compile_user
from probe.analysis.ledger.units import (
    Tree,
    Units,
    apart_at_idle,
    idle,
    launch_calls,
    loop_calls,
    numbered_ranges,
    outermost,
    repeating_unit,
    sampled_stacks,
    threads_by_launches,
    unit_work,
)
from probe.analysis.trace import GRAPH_LAUNCH, PROFILER_STEP_PREFIX, Kind, Trace, foreign_rows
from probe.counts import DIGITS, MAX_COUNT, count
from probe.errors import ProbeError

RULE_STEPS, RULE_PROBE, RULE_PROFILER, RULE_GRAPH, RULE_WINDOW = (
    "--steps",
    "probe ranges",
    "ProfilerStep",
    "graph launches",
    "whole trace",
)
# `--steps-kind`: the kinds of range `--steps` searches, by the name a user knows them by
STEP_KINDS: dict[str, tuple[Kind, ...]] = {
    "range": (Kind.USER_RANGE, Kind.PROFILER_STEP),  # user annotations, NVTX, ProfilerStep#N (and foreign events)
    "cpu_op": (Kind.CPU_OP,),
    "python": (Kind.PYTHON,),  # python_function frames (with_stack=True)
}
UNIT_THREADS = 4  # of the threads that launch GPU work (CPU-only: run top-level ops), the busiest this many are read
MIXED, STEP = "mixed", "step"


def _phase(context: int, generation: int) -> str:
    """An iteration's kind from its request counts: prompts only, decodes only, or both."""
    if context and not generation:
        return vocabulary.PREFILL
    if generation and not context:
        return vocabulary.DECODE
    return MIXED


class _NotACount(ValueError):
    """A marker's count that cannot be true: over MAX_COUNT, or keys attended fewer than the query tokens."""


def _n(text: str) -> int:
    """A count a marker's pattern matched (ASCII digits): its value, or _NotACount over MAX_COUNT."""
    value = count(text)
    if value is None:
        raise _NotACount(f"a count over {MAX_COUNT:,}")
    return value


def _cached(sk: int, sq: int) -> int:
    """Positions cached before the step: keys attended less the new tokens, which cannot be negative."""
    if sk < sq:
        raise _NotACount(f"keys attended ({sk}) fewer than the query tokens ({sq})")
    return sk - sq


def _vllm_kind(m: re.Match) -> str:
    if m["new"] is not None:
        return _phase(_n(m["new"]), _n(m["cached"]))
    return _phase(_n(m["ctx"]), _n(m["gen"]))


_SGLANG_MODES = {
    "EXTEND": vocabulary.PREFILL,
    "PREFILL": vocabulary.PREFILL,
    "SPLIT_PREFILL": vocabulary.PREFILL,
    "DLLM_EXTEND": vocabulary.PREFILL,
    "DECODE": vocabulary.DECODE,
    "MIXED": MIXED,
}


@dataclass(frozen=True)
class StepTokens:
    """What an engine's step marker says the step processed: its sequences, the new tokens over them, and the
    positions already cached before the step over them. None where the marker does not say."""

    sequences: int
    new_tokens: int | None
    context_tokens: int | None
    source: str  # which marker form said it

    def to_json(self) -> dict:
        return {
            "sequences": self.sequences,
            "new_tokens": self.new_tokens,
            "context_tokens": self.context_tokens,
            "source": self.source,
        }


_SQSK = re.compile(rf"sq({DIGITS})sk({DIGITS})sqsq{DIGITS}sqsk{DIGITS}")
_COUNTS = re.compile(DIGITS)


def _vllm_tokens(m: re.Match) -> StepTokens | None:
    """vLLM's markers. The detailed form (TraceLens's patch, vLLM 0.26+) carries, per phase, sq (query tokens) and
    sk (keys attended: cached positions plus the new tokens) summed over the phase's requests, so the cached context
    is sk - sq; the native form carries the token count alone (TraceLens's annotation_utils reads them the same)."""
    if m["new"] is not None:
        return StepTokens(_n(m["new"]) + _n(m["cached"]), None, None, "vLLM execute_new_N_cached_M")
    sequences = _n(m["ctx"]) + _n(m["gen"])
    c, g = _SQSK.fullmatch(m["cst"]), _SQSK.fullmatch(m["gst"])
    if c and g:
        sq = _n(c[1]) + _n(g[1])
        return StepTokens(sequences, sq, _cached(_n(c[2]) + _n(g[2]), sq), "vLLM execute_ (detailed: sq, sk)")
    if _COUNTS.fullmatch(m["cst"]) and _COUNTS.fullmatch(m["gst"]):
        return StepTokens(sequences, _n(m["cst"]) + _n(m["gst"]), None, "vLLM execute_context_R(N)_generation_R(N)")
    return StepTokens(sequences, None, None, "vLLM execute_")


def _sglang_tokens(m: re.Match) -> StepTokens | None:
    """SGLang's step[MODE bs=.. toks=..]: bs requests; the detailed form adds c_sq/c_sk and g_sq/g_sk as vLLM's."""
    values = {k: _n(v) for k, v in re.findall(rf"([a-z_]+)=({DIGITS})", m[0])}
    bs = values.get("bs")
    if bs is None:
        return None
    if "c_sq" in values or "g_sq" in values:
        sq = values.get("c_sq", 0) + values.get("g_sq", 0)
        sk = values.get("c_sk", 0) + values.get("g_sk", 0)
        return StepTokens(bs, sq, _cached(sk, sq), "SGLang step[] (detailed: sq, sk)")
    if "toks" in values:
        return StepTokens(bs, values["toks"], None, "SGLang step[] toks")
    return StepTokens(bs, bs if m["mode"] == "DECODE" else None, None, "SGLang step[] bs")


def _trtllm_tokens(m: re.Match) -> StepTokens | None:
    ctx, gen = _n(m["ctx"]), _n(m["gen"])
    return StepTokens(ctx + gen, gen if not ctx else None, None, "TensorRT-LLM _forward_step")


@dataclass(frozen=True)
class Marker:
    """One engine's per-iteration range: what it is called, what one covers, where it was seen, and what it says
    about the step's kind and tokens."""

    label: str  # how the step rule names it
    pattern: re.Pattern
    covers: str
    source: str  # the code that emits it
    seen_in: str  # a trace that holds it
    kind: Callable[[re.Match], str] = lambda m: STEP
    tokens: Callable[[re.Match], StepTokens | None] = lambda m: None


MARKERS: tuple[Marker, ...] = (
    Marker(
        "vLLM execute_* (also TraceLens-patched SGLang)",
        re.compile(
            r"execute_(?:new_(?P<new>[0-9]+)_cached_(?P<cached>[0-9]+)|(?:[0-9]+_)?context_(?P<ctx>[0-9]+)"
            r"\((?P<cst>[^)]*)\)_generation_(?P<gen>[0-9]+)\((?P<gst>[^)]*)\))"
        ),
        "one Worker.execute_model call: one scheduler step on one rank (input prep, forward, postprocess; "
        "sampling runs after it)",
        "vllm/v1/worker/gpu_worker.py Worker.annotate_profile: execute_new_N_cached_M (v0.11.1-0.13), "
        "execute_context_R(N)_generation_R(N) (v0.14+), the detailed execute_T_context_..(sq..sk..) form "
        "(v0.26+ detailed_trace_annotation, and TraceLens's vLLM and SGLang patches)",
        "TraceLens's test traces (../shared/traces/public): rocm_vllm_decode_cudagraph (detailed form), b200_eager "
        "(a patched v0.13 form), rocm_sglang_qwen3_8b_extend_step (TraceLens's SGLang patch)",
        _vllm_kind,
        _vllm_tokens,
    ),
    Marker(
        "SGLang scheduler.run_batch",
        re.compile(r"scheduler\.run_batch"),
        "one Scheduler.run_batch: one scheduler iteration, every forward of the batch",
        "python/sglang/srt/managers/scheduler.py (v0.5.14+)",
        "none of ours (SGLang 0.5.14+ traces)",
    ),
    Marker(
        "SGLang step[...]",
        re.compile(r"step\[(?P<mode>[A-Z_]+)(?: [a-z_]+=[0-9]+)*\]"),
        "one ModelRunner.forward: one model forward (speculative decoding runs several an iteration)",
        "python/sglang/srt/model_executor/model_runner.py (v0.5.11+; srt/utils/profile_utils.py from 0.5.16)",
        "TraceLens's rocm_sglang_qwen3_8b_extend_step (../shared/traces/public; inside the execute_.. range)",
        lambda m: _SGLANG_MODES.get(m["mode"], m["mode"].lower()),
        _sglang_tokens,
    ),
    Marker(
        "TensorRT-LLM _forward_step",
        re.compile(r"\[Executor\] _forward_step [0-9]+: (?P<ctx>[0-9]+) ctx reqs, (?P<gen>[0-9]+) gen reqs"),
        "one executor iteration (an NVTX range: nsys exports only)",
        "tensorrt_llm/_torch/pyexecutor/py_executor.py",
        "none of ours",
        lambda m: _phase(_n(m["ctx"]), _n(m["gen"])),
        _trtllm_tokens,
    ),
)


@dataclass(frozen=True)
class EngineFrame:
    """An engine's own step function, as a Python frame (`python_function`, with_stack=True): what it covers, the
    code, and whether it is the engine's loop (then its steps are the repeating unit inside it)."""

    label: str
    pattern: re.Pattern  # searched in the frame's name, `path/file.py(line): function`
    covers: str
    source: str
    loop: bool = False


def _frame(path: str, functions: str) -> re.Pattern:
    return re.compile(rf"(?:^|/){path}\([0-9]+\): (?:{functions})$")


ENGINE_FRAMES: tuple[EngineFrame, ...] = (
    EngineFrame(
        "vLLM V1 Worker.execute_model",
        _frame(r"vllm/v1/worker/[a-z_]+_worker\.py", "execute_model"),
        "one scheduler step on one rank: input prep, forward, logits and sampling",
        "vllm/v1/worker/gpu_worker.py (and the other v1 workers)",
    ),
    EngineFrame(
        "vLLM V0 worker execute_model",
        _frame(r"vllm/worker/[a-z_]+\.py", "execute_model"),
        "one scheduler step on one rank (LocalOrDistributedWorkerBase.execute_model)",
        "vllm/worker/worker_base.py",
    ),
    EngineFrame(
        "SGLang Scheduler.run_batch",
        _frame(r"sglang/srt/managers/scheduler\.py", "run_batch"),
        "one scheduler iteration, every forward of the batch",
        "python/sglang/srt/managers/scheduler.py",
    ),
    EngineFrame(
        "TensorRT-LLM PyExecutor._forward_step",
        _frame(r"tensorrt_llm/_torch/pyexecutor/py_executor\.py", "_forward_step"),
        "one executor iteration's forward",
        "tensorrt_llm/_torch/pyexecutor/py_executor.py",
    ),
    EngineFrame(
        "nano-vllm LLMEngine.step",
        _frame(r"nanovllm/engine/llm_engine\.py", "step"),
        "one scheduler step: schedule, run, postprocess",
        "nanovllm/engine/llm_engine.py",
    ),
    EngineFrame(
        "HF generate's decoding loop",
        _frame(
            r"transformers/generation/utils\.py",
            "_sample|_greedy_search|_beam_search|_beam_sample|_assisted_decoding|_contrastive_search|_dola_decoding",
        ),
        "the loop of GenerationMixin.generate: its steps are the repeating unit inside it (a forward, the token's "
        "choice)",
        "transformers/generation/utils.py",
        loop=True,
    ),
)


@dataclass
class StepSet:
    """The steps of a trace, sorted by start, and how they were found."""

    rule: str  # RULE_* or "engine markers: <engine>"
    names: list[str]
    kinds: list[str]
    indices: list[int]
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    warnings: list[str]
    tokens: list[StepTokens | None] | None = None  # what each step's engine marker says it processed

    def __len__(self) -> int:
        return len(self.start)

    def tokens_of(self, i: int) -> StepTokens | None:
        return self.tokens[i] if self.tokens is not None else None


def compile_steps_regex(text: str | None) -> Pattern | None:
    """`--steps` (or the explorer's `steps=`) compiled for a linear-time search; None when not given."""
    return None if text is None else compile_user(text, f"--steps {text!r}")


def parse_steps_kinds(text: str | None) -> tuple[Kind, ...]:
    """`--steps-kind range,python` as the kinds `--steps` searches (every kind when not given)."""
    if not text:
        return tuple(k for kinds in STEP_KINDS.values() for k in kinds)
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in STEP_KINDS]
    if bad or not words:
        raise ProbeError(f"--steps-kind {text!r}: use one or more of {', '.join(STEP_KINDS)}, comma-separated")
    return tuple(k for w in words for k in STEP_KINDS[w])


def find_steps(trace: Trace, steps: Pattern | None = None, kinds: tuple[Kind, ...] | None = None) -> StepSet:
    """The trace's steps by the first rule that finds any (see the module docstring); `steps` is searched for
    in the names of the ranges of `kinds` (every kind `--steps` reads when None; anchor the pattern with `^...$` to
    match whole names). A last step the profiler stopped inside is said (`_cut_by_stop`), and a first step it
    started inside (`_cut_by_start`)."""
    return _cut_by_start(trace, _cut_by_stop(trace, _by_rules(trace, steps, kinds)))


def _cut_by_start(trace: Trace, found: StepSet) -> StepSet:
    """Warn of a first step the recording started inside: of two steps or more, the first begins before any Python
    frame of its thread has ended, and holds less than half the work (`unit_work`) of the median step after it.
    With stacks, torch's profiler writes the frames open when it starts as starting then, the frames of its own
    start call innermost, and those end first: a loop traced from its start (`with profile():`, `prof.start()`
    before it) begins its first step after they ended; a profiler started from inside an iteration (a hook in the
    forward) leaves that iteration's frames around its start, so the first step's window holds only the
    iteration's rest, and its figures are of the part recorded. A trace cut to whole steps (a tool's excerpt that
    begins at its first step's marker) also starts before any frame ended, but its first step is as whole as the
    rest: it is not said."""
    if len(found.start) < 2:
        return found
    i = int(np.argmin(found.start))
    frames = trace.rows(Kind.PYTHON)
    frames = frames[(trace.pid[frames] == found.pid[i]) & (trace.tid[frames] == found.tid[i])]
    if not len(frames) or found.start[i] >= trace.end_ns[frames].min():
        return found
    work = unit_work(trace, launch_calls(trace))
    work = np.sort(trace.ts_ns[work[(trace.pid[work] == found.pid[i]) & (trace.tid[work] == found.tid[i])]])
    held = np.searchsorted(work, found.end, side="left") - np.searchsorted(work, found.start, side="left")
    if 2 * held[i] < np.median(np.delete(held, i)):
        found.warnings.append(
            f"the first step ({found.names[i]}) began before the recording did: it starts before any Python frame "
            "of its thread ended, inside the frames open when the profiler started; its figures are of the part "
            "recorded"
        )
    return found


def _cut_by_stop(trace: Trace, found: StepSet) -> StepSet:
    """Warn of a last step the recording stopped inside: it ends at the very nanosecond a Python frame or a range
    around it on its thread ends. Code closes nested events one after the other (a frame returns after what it
    called, an outer range is popped after the inner one), so a shared end is the tool's: torch's profiler closes
    every open event at the instant it stops, and nsys closes the NVTX ranges a process left open when it exits
    at the instant it ends. The step is cut there and its figures are of the part recorded."""
    if not len(found.end):
        return found
    i = int(np.argmax(found.end))
    around = trace.rows(Kind.PYTHON, Kind.USER_RANGE)
    around = around[(trace.pid[around] == found.pid[i]) & (trace.tid[around] == found.tid[i])]
    around = around[(trace.end_ns[around] == found.end[i]) & (trace.ts_ns[around] < found.start[i])]
    if len(around):
        inner = int(around[np.argmax(trace.ts_ns[around])])
        found.warnings.append(
            f"the last step ({found.names[i]}) was cut when the recording stopped: it ends at the nanosecond the "
            f"{'frame' if trace.kind[inner] == Kind.PYTHON else 'range'} around it, {trace.name(inner)!r}, does, as "
            "every event left open is closed when the profiler stops or the process exits; its figures are of the "
            "part recorded"
        )
    return found


def _by_rules(trace: Trace, steps: Pattern | None, kinds: tuple[Kind, ...] | None) -> StepSet:
    warnings: list[str] = []
    ranges = trace.rows(Kind.USER_RANGE, Kind.PROFILER_STEP)
    if steps is not None:
        searched = trace.rows(*(kinds or parse_steps_kinds(None)))
        if Kind.USER_RANGE in (kinds or parse_steps_kinds(None)):  # another tool's events name code as ranges do
            searched = np.concatenate((searched, foreign_rows(trace)))
        match = trace.name_ids(lambda s: steps.search(s) is not None)
        rows = outermost(trace, searched[match[trace.name_id[searched]]])
        if len(rows):
            return _from_rows(trace, rows, RULE_STEPS, _kinds_of(trace, rows), warnings)
        warnings.append(f"--steps {steps.pattern!r} matched no range; steps found by the rules below it instead")
    rows = _probe_ranges(trace, ranges, warnings)
    if len(rows):
        return _from_rows(trace, rows, RULE_PROBE, _kinds_of(trace, rows), warnings)
    rows = _holding_ops(trace, trace.rows(Kind.PROFILER_STEP))
    if len(rows):
        return _from_rows(trace, rows, RULE_PROFILER, ["profiler_step"] * len(rows), warnings)
    hit = trace.name_ids(lambda s: any(m.pattern.fullmatch(s) for m in MARKERS))
    rows = outermost(trace, ranges[hit[trace.name_id[ranges]]])
    if len(rows):
        found = {trace.names[i] for i in trace.name_id[rows].tolist()}
        labels = [m.label for m in MARKERS if any(m.pattern.fullmatch(text) for text in found)]
        return _from_rows(trace, rows, f"engine markers: {', '.join(labels)}", _kinds_of(trace, rows), warnings)
    calls = launch_calls(trace)
    work = unit_work(trace, calls)
    engine = _engine_frames(trace, work, warnings)
    if engine is not None:
        return engine
    numbered = _numbered_steps(trace, work, warnings)
    if numbered is not None:
        return numbered
    unit = _unit_steps(trace, work, warnings)
    if unit is not None:
        return unit
    graph = _graph_steps(trace, warnings)
    if graph is not None:
        return graph
    return _whole_trace(trace, calls, warnings)


def _holding_ops(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The ProfilerStep#N ranges that hold an op (a cpu_op or a runtime call on their thread), or all of them when
    none does. `profile.step()` closes a step and opens the next, so the call after a loop's last iteration opens
    one that the profiler's stop closes at once with nothing in it (the trace's last ProfilerStep, a few
    microseconds of the profiler's own frames): no step of the program's, and, as a step, a median of nothing."""
    if not len(rows):
        return rows
    ops = trace.rows(Kind.CPU_OP, Kind.RUNTIME)
    held = np.zeros(len(rows), dtype=bool)
    threads = zip(trace.pid[rows].tolist(), trace.tid[rows].tolist(), strict=True)
    for pid, tid in {(int(p), int(t)) for p, t in threads}:
        mine = (trace.pid[rows] == pid) & (trace.tid[rows] == tid)
        starts = np.sort(trace.ts_ns[ops[(trace.pid[ops] == pid) & (trace.tid[ops] == tid)]])
        first = np.searchsorted(starts, trace.ts_ns[rows[mine]], side="left")
        last = np.searchsorted(starts, trace.end_ns[rows[mine]], side="right")
        held[mine] = last > first
    return rows[held] if held.any() else rows


def _probe_ranges(trace: Trace, ranges: np.ndarray, warnings: list[str]) -> np.ndarray:
    """Rule 2: probe's own `prefill` and `decode#i` user ranges, when the trace holds a `decode#i`: probe's loop
    marks every decode step so beside its prefill (probe.capture.loop; at least one decode, settings.py), while
    `prefill` alone is a word any loop may use (a user's `prefill` beside ten `decode_step` ranges is one range of
    theirs, not the steps): it is said in a warning, no row is returned, and the rules below read the trace."""
    ours = trace.name_ids(lambda s: s == vocabulary.PREFILL or _decode_index(s) is not None)
    rows = ranges[ours[trace.name_id[ranges]] & (trace.kind[ranges] == Kind.USER_RANGE)]
    if not len(rows) or any(_decode_index(trace.names[i]) is not None for i in np.unique(trace.name_id[rows]).tolist()):
        return rows
    warnings.append(
        f"{len(rows)} range(s) named {vocabulary.PREFILL!r} and no {vocabulary.DECODE}#i range: not probe's own "
        f"(its loop marks each decode step {vocabulary.DECODE}#i beside its prefill), so not taken as the steps; "
        "steps found by the rules below instead"
    )
    return rows[:0]


def _engine_frames(trace: Trace, calls: np.ndarray, warnings: list[str]) -> StepSet | None:
    """Rule 4's second half: the first engine in ENGINE_FRAMES whose step (or loop) frame the trace holds."""
    frames = trace.rows(Kind.PYTHON)
    for engine in ENGINE_FRAMES:
        hit = trace.name_ids(lambda s, e=engine: e.pattern.search(s) is not None)
        rows = outermost(trace, frames[hit[trace.name_id[frames]]])
        if not len(rows):
            continue
        rule = f"engine frames: {engine.label}"
        if not engine.loop:
            return _from_rows(trace, rows, rule, [STEP] * len(rows), warnings)
        found = [
            units
            for pid, tid, row in zip(trace.pid[rows].tolist(), trace.tid[rows].tolist(), rows.tolist(), strict=True)
            if (units := _inside(trace, calls, pid, tid, row)) is not None
        ]
        if found:
            return _from_units(found, rule + " (" + found[0][2].rule + ")", warnings)
    return None


def _inside(trace: Trace, calls: np.ndarray, pid: int, tid: int, row: int) -> tuple[int, int, Units] | None:
    tree = Tree.of(trace, pid, tid, calls)
    (at,) = np.flatnonzero(tree.rows == row)
    where, scope = f"thread {pid}/{tid}", tree.children(int(at))
    units = loop_calls(tree, scope, where, nested=True) or repeating_unit(tree, where, scope)
    if units is None:
        units = loop_calls(tree, scope, where)
    return None if units is None else (pid, tid, units)


def _gpu_held(trace: Trace, start: np.ndarray, end: np.ndarray) -> int:
    """The GPU time of the ops launched inside the windows [start, end]: how a thread's steps are weighed against
    another thread's (rules 5 and 6)."""
    gpu = attribute(trace, start, end)
    return int(trace.dur_ns[gpu.op_rows[gpu.op_step >= 0]].sum())


def _numbered_steps(trace: Trace, calls: np.ndarray, warnings: list[str]) -> StepSet | None:
    """Rule 5: each launching thread's numbered family (`units.numbered_ranges`); the one whose steps hold the most
    GPU work wins, as in rule 6."""
    best: tuple[int, np.ndarray, str] | None = None
    for pid, tid in threads_by_launches(trace, calls)[:UNIT_THREADS]:
        found = numbered_ranges(trace, calls, pid, tid)
        if found is None:
            continue
        rows, rule = found
        held = _gpu_held(trace, trace.ts_ns[rows], trace.end_ns[rows])
        if best is None or held > best[0]:
            best = (held, rows, rule)
    if best is None:
        return None
    return _from_rows(trace, best[1], best[2], [STEP] * len(best[1]), warnings)


def _unit_steps(trace: Trace, calls: np.ndarray, warnings: list[str]) -> StepSet | None:
    """Rule 6: each launching thread's repeating unit; the one whose steps hold the most GPU work wins (a training
    loop's thread over its autograd thread, whose cycle starts a forward late and ends an optimizer step early). On
    a CPU-only trace (`calls` are then its top-level ops, `unit_work`) no step holds GPU work: the thread with the
    most top-level ops that has a unit wins."""
    best: tuple[int, tuple[int, int, Units]] | None = None
    gaps = idle(trace)
    for pid, tid in threads_by_launches(trace, calls)[:UNIT_THREADS]:
        tree = Tree.of(trace, pid, tid, calls)
        units = apart_at_idle(tree, repeating_unit(tree, f"thread {pid}/{tid}"), f"thread {pid}/{tid}", gaps)
        if units is None:
            continue
        held = _gpu_held(trace, units.start, units.end)
        if best is None or held > best[0]:
            best = (held, (pid, tid, units))
    if best is None:
        return None
    return _from_units([best[1]], best[1][2].rule, warnings)


def _from_units(found: list[tuple[int, int, Units]], rule: str, warnings: list[str]) -> StepSet:
    start = np.concatenate([u.start for _, _, u in found])
    end = np.concatenate([u.end for _, _, u in found])
    names = [n for _, _, u in found for n in u.names]
    kinds = [u.kind for _, _, u in found for _ in u.names]
    pid = np.concatenate([np.full(len(u.start), p) for p, _, u in found])
    tid = np.concatenate([np.full(len(u.start), t) for _, t, u in found])
    order = np.argsort(start, kind="stable")
    n = len(order)
    return StepSet(
        rule,
        [names[i] for i in order.tolist()],
        [kinds[i] for i in order.tolist()],
        list(range(n)),
        start[order],
        end[order],
        pid[order],
        tid[order],
        warnings,
    )


def _whole_trace(trace: Trace, calls: np.ndarray, warnings: list[str]) -> StepSet:
    """Rule 8: one step, on the thread that launches the most GPU work (else the busiest), from its first event
    to its last."""
    launching = threads_by_launches(trace, calls)
    pid, tid = launching[0] if launching else main_thread(trace)
    host = trace.stream < 0
    mine = np.flatnonzero(host & (trace.pid == pid) & (trace.tid == tid))
    start = int(trace.ts_ns[mine].min()) if len(mine) else trace.start_ns
    end = int(trace.end_ns[mine].max()) if len(mine) else int(trace.end_ns.max())
    warnings.append(
        "no step markers found: the whole trace is one step. Name the ranges that mark a step with --steps REGEX"
    )
    if sampled_stacks(trace):
        warnings.append(
            "its events share their instants (each begins and ends at a sample, a whole stack at once): a "
            "sampler's stacks, runs of samples alike, not calls; no iteration is counted from them, a call shorter "
            "than the sampling interval is missing, and their times are the samples'"
        )
    return StepSet(
        RULE_WINDOW,
        ["trace"],
        ["window"],
        [0],
        np.array([start]),
        np.array([end]),
        np.array([pid]),
        np.array([tid]),
        warnings,
    )


def _decode_index(text: str) -> int | None:
    base, index = vocabulary.split_label(text)
    return index if base == vocabulary.DECODE else None


def _kinds_of(trace: Trace, rows: np.ndarray) -> list[str]:
    """probe's own labels, then each engine marker's own classification; `step` for anything else."""
    out = []
    for i in trace.name_id[rows].tolist():
        text = trace.names[i]
        if text == vocabulary.PREFILL:
            out.append(vocabulary.PREFILL)
        elif _decode_index(text) is not None:
            out.append(vocabulary.DECODE)
        elif text.startswith(PROFILER_STEP_PREFIX):
            out.append("profiler_step")
        else:
            out.append(read_marker(text)[0])
    return out


def read_marker(text: str) -> tuple[str, StepTokens | None, str | None]:
    """What an engine marker's name says: (its step's kind, its tokens, why its counts were refused). A name that is
    no marker is a plain step; a marker whose counts cannot be true (_NotACount) is a plain step without counts."""
    for marker in MARKERS:
        hit = marker.pattern.fullmatch(text)
        if hit is None:
            continue
        try:
            return marker.kind(hit), marker.tokens(hit), None
        except _NotACount as e:
            return STEP, None, str(e)
    return STEP, None, None


def _refused_warning(names: list[str], refused: list[str | None]) -> list[str]:
    """One line for every marker whose counts were refused: how many, and the first with its reason."""
    bad = [(n, why) for n, why in zip(names, refused, strict=True) if why is not None]
    if not bad:
        return []
    name, why = bad[0]
    shown = name if len(name) <= 60 else name[:60] + "..."
    return [
        f"{len(bad)} step marker(s) hold counts that cannot be true ({shown!r}: {why}): those steps are read without "
        "token counts"
    ]


def _from_rows(trace: Trace, rows: np.ndarray, rule: str, kinds: list[str], warnings: list[str]) -> StepSet:
    order = np.argsort(trace.ts_ns[rows], kind="stable")
    rows = rows[order]
    kinds = [kinds[i] for i in order.tolist()]
    names = [trace.names[i] for i in trace.name_id[rows].tolist()]
    indices = []
    for position, text in enumerate(names):
        index = vocabulary.split_label(text)[1]
        indices.append(index if index is not None else (0 if text == vocabulary.PREFILL else position))
    read = [read_marker(text) for text in names]
    tokens = [r[1] for r in read]
    warnings = warnings + _refused_warning(names, [r[2] for r in read])
    return StepSet(
        rule,
        names,
        kinds,
        indices,
        trace.ts_ns[rows],
        trace.end_ns[rows],
        trace.pid[rows],
        trace.tid[rows],
        warnings,
        tokens,
    )


def _graph_steps(trace: Trace, warnings: list[str]) -> StepSet | None:
    runtime = trace.rows(Kind.RUNTIME)
    rows = runtime[trace.launch_kind[runtime] == GRAPH_LAUNCH]
    if not len(rows):
        return None
    host = trace.stream < 0
    starts, ends, pids, tids = [], [], [], []
    for pid, tid in sorted({(int(p), int(t)) for p, t in zip(trace.pid[rows], trace.tid[rows], strict=True)}):
        mine = rows[(trace.pid[rows] == pid) & (trace.tid[rows] == tid)]
        on_thread = host & (trace.pid == pid) & (trace.tid == tid)
        last = int(trace.end_ns[on_thread].max())
        s = trace.ts_ns[mine]
        starts.append(s)
        ends.append(np.append(s[1:], last))
        pids.append(np.full(len(mine), pid))
        tids.append(np.full(len(mine), tid))
    start, end = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(start, kind="stable")
    n = len(start)
    return StepSet(
        RULE_GRAPH,
        [f"graph#{i}" for i in range(n)],
        ["graph"] * n,
        list(range(n)),
        start[order],
        end[order],
        np.concatenate(pids)[order],
        np.concatenate(tids)[order],
        warnings,
    )


def main_thread(trace: Trace) -> tuple[int, int]:
    """The host thread that did the most: most cpu_ops, else most ranges and runtime calls, else most rows."""
    for kinds in ((Kind.CPU_OP,), (Kind.USER_RANGE, Kind.PROFILER_STEP, Kind.RUNTIME), tuple(Kind)):
        rows = trace.rows(*kinds)
        rows = rows[trace.stream[rows] < 0]
        if len(rows):
            pairs, counts = np.unique(np.stack([trace.pid[rows], trace.tid[rows]]), axis=1, return_counts=True)
            best = int(np.argmax(counts))
            return int(pairs[0, best]), int(pairs[1, best])
    return -1, -1
