"""Hostile input, third pass (issue 37): costs that grew with what a trace nests or repeats, bounded.

- Nesting: each launch's owning op is found by doubling up the op tree (`intervals.first_ending_by`), not a pass
  a level over every launch: ops nested 8D deep cost what 8 trees D deep cost.
- Output: `probe analyze --step N` shows the longest TIMELINE_ROWS items of the step's timeline, says how many it
  left out, and points at --json, which holds every one.
- Memory per step: `--json` writes each step's verdict and figures (the sentences once, for the median steps) a
  chunk of steps at a time (probe.commands.Rows), and a step's ledger and diagnosis are slotted dataclasses.

No wall-clock time is asserted, only how cost grows, measured within one run (tests/test_scaling.py's timing).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest

from benchmarks.synthetic_traces import write_tiny_steps
from probe import commands
from probe.analysis.intervals import first_ending_by, nearest_marked, nesting
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.gpu import attribute
from probe.analysis.roofline.ops import op_calls
from probe.analysis.trace import load_trace
from probe.render.ledger import TIMELINE_ROWS
from tests.conftest import ROOT, run_probe
from tests.test_scaling import best_times

# --- 10: cost that grows with nesting ----------------------------------------------------------------------------


def deep_trace(chains: int, depth: int, launches: int) -> str:
    """One decode step holding `chains` trees of cpu_ops side by side, each a chain `depth` deep, and `launches`
    kernel launches in all, spread over the chains and over the depths: each launch sits in the tail of an op (after
    its child has ended), so its owner is found only by walking out from the innermost op that started before it."""
    events = []
    width = 4 * depth + 4  # us a chain spans
    per_chain = launches // chains
    corr = 0
    for c in range(chains):
        base = 1 + c * width
        for i in range(depth):  # op i: [base + i, base + 4 depth - 2 i]: each inside the one before
            name = "aten::view" if i % 2 else "aten::mm"
            events.append(cpu_op(name, base + i, 4 * depth - 3 * i))
        for k in range(per_chain):
            i = k * depth // per_chain  # a launch in op i's tail: past op i + 1's end, before op i's
            t = base + 4 * depth - 2 * i - 1.5
            corr += 1
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                 "dur": 0.25, "args": {"correlation": corr}}
            )  # fmt: skip
            events.append(
                {"ph": "X", "cat": "kernel", "name": "gemv_kernel", "pid": 0, "tid": 7, "ts": t + 0.5, "dur": 0.25,
                 "args": {"correlation": corr, "stream": 7, "device": 0}}
            )  # fmt: skip
    wall = chains * width + 2
    events.append({"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 0, "dur": wall})
    return json.dumps({"traceEvents": events})


def cpu_op(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


DEPTH = 1000  # D; the large trace is one chain 8D deep, the small one 8 chains D deep: the same ops and launches
LAUNCHES = 2000


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("deep")
    out = {}
    for chains, depth in ((8, DEPTH), (1, 8 * DEPTH)):
        out[depth] = folder / f"deep{depth}.json"
        out[depth].write_text(deep_trace(chains, depth, LAUNCHES))
    return out


def test_finding_each_launchs_op_grows_with_the_ops_not_with_depth_times_launches(deep):
    """The owners of the launches (op_calls: the per-op roofline's first stage) in one chain 8D deep against 8
    chains D deep: the same ops and launches. A walk a level a pass costs 8x (94 s at 32,000 deep); doubling costs
    log(8D) / log(D) more passes over the same arrays."""
    tables = {d: load_trace(p) for d, p in deep.items()}
    gpu = {d: attribute(t, *analyze(t).windows()) for d, t in tables.items()}
    small, large = DEPTH, 8 * DEPTH
    for d in (small, large):  # every launch owned, by the aten::mm it sits in or the one around its aten::view
        calls = op_calls(tables[d], gpu[d])
        assert calls.kernel_ns.sum() == LAUNCHES * 250
        assert {tables[d].name(r) for r in calls.row} == {"aten::mm"}
    a, b = best_times(lambda: op_calls(tables[small], gpu[small]), lambda: op_calls(tables[large], gpu[large]))
    assert b / a < 3, f"{b / a:.1f}x the time for 8x the depth ({a:.4f} s, {b:.4f} s)"


def test_probe_analyze_of_ops_nested_thousands_deep_with_launches_answers(deep):
    done = run_probe("analyze", str(deep[8 * DEPTH]), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"][0]["kernels"] == LAUNCHES


def walked(parent: np.ndarray, end: np.ndarray, start: np.ndarray, t: np.ndarray) -> np.ndarray:
    """first_ending_by a level at a time, as _owners walked before: the definition the doubling must match."""
    out = start.copy()
    for i, at in enumerate(t):
        while out[i] >= 0 and end[out[i]] < at:
            out[i] = parent[out[i]]
    return out


def test_the_doubling_walk_finds_what_the_level_by_level_walk_finds():
    """On random intervals, nested properly or not (the parent array is whatever `nesting` makes of them)."""
    rng = np.random.default_rng(37)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        start = rng.integers(0, 100, n)
        end = start + rng.integers(0, 60, n)
        order = np.lexsort((-end, start))
        start, end = start[order], end[order]
        _, parent = nesting(start, end)
        t = rng.integers(0, 170, 40)
        latest = np.searchsorted(start, t, side="right") - 1
        assert (first_ending_by(parent, end, latest, t) == walked(parent, end, latest, t)).all()
        marked = rng.random(n) < 0.3
        nodes = np.arange(n)
        every = walked(parent, np.where(marked, 1, 0), nodes, np.ones(n, np.int64))  # up to the first marked
        assert (nearest_marked(parent, marked) == every).all()


# --- 11: uncapped output ------------------------------------------------------------------------------------------

OPS_IN_STEP = 3000


def one_big_step(ops: int) -> str:
    """One decode step of `ops` top-level ops side by side, op i lasting 1 + (7 i mod ops) us: all different, so
    which are the longest is known."""
    events, t = [], 1
    for i in range(ops):
        dur = 1 + (7 * i) % ops
        events.append(cpu_op(f"aten::op{i}", t, dur))
        t += dur + 1
    events.append({"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 0, "dur": t})
    return json.dumps({"traceEvents": events})


def test_one_step_of_thousands_of_ops_shows_the_longest_and_says_what_it_left_out(tmp_path):
    path = tmp_path / "big_step.json"
    path.write_text(one_big_step(OPS_IN_STEP))
    done = run_probe("analyze", str(path), "--step", "0", timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert len(out.splitlines()) < 200  # was a row per op: 3,000 rows
    left = OPS_IN_STEP - TIMELINE_ROWS
    assert f"the {TIMELINE_ROWS} longest of {OPS_IN_STEP:,}, {left:,} left out: --json --step 0 holds" in " ".join(
        out.split()
    )
    shown = {int(n) for n in re.findall(r"aten::op(\d+)", out)}
    longest = sorted(range(OPS_IN_STEP), key=lambda i: -((7 * i) % OPS_IN_STEP))[:TIMELINE_ROWS]
    assert set(longest) <= shown  # the table's; the summary may name an op of its own
    not_shown = sum(int(n) for n in re.findall(r"(\d+) items? not shown", out))
    assert not_shown == left
    full = run_probe("analyze", str(path), "--step", "0", "--json", timeout=120)
    assert full.returncode == 0 and len(json.loads(full.stdout)["timeline"]) == OPS_IN_STEP


# --- 17: memory per step ------------------------------------------------------------------------------------------

FEW, MANY = 10_000, 80_000  # steps of one range and one op (benchmarks.synthetic_traces.write_tiny_steps)
CAP_BYTES = 1_250_000_000  # address space for MANY steps: 1.5 GB was a MemoryError when each step kept its text
# --json per step: the ledger's figures and the verdict's, never sentences: ~3,080 B here (~2,630 before the set-up,
# named-range, recorded-token and kernel-category-alone figures)
BYTES_A_STEP = 3_500
RSS_A_STEP = 8_000  # peak RSS a step, past the first FEW: ~4,400 (18,600 when the whole document sat in memory)

# Runs `python -m probe ARGS` under an address-space cap, stdout to a file, and prints its exit code and peak RSS
# (KiB): this process has no other child, so RUSAGE_CHILDREN is the command's own.
MEASURE = """
import resource, subprocess, sys
cap, out = int(sys.argv[1]), sys.argv[2]
def capped():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
with open(out, "wb") as f:
    done = subprocess.run([sys.executable, "-m", "probe", *sys.argv[3:]], stdout=f, preexec_fn=capped)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measured(out: Path, *args: str) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes, stderr) of `probe ARGS` under CAP_BYTES, its stdout in `out`."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(CAP_BYTES), str(out), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    code, rss_kib = done.stdout.split()
    return int(code), int(rss_kib) * 1024, done.stderr


def occurrences(path: Path, token: bytes) -> int:
    """How often `token` occurs in a file, read a piece at a time."""
    n, tail = 0, b""
    with open(path, "rb") as f:
        while piece := f.read(1 << 24):
            text = tail + piece
            n += text.count(token)
            tail = text[-(len(token) - 1) :]
    return n


def test_rows_written_a_chunk_at_a_time_are_the_document_formatted_whole(capsys, monkeypatch):
    """print_json's Rows, anywhere in a document and over several chunks, write what the whole list would."""
    monkeypatch.setattr(commands, "ROWS_A_CHUNK", 2)
    doc = {"a": 1, "steps": commands.Rows(5, lambda i: {"i": i, "x": [i, {"y": "z"}]}), "none": commands.Rows(0, dict)}
    doc["deep"] = [{"t": commands.Rows(3, lambda i: {"k": i})}]
    whole = {"a": 1, "steps": [{"i": i, "x": [i, {"y": "z"}]} for i in range(5)], "none": []}
    whole["deep"] = [{"t": [{"k": i} for i in range(3)]}]
    commands.print_json(doc)
    assert capsys.readouterr().out == msgspec.json.format(msgspec.json.encode(whole), indent=1).decode() + "\n"


@pytest.mark.slow
def test_json_of_many_tiny_steps_holds_each_steps_figures_in_bounded_bytes_and_memory(tmp_path):
    """probe analyze --json at FEW and at MANY steps: the same bytes a step, no step's sentences (the median step's
    words once), and the peak memory grows by at most RSS_A_STEP a step, under an address-space cap."""
    rss, size, headlines = {}, {}, {}
    for steps in (FEW, MANY):
        trace, out = tmp_path / f"tiny{steps}.json", tmp_path / f"out{steps}.json"
        write_tiny_steps(trace, steps)
        code, rss[steps], err = measured(out, "analyze", str(trace), "--json")
        assert code == 0, err[-2000:]
        size[steps] = out.stat().st_size
        headlines[steps] = occurrences(out, b'"headline":')
        if steps == FEW:
            doc = json.loads(out.read_bytes())
            assert len(doc["steps"]) == FEW and doc["steps"][-1]["name"] == f"decode#{FEW - 1}"
            assert doc["steps"][0]["diagnosis"]["bound"] == "cpu_only" and "headline" in doc["diagnosis"]["median"]
            del doc
        out.unlink()
    assert headlines[FEW] == headlines[MANY] == 2  # the median steady step and the median decode step
    per_step = {n: size[n] / n for n in size}
    assert per_step[MANY] <= BYTES_A_STEP and per_step[MANY] <= 1.01 * per_step[FEW], per_step
    grown = (rss[MANY] - rss[FEW]) / (MANY - FEW)
    assert grown <= RSS_A_STEP, f"{grown:,.0f} B of peak RSS a step ({rss[FEW]:,} at {FEW}, {rss[MANY]:,} at {MANY})"
