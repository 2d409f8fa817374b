"""probe ab: two engines in lockstep in one process, judged by probe compare's rule."""

from __future__ import annotations

import json
import os

import torch

from engines import engine_class
from engines.models import prompt_ids
from probe.capture.loop import generate, lockstep
from tests.conftest import run_probe

SMALL = ["--prompts", "8", "--new-tokens", "12", "--runs", "6", "--warmup", "1"]


def test_lockstep_runs_each_engine_as_generate_does(tiny):
    prompt = prompt_ids(20, 1, tiny.config.vocab_size)
    naive, cached = lockstep([engine_class("naive")(tiny), engine_class("cached")(tiny)], prompt, 10)
    alone = generate(engine_class("cached")(tiny), prompt, 10)
    assert torch.equal(naive.tokens, alone.tokens) and torch.equal(cached.tokens, alone.tokens)
    assert len(naive.step_ns) == len(cached.step_ns) == 9 and min(cached.step_ns) > 0
    assert not torch.is_inference_mode_enabled()  # the runs' guards unwound whatever their order


def test_extra_op_per_layer_is_caught_and_named(tiny):
    result = run_probe("ab", "cached", "tests.variants:ExtraOpCacheEngine", *SMALL)
    assert result.returncode == 1, result.stdout + result.stderr
    layers = tiny.config.num_hidden_layers
    assert f"aten::clone 0 -> {layers} (new)" in result.stdout


def test_same_engine_raises_nothing_and_a_slowdown_is_caught():
    same = run_probe("ab", "cached", "cached", *SMALL)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no regression" in same.stdout
    # 3 ms of busy host work per decode step on a 2-4 ms step: in lockstep it cannot hide in drift
    slow = run_probe(
        "ab", "cached", "tests.variants:SlowCachedEngine", *SMALL, env=os.environ | {"PROBE_SLOW_US": "3000"}
    )
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "host us/step rose" in slow.stdout


def test_unknown_engine_is_a_one_line_error():
    result = run_probe("ab", "cached", "turbo", *SMALL)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "probe: error: unknown engine 'turbo': use one of naive, cached, static, static-eager, batched or module:Class"
    ]


def test_two_differently_named_engines_meet_cell_by_cell():
    """naive against cached, the comparison the command exists for: their cells meet by prompt and tokens."""
    result = run_probe("ab", "naive", "cached", *SMALL, "--json")
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert {r["key"] for r in doc["rows"]} == {"p8 n12"}  # SMALL: one prompt length, 12 new tokens
    # The cache adds bookkeeping ops to every decode forward: an exact, named count alert.
    alerts = [a for a in doc["alerts"] if a["metric"] == "decode_launches"]
    assert alerts and "launches/decode step" in alerts[0]["message"]
