"""probe ab: two engines in lockstep in one process, judged by probe compare's rule."""

from __future__ import annotations

import json

import pytest
import torch

from engines import engine_class
from engines.models import prompt_ids
from probe.capture.loop import generate, lockstep
from tests.conftest import run_probe

SMALL = ["--prompts", "8", "--new-tokens", "12", "--runs", "6", "--warmup", "1"]
# This machine is shared: other processes often take a core, and then the contention rule rightly withholds every
# timing verdict ("contended: not judged", tested below). Tests of the timing rule itself turn the CPU sampling off.
UNSAMPLED = ["--telemetry-ms", "0"]


def test_lockstep_runs_each_engine_as_generate_does(tiny):
    prompt = prompt_ids(20, 1, tiny.config.vocab_size)
    naive, cached = lockstep([engine_class("naive")(tiny), engine_class("cached")(tiny)], prompt, 10)
    alone = generate(engine_class("cached")(tiny), prompt, 10)
    assert torch.equal(naive.tokens, alone.tokens) and torch.equal(cached.tokens, alone.tokens)
    assert len(naive.step_ns) == len(cached.step_ns) == 9 and min(cached.step_ns) > 0
    assert not torch.is_inference_mode_enabled()  # the runs' guards unwound whatever their order


def test_extra_op_per_layer_is_caught_and_named(tiny, cli):
    result = cli("ab", "cached", "tests.variants:ExtraOpCacheEngine", *SMALL)
    assert result.returncode == 1, result.stdout + result.stderr
    layers = tiny.config.num_hidden_layers
    assert f"aten::clone 0 -> {layers} (new)" in result.stdout


@pytest.mark.serial  # a timing verdict: no test beside it to shift one engine's steps
def test_same_engine_raises_nothing_and_a_slowdown_is_caught(cli, monkeypatch):
    same = cli("ab", "cached", "cached", *SMALL, *UNSAMPLED)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no regression" in same.stdout
    # 3 ms of busy host work per decode step on a 2-4 ms step: in lockstep it cannot hide in drift
    monkeypatch.setenv("PROBE_SLOW_US", "3000")
    slow = cli("ab", "cached", "tests.variants:SlowCachedEngine", *SMALL, *UNSAMPLED)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "host µs/step rose" in slow.stdout


def test_unknown_engine_is_a_one_line_error(cli):
    result = cli("ab", "cached", "turbo", *SMALL)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "probe: error: unknown engine 'turbo': use one of naive, cached, static, static-eager, batched or module:Class"
    ]


def test_two_differently_named_engines_meet_cell_by_cell(cli):
    """naive against cached, the comparison the command exists for: their cells meet by prompt and tokens, and the
    cache's bookkeeping ops are listed as a difference between two engines, not a regression (issue 36 §3);
    --gate-counts gates them."""
    result = cli("ab", "naive", "cached", *SMALL, *UNSAMPLED, "--threshold", "1000", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert {r["key"] for r in doc["rows"]} == {"p8 n12"}  # SMALL: one prompt length, 12 new tokens
    counts = [r for r in doc["rows"] if r["metric"] == "decode_launches"]
    assert counts and counts[0]["current"] > counts[0]["baseline"]
    assert counts[0]["verdict"] == "engines differ: not gated" and doc["alerts"] == []
    assert any(c["change"] == "new" for c in doc["changes"])  # what cached launches that naive does not, by name
    gated = cli("ab", "naive", "cached", *SMALL, *UNSAMPLED, "--threshold", "1000", "--gate-counts", "--json")
    assert gated.returncode == 1, gated.stderr
    alerts = [a for a in json.loads(gated.stdout)["alerts"] if a["metric"] == "decode_launches"]
    assert alerts and "launches/decode step" in alerts[0]["message"]


def test_help_states_the_defaults_ab_really_uses():
    """probe ab runs the tiny model on the CPU at prompts 16 and 64 (AB_DEFAULTS), not probe bench's defaults.
    A real process: the help is what a user reads."""
    text = " ".join(run_probe("ab", "--help").stdout.split("options:", 1)[1].split())  # the flags, not the prose
    for flag, shown in {
        "--prompts": "(default: 16,64)",
        "--new-tokens": "(default: 32)",
        "--runs": "(default: 6)",
        "--model": "(default: tiny)",
        "--device": "(default: cpu)",
        "--threads": "(default: 1)",
        "--threshold": "(default: 1.1)",
    }.items():
        assert shown in text.split(flag, 2)[-1].split(" --", 1)[0], (flag, shown)
    assert "4096" not in text  # bench's prompt lengths are not shown


def test_output_names_the_model_and_device_and_reconciles_a_count_alert_beside_a_speed_up(cli):
    """naive against cached at a 64-token prompt, counts gated: the cache adds bookkeeping ops (a count alert) and
    makes each decode step several times faster (measured here 2.6x, p = 5e-22: many times the noise), so the two
    verdicts are printed side by side and reconciled."""
    result = cli(
        "ab", "naive", "cached", "--prompts", "64", "--new-tokens", "12", "--runs", "6", "--warmup", "1", *UNSAMPLED,
        "--gate-counts",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("probe ab: naive (base) vs cached (current), model tiny (float32) on cpu, prompts 64")
    assert "p64 n12: launches/decode step" in result.stdout and "(regression) beside host µs/step x" in result.stdout
    assert "(improvement): the current side launches more a step yet runs faster" in result.stdout
    doc = json.loads(cli("ab", "cached", "cached", *SMALL, "--json").stdout)
    assert doc["header"].startswith("probe ab: cached (base) vs cached (current), model tiny (float32) on cpu")


def test_a_contended_side_is_not_judged(cli, monkeypatch):
    """The contention rule (probe.analysis.records.telemetry.contention, tested on a real busy loop in
    tests/test_telemetry.py)
    forced to say "contended": a 3 ms slowdown a step, which the test above catches, is then no verdict; the exact
    counts still are."""
    from probe.analysis.records.telemetry import Contention
    from probe.capture import cell

    monkeypatch.setattr(cell, "contention", lambda summary, windows, cores: Contention(1.0, True))
    monkeypatch.setenv("PROBE_SLOW_US", "3000")
    slow = cli("ab", "cached", "tests.variants:SlowCachedEngine", *SMALL, "--json")
    assert slow.returncode == 0, slow.stdout + slow.stderr
    verdicts = {r["metric"]: r["verdict"] for r in json.loads(slow.stdout)["rows"]}
    assert verdicts["host_us_per_step"] == "contended: not judged" and verdicts["decode_launches"] == "ok"
    assert {verdicts[m] for m in ("ttft_ms", "decode_tok_s")} == {"contended: not judged"}


def test_what_if_checks_alternate_whole_generations_each_at_its_threads(tiny, monkeypatch):
    """interleaved_steps: each side's whole generation in turn (ABBA across rounds), never one step of each in turn:
    a step run after another engine's runs on that one's caches. Each side's thread count is set before its run."""
    from probe.analysis.diagnosis.predictions import Side
    from probe.capture import ab
    from probe.settings import BenchConfig

    calls = []
    real = ab.generate
    monkeypatch.setattr(
        ab, "generate", lambda e, *a, **k: calls.append((e.name, torch.get_num_threads())) or real(e, *a, **k)
    )
    cfg = BenchConfig(new_tokens=3, runs=2, warmup=0, device="cpu", telemetry_ms=0)
    measured = ab.interleaved_steps(cfg, tiny, [Side("cached"), Side("naive", threads=1)], prompt_len=8)
    assert [name for name, _ in calls] == ["cached", "naive", "naive", "cached"]
    assert {name: n for name, n in calls}["naive"] == 1
    assert set(measured) == {Side("cached"), Side("naive", threads=1)}
    assert all(m.step_ms > 0 for m in measured.values())
