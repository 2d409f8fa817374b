"""Instrumentation and capture: ranges in torch.profiler and nsys traces, deterministic op counts."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from collections import Counter

import pytest
import torch
from transformers.cache_utils import Cache

from engines import engine_class
from engines.models import prompt_ids
from probe import vocabulary
from probe.analysis.records.sidecar import read_sidecar
from probe.capture import annotate
from probe.capture.config import ProfileConfig
from probe.capture.count import count_forward_ops
from probe.capture.profile import NSYS_HINT, find_nsys, profile_torch
from probe.errors import ProbeError
from tests.conftest import IN_CI, run_probe

NEW_TOKENS, LAYERS = 6, 4


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    capture = profile_torch(ProfileConfig(engine="cached", prompt=32, new_tokens=NEW_TOKENS, device="cpu"), out)
    events = json.loads(gzip.decompress(capture.trace.read_bytes()))["traceEvents"]
    return capture, [e for e in events if e.get("ph") == "X"]


def inside(outer, events):
    end = outer["ts"] + outer["dur"]
    return [e for e in events if outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= end and e is not outer]


def test_trace_name_sidecar_and_step_sequence(cpu_trace):
    capture, events = cpu_trace
    assert capture.trace.name == "tiny_cached_cpu_p32_n6.trace.json.gz"
    meta = json.loads(capture.meta.read_text())
    assert meta["config"]["engine"] == "cached" and meta["env"]["torch"] and len(meta["itl_ms"]) == NEW_TOKENS - 1
    steps = [
        e["name"]
        for e in sorted(events, key=lambda e: e["ts"])
        if vocabulary.split_label(e["name"])[0] in vocabulary.STEP_RANGES
    ]
    assert steps == ["prefill"] + [f"decode#{i}" for i in range(NEW_TOKENS - 1)]  # warmup not recorded


def test_a_trace_recorded_contended_is_diagnosed_with_that_caveat_first(cpu_trace, cli, tmp_path):
    """The sidecar records telemetry.contention's verdict on the recorded run; probe analyze says it before its
    verdict when the run was contended, and says nothing of it when it was not."""
    capture, _ = cpu_trace
    meta = json.loads(capture.meta.read_text())
    assert set(meta["contention"]) == {"other_cpu_cores", "contended"}
    for contended, cores in ((False, 0.01), (True, 1.37)):
        trace = shutil.copy(capture.trace, tmp_path / capture.trace.name)
        meta["contention"] = {"other_cpu_cores": cores, "contended": contended}
        (tmp_path / capture.meta.name).write_text(json.dumps(meta))
        out = cli("analyze", trace)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        if contended:
            assert lines[0].startswith("caveat: recorded contended: 1.37 cores of other work"), lines[:3]
        else:
            assert "contended" not in out.stdout


def test_every_decode_step_has_every_range(cpu_trace):
    _, events = cpu_trace
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    for step in (e for e in ranges if e["name"].startswith("decode#")):
        names = Counter(e["name"] for e in inside(step, ranges))
        assert {f"cache.update#{layer}" for layer in range(LAYERS)} <= set(names)
        assert all(names[f"cache.update#{layer}"] == 1 for layer in range(LAYERS))
        for name in (
            vocabulary.FORWARD,
            vocabulary.SAMPLE,
            vocabulary.SYNC,
            vocabulary.CACHE_SEQ_LENGTH,
            vocabulary.CACHE_MASK_SIZES,
            vocabulary.MASK,
        ):
            assert names[name] >= 1, (step["name"], name)


def top_level_ops(window, events):
    ops = sorted((e for e in inside(window, events) if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], float("-inf")
    for op in ops:
        if op["ts"] >= end:
            top.append(op)
            end = op["ts"] + op["dur"]
    return top


def test_dispatch_count_equals_profiler_top_level_count(cpu_trace, tiny):
    _, events = cpu_trace
    counts = count_forward_ops(engine_class("cached")(tiny), prompt_ids(32, 1, tiny.config.vocab_size))
    forwards = [e for e in events if e["name"] == vocabulary.FORWARD]
    decode_forwards = [
        f for f in forwards if any(f in inside(s, events) for s in events if s["name"].startswith("decode#"))
    ]
    assert len(decode_forwards) == NEW_TOKENS - 1
    assert {len(top_level_ops(f, events)) for f in decode_forwards} == {counts.decode_ops}


def test_counts_are_deterministic_across_runs_and_processes(tiny):
    prompt = prompt_ids(16, 1, tiny.config.vocab_size)
    first = [count_forward_ops(engine_class(n)(tiny), prompt) for n in ("naive", "cached")]
    second = [count_forward_ops(engine_class(n)(tiny), prompt) for n in ("naive", "cached")]
    assert first == second
    other = run_probe("count", "--prompts", "16", "--json", "--by-op")
    assert other.returncode == 0, other.stderr
    theirs = json.loads(other.stdout)
    assert [(c["prefill_ops"], c["decode_ops"], c["decode_by_op"]) for c in theirs] == [
        (c.prefill_ops, c.decode_ops, c.decode_by_op) for c in first
    ]
    assert first[1].decode_ops > first[0].decode_ops  # the cache adds per-layer work to every forward


def test_annotations_off_patch_nothing(tiny):
    original = Cache.__dict__["update"]
    with annotate.instrument(tiny, annotate.NULL):
        assert Cache.__dict__["update"] is original
    with annotate.instrument(tiny, annotate.Annotator()):
        assert Cache.__dict__["update"] is not original
    assert Cache.__dict__["update"] is original


def nsys_available() -> bool:
    try:
        find_nsys()
        return True
    except ProbeError:
        return False


@pytest.mark.nsys
@pytest.mark.xdist_group("nsys")  # one nsys session at a time: two at once on two workers ended in "End of file" once
@pytest.mark.slow
@pytest.mark.skipif(not (IN_CI or nsys_available()), reason="nsys not installed (scripts/install-nsys.sh)")
def test_nsys_capture_has_our_ranges(tmp_path):
    result = run_probe(
        "profile",
        "--nsys",
        "--engine",
        "cached",
        "--prompt",
        "16",
        "--new-tokens",
        "4",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    sqlite = tmp_path / "tiny_cached_cpu_p16_n4.sqlite"
    assert sqlite.exists() and (tmp_path / "tiny_cached_cpu_p16_n4.nsys-rep").exists()
    with sqlite3.connect(sqlite) as db:
        names = Counter(
            row[0]
            for row in db.execute(
                "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id"
            )
        )
    assert names["prefill"] == 1 and names["run"] == 1
    assert [names[f"decode#{i}"] for i in range(3)] == [1, 1, 1]
    assert all(names[f"cache.update#{layer}"] == 4 for layer in range(LAYERS))
    for name in (vocabulary.FORWARD, vocabulary.SAMPLE, vocabulary.SYNC, vocabulary.MASK, vocabulary.CACHE_MASK_SIZES):
        assert names[name] == 4


def test_missing_nsys_is_one_line(tmp_path, cli, monkeypatch):
    for name, value in (("PROBE_NSYS", ""), ("PATH", "/usr/bin:/bin"), ("HOME", str(tmp_path))):
        monkeypatch.setenv(name, value)
    result = cli("profile", "--nsys", "--device", "cpu", "--out", tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"probe: error: {NSYS_HINT}"]


def test_ranges_cost_one_check_when_no_tool_listens(monkeypatch):
    for var in ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "PROBE_NVTX"):
        monkeypatch.delenv(var, raising=False)
    quiet = annotate.Annotator()
    assert quiet.push is None and quiet("decode", 1) is quiet._null  # neither nsys nor the profiler: no range
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert quiet("decode", 1) is not quiet._null  # the profiler runs: a real record_function range
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/nsys/libToolsInjection64.so")  # what nsys sets for its child
    assert annotate.Annotator().push is not None


def test_profiler_is_initialised_for_cuda_graphs_once_and_only_on_cuda(monkeypatch):
    """A fake CUDA device (torch.device("cuda") needs no GPU) and a recording stand-in for torch's initialiser."""
    import torch

    from probe.capture import profile

    calls = []
    monkeypatch.setattr(torch.profiler._utils, "_init_for_cuda_graphs", lambda: calls.append("init"))
    monkeypatch.setattr(profile, "_graphs_ready", set())
    assert profile.prepare_graph_profiling(torch.device("cpu")) is False and calls == []
    assert profile.prepare_graph_profiling(torch.device("cuda")) is True
    assert profile.prepare_graph_profiling(torch.device("cuda")) is False and calls == ["init"]


def test_profile_prepares_for_graphs_before_any_warmup(monkeypatch, tmp_path):
    """The static engine captures its graph in the warmup; the profiler must have been initialised before it."""
    from probe.capture import profile

    order = []
    real_generate = profile.generate
    monkeypatch.setattr(profile, "prepare_graph_profiling", lambda device: order.append("prepare"))
    monkeypatch.setattr(profile, "generate", lambda *a, **k: order.append("run") or real_generate(*a, **k))
    profile.profile_torch(ProfileConfig(engine="cached", prompt=8, new_tokens=3, warmup=2, device="cpu"), tmp_path)
    from probe.capture.calibrate import WORKLOAD_PAIRS

    # two warmups, then the recorded run; after it, the op cost's own runs (a warm one, then plain and profiled pairs)
    assert order == ["prepare", "run", "run", "run"] + ["run"] * (1 + 2 * WORKLOAD_PAIRS)


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_kinetos_per_session_lines_are_quiet_unless_asked_for(tmp_path):
    argv = ["profile", "--engine", "cached", "--prompt", "8", "--new-tokens", "3", "--device", "cpu", "--no-history"]
    unset = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}  # this process imported probe.capture
    quiet = run_probe(*argv, "--out", str(tmp_path / "a"), env=unset)
    assert quiet.returncode == 0, quiet.stderr
    assert "USDT:" not in quiet.stderr
    asked = run_probe(*argv, "--out", str(tmp_path / "b"), env=os.environ | {"KINETO_LOG_LEVEL": "0"})
    assert asked.returncode == 0 and "profiler_start" in asked.stderr  # the user's setting wins


def test_the_batched_trace_name_says_b():
    """Issue 24 §3: a B=4 trace must not pass for a batch-1 one."""
    from probe.capture.profile import stem

    cpu = torch.device("cpu")
    assert stem(ProfileConfig(engine="batched", prompt=16, new_tokens=9, model="tiny", batch=4), cpu) == (
        "tiny_batched_cpu_p16_n9_b4"
    )
    assert stem(ProfileConfig(engine="cached", prompt=16, new_tokens=9, model="tiny"), cpu) == "tiny_cached_cpu_p16_n9"


@pytest.mark.parametrize(
    "cuda, preset, set_to, says",
    [
        ("12.4", None, "0", "TEARDOWN_CUPTI=0 set: CUDA 12.4"),  # torch's own rule: graphs below 12.6
        ("13.0", None, None, "TEARDOWN_CUPTI left unset: CUDA 13.0"),  # from 12.6 torch keeps the teardown
        ("12.4", "1", "1", "TEARDOWN_CUPTI=1 as set before the run: kept"),  # the user's setting wins
        (None, None, None, "TEARDOWN_CUPTI: not applicable (no CUDA)"),
    ],
)
def test_teardown_cupti_follows_torchs_rule(monkeypatch, cuda, preset, set_to, says):
    from probe.capture import profile

    profile.cupti_teardown.cache_clear()
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    if preset is not None:
        monkeypatch.setenv("TEARDOWN_CUPTI", preset)
    try:
        assert profile.cupti_teardown(cuda).startswith(says)
        assert os.environ.get("TEARDOWN_CUPTI") == set_to
    finally:
        profile.cupti_teardown.cache_clear()


def test_the_self_check_on_a_cpu_skips_its_cuda_part_with_a_line():
    from probe.capture.profile import self_check

    check = self_check(torch.device("cpu"), sessions=3)
    assert check.note.startswith("CUDA part skipped: no CUDA device (cpu)") and check.sessions == 3
    assert check.cpu_ops_before == check.cpu_ops_after > 0  # matmul, relu, matmul: the same ops every session
    assert check.eager_kernels_before is None and check.graph_kernels_after is None and not check.kernels_lost


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_profile_threads_sets_the_intra_op_threads_as_bench_does(tmp_path):
    """`probe profile --threads 1` on a machine of more cores: the trace ran on one thread and its sidecar says so,
    so its unprofiled estimate is held to `probe bench --threads 1` (issue 32)."""
    argv = ["profile", "--engine", "cached", "--prompt", "8", "--new-tokens", "3", "--device", "cpu", "--no-history"]
    result = run_probe(*argv, "--threads", "1", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (trace,) = tmp_path.glob("*.trace.json.gz")
    assert read_sidecar(trace).threads == (1, os.cpu_count())
    bad = run_probe(*argv, "--threads", "-1", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and "--threads must be 0" in bad.stderr


def test_the_op_cost_is_measured_on_the_decode_steps_its_ranges_at_the_loops_cost(monkeypatch):
    """workload_op_cost: (median profiled step - median plain step - ranges a step x range cost) / ops a step, the
    ops every host event inside a decode#i range that is not a range. The run below plays a generation whose
    profiled steps take exactly 500 ns an op and 3000 a range longer."""
    from probe.capture import calibrate

    x = torch.ones(4, 4)
    profiling, per_step = [], {"ops": 0}

    def run():  # two decode steps, each: a range and two ops (add, mul) inside it, plus a range outside
        with torch.profiler.record_function("prefill"):
            x + 0
        for i in range(2):
            with torch.profiler.record_function(f"decode#{i}"):
                with torch.profiler.record_function("sample"):
                    y = x + 1
                y * 2
        return (10_000 + (per_step["ops"] * 500 + 1 * 3000 if profiling else 0),) * 2

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    ops, ranges = calibrate._per_decode_step(prof.events())
    names = {e.name for e in prof.events() if not e.is_user_annotation}
    assert ranges == 1 and ops >= 2 and {"aten::add", "aten::mul"} <= names  # (the range's own enter/exit ops too)
    per_step["ops"] = ops
    real = torch.profiler.profile

    class Profile(real):  # what `run` reads to know whether it is profiled
        def __enter__(self):
            profiling.append(True)
            return super().__enter__()

        def __exit__(self, *exc):
            profiling.pop()
            return super().__exit__(*exc)

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    assert calibrate.workload_op_cost(run, cpu, range_ns=3000.0) == 500.0
    # a range cost past what the steps show: the op cost holds at 0, never below
    assert calibrate.workload_op_cost(run, cpu, range_ns=1e9) == 0.0


@pytest.mark.slow
def test_the_guard_check_is_measured_apart_from_the_static_engines_compiled_step(tiny):
    """compiled_entry_ms traces the static step with dynamo's eager backend; the static engine compiled after it
    still runs its own inductor graph (the entry's lambda holds its own cache entries), and the check is a positive
    figure of the model's guards."""
    from probe.capture.loop import generate
    from probe.capture.machine import DYNAMO_LOOKUP, compiled_entry_ms

    entry = compiled_entry_ms(tiny, 8, 4)
    assert entry is not None and entry > 0
    engine = engine_class("static")(tiny)
    prompt = prompt_ids(8, 1, tiny.config.vocab_size)
    for _ in range(2):
        generate(engine, prompt, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate(engine, prompt, 4)
    names = {e.name for e in prof.events()}
    assert DYNAMO_LOOKUP in names and any(n.startswith("## Call CompiledFxGraph") for n in names)
