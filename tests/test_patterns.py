"""User patterns (probe.analysis.ledger.patterns): one compiler, RE2's linear-time search, one line for anything
refused,
and `--steps` as a search (issue 28 items 3 and 19, issue 22 section 5)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from probe.analysis.ledger import patterns
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.kernels import KernelRules
from probe.analysis.ledger.patterns import compile_user
from probe.analysis.ledger.steps import compile_steps_regex, find_steps
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.trace import load_trace
from probe.errors import ProbeError
from tests.conftest import DATA, IN_CI, shared_trace

ROOT = Path(__file__).resolve().parents[1]
# PROBE_CI=1: google-re2 is a dependency there, so a missing one fails instead of skipping
needs_re2 = pytest.mark.skipif(patterns.re2 is None and not IN_CI, reason="google-re2 is not installed")


def probe(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "probe", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def x(name: str, ts: float, dur: float, cat: str = "user_annotation", **kw) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}, **kw}


# --- every user pattern through one linear-time compiler -------------------------------------------------


@needs_re2
@pytest.mark.parametrize(
    "flags",
    [["--steps", "(x+x+)+y"], ["--part", "p=(x+x+)+y"], ["--kernel-category", "c=(x+x+)+y"]],
    ids=["steps", "part", "kernel-category"],
)
def test_a_catastrophic_pattern_is_searched_in_linear_time(tmp_path, flags):
    """`(x+x+)+y` against 40 x's: Python's backtracking engine tries every split of the x's, about 2**40 paths,
    before it fails (days); RE2 needs one pass. A range, an op and a kernel all carry the name, so each flag's
    search meets it. The old code never returned; this returns at once (the timeout only bounds a hang)."""
    name = "x" * 40
    events = [
        x("decode#0", 1.0, 100.0),
        x(name, 2.0, 10.0),
        x(name, 3.0, 5.0, cat="cpu_op"),
        x("cudaLaunchKernel", 4.0, 1.0, cat="cuda_runtime", args={"correlation": 1}),
        {**x(name, 6.0, 2.0, cat="kernel", args={"correlation": 1}), "pid": 0, "tid": 7},
    ]
    result = probe("analyze", str(write(tmp_path / "t.json", events)), "--json", *flags)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["steps"]


@needs_re2
def test_every_user_pattern_is_compiled_by_re2():
    options = AnalyzeOptions.parse(steps="^decode#", parts=["inputs=_prepare"], kernel_categories=["moe2=ogs"])
    user_rule = options.kernel_rules[0]
    assert user_rule == ("moe2", "ogs")
    compiled = [options.steps, options.parts[0].pattern, KernelRules.build(options.kernel_rules).rules[0][1]]
    assert all(type(p) is patterns.Pattern and type(p.compiled).__module__.startswith("re2") for p in compiled)


# --- one line for a pattern that cannot be compiled -------------------------------------------------------


DEEP = "(" * 150 + "a" + ")" * 150
REFUSED = [
    ("a{4294967296}", "repetition count 4294967296 (at most 1000)"),  # Python: OverflowError; RE2: a literal
    ("a{1,1001}", "repetition count 1001 (at most 1000)"),
    (DEEP, "groups nested 150 deep (at most 100)"),
    ("x" * 2001, "a pattern of 2001 characters (at most 2000)"),
    ("(", "not a regular expression"),
    ("a(?=b)", "not a regular expression probe can match in linear time (invalid perl operator: (?=)"),
    (r"(a)\1", "not a regular expression probe can match in linear time"),
]


@needs_re2
@pytest.mark.parametrize(("pattern", "why"), REFUSED, ids=[w[:24] for _, w in REFUSED])
def test_an_uncompilable_pattern_is_one_line_from_every_entry(pattern, why):
    """The CLI flags and the explorer's URL parameters all reach AnalyzeOptions.parse."""
    for kwargs, what in (
        ({"steps": pattern}, f"--steps {pattern!r}"),
        ({"parts": [f"p={pattern}"]}, f"--part p={pattern}"),
        ({"kernel_categories": [f"c={pattern}"]}, f"--kernel-category c={pattern}"),
    ):
        with pytest.raises(ProbeError) as info:
            AnalyzeOptions.parse(**kwargs)
        message = str(info.value)
        assert "\n" not in message and message.startswith(what[:60]) and why in message


@needs_re2
@pytest.mark.parametrize("flag", ["--steps", "--part", "--kernel-category"])
@pytest.mark.parametrize("pattern", ["a{4294967296}", DEEP], ids=["huge-repeat", "deep-groups"])
def test_the_cli_says_one_line_and_exits_2(flag, pattern):
    value = pattern if flag == "--steps" else f"p={pattern}"
    result = probe("analyze", str(DATA / "hand_decode.trace.json.gz"), flag, value)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert flag in line and ("repetition count" in line or "nested 150 deep" in line)


def test_without_re2_user_patterns_fail_closed(monkeypatch):
    monkeypatch.setattr(patterns, "re2", None)
    with pytest.raises(ProbeError, match=r"^--steps 'decode': user patterns need the google-re2 package"):
        compile_steps_regex("decode")
    assert AnalyzeOptions.parse().steps is None  # no pattern, nothing needed


@needs_re2
def test_patterns_compare_equal_and_survive_pickling():
    """Options parsed twice are equal (the explorer caches on them); a worker process gets them pickled."""
    import pickle

    a, b = compile_user("^decode#", "x"), compile_user("^decode#", "y")
    assert a == b and hash(a) == hash(b)
    again = pickle.loads(pickle.dumps(AnalyzeOptions.parse(steps="^decode#")))
    assert again.steps == a and again.steps.search("decode#3") and not again.steps.search("xdecode#3")


@needs_re2
def test_a_name_that_is_not_valid_unicode_is_searched():
    assert compile_user("bad", "x").search("bad\udcff") is not None


# --- --steps searches the name ----------------------------------------------------------------------------


@needs_re2
def test_steps_searches_the_name_and_anchors_anchor_it():
    """vLLM's range is `execute_2_context_0(0)_generation_2(2)(sq1sk...)`: `--steps execute_` finds it (a search);
    `^execute_$` asks for the whole name and finds nothing, which is a warning and the rules below apply."""
    trace = load_trace(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz"))
    found = find_steps(trace, compile_steps_regex("execute_"))
    assert found.rule == "--steps" and len(found) == 1 and found.names[0].startswith("execute_")
    whole = find_steps(trace, compile_steps_regex("^execute_$"))
    assert whole.rule != "--steps" and any("matched no range" in w for w in whole.warnings)
    assert any("matched no range" in w for w in analyze(trace, AnalyzeOptions.parse(steps="^execute_$")).warnings)
    anchored = find_steps(trace, compile_steps_regex(f"^{found.names[0].replace('(', '.').replace(')', '.')}$"))
    assert anchored.names == found.names


# --- the built-in kernel-category rules on a name built against them --------------------------------------


def test_a_long_kernel_name_costs_linear_time(tmp_path):
    """One kernel named "flashinfer" 30,000 times (300k characters, in a gzipped file of a few KB): the old rule
    `flashinfer.*(prefill|decode)` read to the end from each of the 30,000 starts (5.9 s at 40k here, growing as
    the square: minutes at 300k). Each built-in rule now has a bounded width (tests/test_kernel_names.py), so this
    is one linear pass (about a second); the timeout only bounds a hang."""
    name = "flashinfer" * 30_000
    events = [
        x("decode#0", 1.0, 100.0),
        x("cudaLaunchKernel", 4.0, 1.0, cat="cuda_runtime", args={"correlation": 1}),
        {**x(name, 6.0, 2.0, cat="kernel", args={"correlation": 1}), "pid": 0, "tid": 7},
    ]
    path = tmp_path / "long.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert path.stat().st_size < 8192
    result = probe("analyze", str(path), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kernels"][0]["category"] == "other"
