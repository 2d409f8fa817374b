"""Shared fixtures: the tiny preset is built once per session (it takes about a second)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import hypothesis
import pytest
import torch

from engines.models import load_model, prompt_ids
from engines.naive import no_cache_forward, prepared_masks
from probe.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"  # what the project made itself (PROVENANCE.md)
IN_CI = os.environ.get("PROBE_CI") == "1"  # .ci/run sets it: tools that CI installs must not be skipped
# Traces recorded by other projects (TraceLens's and HTA's test data, ...), read where they lie, never copied here:
# ../shared/traces beside the checkout, which CI always has. A fresh clone has none of it, and its tests skip.
SHARED = ROOT.parent / "shared" / "traces"
needs_shared = pytest.mark.skipif(not SHARED.is_dir() and not IN_CI, reason=f"{SHARED} is not here")
# Ray as the tests start it, set before any test module imports Ray (which reads these once): in its local-only mode,
# so its nodes' address is the loopback and every port it opens listens on 127.0.0.1 (probe/cluster.py does the same);
# with token authentication, one token for the session (given, so that none is written to ~/.ray).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
# Tests read the tables for what they hold, so every `probe` they run prints them whole: wide enough that no column is
# dropped (probe.render.console fits a table to COLUMNS, else 100 in a pipe). tests/test_console.py sets its own widths.
os.environ["COLUMNS"] = "250"

# Under xdist (.ci/run: two workers on two cores) each worker, and every process it starts, computes on one thread:
# torch's default of one thread per core would put four spinning threads on the two cores and slow every torch test
# manyfold.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)

# The property tests explore new inputs on every local run; CI replays the same derandomized examples, so a gate never
# fails on an input that no one has seen yet (run the suite locally to keep searching).
hypothesis.settings.register_profile("ci", derandomize=True)
if IN_CI:
    hypothesis.settings.load_profile("ci")


def shared_trace(*name: str) -> Path:
    """`../shared/traces/NAME` (e.g. "public/b200_eager.trace.json.gz", or its parts: "engines", "x.json.gz"); the
    calling test skips when it is not there, and fails in CI, which always has it."""
    path = SHARED.joinpath(*name)
    if not path.is_file():
        if IN_CI:
            pytest.fail(f"{path} is not here: CI reads the shared traces beside the checkout")
        pytest.skip(f"{path} is not here")
    return path


@pytest.fixture(scope="session", autouse=True)
def history_outside_the_checkout(tmp_path_factory):
    """The commands that measure append every run to a history (./probe-history.duckdb by default): in tests,
    to a file of the session's own, inherited by every `probe` process a test starts."""
    os.environ["PROBE_HISTORY"] = str(tmp_path_factory.mktemp("history") / "probe-history.duckdb")


@pytest.fixture(scope="session")
def tiny():
    return load_model("tiny", "float32", "cpu", seed=0)


@pytest.fixture
def cli(capsys):
    """`probe ARGS` in this process, as a CompletedProcess (exit code, stdout, stderr): no interpreter start-up and
    no imports per call. Use `run_probe` where the process is what the test is about (exit codes of a real process,
    signals, what a fresh process imports)."""

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


def run_probe(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "probe", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=kw.pop("cwd", ROOT),
        **kw,
    )


def interrupt_sweep(args: list[str], out: Path, signum: int, cells: int = 2) -> subprocess.CompletedProcess:
    """Start `probe ARGS` (a sweep into `out`), send it `signum` once its results.json holds `cells` cells, and
    return the finished process (returncode, stdout, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "probe", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    results = out / "results.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(json.loads(results.read_text())["cells"]) >= cells:
            break
        time.sleep(0.05)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def floor_ops_by_profiler() -> int:
    """The floor's forward (one token, no cache, as the naive engine's prefill calls it: the forward and the
    last position's logits) under torch.profiler: its top-level aten ops, counted from the profiler's own event
    tree, with no probe code involved."""
    model = load_model("tiny", "float32", "cpu")
    token = prompt_ids(1, 1, model.config.vocab_size)
    masks = prepared_masks(model)
    with torch.inference_mode():
        no_cache_forward(model, token, masks)  # warm
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            no_cache_forward(model, token, masks)
    return sum(1 for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::"))
