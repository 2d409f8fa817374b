"""The steps of a trace that marks none: the outermost host unit that repeats and holds the launches (or, where a
trace runs nothing on a GPU, the ops).

Read on one host thread, from its events' nesting (Python frames, cpu_ops and ranges: `Tree`), and from where its
launch calls fall (`launch_calls`: a kernel or graph launch, or any runtime call a GPU op is joined to). A
scope is a list of sibling events, first the thread's outermost ones; its names are compared with object
addresses removed, so one builtin is one name. An event is inside the latest-started event that holds it whole
(`intervals.containers`, the sense `outermost` reads too): with `with_stack=True` a `record_function` range starts
inside the short `torch/autograd/profiler.py(N): __enter__` frame that opens it and ends inside the matching
`__exit__`; it outlives `__enter__`, so it is that frame's sibling, not its child, and the events after `__enter__`
ends are the range's children (ten `decode_step` ranges are then ten siblings, a unit by rule 2). In each scope,
from the outside in:

1. **A container.** When the name holding the most of the scope's launches occurs once and holds at least
   `MAJORITY` of them (a `main()`, a worker's busy loop, `generate`), the step is inside it: its children are the
   next scope.
2. **A unit.** When that name occurs more than once, its occurrences hold at least `WHOLE` of the launches from
   the first one's start to the last one's end, and they are at least half of the siblings there that launch
   anything (nothing else between them launches: vLLM's `execute_model` between idle waits), each occurrence is a
   step, its own span.
3. **A cycle.** A loop whose body is flat (a training loop without stacks: a DataLoader range, the forward's ops, the
   optimizer's range, all siblings) has no one event per iteration. Its iteration count K is the largest count of a
   repeating name such that the names whose counts are multiples of K hold at least `PERIODIC` of the scope's launches
   (an op run twenty times an iteration counts 20 K times; a layer's pieces fail it, since the layer's attention runs
   once), and every cut holds a launch. The cuts are that name's occurrences (the earliest such name's), moved back over
   the events that precede each one alike (so a cycle begins where the loop body does, not at its first repeating name);
   where the cuts so moved fail, the name's own occurrences are tried, the first still moved back: the run moved over
   can be the end of the iteration before, which nothing before the first cut is. A decoding function with two forwards
   a token (`generate(custom_generate=fn)`: a look-ahead over the candidates, then the chosen token's forward) has the
   forward that ended the token before ahead of every token's work, the prefill's ahead of the first: moved back over
   it, each iteration would start at the token before's forward and the last leave its final forward out. A step runs
   from one cut to the next, the last one to the end of the last event of a name that occurs a multiple
   of K times and in every iteration (once each; or each request's tokens, 4, 8 and 12: the last request ends with its
   last token, not its set-up), or, from three iterations on, that runs in it as often as in each
   from the second cut on (a token's two forwards, beside the prefill's one; a training step's `add_` after its
   optimizer step). A first iteration may do more (a prefill, a loop's set-up): from three iterations on, a name whose
   count is not a multiple of K counts with them when, from the second cut on, it occurs a multiple of K - 1 times (R an
   iteration) and before the second cut at least R times (its extra occurrences all fall in the first iteration, or
   before it; they may be K or more: a short `generate` without stacks, whose set-up and prefill run nine more
   `aten::to` than its eight tokens' rate). A last iteration may do less (a hand decode loop that ends on a forward:
   prefill, then each token's sampling and the next forward, so the sampling runs K - 1 times, none after the last
   forward): from three iterations on, a name whose count is a multiple of K - 1 counts with them when it does not occur
   from the last cut on (eight tokens' `argmax`, or their twenty matmuls each, beside nine forwards), so long as the
   last iteration still holds at least half the launches of the median one: less, not nothing (a `while` loop's
   condition, checked once more than the loop runs, is no iteration of its own). A branch's alternatives count with
   them too (`_branches`): names that do not count alone, none in every iteration, that together run equally often
   in each (a router's loop calling one of two models a step, in no fixed order).

   **A cycle inside each iteration.** Requests served back to back without stacks (each a `generate`: its set-up,
   its prefill, its tokens) are a cycle whose iterations are the requests: each request's set-up runs once, so the
   tokens of all are no cycle. Where each iteration is a cycle again (these rules on its own events; the last to the
   scope's end), and the iterations hold different numbers of them (4, 8 and 12 tokens: a model runs the same
   layers in every forward), or each one's first SDPA that recorded its shapes reads more keys than the one's before
   (a token attends to one more, with a KV cache or without; a forward's layers read as many), the inner iterations
   are the steps. Requests of as many tokens, without recorded shapes (or with a static cache, whose attention
   reads the whole cache each token), read as forwards of their layers would: one step each.

4. **A loop's calls** (only inside an engine's loop frame, probe.analysis.ledger.steps' rule 4, when 2 and 3 find
   nothing: `loop_calls`). The loop is known to iterate, so its heaviest call cuts it: the name holding the most
   launches among the loop's children, counting also the children of a child whose name occurs once
   (transformers 5.x calls the first forward, the prefill, inside a once-only `_prefill` frame and the others from
   the loop itself), occurring at least twice and at least once as the loop's own child (so a forward's layers,
   inside a once-only forward, never cut it). A step runs from one occurrence's start to the next's (the token's
   work between forwards, beam search's 42%, is its step's), the last to the end of the last event of a name
   that occurs as often. Where a call sits inside a once-only child this comes before 2 and 3 (which would count
   the loop's own calls, one fewer than it ran); otherwise after them. Such a loop that called its heaviest name
   twice an iteration would be cut at each call, two steps a token: none of transformers' loops does (assisted
   decoding's draft forwards sit inside `get_candidates`), and a user's own decoding function (`custom_generate`)
   is no engine frame, so 3 reads it.

5. **Inside each of a numbered family.** Where the scope's launches are split among events that neither repeat by
   name nor cycle (two requests' ranges, `request_0` and `request_1`, around a `generate` each, traced without
   stacks: a pair, no numbered family of steps), or where a container was followed inward from a scope whose other
   events launch too (the larger of two requests, holding half of the launches or more), the steps are those the
   rules find inside each member of the scope's numbered family of ranges (user annotations, NVTX: names one text
   with their numbers replaced; a frame's line number is no such number) that launches the most, together, when it
   has two members or more, each has steps, and together they hold at least `MAJORITY` of the thread's launches and
   more than the steps found inside the container alone: sixteen decode steps, not one window, nor the first
   request's eight. A set-up call beside a decoding loop is no member.

6. **Apart at idle stretches.** Where the trace records nothing at all for a while (no event on any thread or
   stream: `idle`), far longer than a step, the program was idle there: a serving loop that sleeps between bursts of
   requests, or two recordings' events written into one file. The stretches at least half as long as the longest
   split the thread's events, and the rules find each part's steps from its outermost events, together, when every
   part that holds work has steps, all shorter than those stretches, and the steps found without the split hold
   such a stretch in at most half of them (a loop that sleeps every iteration sleeps as its step) and are no more
   than the parts find (a stretch inside one token, the OS running another process, is no gap between steps); where the
   parts have none, such a step ends where the stretch begins (`apart_at_idle`, after the rules above).

Otherwise the thread has no repeating unit: a trace of one forward is not cut into its layers. What the counts
cannot tell from layers stays one window: a `generate` with a static cache, without stacks (its prefill prepares
its inputs otherwise than a token does, and its last token prepares none, so each token's ops count one fewer or
more at either end); counting a last iteration's fewer with the cycle cut a 12-layer forward into its layers. A
graph launch is never a unit by itself: the replay launches are pieces when the host repeats a larger unit (vLLM's
piecewise graphs: 81 a step), which (2) finds.

A trace that runs nothing on a GPU (a CPU-only run: no launch call and no GPU op) has no launches to hold: there
each thread's cpu_ops that code called stand in for them (`unit_work`, `called`), one per call the model made (an
op's own pieces are none; a compiled region's graph calls its ops from Python, and each is one), and the same rules
read them (ten ResNet forwards of 89 top-level ops each, back to back, are a cycle of 10; a forward whose ops do not
repeat stays one step).

**Numbered ranges** (`numbered_ranges`, tried before the rules above: probe.analysis.ledger.steps' rule 5) are the
user's own marker of an iteration, ProfilerStep#N's shape under a name of the user's: a *family* is the ranges (user
annotations, NVTX) of one thread with the same parent range (or none), whose names are one text with its numbers
replaced (`token_0_processing` .. `token_63_processing`: `token_N_processing`) and each name once (a counter; a
layer's number repeats in every forward). A range's parent is what holds it whole (`intervals.containers`), so
ranges that overlap without nesting (NVTX start/end ranges: `request N` from its arrival to its end on the thread
that served it) are siblings, one family, and not disjoint. A family is the steps when it has at least `FAMILY_MIN`
members, disjoint, each holding a launch, together holding at least `MAJORITY` of the thread's launches, and its
parent range (when it has one) holds no launch outside them: a loop's range runs nothing but its iterations, while a
forward's range runs its own work around its layers (the embedding before the first, the head after the last), so
`layer_0` .. `layer_31` inside one `forward` are pieces of one step. Of the families that pass, the outermost (the
least deep) wins: `layer_N_token_M` inside each token, or `ensure_layer_N_weights` inside each layer, are pieces of
a token. What the structure cannot tell apart is said here: a forward whose every launch lies inside its layer
ranges, or whose layer ranges have no range around them, reads as a loop; a loop whose range also launches work
outside its iterations (set-up, sampling between them) is not found by this rule (`--steps` names it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from probe.analysis.intervals import containers, nesting
from probe.analysis.ledger.gpu import correlation_keys
from probe.analysis.ledger.host import family_key, frame_name, thread_rows
from probe.analysis.trace import GPU_OP_KINDS, Kind, Trace, foreign_rows
from probe.counts import shape_counts

MAJORITY = 0.5  # a container holds at least half the scope's launches; so does a cycle, from first to last
WHOLE = 0.95  # a unit holds all but 5% of the launches between its first and last occurrence
PERIODIC = 0.9  # a cycle's names (counts that are multiples of K) hold at least 90% of the scope's launches
FAMILY_MIN = 3  # a loop from three iterations on (ProfilerStep#N's shape; a cycle whose first does more), not a pair
SDPA = "aten::scaled_dot_product_attention"  # (query [..., L, E], key [..., S, E], ...): S keys for L queries
UNIT_KINDS = (Kind.PYTHON, Kind.CPU_OP, Kind.USER_RANGE)


UnitKind = Literal["step", "iteration"]  # "step": each occurrence of one event; "iteration": a cycle of sibling events


@dataclass(frozen=True)
class Units:
    """Steps found on one thread: their windows (sorted), names, their kind and the rule in words."""

    start: np.ndarray
    end: np.ndarray
    names: list[str]
    kind: UnitKind
    rule: str


def launch_calls(trace: Trace) -> np.ndarray:
    """Rows of the runtime calls that launch GPU work: kernel and graph launches (`Trace.launch_kind`, by name too,
    so a trace whose GPU side was not recorded still has them), and every call a GPU op is joined to (copies,
    memsets)."""
    runtime = trace.rows(Kind.RUNTIME)
    ops = trace.rows(*GPU_OP_KINDS)
    joined = np.isin(correlation_keys(trace, runtime), correlation_keys(trace, ops)[trace.correlation[ops] >= 0])
    return runtime[(trace.launch_kind[runtime] > 0) | (joined & (trace.correlation[runtime] >= 0))]


def outermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows not inside another of `rows` on the same thread (sorted by thread, then start): one step per
    iteration where markers nest, one op per call where ops nest."""
    if len(rows) < 2:
        return rows
    order = np.lexsort((-trace.end_ns[rows], trace.ts_ns[rows], trace.tid[rows], trace.pid[rows]))
    rows = rows[order]
    pid, tid, end = trace.pid[rows], trace.tid[rows], trace.end_ns[rows]
    first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]))))
    keep = np.ones(len(rows), bool)
    for a, b in zip(first.tolist(), np.append(first[1:], len(rows)).tolist(), strict=True):  # one pass a thread
        # Sorted by start, longest first: a range that ends no later than one before it lies inside that one.
        reach = np.maximum.accumulate(end[a:b])
        keep[a + 1 : b] = end[a + 1 : b] > reach[:-1]
    return rows[keep]


def unit_work(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """The work a unit must hold: the launch calls (`calls`, from `launch_calls`); in a trace that runs nothing on a GPU
    (no launch call and no GPU op: a CPU-only run), each thread's cpu_ops that code called (`called`) stand in for them,
    one per call the model made, so a CPU loop is cut by the same rules (a unit or a cycle that holds most of them). A
    trace of ranges alone (no GPU side and no op: an NVTX-annotated CPU program under nsys) has only its ranges to say
    where the work is: each thread's innermost ranges (`innermost`) stand in, one per piece of annotated work, so its
    `step_N` ranges, or its repeating `iteration` range, are its steps by the same rules. A trace with no range
    either, only events of categories the reader does not know (another tool's: `foreign_events`), has their
    innermost stand in alike."""
    if len(calls) or len(trace.rows(*GPU_OP_KINDS)):
        return calls
    ops = trace.rows(Kind.CPU_OP)
    ops = ops[trace.stream[ops] < 0]
    if len(ops):
        return called(trace, ops)
    ranges = trace.rows(Kind.USER_RANGE)
    ranges = ranges[trace.stream[ranges] < 0]
    return innermost(trace, ranges if len(ranges) else foreign_events(trace))


def foreign_events(trace: Trace) -> np.ndarray:
    """The host events of categories the reader does not know (`foreign_rows`), in a trace that has nothing else to
    read a unit from: no GPU side, no op, frame or range (another tool's trace: VizTracer's function calls, ONNX
    Runtime's sessions and its graph's nodes). They name the program's own code as ranges do
    (`host.named_range_rows` reads them so), and their nesting is the program's, so they join the `Tree` and their
    innermost stand in for its work (`unit_work`): a loop's repeating call is its step by the same rules. Empty
    wherever the trace has any of those, and where the events share their instants, fewer distinct starts and ends
    than events: a sampler's stacks (py-spy's chrome trace), whose every frame begins and ends at a sample, one
    instant for a whole stack. Its events are runs of samples alike, not calls: a frame whose line changed between
    samples is two events, and calls between two samples are none, so nothing counts its iterations."""
    rows = _only_foreign(trace)
    return np.zeros(0, np.int64) if rows is None or _shared_instants(trace, rows) else rows


def sampled_stacks(trace: Trace) -> bool:
    """Whether the trace is a sampler's stacks (`foreign_events`' exception): nothing but events of foreign
    categories, on the host, with fewer distinct starts and ends than events."""
    rows = _only_foreign(trace)
    return rows is not None and _shared_instants(trace, rows)


def _only_foreign(trace: Trace) -> np.ndarray | None:
    """The host events of foreign categories (`foreign_rows`), where the trace has nothing else to read a unit from
    (no GPU side, no op, frame, range or runtime call); None where it has."""
    if len(trace.rows(*UNIT_KINDS, *GPU_OP_KINDS, Kind.RUNTIME, Kind.PROFILER_STEP)):
        return None
    rows = foreign_rows(trace)
    return rows[trace.stream[rows] < 0]


def _shared_instants(trace: Trace, rows: np.ndarray) -> bool:
    """Whether `rows` (two or more) have fewer distinct starts and ends than rows."""
    return len(rows) > 1 and len(np.unique(np.concatenate((trace.ts_ns[rows], trace.end_ns[rows])))) < len(rows)


def called(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """The cpu_ops `ops` that code called, one per call the program made (sorted by thread, then start): those that
    no other cpu_op holds directly, where what holds an op directly is the innermost of its thread's cpu_ops,
    Python frames and ranges that holds it whole (`intervals.containers`). An op's own pieces (`aten::linear`'s
    `aten::mm`) are no calls of their own; but an op inside which code runs again calls what that code calls: a
    compiled region (`Torch-Compiled Region`, one cpu_op) runs the compiled graph's Python `call`, whose every
    `aten::mm` is a call of the program's, so a compiled decode step weighs its calls, not one, beside an eager
    prefill's hundred. Without stacks and ranges inside ops, these are the outermost ops."""
    host = trace.rows(Kind.CPU_OP, Kind.PYTHON, Kind.USER_RANGE, Kind.PROFILER_STEP)
    host = host[trace.stream[host] < 0]
    host = host[np.lexsort((-trace.end_ns[host], trace.ts_ns[host], trace.tid[host], trace.pid[host]))]
    pid, tid = trace.pid[host], trace.tid[host]
    first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]))))
    keep = np.zeros(len(host), bool)
    for a, b in zip(first.tolist(), np.append(first[1:], len(host)).tolist(), strict=True):  # one pass a thread
        parent = containers(trace.ts_ns[host[a:b]], trace.end_ns[host[a:b]])
        held_by_op = (parent >= 0) & (trace.kind[host[a:b]][np.maximum(parent, 0)] == Kind.CPU_OP)
        keep[a:b] = ~held_by_op
    mine = np.zeros(len(trace.kind), bool)
    mine[ops] = True
    return host[keep & mine[host]]


def innermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows that hold no other of `rows` whole on their thread (`intervals.containers`' sense), sorted by
    thread, then start: the leaves of each thread's nesting."""
    if len(rows) < 2:
        return rows
    rows = rows[np.lexsort((-trace.end_ns[rows], trace.ts_ns[rows], trace.tid[rows], trace.pid[rows]))]
    parent = containers(trace.ts_ns[rows], trace.end_ns[rows])
    child = np.flatnonzero(parent >= 0)
    # The search runs over every thread's rows at once: a parent found on an earlier thread holds nothing here.
    child = child[
        (trace.pid[rows[parent[child]]] == trace.pid[rows[child]])
        & (trace.tid[rows[parent[child]]] == trace.tid[rows[child]])
    ]
    leaf = np.ones(len(rows), bool)
    leaf[parent[child]] = False
    return rows[leaf]


def threads_by_launches(trace: Trace, calls: np.ndarray) -> list[tuple[int, int]]:
    """The host threads that launch GPU work, the most first: by the GPU time of the ops their calls launched, then
    by how many calls, then by the time the calls take (a CPU-only trace's two workers of eight steps each, whose
    innermost ranges stand in for the launches: the one whose steps take longer, which bounds the run)."""
    if not len(calls):
        return []
    threads, thread_of = np.unique(np.stack([trace.pid[calls], trace.tid[calls]], axis=1), axis=0, return_inverse=True)
    thread_of = thread_of.reshape(-1)
    ops = trace.rows(*GPU_OP_KINDS)
    keys = correlation_keys(trace, calls)
    order = np.argsort(keys, kind="stable")
    op_keys = correlation_keys(trace, ops)
    k = np.clip(np.searchsorted(keys[order], op_keys), 0, len(calls) - 1)
    hit = (op_keys >= 0) & (keys[order][k] == op_keys)
    work = np.zeros(len(threads), np.int64)
    np.add.at(work, thread_of[order[k[hit]]], trace.dur_ns[ops[hit]])
    count = np.bincount(thread_of, minlength=len(threads))
    busy = np.bincount(thread_of, weights=trace.dur_ns[calls], minlength=len(threads))
    ranked = np.lexsort((threads[:, 1], threads[:, 0], -busy, -count, -work))
    return [(int(threads[i, 0]), int(threads[i, 1])) for i in ranked.tolist()]


def keys_read(dims: tuple) -> int | None:
    """How many keys an SDPA read, from its recorded input dims: S of its key [B, H, S, E]; None when they say
    no such thing."""
    key = shape_counts(dims[1] if len(dims) > 1 else None, 4)
    return None if key is None else key[2]


@dataclass
class Tree:
    """One thread's events (UNIT_KINDS), nested by what holds each whole (`intervals.containers`), each with how
    many of the thread's launch calls (or what stands in for them, `unit_work`) start inside it."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    key: np.ndarray  # the name, addresses removed, as an id into `names`
    names: list[str]
    parent: np.ndarray
    held: np.ndarray
    launches: np.ndarray  # the thread's launch calls' starts, sorted
    _by_parent: np.ndarray
    _parents: np.ndarray
    is_range: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # a user range (not a frame or an op)
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # an SDPA's keys read (`keys_read`), or -1

    @classmethod
    def of(cls, trace: Trace, pid: int, tid: int, calls: np.ndarray) -> Tree:
        rows = thread_rows(trace, np.concatenate((trace.rows(*UNIT_KINDS), foreign_events(trace))), pid, tid)
        start, end = trace.ts_ns[rows], trace.end_ns[rows]
        order = np.lexsort((-end, start))
        rows, start, end = rows[order], start[order], end[order]
        parent = containers(start, end)
        table: dict[str, int] = {}
        ids = np.unique(trace.name_id[rows])
        key_of = np.zeros(len(trace.names), np.int64)
        key_of[ids] = [table.setdefault(frame_name(trace.names[i]), len(table)) for i in ids.tolist()]
        key = key_of[trace.name_id[rows]]
        launches = np.sort(trace.ts_ns[thread_rows(trace, calls, pid, tid)])
        held = np.searchsorted(launches, end, side="right") - np.searchsorted(launches, start, side="left")
        by_parent = np.argsort(parent, kind="stable")
        ranges = (trace.kind[rows] == Kind.USER_RANGE) | (trace.kind[rows] == Kind.OTHER)  # foreign events name code
        keys = np.full(len(rows), -1, np.int64)
        sdpa = np.flatnonzero(trace.name_ids(lambda s: s == SDPA)[trace.name_id[rows]] & (trace.shape_id[rows] >= 0))
        for i in sdpa.tolist():
            keys[i] = keys_read(trace.shapes[int(trace.shape_id[rows[i]])].dims) or -1
        return cls(
            rows, start, end, key, list(table), parent, held, launches, by_parent, parent[by_parent], ranges, keys
        )

    def children(self, i: int) -> np.ndarray:
        a, b = np.searchsorted(self._parents, [i, i + 1])
        return self._by_parent[a:b]

    def count(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Launch calls starting in [a, b)."""
        return np.searchsorted(self.launches, b, side="left") - np.searchsorted(self.launches, a, side="left")


def repeating_unit(tree: Tree, where: str, scope: np.ndarray | None = None) -> Units | None:
    """The steps of one thread by the rules of the module docstring, from `scope` (the outermost events when None)
    inward; `where` names the thread in the rule's words."""
    scope = np.flatnonzero(tree.parent < 0) if scope is None else scope
    root = int(tree.held[scope].sum())
    peers: np.ndarray | None = None  # the innermost scope a container was entered from whose other events launch

    def found(units: Units | None) -> Units | None:
        units = _most(tree, units, root)
        every = _most(tree, _in_each(tree, peers, where), root) if peers is not None else None
        if every is not None and (units is None or _held(tree, every) > _held(tree, units)):
            return every
        return units

    while len(scope):
        total = int(tree.held[scope].sum())
        if not total:
            return found(None)
        keys, inverse = np.unique(tree.key[scope], return_inverse=True)
        sums = np.bincount(inverse, weights=tree.held[scope]).astype(np.int64)
        counts = np.bincount(inverse)
        g = int(np.argmax(sums))
        members = scope[inverse == g]
        if counts[g] == 1:
            if sums[g] >= MAJORITY * total:
                peers = scope if sums[g] < total else peers
                scope = tree.children(int(members[0]))
                continue
            return found(_cycles(tree, scope, where) or _in_each(tree, scope, where))
        if _whole(tree, scope, members, int(sums[g])):
            return found(_each(tree, members, where))
        return found(_cycles(tree, scope, where))
    return found(None)


def idle(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The stretches [start, end) in which the trace records nothing: no event of any thread or stream (the
    profiler's own span of the whole recording, `Kind.OTHER`, apart), sorted. Between two ops a few microseconds;
    a serving loop that sleeps between bursts of requests, or two recordings' events written into one file, a
    stretch longer than any step."""
    rows = np.flatnonzero(trace.kind != Kind.OTHER)
    if len(rows) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = trace.ts_ns[rows]  # rows are in ts order
    reach = np.maximum.accumulate(trace.end_ns[rows])
    gap = np.flatnonzero(start[1:] > reach[:-1])
    return reach[gap], start[gap + 1]


def apart_at_idle(tree: Tree, units: Units | None, where: str, gaps: tuple[np.ndarray, np.ndarray]) -> Units | None:
    """Rule 6 of the module docstring: the trace's longest stretches in which nothing was recorded (`idle`: those
    at least half as long as the longest) split the thread's events into parts, and each part's steps are found by
    the rules from its outermost events, together, when every part that holds work has steps and every step is
    shorter than the shortest such stretch: the program was idle there, not stepping (a serving loop that sleeps
    between bursts of requests; two recordings' events written into one file, each one's eight decode steps, not
    one step from the first recording's start over the gap into the second's). Where the steps `units` found
    without the split hold none of these stretches, or more than half of them hold one (a loop that sleeps in
    every iteration sleeps as its step), or the parts hold fewer steps than they (a stretch inside one token: the
    OS ran another process, or Python ran without ops; cut apart there, the token is lost), they stand; where
    the parts find no such steps, a step that holds one ends where the stretch begins, when the stretch is longer
    than every step's recorded part (its wall less the stretches in it)."""
    gs, ge = gaps
    if not len(gs):
        return units
    long = (ge - gs) >= (ge - gs).max() // 2
    gs, ge = gs[long], ge[long]
    inside = np.zeros(0, bool)
    if units is not None:
        at = np.searchsorted(gs, units.start, side="left")  # the first long stretch from each step's start on
        inside = (at < len(gs)) & (ge[np.minimum(at, len(gs) - 1)] <= units.end)
        if not inside.any() or 2 * int(inside.sum()) > len(inside):
            return units
    scope = np.flatnonzero(tree.parent < 0)
    part = np.searchsorted(gs, tree.start[scope], side="right")
    parts = np.unique(part[tree.held[scope] > 0]).tolist()
    found = [repeating_unit(tree, where, scope[part == p]) for p in parts] if len(parts) > 1 else []
    each = [u for u in found if u is not None]
    if units is not None and each and sum(len(u.start) for u in each) < len(units.start):
        return units  # the parts hold fewer steps than the whole: a stretch inside a step, not between them
    if each and len(each) == len(found) and all(int((u.end - u.start).max()) < int((ge - gs).min()) for u in each):
        return Units(
            np.concatenate([u.start for u in each]),
            np.concatenate([u.end for u in each]),
            [n for u in each for n in u.names],
            each[0].kind,
            f"{each[0].rule}, and so in each of {len(each)} parts between stretches of at least "
            f"{(ge - gs).min() / 1e6:.3f} ms in which nothing was recorded",
        )
    if units is None:
        return None
    length = np.concatenate(([0], np.cumsum(ge - gs)))
    first = np.searchsorted(gs, units.start, side="left")
    last = np.maximum(np.searchsorted(ge, units.end, side="right"), first)
    busy = (units.end - units.start) - (length[last] - length[first])
    if int((ge - gs).min()) <= int(busy.max()):
        return units
    end = units.end.copy()
    end[inside] = gs[first[inside]]
    return Units(units.start, end, units.names, units.kind, units.rule + ", each ending where the trace goes idle")


def loop_calls(tree: Tree, scope: np.ndarray, where: str, nested: bool = False) -> Units | None:
    """Rule 4 of the module docstring: a loop frame's steps cut at each call of its heaviest name, counted through
    its once-only children (`scope`: the loop frame's children), or None; with `nested`, only where a call sits
    inside a once-only child (5.x's `_prefill`: then the loop's own children hold one call fewer than it ran, and
    the cycle rule would count K - 1 iterations)."""
    if not len(scope):
        return None
    names, counts = np.unique(tree.key[scope], return_counts=True)
    once = np.isin(tree.key[scope], names[counts == 1]) & (tree.held[scope] > 0)
    inner = [tree.children(int(i)) for i in scope[once].tolist()]
    seq = np.concatenate([scope, *inner])
    direct = np.arange(len(seq)) < len(scope)
    order = np.argsort(tree.start[seq], kind="stable")
    seq, direct = seq[order], direct[order]
    keys, inverse, counts = np.unique(tree.key[seq], return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=tree.held[seq]).astype(np.int64)
    g = int(np.argmax(sums))
    calls = seq[inverse == g]
    calls = calls[tree.start[calls] >= np.maximum.accumulate(np.append(-1, tree.end[calls][:-1]))]  # outermost
    if len(calls) < 2 or not sums[g] or not direct[inverse == g].any() or (nested and direct[inverse == g].all()):
        return None
    last_end = int(tree.end[seq[counts[inverse] == counts[g]]].max())
    start = tree.start[calls]
    end = np.append(start[1:], last_end)
    name = tree.names[int(keys[g])]
    return _most(
        tree,
        Units(
            start,
            end,
            [f"iteration#{i}" for i in range(len(calls))],
            "iteration",
            f"loop calls: {name!r}, {len(calls)} times on {where}, each to the next",
        ),
        int(tree.held[scope].sum()),
    )


def _in_each(tree: Tree, scope: np.ndarray, where: str) -> Units | None:
    """Rule 5 of the module docstring: the steps inside each member of the numbered family of ranges in `scope` that
    holds the most launches (`request_0`, `request_1`: names one text with their numbers replaced, `family_key`), by
    the rules from each member's children inward, together; None unless the family has two members or more and each
    has steps."""
    members: dict[str, list[int]] = {}
    for i in scope[(tree.held[scope] > 0) & tree.is_range[scope]].tolist():
        key = family_key(tree.names[int(tree.key[i])])
        if key is not None:
            members.setdefault(key, []).append(i)
    family = max(members.values(), key=lambda rows: (int(tree.held[rows].sum()), -rows[0]), default=[])
    if len(family) < 2:
        return None
    found = [repeating_unit(tree, where, tree.children(i)) for i in family]
    if any(u is None for u in found):
        return None
    units = [u for u in found if u is not None]
    return Units(
        np.concatenate([u.start for u in units]),
        np.concatenate([u.end for u in units]),
        [n for u in units for n in u.names],
        units[0].kind,
        f"{units[0].rule}, and so inside each of {len(units)} events {tree.names[int(tree.key[family[0]])]!r}..",
    )


def _held(tree: Tree, units: Units) -> int:
    """The launches the units hold."""
    return int(tree.count(units.start, units.end + 1).sum())


def _most(tree: Tree, units: Units | None, root: int) -> Units | None:
    """The units, when they hold at least MAJORITY of the launches of the scope the search began in: containers
    followed inward, each holding half of its own scope, can reach the layers of one forward (a pipeline's text
    encoder's 24 blocks, 39% of its thread's launches), which are pieces of a step, not steps."""
    if units is None or int(tree.count(units.start, units.end + 1).sum()) < MAJORITY * root:
        return None
    return units


def _whole(tree: Tree, scope: np.ndarray, members: np.ndarray, held: int) -> bool:
    """Rule 2: from the first occurrence to the last, the occurrences hold all but `1 - WHOLE` of the launches and
    are at least half of the siblings that launch anything (AlexNet's five convolutions hold most launches of a
    forward, but the ReLUs and pools between them launch too: they are layers, not steps)."""
    first, last = tree.start[members[0]], tree.end[members[-1]]
    between = int(tree.count(np.array([first]), np.array([last + 1]))[0])
    inside = scope[(tree.start[scope] >= first) & (tree.end[scope] <= last) & (tree.held[scope] > 0)]
    return held >= WHOLE * between and 2 * len(members) >= len(inside)


def _each(tree: Tree, members: np.ndarray, where: str) -> Units:
    name = tree.names[int(tree.key[members[0]])]
    return Units(
        tree.start[members],
        tree.end[members],
        [name] * len(members),
        "step",
        f"repeating unit: {name!r}, {len(members)} times on {where}",
    )


def _cycles(tree: Tree, scope: np.ndarray, where: str) -> Units | None:
    """Rule 3's cycle in `scope`; where each of its iterations is a cycle again, and they hold different numbers of
    iterations or each one's attention reads more keys than the one before, those inner iterations (rule 3b of the
    module docstring); None when the scope has no cycle."""
    outer = _cycle(tree, scope, where)
    if outer is None or len(outer.start) < 2:
        return outer
    seq = scope[np.argsort(tree.start[scope], kind="stable")]
    lo = np.searchsorted(tree.start[seq], outer.start, side="left")
    hi = np.append(lo[1:], len(seq))  # the last to the scope's end: its inner cycle says where it ends
    inner: list[Units] = []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        if (u := _cycle(tree, seq[a:b], where)) is None:
            return outer
        inner.append(u)
    counts = [len(u.start) for u in inner]
    if len(set(counts)) == 1 and not all(_reads_more_keys(tree, u) for u in inner):
        return outer  # as many in each: a forward's layers, or requests of as many tokens, unless attention says
    return Units(
        np.concatenate([u.start for u in inner]),
        np.concatenate([u.end for u in inner]),
        [f"iteration#{i}" for i in range(sum(counts))],
        "iteration",
        f"{outer.rule}, and inside each a cycle again: {'/'.join(map(str, counts))} iterations",
    )


def _reads_more_keys(tree: Tree, units: Units) -> bool:
    """Whether the first SDPA of each of the units (that recorded its shapes) reads more keys than the one before:
    tokens, each attending to one more (a KV cache's, or the whole sequence re-read), not a forward's layers,
    which read as many."""
    sdpa = np.flatnonzero(tree.keys >= 0)  # the tree's events are sorted by start
    at = np.searchsorted(tree.start[sdpa], units.start, side="left")
    if not len(sdpa) or np.any(at >= len(sdpa)):
        return False
    first = sdpa[at]
    return bool(np.all(tree.start[first] < units.end) and np.all(np.diff(tree.keys[first]) > 0))


def _cycle(tree: Tree, scope: np.ndarray, where: str) -> Units | None:
    """A flat loop's iterations in `scope` (rule 3 of the module docstring), or None."""
    seq = scope[np.argsort(tree.start[scope], kind="stable")]
    keys, inverse, counts = np.unique(tree.key[seq], return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=tree.held[seq]).astype(np.int64)
    first = np.full(len(keys), len(seq), np.int64)
    np.minimum.at(first, inverse, np.arange(len(seq)))  # each name's first position in the scope
    total = int(sums.sum())
    best = None
    for k in sorted(
        {int(c) for c, s in zip(counts.tolist(), sums.tolist(), strict=True) if c >= 2 and s}, reverse=True
    ):
        if not np.any((counts == k) & (sums > 0)):
            continue
        positions = np.flatnonzero(inverse == inverse[int(first[(counts == k) & (sums > 0)].min())])
        for cuts in _phases(inverse, positions):
            later = np.bincount(inverse[int(cuts[1]) :], minlength=len(keys))  # each name's count from the 2nd cut on
            last = np.bincount(inverse[int(cuts[-1]) :], minlength=len(keys))  # and from the last cut on
            if _periodic(tree, seq, inverse, cuts, k, counts, sums, later, last):
                best = (k, cuts, later, last)
                break
        if best is not None:
            break
    if best is None:
        return None
    k, cuts, later, last = best
    # The last iteration ends with the last name that occurs a multiple of K times, in every iteration (once each, or
    # each request's tokens) or, from three iterations on, that runs in it as often as in each from the second cut on
    # (a first iteration's extras apart: a token's two forwards beside the prefill's one)
    every = _in_every(inverse, cuts, k, counts)
    ends = every | ((k >= FAMILY_MIN) & (later > 0) & (later % (k - 1) == 0) & (last * (k - 1) == later))
    ends |= _branches(inverse, cuts, k, ends | (sums == 0))
    last_end = int(tree.end[seq[ends[inverse]]].max())
    start = tree.start[seq[cuts]]
    end = np.append(start[1:], max(last_end, int(start[-1])))
    if tree.count(start[:1], end[-1:] + 1)[0] < MAJORITY * total:
        return None
    name = tree.names[int(keys[inverse[cuts[0]]])]
    return Units(
        start,
        end,
        [f"iteration#{i}" for i in range(k)],
        "iteration",
        f"repeating cycle: {k} iterations of sibling events from {name!r} on {where}",
    )


def _periodic(
    tree: Tree,
    seq: np.ndarray,
    inverse: np.ndarray,
    cuts: np.ndarray,
    k: int,
    counts: np.ndarray,
    sums: np.ndarray,
    later: np.ndarray,
    last: np.ndarray,
) -> bool:
    """Whether `cuts` (positions in `seq`) cut the scope into K iterations (rule 3): the names that count with the
    cycle (a multiple of K, in each iteration: `_in_every`; from three iterations on, a first iteration's
    extras or a last's fewer) hold `PERIODIC` of its launches, and every iteration holds a launch (the last, when
    some name skips it, half the median's)."""
    first_more = (later % (k - 1) == 0) & (counts - later >= later // (k - 1))  # extras: 1st or before
    last_less = (counts % (k - 1) == 0) & (last == 0)  # K - 1 times its rate, none in the last iteration
    periodic = _in_every(inverse, cuts, k, counts) | ((k >= FAMILY_MIN) & (first_more | last_less))
    periodic |= _branches(inverse, cuts, k, periodic | (sums == 0))
    if sums[periodic].sum() < PERIODIC * sums.sum():
        return False
    pieces = tree.count(tree.start[seq[cuts[:-1]]], tree.start[seq[cuts[1:]]])
    short = np.any(periodic & ~first_more & (counts % k != 0) & (sums > 0))  # some name skips the last one
    tail = tree.count(tree.start[seq[cuts[-1:]]], np.array([int(tree.end[seq].max()) + 1]))[0]
    return bool(np.all(pieces > 0) and (not short or 2 * tail >= np.median(pieces)))


def _branches(inverse: np.ndarray, cuts: np.ndarray, k: int, counted: np.ndarray) -> np.ndarray:
    """Per name, whether it is one of a branch's alternatives in the K iterations `cuts` makes: of the names that do
    not count with the cycle by themselves (`counted` False), none runs in every iteration, and together they run
    equally often in each, at least once (a loop that calls one of two models a step, as a router picks: each
    model's forward runs in some iterations only, one of them in every one). Two names at least; else none."""
    rest = ~counted
    out = np.zeros(len(counted), bool)
    if np.count_nonzero(rest) < 2:
        return out
    pos = np.flatnonzero(rest[inverse])
    it = np.searchsorted(cuts, pos, side="right") - 1  # each position's iteration; -1 before the first cut
    ok = it >= 0
    per_iteration = np.bincount(it[ok], minlength=k)
    if per_iteration.min() < 1 or per_iteration.min() != per_iteration.max():
        return out
    compact = np.cumsum(rest) - 1
    table = np.bincount(compact[inverse[pos[ok]]] * k + it[ok], minlength=int(rest.sum()) * k).reshape(-1, k)
    if np.any(np.all(table > 0, axis=1)):
        return out
    out[np.flatnonzero(rest)[table.sum(axis=1) > 0]] = True  # a set-up call before the first cut is none
    return out


def _in_every(inverse: np.ndarray, cuts: np.ndarray, k: int, counts: np.ndarray) -> np.ndarray:
    """Per name (`inverse`: each position's name in the scope), whether it occurs a multiple of K times and in each
    of the K iterations `cuts` makes: one that runs in every other iteration only is no name of that cycle (a
    denoising loop that calls its network twice a step, for the guided and the unguided prediction, and combines
    them once: cut at each call, the combining ops ran twice in every second "iteration" and never in the others;
    its steps are the twenty scheduler steps, not forty calls). How often it runs in each may differ (requests of
    4, 8 and 12 tokens). The table is names x K, and a name counted a multiple of K occurs at least K times, so it
    holds at most as many cells as the scope has events."""
    mult = (counts % k == 0) & (counts > 0)
    every = np.zeros(len(counts), bool)
    if not mult.any():
        return every
    pos = np.flatnonzero(mult[inverse])
    it = np.searchsorted(cuts, pos, side="right") - 1  # each position's iteration; -1 before the first cut
    compact = np.cumsum(mult) - 1
    ok = it >= 0
    table = np.bincount(compact[inverse[pos[ok]]] * k + it[ok], minlength=int(mult.sum()) * k).reshape(-1, k)
    every[mult] = np.all(table > 0, axis=1)
    return every


def _phases(inverse: np.ndarray, positions: np.ndarray) -> list[np.ndarray]:
    """The cuts to try for one name's `positions`, in order: moved back over the events that precede every cut alike
    (the longest run before the first cut that equals the run before the second, shorter than one period), so a
    cycle begins where the loop body does; then, where that moved them, the name's own positions, the first still
    moved back (a run before the first cut that precedes every cut alike can end no earlier iteration: a prefill's
    forward, alike in name to the forward that ends each token's work, is the first iteration's). The moved cuts
    fail where the run they move over ends the iteration before (the forward that ends each token's work): each
    iteration then starts at the token before's forward, so from the second cut on the forwards count one more than
    a first iteration's extras allow, and the last iteration leaves the final forward out."""
    first, second = int(positions[0]), int(positions[1])
    back = 0
    while (
        back + 1 < second - first and first - back - 1 >= 0 and inverse[first - back - 1] == inverse[second - back - 1]
    ):
        back += 1
    if not back:
        return [positions]
    moved = positions - back
    moved[1:] = np.maximum(moved[1:], positions[:-1] + 1)  # an iteration shorter than the first keeps its cut
    own = positions.copy()
    own[0] = moved[0]
    return [moved, own]


def numbered_ranges(trace: Trace, calls: np.ndarray, pid: int, tid: int) -> tuple[np.ndarray, str] | None:
    """The numbered family of thread pid/tid that marks its steps (the module docstring's last rule): its rows,
    sorted by start, and the rule in words; None when no family passes. `calls`: the launch calls (`unit_work`)."""
    rows = thread_rows(trace, trace.rows(Kind.USER_RANGE), pid, tid)
    rows = rows[trace.stream[rows] < 0]
    launches = np.sort(trace.ts_ns[thread_rows(trace, calls, pid, tid)])
    if len(rows) < FAMILY_MIN or not len(launches):
        return None
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    depth, _ = nesting(start, end)
    # A range's parent is what holds it whole: ranges that overlap without nesting (start/end ranges, a request's
    # life opened on one thread and closed on another) are siblings, so their family is one, and not disjoint.
    parent = containers(start, end)
    held = np.searchsorted(launches, end, side="right") - np.searchsorted(launches, start, side="left")
    ids = np.unique(trace.name_id[rows])
    keys: dict[str, int] = {}
    key_of = np.full(len(trace.names), -1, np.int64)
    for i in ids.tolist():
        key = family_key(trace.names[i])
        if key is not None:
            key_of[i] = keys.setdefault(key, len(keys))
    key = key_of[trace.name_id[rows]]
    numbered = np.flatnonzero(key >= 0)
    if not len(numbered):
        return None
    # a family: one key under one parent range
    groups, group = np.unique(np.stack([parent[numbered], key[numbered]], axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    size = np.bincount(group, minlength=len(groups))
    total = np.bincount(group, weights=held[numbered], minlength=len(groups))
    empty = np.bincount(group, weights=held[numbered] == 0, minlength=len(groups))
    passed = []
    for g in np.flatnonzero((size >= FAMILY_MIN) & (empty == 0) & (total >= MAJORITY * len(launches))).tolist():
        members = numbered[group == g]
        p = int(groups[g, 0])
        if _family(trace, rows[members], start[members], end[members]) and (p < 0 or int(held[p]) == int(total[g])):
            passed.append((int(depth[members[0]]), -int(total[g]), g, members))
    if not passed:
        return None
    _, _, g, members = min(passed, key=lambda x: x[:3])
    text = next(k for k, v in keys.items() if v == int(groups[g, 1]))
    return rows[members], f"numbered ranges: {text!r}, {len(members)} times on thread {pid}/{tid}"


def _family(trace: Trace, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> bool:
    """Ranges of one key under one parent (sorted by start) that are a counter's: each name once, none overlapping
    the next."""
    return len(np.unique(trace.name_id[rows])) == len(rows) and bool(np.all(start[1:] >= end[:-1]))
