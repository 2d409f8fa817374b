"""Steps as the engine ran them (probe.analysis.ledger.steps, units, coverage): engines' own step frames, `--steps`
over every kind of range, the outermost host unit that repeats and holds the launches, never a step per graph
piece, what the steps cover. Hand-built traces, each figure worked out beside it."""

from __future__ import annotations

import functools
import json
import sqlite3
from pathlib import Path

import pytest

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.steps import RULE_STEPS, compile_steps_regex, find_steps
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.ledger.units import SDPA, Tree, launch_calls
from probe.analysis.trace import Kind, load_trace
from probe.errors import ProbeError
from tests.data import make_nsys_fixture

WORKER = "vllm/v1/worker/gpu_worker.py(263): execute_model"
RUNNER = "vllm/v1/worker/gpu_model_runner.py(1002): execute_model"


class Trace:
    """A chrome trace written event by event: host events on (pid 1, tid), GPU ops on stream 7, times in us."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def host(self, cat: str, name: str, a: float, b: float, tid: int = 1, **args) -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": a, "dur": b - a, "args": args}
        )

    def launch(self, a: float, b: float, gpu: list[tuple[float, float]], tid: int = 1, name="cudaLaunchKernel"):
        """A launch call [a, b] and the GPU ops it started (none: the profiler recorded no GPU side)."""
        self.corr += 1
        self.host("cuda_runtime", name, a, b, tid, correlation=self.corr)
        for s, e in gpu:
            self.gpu("kernel", f"k{self.corr}", s, e, self.corr)

    def gpu(self, cat: str, name: str, a: float, b: float, corr: int, **args) -> None:
        args = {"stream": 7, "correlation": corr, **args}
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": a, "dur": b - a, "args": args}
        )

    def write(self, tmp_path: Path, name: str = "t.json") -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"traceEvents": self.events}))
        return path


def vllm_like(worker: str = WORKER) -> Trace:
    """A worker's busy loop with three steps; each replays four graph pieces (two kernels each) with an eager
    attention launch between two of them, as vLLM V1's piecewise CUDA graphs do, and the busy loop waits between
    the steps."""
    t = Trace()
    t.host("python_function", "vllm/v1/executor/multiproc_executor.py(465): worker_busy_loop", 0, 1000)
    for k, start in enumerate((10, 400, 700)):
        t.host("python_function", worker, start, start + 200)
        t.host("python_function", RUNNER, start + 1, start + 199)
        for piece in range(4):
            at = start + 10 + 40 * piece
            t.launch(at, at + 5, [(at + 6, at + 16), (at + 16, at + 26)], name="cudaGraphLaunch")
            if piece == 1:
                t.launch(at + 20, at + 25, [(at + 30, at + 34)])
        t.host("python_function", "vllm/v1/executor/multiproc_executor.py(480): dequeue", start + 210, start + 290 - k)
    return t


def test_vllm_v1_worker_frames_are_the_steps_without_flags(tmp_path):
    """Three execute_model frames, each holding four graph launches: three steps (the worker's frame, outermost over
    the model runner's), never twelve graph pieces."""
    path = vllm_like().write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.rule == "engine frames: vLLM V1 Worker.execute_model"
    assert steps.names == [WORKER] * 3
    assert [(int(s) - 10_000, int(e - s)) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (0, 200_000),
        (390_000, 200_000),
        (690_000, 200_000),
    ]
    a = analyze(load_trace(path))
    assert [(s.graph_launches, s.launches, s.kernels) for s in a.steps] == [(4, 1, 9)] * 3
    assert a.coverage.gpu_share == 1.0 and not any("outside every step" in w for w in a.warnings)


def test_steps_searches_python_frames_and_steps_kind_narrows_it(tmp_path):
    path = vllm_like().write(tmp_path)
    found = analyze(load_trace(path), AnalyzeOptions.parse(steps="execute_model"))
    assert (found.step_rule, [s.name for s in found.steps]) == ("--steps", [WORKER] * 3)  # the outermost frames
    only = analyze(load_trace(path), AnalyzeOptions.parse(steps="execute_model", steps_kind="python"))
    assert [s.name for s in only.steps] == [WORKER] * 3
    ranges = analyze(load_trace(path), AnalyzeOptions.parse(steps="execute_model", steps_kind="range"))
    assert any("matched no range" in w for w in ranges.warnings)  # no annotation is named so: the rules below
    assert ranges.step_rule.startswith("engine frames")
    with pytest.raises(ProbeError, match="--steps-kind 'frames'"):
        AnalyzeOptions.parse(steps="x", steps_kind="frames")
    with pytest.raises(ProbeError, match="give --steps REGEX with it"):
        AnalyzeOptions.parse(steps_kind="python")


def test_an_unknown_engine_loop_is_found_by_its_repeating_unit(tmp_path):
    """The same structure under names no rule knows: the outermost unit that repeats and holds the launches (the
    busy loop holds them all: a container; inside it the step frame repeats three times and nothing between its
    occurrences launches), never a step per graph piece."""
    path = vllm_like(worker="myengine/worker.py(12): run_step").write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.rule == "repeating unit: 'myengine/worker.py(12): run_step', 3 times on thread 1/1"
    assert len(steps) == 3 and steps.kinds == ["step"] * 3


def flat_loop() -> Trace:
    """A training loop without stacks or markers, three iterations on thread 1: a zeroing op, the DataLoader's range
    (60 us, no launch), two linears (a launch each), the loss (a launch), the optimizer's range (a launch); the
    backward on the autograd thread 2 (two launches of 20 us kernels, more GPU work than thread 1's 2 us kernels)."""
    t = Trace()
    for i in range(3):
        b = 1000 * i
        t.host("cpu_op", "aten::zeros", b, b + 2)
        t.host("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b + 5, b + 65)
        for j in range(2):
            t.host("cpu_op", "aten::linear", b + 70 + 10 * j, b + 78 + 10 * j)
            t.launch(b + 71 + 10 * j, b + 73 + 10 * j, [(b + 74 + 10 * j, b + 76 + 10 * j)])
        t.host("cpu_op", "aten::cross_entropy_loss", b + 90, b + 96)
        t.launch(b + 91, b + 93, [(b + 94, b + 96)])
        for j in range(2):
            t.host(
                "cpu_op",
                "autograd::engine::evaluate_function: AddmmBackward0",
                b + 100 + 30 * j,
                b + 125 + 30 * j,
                tid=2,
            )
            t.launch(b + 101 + 30 * j, b + 103 + 30 * j, [(b + 104 + 30 * j, b + 124 + 30 * j)], tid=2)
        t.host("user_annotation", "Optimizer.step#SGD.step", b + 170, b + 180)
        t.launch(b + 171, b + 173, [(b + 174, b + 176)])
    return t


def test_a_flat_training_loop_is_cut_into_its_iterations(tmp_path):
    """Iterations K = 3: the names counting multiples of 3 hold every launch, and the earliest of the once-an-
    iteration names is the DataLoader's range; each cut moves back over the zeroing op that precedes every one, so an
    iteration runs from one aten::zeros to the next (1000 us), the last to the optimizer's end (180 us). Thread 1,
    the loop's, not the autograd thread 2 that launches the most GPU work: its cycle starts a forward late."""
    path = flat_loop().write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.rule.startswith("repeating cycle: 3 iterations of sibling events from 'aten::zeros' on thread 1/1")
    assert steps.names == ["iteration#0", "iteration#1", "iteration#2"] and steps.kinds == ["iteration"] * 3
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (0, 1000),
        (1000, 1000),
        (2000, 180),
    ]
    a = analyze(load_trace(path))
    assert [s.launches for s in a.steps] == [6, 6, 6] and a.coverage.gpu_share == 1.0
    # the DataLoader's 60 us are data loading, a purpose of their own
    assert [s.purpose_ns["data"] for s in a.steps] == [60_000] * 3


def test_one_forward_is_not_cut_into_its_layers(tmp_path):
    """AlexNet's shape: three convolutions (three launches each), a ReLU after each, pools after the first and the
    last, two linears with a ReLU between (a launch each). The convolutions hold most launches but other layers launch
    between them (layers, not steps), and no count K has the names counting its multiples hold 90% of the launches
    (K = 3: the convolutions' 9 of 17; K = 2: pools, linears and ReLUs, 8 of 17): the whole trace is one step."""
    t = Trace()
    at = 0

    def op(name: str, launches: int) -> None:
        nonlocal at
        t.host("cpu_op", name, at, at + 10 * launches + 5)
        for j in range(launches):
            t.launch(at + 1 + 10 * j, at + 3 + 10 * j, [(at + 4 + 10 * j, at + 8 + 10 * j)])
        at += 10 * launches + 10

    for layer in range(3):
        op("aten::conv2d", 3)
        op("aten::relu", 1)
        if layer != 1:
            op("aten::max_pool2d", 1)
    op("aten::linear", 1)
    op("aten::relu", 1)
    op("aten::linear", 1)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "whole trace" and steps.names == ["trace"]


def cpu_loop(iterations: int) -> Trace:
    """A CPU-only run (no launch, no GPU op) of one small forward `iterations` times, 1000 us apart, no marker: on
    thread 1 randn [0, 10], a linear [20, 60] (its addmm nested inside), relu [70, 80], a second linear [90, 130],
    mean [140, 150]; thread 2 (a loader's) copies twice an iteration, fewer ops than thread 1."""
    t = Trace()
    for i in range(iterations):
        b = 1000 * i
        t.host("cpu_op", "aten::randn", b, b + 10)
        for at in (20, 90):
            t.host("cpu_op", "aten::linear", b + at, b + at + 40)
            t.host("cpu_op", "aten::addmm", b + at + 5, b + at + 35)
        t.host("cpu_op", "aten::relu", b + 70, b + 80)
        t.host("cpu_op", "aten::mean", b + 140, b + 150)
        for at in (300, 600):
            t.host("cpu_op", "aten::copy_", b + at, b + at + 50, tid=2)
    return t


def test_a_cpu_only_loop_is_cut_into_its_iterations(tmp_path):
    """No launch anywhere: thread 1's outermost ops stand in for launches (the addmm inside each linear does not
    count again). Four iterations of five top-level ops: the linears' count 8 holds 8 of 20 ops, K = 4 holds all 20,
    so the cuts are the earliest once-an-iteration name, aten::randn; an iteration runs from one randn to the next
    (1000 us), the last to the end of its mean (150 us). Thread 1, which runs the most top-level ops (20 against
    thread 2's 8 copies, which repeat too)."""
    path = cpu_loop(4).write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.rule == "repeating cycle: 4 iterations of sibling events from 'aten::randn' on thread 1/1"
    assert steps.names == [f"iteration#{i}" for i in range(4)] and steps.kinds == ["iteration"] * 4
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (0, 1000),
        (1000, 1000),
        (2000, 1000),
        (3000, 150),
    ]
    a = analyze(load_trace(path))
    assert len(a.steps) == 4 and not any("whole trace is one step" in w for w in a.warnings)


@pytest.mark.parametrize("extra_in", [0, 4])
def test_a_cpu_loop_whose_first_iteration_does_more_is_cut(tmp_path, extra_in):
    """A CPU loop without stacks whose first pass (a prefill) runs three more `aten::to` than the others: five
    iterations of six top-level ops (cpu_loop's five and one `aten::to` at 200 us) and three more `aten::to` in
    iteration `extra_in`: 33 ops. For K = 5 the names counting multiples of 5 hold 25 of 33 (76%, under 90%); but
    the extra `aten::to` all fall before the second cut (1000 us), and from it on `aten::to` runs once an iteration
    (4 = 8 // 5 times 4), so they are the first iteration's: 5 iterations, from randn to randn, the last to the end
    of its `aten::to` (210 us: from the second cut on it runs once an iteration, the last included, so the last
    iteration holds it as the others do; before, it ended at the mean's 150 us, the last name that occurs 5 times).
    Extras in the last iteration are not the first's: thread 1 is not cut (thread 2's copies are the steps)."""
    t = cpu_loop(5)
    for i in range(5):
        t.host("cpu_op", "aten::to", 1000 * i + 200, 1000 * i + 210)
    for j in range(3):
        t.host("cpu_op", "aten::to", 1000 * extra_in + 220 + 20 * j, 1000 * extra_in + 230 + 20 * j)
    steps = find_steps(load_trace(t.write(tmp_path)))
    if extra_in:
        assert "thread 1/1" not in steps.rule
        return
    assert steps.rule == "repeating cycle: 5 iterations of sibling events from 'aten::randn' on thread 1/1"
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (0, 1000),
        (1000, 1000),
        (2000, 1000),
        (3000, 1000),
        (4000, 210),
    ]


def test_a_cpu_loop_whose_first_iteration_does_as_many_more_as_it_has_iterations_is_cut(tmp_path):
    """The loop above with six extra `aten::to` in the first iteration, as many as or more than the iterations (a
    short `generate` without stacks: its set-up and prefill run more `aten::to`, `slice`, `mul` than it makes
    tokens): 11 `aten::to`, 4 from the second cut on, once an iteration. The rate is read from the later iterations
    (4 over 4), and the 7 before the second cut hold at least one iteration's: the first iteration's. Reading it as
    11 // 5 = 2 an iteration (8 expected later) made `aten::to` not periodic, and the loop one window."""
    t = cpu_loop(5)
    for i in range(5):
        t.host("cpu_op", "aten::to", 1000 * i + 200, 1000 * i + 210)
    for j in range(6):
        t.host("cpu_op", "aten::to", 220 + 20 * j, 230 + 20 * j)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "repeating cycle: 5 iterations of sibling events from 'aten::randn' on thread 1/1"
    assert [int(s) // 1000 for s in steps.start] == [0, 1000, 2000, 3000, 4000]


@pytest.mark.parametrize("first_iterations", [4, 6])
def test_the_loops_inside_each_of_two_requests_are_the_steps(tmp_path, first_iterations):
    """Two `request_N` ranges (a pair: no numbered family), each around a CPU loop without stacks: two set-up ops,
    then iterations of cpu_loop's five ops. Equal requests (4 and 4 iterations): the first holds exactly half the
    launches, so it was taken as the container, and its four steps were all (in a real trace whose set-up leaves
    them under half the thread's, refused: one window). A larger first request (6 and 4): its six steps, and the
    second request's four were left out. The steps are the iterations inside each request."""
    t = Trace()
    at = 0
    for r, n in enumerate((first_iterations, 4)):
        t.host("user_annotation", f"request_{r}", at, at + 200 + 1000 * n)
        t.host("cpu_op", "aten::ones", at + 10, at + 20)
        t.host("cpu_op", "aten::isin", at + 30, at + 40)
        for i in range(n):
            b = at + 200 + 1000 * i
            t.host("cpu_op", "aten::randn", b, b + 10)
            for x in (20, 90):
                t.host("cpu_op", "aten::linear", b + x, b + x + 40)
            t.host("cpu_op", "aten::relu", b + 70, b + 80)
            t.host("cpu_op", "aten::mean", b + 140, b + 150)
        at += 1000 * (n + 1)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert len(steps.names) == first_iterations + 4
    assert steps.rule.endswith("and so inside each of 2 events 'request_0'..")


def test_a_set_up_call_beside_a_decoding_loop_is_no_request(tmp_path):
    """Beside the loop (a frame holding cpu_loop's four iterations, 20 top-level ops), a set-up frame calls a helper
    six times, each one op: a repeating unit of its own. Neither is a numbered range, so the steps stay the loop's
    four iterations, not the helper's six calls beside them (twelve `_tensor_or_none` steps on a generate with two
    forwards a token, before ranges were asked for)."""
    t = Trace()
    t.host("python_function", "setup.py(1): prepare", 0, 900)
    for j in range(6):
        t.host("python_function", "setup.py(5): _tensor_or_none", 10 + 100 * j, 90 + 100 * j)
        t.host("cpu_op", "aten::tensor", 20 + 100 * j, 80 + 100 * j)
    t.host("python_function", "loop.py(2): decode", 1000, 5200)
    for i in range(4):
        b = 1100 + 1000 * i
        t.host("cpu_op", "aten::randn", b, b + 10)
        for x in (20, 90):
            t.host("cpu_op", "aten::linear", b + x, b + x + 40)
        t.host("cpu_op", "aten::relu", b + 70, b + 80)
        t.host("cpu_op", "aten::mean", b + 140, b + 150)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "repeating cycle: 4 iterations of sibling events from 'aten::randn' on thread 1/1"


def sampled_loop(tokens: int, repeats: int) -> Trace:
    """A hand decode loop with stacks, CPU only, that ends on a forward: a prefill forward, then `tokens` times the
    token's work on the logits (a select, `repeats` matmuls, an argmax: top-level ops) followed by the next forward,
    1000 us a token. Each forward is an `nn.Module: M_0` frame holding eight ops [b + 10, b + 90]."""
    t = Trace()
    t.host("python_function", "loop.py(1): run", 0, 1000 * tokens + 200)
    _forward(t, 10)
    for i in range(tokens):
        b = 1000 * i + 120
        t.host("cpu_op", "aten::select", b, b + 5)
        for j in range(repeats):
            t.host("cpu_op", "aten::matmul", b + 10 + 20 * j, b + 25 + 20 * j)
        t.host("cpu_op", "aten::argmax", b + 10 + 20 * repeats, b + 15 + 20 * repeats)
        _forward(t, 1000 * (i + 1) + 10)
    return t


def _forward(t: Trace, b: float) -> None:
    """A forward at b: an `nn.Module: M_0` frame [b, b + 100] holding eight linears (top-level ops)."""
    t.host("python_function", "nn.Module: M_0", b, b + 100)
    for j in range(8):
        t.host("cpu_op", "aten::linear", b + 10 + 10 * j, b + 15 + 10 * j)


@pytest.mark.parametrize("repeats", [1, 3])
def test_a_loop_that_ends_on_a_forward_is_cut_at_each_forward(tmp_path, repeats):
    """Nine forwards and eight tokens' work between them: 9 x 8 linears + 8 x (2 + repeats) ops. Cut at each forward,
    K = 9: the token's names occur 8 times (the select, the argmax) or 8 x repeats (the matmuls), each a multiple of
    K - 1 with none after the last forward: the last iteration is the loop's final forward, which nothing samples
    after. They count with the cycle, so 9 iterations, from forward to forward (1000 us), the last the forward alone
    (100 us, its 8 ops at least half the median iteration's 8 + 2 + repeats), whether the token's work runs one
    matmul or three. Counting only names whose counts are multiples of K, the forwards' 72 ops of 96 (or of 112)
    fell under 90%, and K = 8 (cut at the select, moved back over the forward before it) left the final forward as a
    ninth: one whole-trace step."""
    steps = find_steps(load_trace(sampled_loop(8, repeats).write(tmp_path)))
    assert steps.rule == "repeating cycle: 9 iterations of sibling events from 'nn.Module: M_0' on thread 1/1"
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (10 + 1000 * i, 1000) for i in range(8)
    ] + [(8010, 100)]


def test_a_loop_condition_checked_once_more_is_no_iteration(tmp_path):
    """A `while` loop of 8 iterations, 1000 us apart: its condition frame (`loop.py(3): more`, one op inside) at
    [0, 20], then a forward (sixteen linears) [30, 200] and the token's select and argmax; the condition is checked
    once more after the last, at 8000: 9 conditions. K = 9, cut at the condition, would make every other name one
    that skips the last iteration, which then holds the check's one op against a median iteration's 19: not an
    iteration, so K = 9 is refused; K = 8 cuts at each forward, moved back over the condition before it (the names
    counting multiples of 8 hold 144 of the 153 ops): 8 iterations of 1000 us, the last to the end of its argmax
    (240 us); the final check is after them."""
    t = Trace()
    t.host("python_function", "loop.py(1): run", 0, 8100)
    for i in range(9):
        b = 1000 * i
        t.host("python_function", "loop.py(3): more", b, b + 20)
        t.host("cpu_op", "aten::is_nonzero", b + 5, b + 15)
        if i == 8:
            break
        t.host("python_function", "nn.Module: M_0", b + 30, b + 200)
        for j in range(16):
            t.host("cpu_op", "aten::linear", b + 40 + 10 * j, b + 45 + 10 * j)
        t.host("cpu_op", "aten::select", b + 210, b + 215)
        t.host("cpu_op", "aten::argmax", b + 230, b + 240)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "repeating cycle: 8 iterations of sibling events from 'loop.py(3): more' on thread 1/1"
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (1000 * i, 1000) for i in range(7)
    ] + [(7000, 240)]


def token_search(tokens: int, forwards: int) -> Trace:
    """A user's decoding function with stacks, CPU only (HF `generate(custom_generate=fn)`, where transformers 5.x
    put contrastive search and DoLa): inside `search.py(9): search` [0, ...], a prefill forward [10, 110], then
    `past_key_values` [115, 120] (a property frame, no op); then `tokens` times, b = 200 + 1000 i: the logits' select
    [b, b + 5], topk [b + 10, b + 15], a `deepcopy` of the cache [b + 20, b + 40] (one clone inside), with
    `forwards` = 2 a look-ahead forward of the top candidates [b + 50, b + 150], then argmax [b + 160, b + 165],
    cat [b + 170, b + 175], the chosen token's forward [b + 180, b + 280] and its `past_key_values`
    [b + 285, b + 290]. Each forward is an `nn.Module: M_0` frame holding eight linears (top-level ops)."""
    t = Trace()
    t.host("python_function", "search.py(9): search", 0, 1000 * tokens + 300)
    forward = functools.partial(_forward, t)

    def past(b: float) -> None:
        t.host("python_function", "transformers/utils/generic.py(593): past_key_values", b, b + 5)

    forward(10)
    past(115)
    for i in range(tokens):
        b = 200 + 1000 * i
        t.host("cpu_op", "aten::select", b, b + 5)
        t.host("cpu_op", "aten::topk", b + 10, b + 15)
        t.host("python_function", "copy.py(128): deepcopy", b + 20, b + 40)
        t.host("cpu_op", "aten::clone", b + 25, b + 35)
        if forwards == 2:
            forward(b + 50)
        t.host("cpu_op", "aten::argmax", b + 160, b + 165)
        t.host("cpu_op", "aten::cat", b + 170, b + 175)
        forward(b + 180)
        past(b + 285)
    return t


@pytest.mark.parametrize("tokens", [3, 8])
def test_a_loop_of_two_forwards_a_token_is_cut_per_token(tmp_path, tokens):
    """Two forwards a token (a look-ahead over the candidates, then the chosen token's) and a prefill: 2 tokens + 1
    forwards, `tokens` times the token's five ops. K = 2 tokens + 1 (the forwards) holds only the linears
    (8 x 17 of 176 ops at 8 tokens); K = tokens cuts at the select, and the events before it that precede every cut
    alike are a forward and its `past_key_values`: moved back over them, each iteration would start at the forward
    that ends the token before, the prefill's one forward in the first, so from the second cut on the forwards count
    2 tokens - 1, not the 2 (tokens - 1) of a first iteration that does one more, and the last would leave its final
    forward out. The select's own positions hold: from the second one on each token runs two forwards, so they count
    with the cycle (the prefill's is the first iteration's extra); the first iteration still starts at the run moved
    over (the prefill's forward, which ends no earlier iteration), and the last ends where each token's work does,
    at the end of its `past_key_values` (it runs once a token from the second cut on, the last included). So
    `tokens` steps of two forwards each, the first from the prefill [10, 1200], then 1000 us each, the last 290 us.
    Before: one whole-trace step."""
    steps = find_steps(load_trace(token_search(tokens, forwards=2).write(tmp_path)))
    assert steps.rule == f"repeating cycle: {tokens} iterations of sibling events from 'nn.Module: M_0' on thread 1/1"
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (10, 1190)
    ] + [(200 + 1000 * i, 1000) for i in range(1, tokens - 1)] + [(200 + 1000 * (tokens - 1), 290)]


@pytest.mark.parametrize("tokens", [3, 8])
def test_a_search_of_one_forward_a_token_stays_cut_at_each_forward(tmp_path, tokens):
    """The same function with one forward a token (no look-ahead): tokens + 1 forwards, the token's five ops
    `tokens` times, none after the last forward, is a loop that ends on a forward (K = tokens + 1, cut at each
    forward, nothing to move back over): tokens + 1 iterations from forward to forward, the first the prefill
    [10, 380], the last the final forward and its `past_key_values` (110 us)."""
    steps = find_steps(load_trace(token_search(tokens, forwards=1).write(tmp_path)))
    assert steps.rule == (
        f"repeating cycle: {tokens + 1} iterations of sibling events from 'nn.Module: M_0' on thread 1/1"
    )
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (10, 370)
    ] + [(380 + 1000 * i, 1000) for i in range(tokens - 1)] + [(380 + 1000 * (tokens - 1), 110)]


CHECK = "transformers/generation/utils.py(3020): _has_unfinished_sequences"


@pytest.mark.parametrize("drafts", [(4, 4, 3, 4, 2), (0, 0, 0, 0, 0)])
def test_assisted_decoding_is_cut_at_each_round(tmp_path, drafts):
    """HF assisted decoding (`_assisted_decoding`), CPU only: set-up [5, 40] (two ops), the loop's first check
    [50, 55] (no op), then a round a time, b = 100 + 1000 i: `get_candidates` [b, b + 500] holding the draft model's
    forwards (`drafts[i]` of four linears each; with none, prompt lookup's two n-gram ops), the target forward
    [b + 520, b + 700] (sixteen linears), argmax, eq, cat, max and eq again, then the check [b + 760, b + 770] (one
    op): 6 checks for 5 rounds. K = 6 (the checks) would leave the last check alone, one op: no iteration. K = 5
    cuts at `get_candidates` moved back over the check before it: 5 rounds from check to check, the first from the
    loop's first check [50, 860]; the last ends with its work at its second eq (it runs twice each round from the
    second cut on, the last included; 995 us), the final check after it. The draft model's forwards, inside
    `get_candidates`, are no sibling of the target's: one forward a round either way."""
    t = Trace()
    t.host("python_function", "transformers/generation/utils.py(3400): _assisted_decoding", 0, 5200)
    t.host("python_function", "transformers/generation/utils.py(1293): _get_candidate_generator", 5, 40)
    for at in (10, 20):
        t.host("cpu_op", "aten::to", at, at + 5)
    t.host("python_function", CHECK, 50, 55)

    def forward(b: float, linears: int) -> None:
        t.host("python_function", "nn.Module: M_0", b, b + 10 * linears + 20)
        for j in range(linears):
            t.host("cpu_op", "aten::linear", b + 10 + 10 * j, b + 15 + 10 * j)

    for i, n in enumerate(drafts):
        b = 100 + 1000 * i
        t.host("python_function", "transformers/generation/candidate_generator.py(198): get_candidates", b, b + 500)
        for d in range(n):
            forward(b + 5 + 110 * d, 4)
        for j in range(0 if n else 2):
            t.host("cpu_op", "aten::unfold", b + 10 + 20 * j, b + 15 + 20 * j)
        forward(b + 520, 16)
        for name, at in (("argmax", 710), ("eq", 720), ("cat", 730), ("max", 740), ("eq", 750)):
            t.host("cpu_op", f"aten::{name}", b + at, b + at + 5)
        t.host("python_function", CHECK, b + 760, b + 770)
        t.host("cpu_op", "aten::is_nonzero", b + 762, b + 768)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == (
        f"engine frames: HF generate's decoding loop (repeating cycle: 5 iterations of sibling events from {CHECK!r} "
        "on thread 1/1)"
    )
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (50, 810)
    ] + [(860 + 1000 * i, 1000) for i in range(3)] + [(3860, 995)]


def test_one_cpu_only_forward_is_not_cut(tmp_path):
    """A CPU-only forward of AlexNet's shape inside a `model_inference` range (nested aten calls under each
    convolution): the range holds every top-level op (a container); inside it the ReLUs hold the most but other
    layers run between them, and no K has the names counting its multiples hold 90% of the 11 ops (K = 4: the
    ReLUs, 4; K = 3: the convolutions, 3; K = 2: ReLUs, pools and linears, 8): the whole trace is one step."""
    t = Trace()
    t.host("user_annotation", "model_inference", 0, 2000)
    at = 10

    def op(name: str, inner: tuple[str, ...] = ()) -> None:
        nonlocal at
        t.host("cpu_op", name, at, at + 100)
        for depth, child in enumerate(inner, 1):
            t.host("cpu_op", child, at + depth, at + 100 - depth)
        at += 110

    for layer in range(3):
        op("aten::conv2d", ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"))
        op("aten::relu", ("aten::clamp_min",))
        if layer != 1:
            op("aten::max_pool2d", ("aten::max_pool2d_with_indices",))
    op("aten::linear", ("aten::addmm",))
    op("aten::relu", ("aten::clamp_min",))
    op("aten::linear", ("aten::addmm",))
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "whole trace" and steps.names == ["trace"]
    assert (int(steps.tid[0]), int(steps.end[0] - steps.start[0])) == (1, 2_000_000)


def test_a_whole_trace_step_is_the_launching_threads_without_lead_in(tmp_path):
    """No structure repeats: one step on the thread that launches the GPU work (thread 3, though thread 1 holds more
    ops), from its first event to its last; thread 1's earlier events are lead-in."""
    t = Trace()
    for i in range(4):
        t.host("cpu_op", "aten::empty", 10 * i, 10 * i + 5)
    t.host("cpu_op", "aten::mm", 100, 150, tid=3)
    t.launch(110, 120, [(121, 200)], tid=3)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert (steps.rule, int(steps.pid[0]), int(steps.tid[0])) == ("whole trace", 1, 3)
    assert int(steps.end[0] - steps.start[0]) == 50_000  # 100 to 150 us: the GPU's end is not host time


def test_steps_that_leave_gpu_work_out_are_warned_of(tmp_path):
    """Two decode steps hold 2 x 10 us of GPU work; a 60 us kernel launched under aten::randperm before the first
    step lies in none: 60 of the trace's 80 us of GPU work, 75%, past the 5% the warning allows."""
    t = Trace()
    t.host("cpu_op", "aten::randperm", 0, 20)
    t.launch(5, 10, [(12, 72)])
    for i in range(2):
        b = 100 + 100 * i
        t.host("user_annotation", f"decode#{i}", b, b + 50)
        t.host("cpu_op", "aten::mm", b + 5, b + 20)
        t.launch(b + 6, b + 10, [(b + 11, b + 21)])
    a = analyze(load_trace(t.write(tmp_path)))
    c = a.coverage
    assert (c.gpu_in_steps_ns, c.gpu_busy_ns, c.left_out_ns) == (20_000, 80_000, 60_000)
    # thread 1 runs 20 (randperm) + 2 x 15 (the mm ops) us of events; the steps hold the mm ops' 30
    assert (c.host_in_steps_ns, c.host_busy_ns) == (30_000, 50_000)
    (line,) = [w for w in a.warnings if "outside every step" in w]
    assert line.startswith("the steps leave 75% of the GPU work outside every step (0.060 of 0.080 ms)")
    assert "the largest piece: 0.060 ms of GPU work (1 ops) launched before the first step, most of it under " \
        "aten::randperm" in line  # fmt: skip


def test_the_largest_piece_left_out_is_measured_as_the_share_is(tmp_path):
    """A ProfilerStep [0, 100] launches a 50 us kernel [10, 60] with MTIA's launch call (a kernel joins it: a
    launch, whatever its name); four copies carry no correlation id (MTIA's dma_request): [20, 40] and [50, 70]
    under the kernel for 20 + 10 us, [80, 90] and [120, 140] alone. The steps leave out the union of every op less
    theirs: (60 + 10 + 20) - 50 = 40 us; the piece, the same copies, is those 40 us too (their union, 70 us,
    counts the 30 the kernel already covers), and it is said to have no launch call to lose."""
    t = Trace()
    t.host("user_annotation", "ProfilerStep#1", 0, 100)
    t.launch(2, 8, [(10, 60)], name="runFunction - job_prep_and_submit_for_execution")
    for a, b in ((20, 40), (50, 70), (80, 90), (120, 140)):
        t.events.append(
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 8, "ts": a, "dur": b - a}
        )
    for e in t.events:
        if e["name"] == "k1":
            e["cat"], e["pid"] = "mtia_ccp_events", 9
    t.events[1]["cat"] = "mtia_runtime"
    a = analyze(load_trace(t.write(tmp_path)))
    (s,) = a.steps
    assert (s.launches, s.kernels, a.totals.launches) == (1, 1, 1)
    c = a.coverage
    assert (c.gpu_in_steps_ns, c.gpu_busy_ns, c.left_out_ns) == (50_000, 90_000, 40_000)
    (line,) = [w for w in a.warnings if "outside every step" in w]
    assert line.startswith("the steps leave 44% of the GPU work outside every step (0.040 of 0.090 ms)")
    assert (
        "the largest piece: 0.040 ms of GPU work (4 ops, most of them dma_request copies) that carry no correlation "
        "id: the trace links them to no host call, so no launch of theirs was lost"
    ) in line


def test_a_graph_launch_is_a_step_when_each_holds_a_whole_forward(tmp_path):
    """Three cudaGraphLaunch calls and no host event around them (a whole forward captured in each graph): nothing
    repeats above the launches, so each launch starts a step that lasts to the next (the last to the thread's last
    event). The same launches inside repeating step frames are pieces: vllm_like's test above."""
    t = Trace()
    for i in range(3):
        at = 100 * i
        t.launch(at, at + 5, [(at + 6, at + 40), (at + 40, at + 80)], name="cudaGraphLaunch")
    t.host("cuda_runtime", "cudaStreamSynchronize", 205, 290)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert (steps.rule, steps.names) == ("graph launches", ["graph#0", "graph#1", "graph#2"])
    assert [int(e - s) // 1000 for s, e in zip(steps.start, steps.end, strict=True)] == [100, 100, 90]


def test_hf_generates_loop_holds_the_steps_its_repeating_unit(tmp_path):
    """HF `generate`: its decoding loop (`_sample`) is a loop, not a step; inside it the model's forward repeats four
    times (two launches each) with the logits processor (no launch) between: four steps, one a forward. The
    `generate` frame around the loop, and a launch before it, are no step."""
    t = Trace()
    t.host("python_function", "transformers/generation/utils.py(2000): generate", 0, 1000)
    t.launch(5, 8, [(9, 12)])  # the input's copy to the device, before the loop
    t.host("python_function", "transformers/generation/utils.py(3000): _sample", 20, 990)
    for i in range(4):
        b = 30 + 200 * i
        t.host("python_function", "transformers/models/llama/modeling_llama.py(1100): forward", b, b + 150)
        for j in range(2):
            t.launch(b + 10 + 50 * j, b + 15 + 50 * j, [(b + 16 + 50 * j, b + 40 + 50 * j)])
        t.host("python_function", "transformers/generation/logits_process.py(90): __call__", b + 160, b + 190)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == (
        "engine frames: HF generate's decoding loop (repeating unit: "
        "'transformers/models/llama/modeling_llama.py(1100): forward', 4 times on thread 1/1)"
    )
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (30, 150),
        (230, 150),
        (430, 150),
        (630, 150),
    ]


MODEL = "nn.Module: LlamaForCausalLM_0"


def generate_5x(tokens: int, gpu: bool) -> Trace:
    """HF `generate` as transformers 5.x runs it: in `_sample` [20, ...], a once-only `_prefill` [30, 205] holds the
    first forward (`prepare_inputs_for_generation`'s wrapper [35, 45], the model [50, 200], four pieces of work),
    and the loop itself calls the other `tokens - 1` forwards, token i's at b = 300 i: the wrapper [b, b + 10], the
    model [b + 20, b + 170] (two pieces of work). After each forward, argmax [f + 160, f + 170] and cat
    [f + 175, f + 185] run a piece of work each (f: that forward's start), from the loop. A piece of work is a
    kernel launch (`gpu`) or, on a CPU-only trace, an `aten::mm` op inside a linear (each is one top-level op)."""
    t = Trace()

    def work(at: float) -> None:
        if gpu:
            t.launch(at, at + 2, [(at + 3, at + 6)])
        else:
            t.host("cpu_op", "aten::linear", at, at + 5)
            t.host("cpu_op", "aten::mm", at + 1, at + 4)

    wrapper = "transformers/utils/deprecation.py(121): wrapped_func"
    end = 300 * tokens + 100
    t.host("python_function", "transformers/generation/utils.py(2400): generate", 0, end + 10)
    t.host("python_function", "transformers/generation/utils.py(3123): _sample", 20, end)
    t.host("python_function", "transformers/generation/utils.py(4283): _prefill", 30, 205)
    t.host("python_function", wrapper, 35, 45)
    forwards = [50.0] + [300.0 * i + 20 for i in range(1, tokens)]
    for i, f in enumerate(forwards):
        if i:
            t.host("python_function", wrapper, f - 20, f - 10)
        t.host("python_function", MODEL, f, f + 150)
        for j in range(4 if i == 0 else 2):
            work(f + 10 + 30 * j)
        t.host("python_function", "<built-in method argmax of type object at 0x7f01>", f + 160, f + 170)
        work(f + 162)
        t.host("python_function", "<built-in method cat of type object at 0x7f02>", f + 175, f + 185)
        work(f + 177)
    return t


@pytest.mark.parametrize("gpu", [True, False])
@pytest.mark.parametrize("tokens", [2, 4])
def test_hf_5x_generate_is_cut_at_each_forward_its_prefill_the_first(tmp_path, gpu, tokens):
    """transformers 5.x: the prefill's forward sits inside a once-only `_prefill` frame, the others are the loop's
    own children, and argmax and cat launch between them. The forwards hold 2 of each decode token's 4 pieces of work
    (no unit: 95%), and no count K has its multiples hold 90% (K = tokens: argmax and cat; K = tokens - 1: the
    loop's forwards), so the loop is cut at its heaviest call counted through `_prefill`: `tokens` steps, each
    from one forward's start to the next's (the argmax and cat are the token's), the first the prefill [50, 320],
    the last to the end of its cat (f + 185)."""
    steps = find_steps(load_trace(generate_5x(tokens, gpu).write(tmp_path)))
    assert steps.rule == (
        f"engine frames: HF generate's decoding loop (loop calls: {MODEL!r}, {tokens} times on thread 1/1, each to "
        "the next)"
    )
    starts = [50] + [300 * i + 20 for i in range(1, tokens)]
    assert [(int(s) // 1000, int(e) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == list(
        zip(starts, starts[1:] + [starts[-1] + 185], strict=True)
    )
    assert steps.kinds == ["iteration"] * tokens


def test_a_5x_generate_of_one_token_is_not_cut_into_its_layers(tmp_path):
    """One token: `_sample` holds its `_prefill`, whose one forward runs four decoder layers (each its own
    `nn.Module: LlamaDecoderLayer_i`, each holding the same-named Python `forward` frame and two launches), then
    argmax and cat. The loop's heaviest call occurs once: no step is cut, neither at the forward nor at its
    layers' frames, which are no child of the loop: the whole trace is one step."""
    t = Trace()
    t.host("python_function", "transformers/generation/utils.py(3123): _sample", 0, 1000)
    t.host("python_function", "transformers/generation/utils.py(4283): _prefill", 10, 900)
    t.host("python_function", MODEL, 20, 880)
    for layer in range(4):
        b = 40 + 200 * layer
        t.host("python_function", f"nn.Module: LlamaDecoderLayer_{layer}", b, b + 180)
        t.host("python_function", "transformers/models/llama/modeling_llama.py(300): forward", b + 5, b + 175)
        for j in range(2):
            t.launch(b + 10 + 50 * j, b + 12 + 50 * j, [(b + 13 + 50 * j, b + 40 + 50 * j)])
    for name, at in (("<built-in method argmax of type object at 0x1>", 910), ("<built-in method cat>", 950)):
        t.host("python_function", name, at, at + 20)
        t.launch(at + 2, at + 4, [(at + 5, at + 9)])
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "whole trace" and steps.names == ["trace"]


def test_the_layers_of_one_forward_are_not_steps(tmp_path):
    """A pipeline's one call holds an encoder whose 24 blocks launch a third of the thread's work and the rest runs
    after it (a transformer, a decoder): followed inward, each container holds half of its own scope, and the blocks
    repeat, but they hold under half of what the search began with: pieces of one step, not steps."""
    from probe.analysis.ledger.units import Tree, launch_calls, repeating_unit
    from probe.analysis.trace import load_trace

    events: list[dict] = []

    def frame(name, start, end):
        events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": end - start,
                "args": {},
            }
        )

    def launch(at):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": at,
                "dur": 1.0,
                "args": {"correlation": len(events)},
            }
        )

    frame("pipeline.py(10): __call__", 0.0, 10_000.0)
    frame("encoder.py(5): forward", 10.0, 4_000.0)
    for i in range(24):  # 24 blocks, 2 launches each: 48 of the 100 launches
        frame("modeling_layers.py(59): __call__", 20.0 + 160 * i, 150.0 + 160 * i)
        launch(30.0 + 160 * i)
        launch(60.0 + 160 * i)
    for i in range(52):  # the rest of the pipeline, flat under its call
        launch(4_100.0 + 100 * i)
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    tree = Tree.of(trace, 1, 1, launch_calls(trace))
    assert repeating_unit(tree, "thread 1/1") is None


def token_loop(layers: tuple[int, ...] = (2, 2, 2, 2)) -> Trace:
    """A layer-streaming decode loop annotated as llama3-inference's nsys trace is (NVTX there, user annotations
    here): one `layer_processing_simulation` range holding a `token_i_processing` range a token (nothing launches
    outside them), each holding `layer_l_token_i` ranges (layers[i] of them), each an `ensure_layer_l_weights` range
    (host work, no launch) then a `layer_l_computation` range (3 launches). Token i starts at 1000 i us; a layer
    takes 100 us: 60 ensuring its weights, 30 computing."""
    t = Trace()
    t.host("user_annotation", "layer_processing_simulation", 0, 1000 * len(layers))
    for i, n in enumerate(layers):
        b = 1000 * i + 10
        t.host("user_annotation", f"token_{i}_processing", b, b + 100 * n + 10)
        for layer in range(n):
            at = b + 5 + 100 * layer
            t.host("user_annotation", f"layer_{layer}_token_{i}", at, at + 95)
            t.host("user_annotation", f"ensure_layer_{layer}_weights", at + 1, at + 61)
            t.host("user_annotation", f"layer_{layer}_computation", at + 62, at + 92)
            for j in range(3):
                t.launch(at + 63 + 9 * j, at + 66 + 9 * j, [(at + 67 + 9 * j, at + 70 + 9 * j)])
    return t


def test_numbered_ranges_that_hold_the_launches_are_the_steps(tmp_path):
    """Four `token_N_processing` ranges, one text with its number replaced, each once, under one range that launches
    nothing outside them, holding all 24 launches: four steps, as ProfilerStep#N would be. The numbered families
    inside them (`layer_N_token_M`, two a token; `ensure_layer_N_weights`, one a layer, holding no launch) are
    pieces of a token."""
    path = token_loop().write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.rule == "numbered ranges: 'token_N_processing', 4 times on thread 1/1"
    assert steps.names == [f"token_{i}_processing" for i in range(4)] and steps.kinds == ["step"] * 4
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (1000 * i + 10, 210) for i in range(4)
    ]
    a = analyze(load_trace(path))
    assert [s.launches for s in a.steps] == [6] * 4 and a.coverage.gpu_share == 1.0


def test_the_outermost_numbered_family_wins(tmp_path):
    """A cold first token holding most of the launches: its three `layer_N_token_0` ranges hold 9 of the 15, a
    family that passes alone, but the token ranges around it are the outer family: three steps, not three layers."""
    steps = find_steps(load_trace(token_loop((3, 1, 1)).write(tmp_path)))
    assert steps.rule == "numbered ranges: 'token_N_processing', 3 times on thread 1/1"


def forward_with_layers(tmp_path: Path, forwards: int, enclosed: bool) -> Path:
    """`forwards` forwards of four `layer_N` ranges (two launches each), an embedding launch before the first and a
    head launch after the last: inside one `forward` range each when `enclosed`, else the layers at the top."""
    t = Trace()
    for f in range(forwards):
        b = 1000 * f
        if enclosed:
            t.host("user_annotation", "forward", b, b + 600)
        t.launch(b + 5, b + 8, [(b + 9, b + 12)])  # the embedding
        for layer in range(4):
            at = b + 20 + 120 * layer
            t.host("user_annotation", f"layer_{layer}", at, at + 100)
            t.launch(at + 10, at + 15, [(at + 16, at + 40)])
            t.launch(at + 50, at + 55, [(at + 56, at + 80)])
        t.launch(b + 520, b + 525, [(b + 526, b + 560)])  # the head
    return t.write(tmp_path)


def test_the_numbered_layers_of_one_forward_are_not_steps(tmp_path):
    """One `forward` range holds `layer_0` .. `layer_3` (8 of its 10 launches): the forward launches its embedding
    and head outside them, so they are its pieces, not a loop's iterations: the whole trace is one step."""
    steps = find_steps(load_trace(forward_with_layers(tmp_path, 1, enclosed=True)))
    assert steps.rule == "whole trace" and steps.names == ["trace"]


def test_layer_numbers_that_repeat_are_no_family(tmp_path):
    """Three forwards with no range around each: `layer_0` .. `layer_3` recur in every forward, so their number is
    a place in something larger, not a counter, and no numbered family is the steps; the forwards repeat (a cycle
    of three from the embedding's launch)."""
    steps = find_steps(load_trace(forward_with_layers(tmp_path, 3, enclosed=False)))
    assert not steps.rule.startswith("numbered ranges") and len(steps) == 3


ENTER = "torch/autograd/profiler.py(918): __enter__"
EXIT = "torch/autograd/profiler.py(932): __exit__"


def marked_loop(stack: bool, prefill: bool = False) -> Trace:
    """A hand-written decode loop under `main()`: an optional `prefill` range (a forward of 4 launches, 0-300 us),
    then ten `decode_step` ranges, one every 200 us from 400 us, each a forward of 3 launches and an argmax. With
    `stack` (torch.profiler's with_stack=True) each range starts 2 us into the 20 us `profiler.py: __enter__` frame
    that opens it and ends 2 us before the 20 us `__exit__` frame that closes it does: the range outlives the one
    and started before the other, nesting in neither."""
    t = Trace()
    t.host("python_function", "run.py(3): main", 0, 2400)
    if prefill:
        t.host("user_annotation", "prefill", 10, 300)
        t.host("python_function", "nn.Module: Qwen3ForCausalLM_0", 20, 290)
        for j in range(4):
            t.launch(30 + 60 * j, 35 + 60 * j, [(36 + 60 * j, 80 + 60 * j)])
    for i in range(10):
        b = 400 + 200 * i
        if stack:
            t.host("python_function", ENTER, b - 2, b + 18)
            t.host("cpu_op", "profiler::_record_function_enter_new", b - 1, b + 1)
        t.host("user_annotation", "decode_step", b, b + 150)
        t.host("python_function", "nn.Module: Qwen3ForCausalLM_0", b + 25, b + 125)
        for j in range(3):
            t.launch(b + 30 + 30 * j, b + 35 + 30 * j, [(b + 36 + 30 * j, b + 55 + 30 * j)])
        if stack:
            t.host("python_function", EXIT, b + 132, b + 152)
            t.host("cpu_op", "profiler::_record_function_exit", b + 140, b + 145)
        t.launch(b + 126, b + 129, [(b + 130, b + 134)])  # the argmax
    return t


@pytest.mark.parametrize("stack", [False, True])
def test_ranges_opened_inside_profilers_enter_frame_are_the_repeating_unit(tmp_path, stack):
    """Ten `decode_step` ranges holding all 40 launches: ten steps with stacks as without. With with_stack=True
    each range starts inside its short `__enter__` frame and ends inside `__exit__`: it lies in neither (what holds
    it whole is `main`), so the ten are siblings under main, and the forward after `__enter__` ends lies inside its
    range."""
    path = marked_loop(stack).write(tmp_path)
    trace = load_trace(path)
    steps = find_steps(trace)
    assert steps.rule == "repeating unit: 'decode_step', 10 times on thread 1/1"
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (400 + 200 * i, 150) for i in range(10)
    ]
    tree = Tree.of(trace, 1, 1, launch_calls(trace))
    name = {int(r): trace.name(int(r)) for r in tree.rows}
    up = zip(tree.rows.tolist(), tree.parent.tolist(), strict=True)
    parent = {r: (name[int(tree.rows[p])] if p >= 0 else None) for r, p in up}
    assert {parent[r] for r in name if name[r] == "decode_step"} == {"run.py(3): main"}
    assert {parent[r] for r in name if name[r] == "nn.Module: Qwen3ForCausalLM_0"} == {"decode_step"}
    if stack:  # the ops inside the frames stay inside them
        assert {parent[r] for r in name if name[r].startswith("profiler::")} == {ENTER, EXIT}


def test_a_prefill_range_alone_is_not_probes_own(tmp_path):
    """A user's `prefill` range beside ten `decode_step` ranges, with no `decode#i` range: not probe's vocabulary
    (its loop marks each decode step `decode#i` beside its prefill), so the prefill, 4 of the 44 launches, is not
    the only step: a warning says why, and the ten decode_step ranges are the steps (the repeating unit)."""
    steps = find_steps(load_trace(marked_loop(stack=True, prefill=True).write(tmp_path)))
    assert steps.rule == "repeating unit: 'decode_step', 10 times on thread 1/1"
    assert steps.names == ["decode_step"] * 10
    assert any("'prefill' and no decode#i range" in w for w in steps.warnings)


def test_probes_own_prefill_and_decode_ranges_are_the_steps(tmp_path):
    """Where `decode#i` ranges sit beside the `prefill`, they are probe's: the prefill and each decode is a step,
    with no warning, whatever else repeats."""
    t = marked_loop(stack=False, prefill=True)
    for e in t.events:
        if e["name"] == "decode_step":
            e["name"] = f"decode#{(int(e['ts']) - 400) // 200}"
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "probe ranges" and not steps.warnings
    assert steps.names == ["prefill"] + [f"decode#{i}" for i in range(10)]


@pytest.mark.parametrize("main_end, cut", [(1000.0, True), (1000.5, False)])
def test_a_last_step_the_profiler_stopped_inside_is_said(tmp_path, main_end, cut):
    """The profiler closes every open event at the one instant it stops: a last step that ends at the nanosecond a
    frame around it ends was cut there. A frame that returns ends after the step it called: no warning."""
    events = [
        {"ph": "X", "cat": "python_function", "name": "run.py(3): main", "pid": 1, "tid": 1, "ts": 0.0,
         "dur": main_end, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 10.0, "dur": 400.0,
         "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 500.0,
         "dur": 500.0, "args": {}},
    ]  # fmt: skip
    path = tmp_path / "cut.json"
    path.write_text(json.dumps({"traceEvents": events}))
    said = [w for w in find_steps(load_trace(path)).warnings if "cut when the recording stopped" in w]
    assert len(said) == cut
    if cut:
        assert "the last step (ProfilerStep#1)" in said[0] and "'run.py(3): main'" in said[0]


# --- traces of NVTX ranges alone (nsys --trace=nvtx,osrt of a CPU program: no op, no launch, no GPU side) -------


def nvtx_export(path: Path, ranges: list[tuple[int, int, str, int, int]]) -> Path:
    """An Nsight Systems export holding NVTX ranges only: (start, end, name, thread, eventType) in ns, all of one
    process (tests/data/make_nsys_fixture's schema, 2022.4's own CREATE TABLE text); 59 is a push/pop range, 60 a
    start/end range (recorded on the thread that started it)."""
    con = sqlite3.connect(str(path))
    for sql in make_nsys_fixture.SCHEMA[:3]:  # StringIds, the session start, NVTX_EVENTS
        con.execute(sql)
    names = {name: i for i, name in enumerate(dict.fromkeys(r[2] for r in ranges), 1)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, name) for name, i in names.items()])
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (make_nsys_fixture.SESSION_START_NS,))
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId) VALUES (?, ?, ?, ?, ?, 0)",
        [(a, b, kind, names[name], make_nsys_fixture.global_tid(10, tid)) for a, b, name, tid, kind in ranges],
    )
    con.commit()
    con.close()
    return path


def test_a_loop_marked_by_nvtx_ranges_alone_is_cut_by_them(tmp_path):
    """No op and no launch to hold: each thread's innermost ranges stand in (one per piece of annotated work), so a
    `loop` range around four `step_N` ranges, each a `compute` and an `io` range, is four steps (numbered ranges),
    and a thread's six `iteration` ranges holding a `forward` each are six (the repeating unit). Before, both were
    the whole trace, one step."""
    numbered = [(0, 4_000, "loop", 1, 59)]
    for i in range(4):
        a = 100 + 950 * i
        numbered += [(a, a + 900, f"step_{i}", 1, 59), (a + 10, a + 700, "compute", 1, 59)]
        numbered += [(a + 710, a + 890, "io", 1, 59)]
    steps = find_steps(load_trace(nvtx_export(tmp_path / "numbered.sqlite", numbered)))
    assert steps.rule == "numbered ranges: 'step_N', 4 times on thread 10/1"
    assert steps.names == [f"step_{i}" for i in range(4)]
    assert steps.start.tolist() == [100, 1_050, 2_000, 2_950] and steps.end.tolist() == [1_000, 1_950, 2_900, 3_850]

    unit = [(0, 50, "setup", 2, 59)]  # a range once, before the loop
    for i in range(6):
        a = 100 + 200 * i
        unit += [(a, a + 150, "iteration", 2, 59), (a + 20, a + 140, "forward", 2, 59)]
    steps = find_steps(load_trace(nvtx_export(tmp_path / "unit.sqlite", unit)))
    assert steps.rule == "repeating unit: 'iteration', 6 times on thread 10/2"
    assert steps.start.tolist() == [100 + 200 * i for i in range(6)]


def test_numbered_ranges_that_overlap_are_not_a_family(tmp_path):
    """Start/end ranges `request 0` .. `request 5`, each opened on the main thread as the request arrives and
    closed by the worker that serves it, overlap one another without nesting: what holds a range whole is its
    parent, so they are one family of siblings, not disjoint, and not the steps; the worker's `serve` loop is.
    Before, `nesting` made each odd request, begun inside the even one before it, that one's child, and the even
    ones passed as a family of three."""
    ranges = []
    for i in range(6):
        a = 1_000 * i
        end = a + (1_400 if i % 2 == 0 else 700)  # an even request is still open when the next one arrives
        ranges += [(a, end, f"request {i}", 1, 60), (end - 300, end - 10, "serve", 2, 59)]
    steps = find_steps(load_trace(nvtx_export(tmp_path / "requests.sqlite", ranges)))
    assert steps.rule == "repeating unit: 'serve', 6 times on thread 10/2"


def test_a_last_step_a_process_exit_closed_is_said(tmp_path):
    """nsys closes the NVTX ranges a process left open when it exits, all at the instant it ends: the last `step`
    ends at the nanosecond the `run` range around it does, which no pop makes (an outer range is popped after
    the inner one), so the step was cut there. A run popped after its last step: no warning."""
    for run_end, cut in ((900, True), (905, False)):
        ranges = [(0, run_end, "run", 1, 59)] + [(10 + 200 * i, 10 + 200 * i + 150, "step", 1, 59) for i in range(4)]
        ranges.append((810, 900, "step", 1, 59))
        path = nvtx_export(tmp_path / f"exit{run_end}.sqlite", ranges)
        said = [w for w in find_steps(load_trace(path)).warnings if "cut when the recording stopped" in w]
        assert len(said) == cut
        if cut:
            assert "the last step (step)" in said[0] and "the range around it, 'run'" in said[0]


def test_two_threads_of_as_many_annotated_steps_the_longer_wins(tmp_path):
    """Two workers of four `step` ranges each, a `compute` range in each (a CPU program under nsys: the innermost
    ranges stand in for the launches, four a thread): equal counts, no GPU work; the thread whose work takes longer,
    which bounds the run, is the steps' thread, whatever its thread id."""
    ranges = []
    for i in range(4):
        ranges += [(100 + 300 * i, 200 + 300 * i, "step", 1, 59), (110 + 300 * i, 190 + 300 * i, "compute", 1, 59)]
        a = 100 + 1_000 * i
        ranges += [(a, a + 900, "step", 2, 59), (a + 10, a + 890, "compute", 2, 59)]
    steps = find_steps(load_trace(nvtx_export(tmp_path / "two.sqlite", ranges)))
    assert steps.rule == "repeating unit: 'step', 4 times on thread 10/2"


def test_torch_op_ranges_under_nsys_are_the_ops_they_name(tmp_path):
    """`torch.autograd.profiler.emit_nvtx` names each op's range `aten::mm, seq = 12, op_id = 40, sizes = [[1, 64],
    [64, 64]]` (torch's getNvtxStr): the counters make every name unique, so nothing repeated and six forwards
    were one whole-trace step. Read as the cpu_ops they stand for, named by the op, their sizes their recorded
    shapes: six steps, the first a prefill of 16 tokens, the rest decodes of one."""
    ranges, t, op_id = [], 0, 0
    for i in range(6):
        tokens = 16 if i == 0 else 1
        for name, sizes in (
            ("aten::embedding", f"[[256, 64], [1, {tokens}]]"),
            ("aten::linear", f"[[1, {tokens}, 64], [64, 64], [64]]"),
            ("aten::linear", f"[[1, {tokens}, 64], [64, 64], [64]]"),
            ("aten::softmax", f"[[1, {tokens}, 256], []]"),
        ):
            op_id += 1
            ranges.append((t, t + 80, f"{name}, seq = {op_id // 2}, op_id = {op_id}, sizes = {sizes}", 1, 59))
            ranges.append((t + 10, t + 70, f"aten::empty, op_id = {op_id + 1000}", 1, 59))  # seq -1: op_id only
            t += 100
        t += 200  # the sampling between forwards
    trace = load_trace(nvtx_export(tmp_path / "emit.sqlite", ranges))
    ops = trace.rows(Kind.CPU_OP)
    assert len(ops) == len(ranges) and not len(trace.rows(Kind.USER_RANGE))
    assert {trace.names[i] for i in trace.name_id[ops]} == {
        "aten::embedding",
        "aten::linear",
        "aten::softmax",
        "aten::empty",
    }
    first = ops[0]
    assert trace.shapes[int(trace.shape_id[first])].dims == ((256, 64), (1, 16))
    a = analyze(trace)
    assert len(a.steps) == 6
    assert [s.kind for s in a.steps] == ["prefill"] + ["decode"] * 5


def _with_os_calls(path: Path, calls: list[tuple[int, int, str, int]], cuda: list[tuple[int, int, str, int]] = ()):
    """`path`'s export with OS runtime calls (start, end, name, thread) in OSRT_API, and CUDA runtime calls (the
    same) in CUPTI_ACTIVITY_KIND_RUNTIME, of process 10 (`nvtx_export`'s)."""
    con = sqlite3.connect(str(path))
    con.execute(make_nsys_fixture.OSRT_SCHEMA)
    con.execute(make_nsys_fixture.SCHEMA[3])
    first = con.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()[0]
    names = {n: first + i for i, n in enumerate(dict.fromkeys(c[2] for c in [*calls, *cuda]))}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
    tid = make_nsys_fixture.global_tid
    con.executemany(
        "INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, 1)", [(a, b, tid(10, t), names[n]) for a, b, n, t in calls]
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
        [(a, b, tid(10, t), 0, names[n]) for a, b, n, t in cuda],
    )
    con.commit()
    con.close()
    return path


def test_os_runtime_calls_a_thread_waits_in_are_waits_not_work(tmp_path):
    """An nsys export's OS runtime calls (OSRT_API, recorded by default) are read: a loop whose iterations each wait
    15 us in sem_wait for a producer thread (which sleeps in clock_nanosleep) and read 2 us: the wait is sync wait,
    the read a runtime call, the producer's sleep no work of another thread, and the trace stays CPU only (an OS call
    is no GPU runtime call). The ioctl the CUDA driver makes inside a CUDA call is that call's own time."""
    ranges, calls = [], []
    for i in range(4):
        a = 100_000 * i
        ranges += [(a, a + 40_000, "iteration", 1, 59), (a + 30_000, a + 38_000, "compute", 1, 59)]
        calls += [(a + 1_000, a + 16_000, "sem_wait", 1), (a + 20_000, a + 22_000, "read", 1)]
        calls += [(a + 500, a + 14_000, "clock_nanosleep", 2)]
    path = _with_os_calls(nvtx_export(tmp_path / "osrt.sqlite", ranges), calls)
    a = analyze(load_trace(path))
    assert len(a.steps) == 4 and not a.on_gpu and a.gpu_unrecorded is None
    s = a.steps[1]
    assert s.mechanism_ns["sync_wait"] == 15_000 and s.mechanism_ns["runtime"] == 2_000
    assert s.unattributed_other_ns == 0 and s.other_threads == ()
    # the producer does work of its own inside the wait (a read, 6 us): that part is other threads' work, as a
    # Python blocking builtin's is; the rest a wait
    more = calls + [(100_000 * i + 5_000, 100_000 * i + 11_000, "read", 2) for i in range(4)]
    s = analyze(load_trace(_with_os_calls(nvtx_export(tmp_path / "osrt2.sqlite", ranges), more))).steps[1]
    assert (s.mechanism_ns["sync_wait"], s.python_other_ns) == (9_000, 6_000)
    assert [(t.tid, t.busy_ns) for t in s.other_threads] == [(2, 6_000)]

    cuda = [(1_000, 9_000, "cudaLaunchKernel", 1)]
    path = _with_os_calls(
        nvtx_export(tmp_path / "cuda.sqlite", [(0, 10_000, "step", 1, 59)]), [(2_000, 8_000, "ioctl", 1)], cuda
    )
    trace = load_trace(path)
    assert [trace.names[i] for i in trace.name_id[trace.rows(Kind.RUNTIME)]] == ["cudaLaunchKernel"]


def test_a_compiled_decode_loop_beside_an_eager_prefill_is_cut_at_each_token(tmp_path):
    """A hand decode loop (CPU only, with stacks) whose prefill runs eager (a `step` frame of 30 top-level ops) and
    whose six tokens each call a compiled step: `compile_wrapper`, inside it one cpu_op `Torch-Compiled Region`,
    inside that the compiled graph's Python `call` and its four `aten::mm` (each under its `<built-in method mm>`
    frame), then the token's `argmax`. Counting the outermost ops, each token was 1 call and the prefill 30 of 42:
    a container, so the steps were sought inside the prefill, and the trace was one window. The ops the graph's
    Python calls are the program's calls (5 a token): six iterations, one a token."""
    t = Trace()
    t.host("python_function", "make.py(10): loop", 0, 20000)
    t.host("python_function", "make.py(7): step", 10, 3010)
    for j in range(30):
        t.host("cpu_op", "aten::add", 20 + 100 * j, 80 + 100 * j)
    for i in range(6):
        b = 4000 + 2000 * i
        t.host("python_function", "torch/_dynamo/eval_frame.py(1076): compile_wrapper", b, b + 1000)
        t.host("cpu_op", "Torch-Compiled Region: 0/0", b + 10, b + 990)
        t.host("python_function", "/tmp/torchinductor_root/ab/cab.py(906): call", b + 20, b + 980)
        for j in range(4):
            t.host("python_function", "<built-in method mm of type object>", b + 100 + 200 * j, b + 250 + 200 * j)
            t.host("cpu_op", "aten::mm", b + 110 + 200 * j, b + 240 + 200 * j)
        t.host("python_function", "<built-in method argmax of Tensor object>", b + 1100, b + 1200)
        t.host("cpu_op", "aten::argmax", b + 1110, b + 1190)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule.startswith("repeating cycle: 6 iterations of sibling events from ")
    assert [int(s) // 1000 for s in steps.start] == [4000 + 2000 * i for i in range(6)]


def nostack_generate(t: Trace, at: float, tokens: int) -> None:
    """A short `generate` without stacks (CPU only) from `at`: three `aten::to` of set-up, then `tokens` tokens,
    1000 us apart, each a slice, four linears, an argmax and a cat (top-level ops); the first token (the prefill)
    runs two more `aten::to` before its argmax."""
    for j in range(3):
        t.host("cpu_op", "aten::to", at + 10 * j, at + 5 + 10 * j)
    for i in range(tokens):
        b = at + 100 + 1000 * i
        t.host("cpu_op", "aten::slice", b, b + 5)
        for j in range(4):
            t.host("cpu_op", "aten::linear", b + 10 + 20 * j, b + 25 + 20 * j)
        if i == 0:
            t.host("cpu_op", "aten::to", b + 90, b + 92)
            t.host("cpu_op", "aten::to", b + 94, b + 96)
        t.host("cpu_op", "aten::argmax", b + 100, b + 105)
        t.host("cpu_op", "aten::cat", b + 110, b + 115)


@pytest.mark.parametrize("sessions", [1, 2])
def test_two_recordings_in_one_file_are_cut_each_into_its_tokens(tmp_path, sessions):
    """Two recordings' events written into one file (two sessions of a six-token `generate` without stacks, the
    second 40 ms after the first ends, nothing recorded between): the extras of each session's first token made
    the twelve tokens no cycle, and two iterations were cut at the sessions' starts, the first running over the
    idle gap into the second. The 40 ms in which nothing was recorded is longer than any step found: each side of
    it is cut by itself, six tokens each (one session alone: its six)."""
    t = Trace()
    for s in range(sessions):
        nostack_generate(t, 46000 * s, 6)
    steps = find_steps(load_trace(t.write(tmp_path)))
    starts = [46000 * s + 100 + 1000 * i for s in range(sessions) for i in range(6)]
    assert [int(s) // 1000 for s in steps.start] == starts
    assert int(max(steps.end - steps.start)) // 1000 == 1000


def requests(tokens: tuple[int, ...], keys: bool = False) -> Trace:
    """Requests back to back without stacks: each runs six set-up ops of different names once, then its tokens, a
    linear and a relu each, 1000 us apart; with `keys`, an SDPA between them that records its shapes, reading the
    prompt's 16 keys and one more each token."""
    t = Trace()
    at = 0
    for n in tokens:
        for j, name in enumerate(("aten::ones", "aten::isin", "aten::cumsum", "aten::ne", "aten::any", "aten::full")):
            t.host("cpu_op", name, at + 10 * j, at + 5 + 10 * j)
        for i in range(n):
            b = at + 100 + 1000 * i
            t.host("cpu_op", "aten::linear", b, b + 50)
            if keys:
                t.host("cpu_op", SDPA, b + 52, b + 58, **sdpa_dims(16 if i == 0 else 1, 16 + i))
            t.host("cpu_op", "aten::relu", b + 60, b + 70)
        at += 100 + 1000 * n
    return t


def sdpa_dims(queries: int, keys: int) -> dict:
    """An SDPA's recorded shapes: query [1, 4, L, 16], key and value [1, 4, S, 16]."""
    return {"Input Dims": [[1, 4, queries, 16], [1, 4, keys, 16], [1, 4, keys, 16]], "Input type": ["float"] * 3}


def test_a_stretch_of_nothing_inside_one_token_does_not_split_the_tokens(tmp_path):
    """An eight-token `generate` without stacks (nostack_generate's) whose fourth token stops for 3 ms between its
    second and third linear, nothing recorded (the OS ran another process; Python without ops): a stretch three
    times a token. Cut apart at it, the two parts held 3 and 4 tokens, the fourth lost; the split stands only where
    it finds as many steps as the trace holds without it (two recordings, a server's bursts). Eight steps, the
    fourth holding the stretch."""
    t = Trace()
    nostack_generate(t, 0, 8)
    for e in t.events:
        if e["ts"] >= 100 + 1000 * 3 + 50:  # the fourth token's third linear on
            e["ts"] += 3000
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert len(steps.names) == 8 and "parts between stretches" not in steps.rule
    assert [int(e - s) // 1000 for s, e in zip(steps.start, steps.end, strict=True)][3] == 4000


@pytest.mark.parametrize("tokens", [(2, 2), (2, 6)])
def test_the_last_of_two_iterations_ends_with_its_repeating_work(tmp_path, tokens):
    """Two requests of two and two (or six) tokens (two iterations; the first request's two tokens are too few to be a
    cycle of their own). The last iteration ended at the end of the last name that occurs once an iteration (its
    set-up, 60 us in); a name that occurs a multiple of K times and in every iteration ends it too: its last relu."""
    steps = find_steps(load_trace(requests(tokens).write(tmp_path)))
    assert steps.rule.startswith("repeating cycle: 2 iterations") and "inside each" not in steps.rule
    first = 100 + 1000 * tokens[0]
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        (0, first),
        (first, 1000 * tokens[1] - 1000 + 170),
    ]


@pytest.mark.parametrize("tokens", [(4, 12), (4, 8, 12), (8, 8, 6)])
def test_the_tokens_inside_each_of_several_requests_are_the_steps(tmp_path, tokens):
    """Requests back to back without stacks, each its set-up, then its tokens: the requests are a cycle (their set-up
    runs once each, so the tokens of all are none), and inside each request its tokens are a cycle again, whose
    first iteration does more (the set-up before it). They hold different numbers of tokens, which no forward's
    layers do. The steps are the tokens, each from its linear to the next (the last of each request to its relu),
    not the requests."""
    steps = find_steps(load_trace(requests(tokens).write(tmp_path)))
    assert steps.rule.endswith(f"and inside each a cycle again: {'/'.join(map(str, tokens))} iterations")
    at, want = 0, []
    for n in tokens:
        want += [(at + 100 + 1000 * i, 1000 if i < n - 1 else 70) for i in range(n)]
        at += 100 + 1000 * n
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == want
    assert len(set(steps.names)) == sum(tokens)


def forwards(keys: bool = False) -> Trace:
    """Five forwards without stacks, each an embedding, four layers of the same five ops, a norm and a head, 10 ms
    apart; with `keys`, each layer's SDPA records its shapes, reading as many keys in every layer of a forward."""
    t = Trace()
    for f in range(5):
        b = 10_000 * f
        t.host("cpu_op", "aten::embedding", b, b + 50)
        for layer in range(4):
            c = b + 100 + 2000 * layer
            for j, name in enumerate(("aten::rms_norm", "aten::linear", SDPA, "aten::rms_norm", "aten::linear")):
                dims = sdpa_dims(1, 20 + f) if keys and name == SDPA else {}
                t.host("cpu_op", name, c + 300 * j, c + 300 * j + 200, **dims)
        t.host("cpu_op", "aten::rms_norm", b + 8200, b + 8300)
        t.host("cpu_op", "aten::linear", b + 8400, b + 8600)
    return t


@pytest.mark.parametrize("keys", [False, True])
def test_forwards_back_to_back_are_not_cut_into_their_layers(tmp_path, keys):
    """The forwards are a cycle, and inside each its four layers are a cycle again, but as many in every forward (a
    model runs the same layers each time), and where their SDPAs recorded their shapes, each reads as many keys as
    the layer before: five steps, not twenty layers. (Requests of as many tokens each, without shapes, read alike,
    and stay cut per request.)"""
    steps = find_steps(load_trace(forwards(keys).write(tmp_path)))
    assert steps.rule.startswith("repeating cycle: 5 iterations") and "inside each" not in steps.rule
    assert [int(s) // 1000 for s in steps.start] == [0, 10_000, 20_000, 30_000, 40_000]
    same = find_steps(load_trace(requests((8, 8)).write(tmp_path, "requests.json")))
    assert same.rule.startswith("repeating cycle: 2 iterations") and "inside each" not in same.rule


def test_requests_of_as_many_tokens_are_cut_into_them_where_attention_reads_more_keys_each(tmp_path):
    """Two requests of eight tokens each: as many in each, as a forward's layers are, so the counts alone cannot
    tell them apart; where each token's SDPA recorded its shapes and reads one key more than the token before (16,
    then 17 ..), they are tokens: sixteen steps. A forward's layers read as many keys each, and stay one step
    (`forwards(keys=True)`, above)."""
    steps = find_steps(load_trace(requests((8, 8), keys=True).write(tmp_path)))
    assert steps.rule.endswith("and inside each a cycle again: 8/8 iterations")
    assert [int(s) // 1000 for s in steps.start] == [100 + 1000 * i for i in range(8)] + [
        8200 + 1000 * i for i in range(8)
    ]


def test_a_denoising_loop_that_calls_its_network_twice_a_step_is_cut_per_step(tmp_path):
    """A guided denoising loop (CPU only, with stacks): each of ten steps calls the network twice (`nn.Module:
    Net_0`, seven ops each: the guided and the unguided prediction), then combines them and updates the sample
    (sub, mul, add, mul, sub: top-level ops). Cut at each call, twenty "iterations": the network's calls, the
    subs and the muls (40 each) are multiples of 20 and held 96% of the ops, though the subs and muls ran twice
    in every second iteration and never in the others. A name counts with a cycle of K when it runs as often in
    each iteration: ten steps, one a scheduler step."""
    t = Trace()
    for i in range(10):
        b = 2000 * i
        for c in range(2):
            a = b + 600 * c
            t.host("python_function", "nn.Module: Net_0", a, a + 500)
            for j in range(7):
                t.host("cpu_op", "aten::conv2d", a + 10 + 60 * j, a + 60 + 60 * j)
        for j, name in enumerate(("aten::sub", "aten::mul", "aten::add", "aten::mul", "aten::sub")):
            t.host("cpu_op", name, b + 1300 + 50 * j, b + 1340 + 50 * j)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert steps.rule == "repeating cycle: 10 iterations of sibling events from 'nn.Module: Net_0' on thread 1/1"
    assert [int(s) // 1000 for s in steps.start] == [2000 * i for i in range(10)]


def tool_loop(tokens: int, sampled: bool) -> Trace:
    """Another tool's trace of a decoding loop (category `fee`, as VizTracer writes its function calls): a `main`
    [0, 100 * tokens + 50] holding a set-up call [1, 9] and per token a `forward` [b, b + 70] (two `matmul` calls
    inside it, [b + 5, b + 30] and [b + 35, b + 60]) then a `sample` [b + 75, b + 90], b = 10 + 100 * i. Sampled:
    every event starts and ends on a 10 us grid shared with the events around it, as a sampler's stacks do."""
    t = Trace()

    def at(x: float) -> float:
        return round(x / 50) * 50 if sampled else x

    t.host("fee", "main", 0, 100 * tokens + 50)
    t.host("fee", "setup", 1, 9)
    for i in range(tokens):
        b = 10 + 100 * i
        t.host("fee", "forward", at(b), at(b + 70))
        for m in (5, 35):
            t.host("fee", "matmul", at(b + m), at(b + m + 25))
        t.host("fee", "sample", at(b + 75), at(b + 90))
    return t


def test_another_tools_trace_of_a_loop_is_cut_at_each_token(tmp_path):
    """A trace with no op, frame, range or GPU side, only events of a category the reader does not know (VizTracer's
    function calls, ONNX Runtime's runs and nodes): their nesting is the program's, and their innermost calls stand
    in for its work, so eight tokens' forward (the heaviest name, eight times, back to back with the samples
    between) are eight steps. Before, nothing stood in for the work and the trace was one window."""
    path = tool_loop(8, sampled=False).write(tmp_path)
    steps = find_steps(load_trace(path))
    assert len(steps.names) == 8, steps.rule
    assert [int(s) // 1000 for s in steps.start] == [10 + 100 * i for i in range(8)]


def test_a_samplers_stacks_are_not_cut_into_steps(tmp_path):
    """The same loop as a sampler writes it (py-spy's chrome trace): each frame begins and ends at a sample, so the
    events share their instants (fewer distinct starts and ends than events). Its events are runs of samples, not
    calls: no count of them is an iteration count, and the trace stays one window, said to be a sampler's."""
    path = tool_loop(8, sampled=True).write(tmp_path)
    steps = find_steps(load_trace(path))
    assert steps.names == ["trace"]
    assert any("a sampler's stacks" in w for w in steps.warnings)
    assert not any(
        "a sampler's stacks" in w for w in find_steps(load_trace(tool_loop(8, False).write(tmp_path))).warnings
    )


def test_a_loop_that_calls_one_of_two_models_a_step_is_cut_per_step(tmp_path):
    """A router's loop (CPU only): each iteration picks one of two models (a small linear, its argmax), calls that
    model's forward (a module frame of five ops) and appends the token, the models in no fixed order (A B B A A B).
    Each model's forward runs in some iterations only, so neither counts with the cycle of six, and together they
    hold most of the ops: the loop was one window. One of them runs in every iteration, equally often: a branch's
    alternatives, which count with it; six steps, each from its `aten::select` to the next, the last to its `cat`."""
    t = Trace()
    for i, model in enumerate("ABBAAB"):
        b = 500 * i
        t.host("cpu_op", "aten::select", b, b + 5)
        t.host("cpu_op", "aten::linear", b + 10, b + 20)
        t.host("cpu_op", "aten::argmax", b + 25, b + 30)
        t.host("python_function", f"nn.Module: {model}_0", b + 40, b + 400)
        for j in range(5):
            t.host("cpu_op", "aten::mm" if model == "A" else "aten::addmm", b + 50 + 60 * j, b + 100 + 60 * j)
        t.host("cpu_op", "aten::cat", b + 410, b + 490)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert len(steps.names) == 6, steps.rule
    assert [(int(s) // 1000, int(e - s) // 1000) for s, e in zip(steps.start, steps.end, strict=True)] == [
        *((500 * i, 500) for i in range(5)),
        (2500, 490),
    ]


def test_another_tools_events_with_no_category_are_cut_at_each_step(tmp_path):
    """A tool that writes no category at all (JAX's profiler: its host events, Python frames as `$file:N name`, the
    jitted call, the runtime's execute): in a trace not torch's these events are the program's own, as a foreign
    category's are, so the loop's repeating call cuts it. Six steps of a `PjitFunction(step)` holding an execute,
    then a Python frame reading the result back. Before, the trace was one window with its time "between ops"."""
    events = []
    for i in range(6):
        b = 100 * i
        events += [
            {"ph": "X", "name": "PjitFunction(step)", "pid": 1, "tid": 1, "ts": b, "dur": 40},
            {"ph": "X", "name": "Execute", "pid": 1, "tid": 1, "ts": b + 5, "dur": 30},
            {"ph": "X", "name": "$array.py:600 _value", "pid": 1, "tid": 1, "ts": b + 50, "dur": 20},
        ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = find_steps(load_trace(path))
    assert len(steps.names) == 6, steps.rule
    assert [int(s) // 1000 for s in steps.start] == [100 * i for i in range(6)]


def test_steps_names_another_tools_events(tmp_path):
    """`--steps` searches another tool's events (a category the reader does not know) with the ranges: a VizTracer
    trace's `forward` calls are the steps asked for. Before, it matched "no range", the rules ran instead, and the
    warning's advice (name the ranges with --steps) could not be followed."""
    path = tool_loop(8, sampled=False).write(tmp_path)
    steps = find_steps(load_trace(path), compile_steps_regex("^forward$"))
    assert steps.rule == RULE_STEPS and len(steps.names) == 8
    assert not any("matched no range" in w for w in steps.warnings)


@pytest.mark.parametrize(("inside", "excerpt"), [(False, False), (True, False), (False, True)])
def test_a_first_step_the_profiler_started_inside_is_said(tmp_path, inside, excerpt):
    """With stacks, the frames open when the profiler starts are written as starting then, its own start call's
    innermost, and those end first. Started before the loop ([5, 50], then four forwards from 100 us): no step began
    before a frame ended, nothing said. Started from a hook inside the first forward (the forward [10, 600] holds
    the hook, which holds the start call [25, 60], and one matmul of the others' embedding and three): the first
    step began before any frame ended and holds less than half the work of the others, and is said to be the rest
    of an iteration the recording started inside. An excerpt cut to whole steps (no frame ends before its first
    step, as in the shared tiled engine traces) has a first step as whole as the rest: not said."""
    t = Trace()
    t.host("python_function", "main.py(1): <module>", 0, 5000)
    if not inside and not excerpt:  # an excerpt holds no frame that ended before its first step
        t.host("python_function", "torch/profiler/profiler.py(1128): start", 5, 50)
    for i in range(4):
        cut = inside and i == 0
        t.host("python_function", "nn.Module: M_0", 10 if cut else 100 + 1000 * i, 1000 * i + 900)
        if cut:
            t.host("python_function", "main.py(9): hook", 20, 200)
            t.host("python_function", "torch/profiler/profiler.py(1128): start", 25, 60)
        else:
            t.host("cpu_op", "aten::embedding", 1000 * i + 120, 1000 * i + 150)
        for j in range(2, 3) if cut else range(3):  # the cut one holds the rest of its forward only
            t.host("cpu_op", "aten::mm", 1000 * i + 300 + 150 * j, 1000 * i + 400 + 150 * j)
    steps = find_steps(load_trace(t.write(tmp_path)))
    assert len(steps.names) == 4, steps.rule
    said = [w for w in steps.warnings if "began before the recording did" in w]
    assert len(said) == int(inside)
