"""Every trace in ../shared/traces, whole: `probe analyze --json` answers on each (or refuses it in one line), and
its figures hold together the way the answer says they do. A trace nobody tuned the rules to is the test: a rule
that breaks on a shape it was not written for shows here as a traceback or a sum that does not add up."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from probe.cli import main
from tests.conftest import IN_CI, SHARED

TRACES = sorted(
    p.relative_to(SHARED).as_posix()
    for p in (SHARED.glob("*/*") if SHARED.is_dir() else ())
    if p.name.endswith((".json", ".json.gz", ".sqlite"))
)
US = 0.01  # the JSON's figures are rounded to the nanosecond, in microseconds: sums agree to well within this

# host work's parts (probe.analysis.diagnosis.evidence: they add up to it)
HOST_PARTS = (
    "setup_us",
    "data_us",
    "python_us",
    "dispatch_us",
    "launch_us",
    "other_threads_us",
    "profiler_recorded_us",
    "unattributed_us",
)


def _problems(step: dict) -> list[str]:
    """What of one step's figures does not hold together: the partitions add up to the wall, host work is the wall
    less the sync wait and is its parts, no figure is negative, busy lies within the GPU window, and every offered
    what-if saves something, no more than the step."""
    out = []
    name = f"step {step['index']}"
    for partition in ("mechanism_us", "purpose_us"):
        total = sum(step[partition].values())
        if abs(total - step["wall_us"]) > US:
            out.append(f"{name}: {partition} add up to {total:.3f}, the wall is {step['wall_us']:.3f}")
    if step["gpu_busy_us"] > step["gpu_window_us"] + US:
        out.append(f"{name}: GPU busy {step['gpu_busy_us']:.3f} past its window {step['gpu_window_us']:.3f}")
    d = step.get("diagnosis")
    if not d:
        return out
    e = d["evidence"]
    parts = sum(e[k] for k in HOST_PARTS)
    if abs(parts - e["host_work_us"]) > US:
        out.append(f"{name}: host work {e['host_work_us']:.3f}, its parts {parts:.3f}")
    if abs(e["wall_us"] - e["sync_wait_us"] - e["host_work_us"]) > US:
        out.append(f"{name}: host work {e['host_work_us']:.3f} is not wall less sync wait")
    out += [f"{name}: {k} = {v}" for k, v in e.items() if isinstance(v, int | float) and v < 0]
    for w in d["what_if"]:
        if not 0 < w["saving_ms"] <= w["step_ms"] + US / 1e3 or w["predicted_step_ms"] < 0:
            out.append(f"{name}: {w['change']!r} saves {w['saving_ms']} of {w['step_ms']} ms")
    return out


@pytest.mark.parametrize("name", TRACES or ["(no shared traces here)"])
def test_every_shared_trace_answers_and_its_figures_add_up(name):
    if not TRACES:
        if IN_CI:
            pytest.fail(f"{SHARED} is not here: CI reads the shared traces beside the checkout")
        pytest.skip(f"{SHARED} is not here")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["analyze", str(SHARED / name), "--json"])
    if code:  # refused: one line that says why, never a traceback
        (line,) = [x for x in err.getvalue().splitlines() if x.startswith("probe: error:")]
        assert code == 2 and name in line
        return
    doc = json.loads(out.getvalue())
    assert doc["steps"], "an answer with no step"
    problems = [p for s in doc["steps"] for p in _problems(s)]
    assert not problems, "; ".join(problems[:5])
