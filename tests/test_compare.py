"""probe compare and probe baseline: exact count gates, noise-aware timing verdicts, inputs, outputs, exits."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import torch

from probe.analysis.ledger import kernels as kernels_module
from probe.analysis.records.environment import Environment
from probe.analysis.records.results import RESULTS_FILE, BenchResults, Cell, load_results
from probe.analysis.regression.compare import compare, timing_row
from probe.analysis.regression.identity import ConfigIdentity
from probe.analysis.regression.rules import ALPHA, THRESHOLD, CompareRules
from probe.analysis.regression.samples import Metric, SampleSet, Unit, from_results, load_samples
from probe.analysis.regression.stats import can_reach
from probe.capture.config import BenchConfig
from probe.capture.loop import generate
from probe.capture.sweep import bench
from probe.errors import ProbeError
from probe.render.markdown import comparison_markdown
from tests.conftest import DATA, ROOT, run_probe, shared_trace
from tests.variants import SLOW_US_VAR, ExtraOpCacheEngine, SlowCachedEngine

SMALL = dict(prompts=(8,), new_tokens=6, runs=3, warmup=1, device="cpu")
EXTRA = "tests.variants:ExtraOpCacheEngine"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Three bench folders: the cached engine, the same again, and the extra-op variant."""
    root = tmp_path_factory.mktemp("compare")
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see one_thread
    try:
        for name, engine in (("base", "cached"), ("again", "cached"), ("extra", EXTRA)):
            bench(BenchConfig(engines=(engine,), **SMALL), root / name)
            out[name] = root / name
    finally:
        torch.set_num_threads(threads)
    return out


def edited(folder, tmp_path, name: str, edit) -> str:
    """A copy of a results file with `edit(data)` applied."""
    data = json.loads((folder / RESULTS_FILE).read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def cmp(base, cur, require_same_env: bool = False, **rules):
    """compare() of two inputs (paths or SampleSets) under CompareRules(**rules)."""
    sides = [x if isinstance(x, SampleSet) else load_samples(x) for x in (base, cur)]
    return compare(*sides, CompareRules(**rules), require_same_env)


def changes(result, metric: str | None = None) -> dict[str, dict[str, tuple[float, float]]]:
    """key -> name -> (baseline, current) of every op or kernel that moved (of `metric`, if given)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for c in result.changes:
        if metric is None or c.metric == metric:
            out.setdefault(c.key, {})[c.name] = (c.baseline, c.current)
    return out


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("probe: error: "), proc.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# counts


def test_extra_op_per_layer_is_caught_and_named(folders, tiny, cli):
    base = load_results(folders["base"]).cells[0]
    layers = tiny.config.num_hidden_layers
    proc = cli("compare", str(folders["base"]), str(folders["extra"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"launches/decode step {base.decode_ops} -> {base.decode_ops + layers} (+{layers})" in proc.stdout
    assert f"aten::clone 0 -> {layers} (new)" in proc.stdout
    result = cmp(folders["base"], folders["extra"])
    assert changes(result) == {"cached p8 n6": {"aten::clone": (0.0, float(layers))}}  # decode and prefill alike
    assert {c.metric for c in result.changes} == {"decode_launches", "prefill_launches"}
    assert f"new: aten::clone, 0 -> {layers} a step" in proc.stdout
    assert {(a.key, a.metric) for a in result.alerts} >= {("cached p8 n6", "decode_launches")}
    prefill = next(a for a in result.alerts if a.metric == "prefill_launches")
    assert f"aten::clone 0 -> {layers} (new)" in prefill.message  # the prefill's writes grew too, and are named


def test_same_engine_rerun_passes_the_count_gate(folders, cli):
    proc = cli("compare", str(folders["base"]), str(folders["again"]), "--counts-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no regression" in proc.stdout and "timings not compared" in proc.stdout
    result = cmp(folders["base"], folders["again"], counts_only=True)
    assert {r.kind for r in result.rows} == {"count"} and all(r.verdict == "ok" for r in result.rows)


def test_identical_inputs_raise_nothing(folders):
    result = cmp(folders["base"], folders["base"])
    assert not result.alerts and not result.changes
    timed = [r for r in result.rows if r.kind == "timing"]
    assert timed and all(r.ratio == 1 and r.verdict in ("ok", "too few samples") for r in timed)
    host = next(r for r in timed if r.metric == "host_us_per_step")
    assert host.p_value == 1 and host.n_baseline == 15 and host.ci_low <= 1 <= host.ci_high


def test_counts_grow_only_by_total(folders, tmp_path):
    """One op traded for another at the same total is listed but does not alert; a total increase does."""

    def swap(data):
        ops = data["cells"][0]["decode_ops_by_op"]
        name = next(iter(ops))
        ops[name] -= 1
        ops["aten::made_up"] = 1

    result = cmp(folders["base"], edited(folders["base"], tmp_path, "swap.json", swap))
    assert not result.alerts
    moved = changes(result, "decode_launches")["cached p8 n6"]
    assert moved["aten::made_up"] == (0.0, 1.0) and len(moved) == 2  # the new op, and the one that shrank by one
    name = next(n for n in moved if n != "aten::made_up")
    assert moved[name][0] - moved[name][1] == 1


# ---------------------------------------------------------------------------------------------------------
# timings


def interleaved_cells(engines: dict, tiny, prompt_len: int, new_tokens: int, runs: int) -> dict[str, Cell]:
    """Runs of several engines in turn (A B C A B C ...), so machine drift hits each alike."""
    from engines.models import prompt_ids

    prompt = prompt_ids(prompt_len, 1, tiny.config.vocab_size)
    for engine in engines.values():
        generate(engine, prompt, new_tokens)  # warmup
    gens = {name: [] for name in engines}
    for _ in range(runs):
        for name, engine in engines.items():
            gens[name].append(generate(engine, prompt, new_tokens))
    return {
        name: Cell.from_runs(
            engine="cached",
            prompt_tokens=prompt_len,
            batch=1,
            ttft_ms=[g.ttft_ns / 1e6 for g in gs],
            itl_ms=[[s / 1e6 for s in g.step_ns] for g in gs],
            total_ms=[g.total_ns / 1e6 for g in gs],
            tokens=[g.tokens.tolist() for g in gs],
            peak_mem_bytes=0,
            peak_mem_kind="cpu_rss",
        )
        for name, gs in gens.items()
    }


@pytest.fixture
def one_thread():
    # Two threads on a two-core machine shared with other jobs turn every preemption into a stalled step.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_injected_delay_is_caught(tiny, one_thread, monkeypatch):
    """A busy-wait of at least twice the step, measured interleaved with the stock engine, is a regression.

    Not a timing claim: the delay is sized from this machine's own step time, and the runs alternate, so the
    machine's drift (2-3x between sessions here) hits both sides alike. How small a delay is caught, and how
    often an unchanged engine alerts, is benchmarks/compare_noise.py's job.
    """
    from engines.cached import CachedEngine
    from engines.models import prompt_ids

    prompt = prompt_ids(8, 1, tiny.config.vocab_size)
    step_us = statistics.median(generate(CachedEngine(tiny), prompt, 12).step_ns) / 1e3
    monkeypatch.setenv(SLOW_US_VAR, str(max(2000.0, 2 * step_us)))
    cells = interleaved_cells(
        {"a": CachedEngine(tiny), "slow": SlowCachedEngine(tiny)}, tiny, prompt_len=8, new_tokens=16, runs=5
    )
    env = Environment(torch="x", transformers="y", device="cpu", device_name="cpu", dtype="float32")
    base, slow = (
        from_results(BenchResults([cells[n]], env, BenchConfig(model="tiny"), complete=True), n) for n in ("a", "slow")
    )
    result = cmp(base, slow)
    host = next(r for r in result.rows if r.metric == "host_us_per_step")
    assert host.verdict == "regression", host
    assert host.ratio > THRESHOLD and host.p_value < ALPHA and host.ci_low > 1
    assert any(a.metric == "host_us_per_step" and "host µs/step rose" in a.message for a in result.alerts)


def series(n: int, scale: float = 1.0) -> list[float]:
    return [scale * (100 + (7 * i) % 13) for i in range(n)]  # a fixed, spread-out sample


def test_timing_rule_needs_both_ratio_and_significance():
    host = Metric("host_us_per_step", "host µs/step", "timing")
    slow = timing_row("k", host, series(40), series(40, 1.3), CompareRules())
    assert slow.verdict == "regression" and slow.ratio == pytest.approx(1.3) and slow.p_value < 1e-6
    assert slow.ci_low <= 1.3 <= slow.ci_high
    again = timing_row("k", host, series(40), series(40, 1.3), CompareRules())
    assert (again.ci_low, again.ci_high) == (slow.ci_low, slow.ci_high)  # fixed seed: same report every time
    small = timing_row("k", host, series(400), series(400, 1.05), CompareRules())
    assert small.p_value < ALPHA and small.verdict == "ok"  # significant, but under the threshold
    faster = timing_row("k", host, series(40), series(40, 0.7), CompareRules())
    assert faster.verdict == "improvement"
    few = timing_row("k", host, series(4), series(4, 2.0), CompareRules())
    assert few.verdict == "too few samples" and few.p_value is None and few.ratio == pytest.approx(2.0)


def test_tokens_per_second_regresses_when_it_drops():
    tok_s = Metric("decode_tok_s", "decode tok/s", "timing", higher_is_worse=False)
    drop = timing_row("k", tok_s, series(20), series(20, 0.8), CompareRules())
    assert drop.verdict == "regression" and drop.ratio == pytest.approx(0.8)  # tokens/s fell: worse
    rise = timing_row("k", tok_s, series(20), series(20, 1.25), CompareRules())
    assert rise.verdict == "improvement"


def test_enough_samples_follows_asv():
    assert can_reach(5, 5, 0.01) and not can_reach(4, 4, 0.01) and not can_reach(1, 100, 0.01)
    assert can_reach(2, 1000, 0.01)  # 2 / C(1002, 2) is tiny: a U test can decide


def test_results_give_per_run_ttft_and_tokens_per_second(folders):
    cell = load_results(folders["base"]).cells[0]
    unit = load_samples(folders["base"]).units["cached p8 n6"]
    assert unit.samples["ttft_ms"] == tuple(cell.ttft_runs_ms)
    assert statistics.median(unit.samples["decode_tok_s"]) == pytest.approx(cell.decode_tok_s)
    assert len(unit.samples["host_us_per_step"]) == 3 * 5
    assert "cache_us_per_step" not in unit.samples
    assert any("cache µs/step: not in bench results" in n for n in cmp(folders["base"], folders["base"]).notes)


# ---------------------------------------------------------------------------------------------------------
# versions, bad input, outputs


@pytest.mark.parametrize(
    "field,value,skipped",
    [
        ("torch", "9.9.9", "skipped: versions differ"),
        ("transformers", "9.9.9", "skipped: versions differ"),
        ("device_name", "A10", "skipped: devices differ"),
    ],
)
def test_version_or_device_mismatch_warns_and_skips_count_gate(folders, tmp_path, cli, field, value, skipped):
    current = edited(folders["extra"], tmp_path, "other.json", lambda d: d["env"].__setitem__(field, value))
    proc = cli("compare", folders["base"], current, "--counts-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"probe: WARNING: {field.removesuffix('_name')} differs" in proc.stderr
    assert skipped in proc.stdout
    result = cmp(folders["base"], current, counts_only=True)
    assert result.versions_differ and not result.alerts
    assert changes(result)["cached p8 n6"]["aten::clone"][0] == 0  # the grown op is still reported
    assert all(r.verdict == skipped for r in result.rows)


def test_unusable_input_is_one_line_exit_2(folders, tmp_path, cli):
    base = str(folders["base"])
    (tmp_path / "corrupt.json").write_text('{"cells": [')
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "nofile").mkdir()
    for bad, why in [
        (tmp_path / "missing", "no such file"),
        (tmp_path / "corrupt.json", "cannot read"),
        (tmp_path / "empty.json", "empty file"),
        (tmp_path / "other.json", "not a probe results file"),
        (tmp_path / "nofile", "without a results.json"),
    ]:
        line = one_line_error(cli("compare", base, str(bad)))
        assert why in line, line


def test_mismatched_configs_exit_2(folders, tmp_path, cli):
    base = str(folders["base"])
    model = edited(folders["base"], tmp_path, "model.json", lambda d: d["config"].__setitem__("model", "other"))
    assert "mismatched configs: model" in one_line_error(cli("compare", base, model))
    dtype = edited(folders["base"], tmp_path, "dtype.json", lambda d: d["env"].__setitem__("dtype", "float16"))
    assert "mismatched configs: dtype" in one_line_error(cli("compare", base, dtype))
    longer = edited(folders["base"], tmp_path, "prompt.json", lambda d: d["cells"][0].__setitem__("prompt_tokens", 9))
    assert "no cell in common" in one_line_error(cli("compare", base, longer))
    with pytest.raises(ProbeError, match="--threshold must be above 1"):
        cmp(folders["base"], folders["base"], threshold=0.9)
    assert "--threshold must be above 1" in one_line_error(cli("compare", base, base, "--threshold", "0.9"))


def test_json_and_markdown_are_well_formed(folders, tmp_path, cli):
    md = tmp_path / "comment.md"
    proc = cli("compare", str(folders["base"]), str(folders["extra"]), "--json", "--markdown", str(md))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    clone = {"key": "cached p8 n6", "metric": "decode_launches", "name": "aten::clone", "baseline": 0, "current": 4}
    assert data["regression"] is True and clone | {"change": "new", "steps": []} in data["changes"]
    assert {
        "key",
        "metric",
        "baseline",
        "current",
        "ratio",
        "ci_low",
        "ci_high",
        "p_value",
        "n_baseline",
        "n_current",
        "verdict",
    } <= set(data["rows"][0])
    assert any("aten::clone" in a["message"] for a in data["alerts"])
    text = md.read_text()
    assert text.startswith("### probe compare: REGRESSION")
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(data["rows"])
    assert len({line.replace("\\|", "").count("|") for line in table}) == 1  # same column count on every line
    assert "aten::clone 0 \\-\\> 4 \\(new\\)" in text  # the alert, its Markdown escaped
    assert "new: aten::clone, 0 \\-\\> 4 a step" in text


def test_other_machine_warns_about_timings_only_when_they_are_compared(folders, tmp_path):
    current = edited(folders["base"], tmp_path, "cpu.json", lambda d: d["env"].__setitem__("cpu_model", "other"))
    assert any(w.startswith("cpu_model differs") for w in cmp(folders["base"], current).warnings)
    quiet = cmp(folders["base"], current, counts_only=True)
    assert not quiet.warnings and not quiet.versions_differ


def test_markdown_carries_the_version_warning(folders, tmp_path):
    current = edited(folders["base"], tmp_path, "v.json", lambda d: d["env"].__setitem__("torch", "0.0.1"))
    text = comparison_markdown(cmp(folders["base"], current))
    assert "> **WARNING: torch differs: " in text and text.startswith("### probe compare: no regression")


# ---------------------------------------------------------------------------------------------------------
# traces, baseline file, the CI gate


def test_traces_compare_by_step_kind(tmp_path, tiny, cli):
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_torch

    made = {}
    for name, engine in (("a", "cached"), ("b", EXTRA)):
        made[name] = profile_torch(
            ProfileConfig(engine=engine, prompt=8, new_tokens=5, device="cpu"), tmp_path / name
        ).trace
    result = cmp(made["a"], made["b"])
    layers = tiny.config.num_hidden_layers
    assert changes(result, "launches")["decode"] == {"aten::clone": (0.0, float(layers))}
    assert {a.key for a in result.alerts if a.metric == "launches"} == {"prefill", "decode"}
    decode = {r.metric: r for r in result.rows if r.key == "decode"}
    assert decode["host_us_per_step"].n_baseline == 4 and "cache_us_per_step" in decode
    assert not result.warnings  # the sidecar .meta.json carries the environment
    no_env = cli("compare", str(made["a"]), str(ROOT / "tests/data/hand_decode.trace.json.gz"))
    assert no_env.returncode == 0 and "records no environment" in no_env.stderr  # hand trace: no sidecar
    assert "no such file" in one_line_error(cli("compare", str(made["a"]), str(tmp_path / "nowhere")))


def test_trace_against_results_is_exit_2(folders, cli):
    line = one_line_error(cli("compare", str(folders["base"]), str(ROOT / "tests/data/hand_decode.trace.json.gz")))
    assert "cannot compare a results input" in line


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_baseline_command_and_the_ci_gate(tmp_path):
    """What .ci/run does: rerun the baseline's configuration, gate on counts against the committed file."""
    committed = ROOT / "baselines/cpu-tiny.json"
    data = json.loads(committed.read_text())
    assert data["baseline"]["by"] == "probe baseline" and data["complete"] is True
    assert all(c["decode_ops_by_op"] and c["decode_ops"] == sum(c["decode_ops_by_op"].values()) for c in data["cells"])
    current = tmp_path / "current.json"
    made = run_probe("baseline", "--runs", "1", "--warmup", "0", "--out", str(current))
    assert made.returncode == 0, made.stderr
    assert load_samples(current).kind == "baseline"
    gate = run_probe("compare", str(committed), str(current), "--counts-only")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    cells = {dataclasses.astuple(c)[:4] for c in load_results(current).cells}
    assert cells == {dataclasses.astuple(c)[:4] for c in load_results(committed).cells}


def test_variants_do_what_their_names_say(tiny, monkeypatch):
    from engines.models import prompt_ids
    from probe.capture.count import count_forward_ops

    prompt = prompt_ids(8, 1, tiny.config.vocab_size)
    counts = count_forward_ops(ExtraOpCacheEngine(tiny), prompt)
    assert counts.decode_by_op["aten::clone"] == tiny.config.num_hidden_layers
    monkeypatch.setenv(SLOW_US_VAR, "3000")
    gen = generate(SlowCachedEngine(tiny), prompt, 4)
    assert min(gen.step_ns) >= 3_000_000  # a floor, not a timing claim: the wait alone lasts this long


# malformed but valid JSON, impossible values, incomplete runs, a dependency bump: unusable input, never a verdict


@pytest.mark.parametrize(
    ("what", "edit", "why"),
    [
        ("cells not objects", lambda d: d.__setitem__("cells", [1, 2]), "malformed cell 0: a cell is a JSON object"),
        ("env a list", lambda d: d.__setitem__("env", ["torch"]), "env is a list, not an object"),
        ("a string time", lambda d: d["cells"][0].__setitem__("ttft_ms", "fast"), "Expected `float`, got `str`"),
        ("a string sample", lambda d: d["cells"][0]["itl_runs_ms"][0].__setitem__(0, "x"), "$.itl_runs_ms[0][0]"),
        ("a NaN time", lambda d: d["cells"][0].__setitem__("itl_p50_ms", float("nan")), "impossible value"),
        ("a negative time", lambda d: d["cells"][0]["itl_runs_ms"][0].__setitem__(0, -1.0), "impossible value"),
        ("a negative count", lambda d: d["cells"][0].__setitem__("runs", -3), "impossible value in `runs`"),
    ],
)
def test_malformed_results_are_exit_2_not_a_verdict(folders, tmp_path, what, edit, why, cli):
    bad = edited(folders["base"], tmp_path, "bad.json", edit)
    for argv in ((str(folders["base"]), bad), (bad, str(folders["base"])), (bad, bad)):
        line = one_line_error(cli("compare", *argv, "--counts-only"))
        assert why in line, (what, line)


def test_a_malformed_sidecar_is_exit_2(tmp_path, cli):
    trace = tmp_path / "t.trace.json.gz"
    trace.write_bytes((DATA / "hand_decode.trace.json.gz").read_bytes())
    (tmp_path / "t.meta.json").write_text('{"config": ["engine"], "env": {}}')
    line = one_line_error(cli("compare", str(trace), str(trace)))
    assert "not a probe sidecar" in line


def test_an_incomplete_run_fails_the_count_gate(folders, tmp_path, cli):
    base = str(folders["base"])
    interrupted = edited(folders["base"], tmp_path, "cut.json", lambda d: d.__setitem__("complete", False))
    assert "incomplete: an interrupted sweep" in one_line_error(cli("compare", base, interrupted, "--counts-only"))

    def other_prompt(d):
        d["cells"].append(dict(d["cells"][0], prompt_tokens=16))

    two_cells = edited(folders["base"], tmp_path, "two.json", other_prompt)
    line = one_line_error(cli("compare", two_cells, base, "--counts-only"))
    assert "incomplete: 1 of the baseline's 2 cells missing (cached p16 n6)" in line
    shared = cli("compare", two_cells, base)  # a timing comparison of what both have: the same cell, so no verdict
    assert shared.returncode == 0 and "only in the baseline, not compared: cached p16 n6" in shared.stdout


def test_require_same_env_makes_a_dependency_bump_unusable_input(folders, tmp_path, cli):
    bumped = edited(folders["base"], tmp_path, "bumped.json", lambda d: d["env"].__setitem__("torch", "9.9.9"))
    line = one_line_error(cli("compare", str(folders["base"]), bumped, "--counts-only", "--require-same-env"))
    assert "--require-same-env: torch differs" in line
    assert cli("compare", str(folders["base"]), bumped, "--counts-only").returncode == 0  # the old behaviour


# ---------------------------------------------------------------------------------------------------------
# what changed, by name; other devices; contended samples (issue 22 section 4)


def test_htas_trace_diff_data_names_what_was_added_and_removed(cli):
    """HTA's tests/test_trace_diff.py on these two traces (rank 1, iteration 1010): CPU ops added AddmmBackward0,
    All2All_Pooled_Req, CatBackward0 and deleted nccl:all_reduce; GPU one kernel deleted ({"-": 1}). By the raw
    events: iteration 1010 (ProfilerStep#1010, ts 365430 + 122149 us) gains All2All_Pooled_Req on its own thread
    (tid 2568503); the other three ops are on thread 2575472, which probe's step (its own thread) does not hold; and
    the kernel at ts 539619, launched at 487511 inside ProfilerStep#1010, is gone. ProfilerStep#1009 is the same."""
    kernel = "at::native::vectorized_elementwise_kernel"
    base = shared_trace("peer/hta_trace_compare_base.trace.json.gz")
    test = shared_trace("peer/hta_trace_compare_test.trace.json.gz")
    proc = cli("compare", base, test)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a removal is no regression
    assert f"removed: {kernel}, 1 -> 0 a step (ProfilerStep#1010)" in proc.stdout
    assert "new: All2All_Pooled_Req, 0 -> 1 a step (ProfilerStep#1010)" in proc.stdout
    result = cmp(base, test)
    got = {(c.metric, c.name, c.change, c.steps) for c in result.changes}
    assert got == {
        ("launches", "All2All_Pooled_Req", "new", ("ProfilerStep#1010",)),
        ("kernels", kernel, "removed", ("ProfilerStep#1010",)),
    }
    back = cli("compare", test, base)  # the other way round the kernel is new: kernels 0.5 -> 1 a step
    assert back.returncode == 1, back.stdout + back.stderr
    assert f"new: {kernel}, 0 -> 1 a step (ProfilerStep#1010)" in back.stdout
    assert "removed: All2All_Pooled_Req, 1 -> 0 a step (ProfilerStep#1010)" in back.stdout


def test_two_devices_are_compared_by_category_and_not_gated(cli):
    """One HF model's prefill on an H100 and on an MI300X, neither with a sidecar: the device comes from each
    trace's deviceProperties, so they differ, nothing is gated, and kernels are diffed by category."""
    h100 = shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")
    mi300x = shared_trace("public/mi300x_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")
    proc = cli("compare", h100, mi300x)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REGRESSION" not in proc.stdout and "records no environment" not in proc.stderr
    assert "device differs: cuda (NVIDIA H100 80GB HBM3) (baseline) vs cuda (AMD Instinct MI300X VF)" in proc.stderr
    result = cmp(h100, mi300x)
    assert result.devices_differ and not result.alerts
    assert result.rows and all(r.verdict == "skipped: devices differ" for r in result.rows)
    kernels = next(r for r in result.rows if r.metric == "kernels")
    by_category = [c for c in result.changes if c.metric == "kernel categories"]
    categories = {category for category, _ in kernels_module.KERNEL_RULES} | {kernels_module.OTHER}
    assert by_category and {c.name for c in by_category} <= categories
    # every kernel is in one category, so the categories' moves add up to the kernels' move a step
    assert sum(c.current - c.baseline for c in by_category) == kernels.current - kernels.baseline
    assert not [c for c in result.changes if c.metric == "kernels"]  # no vendor's kernel names held to the other's


def contended_pair(contended: tuple[bool | None, bool | None], scale: float) -> tuple[SampleSet, SampleSet]:
    env = Environment(torch="x", transformers="y", device="cpu", device_name="cpu")
    units = [
        Unit("k", {"decode_launches": 10.0}, {}, {"host_us_per_step": tuple(series(40, s))}, flag)
        for flag, s in zip(contended, (1.0, scale), strict=True)
    ]
    return tuple(
        SampleSet(name, "results", env, ConfigIdentity(), {"k": u}) for name, u in zip("ab", units, strict=True)
    )


@pytest.mark.parametrize("scale", [1.3, 0.7])
@pytest.mark.parametrize("contended", [(True, False), (False, True), (True, True)])
def test_a_contended_sample_is_never_a_verdict(contended, scale):
    """series(40) against 1.3x (or 0.7x) of it is a regression (an improvement) when judged
    (test_timing_rule_needs_both_ratio_and_significance); with either side contended it is neither."""
    result = compare(*contended_pair(contended, scale))
    host = next(r for r in result.rows if r.metric == "host_us_per_step")
    assert host.verdict == "contended: not judged" and host.ratio == pytest.approx(scale) and host.p_value is None
    assert not result.alerts and any(n.startswith("contended: not judged") for n in result.notes)
    judged = compare(*contended_pair((False, None), scale))
    assert next(r for r in judged.rows if r.kind == "timing").verdict == ("regression" if scale > 1 else "improvement")


def test_contended_cells_of_a_results_file_are_not_judged(folders, tmp_path, cli):
    """A results file whose cell ran contended (Cell.contended, the telemetry rule) and is 3x slower: no verdict."""

    def slow_and_contended(d):
        cell = d["cells"][0]
        cell["contended"] = True
        cell["itl_runs_ms"] = [[x * 3 for x in run] for run in cell["itl_runs_ms"]]

    slow = edited(folders["base"], tmp_path, "contended.json", slow_and_contended)
    proc = cli("compare", folders["base"], slow)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "contended: not judged" in proc.stdout
    rows = cmp(folders["base"], slow).rows
    assert next(r for r in rows if r.metric == "host_us_per_step").verdict == "contended: not judged"


def test_a_count_alert_beside_a_speed_up_is_reconciled():
    env = Environment(torch="x", transformers="y", device="cpu", device_name="cpu")
    sides = [
        Unit("k", {"decode_launches": n}, {}, {"host_us_per_step": tuple(series(40, s))})
        for n, s in ((10.0, 1.0), (12.0, 0.5))
    ]
    base, cur = (
        SampleSet(name, "results", env, ConfigIdentity(), {"k": u}) for name, u in zip("ab", sides, strict=True)
    )
    result = compare(base, cur)
    assert result.regressed and [a.metric for a in result.alerts] == ["decode_launches"]
    line = next(n for n in result.notes if n.startswith("k: "))
    assert "launches/decode step 10 -> 12 (regression) beside host µs/step x0.500 (improvement)" in line


def test_a_contended_profile_warns_and_its_trace_is_not_judged(tmp_path, tiny, monkeypatch, capsys, cli):
    """probe profile holds its own run to the contention rule (probe.analysis.records.telemetry.contention, tested on a
    real
    busy loop in tests/test_telemetry.py); here the rule's answer is forced, to test what follows from it: a warning,
    the sidecar's record, and compare's "contended: not judged"."""
    from probe.analysis.records.telemetry import Contention
    from probe.capture import profile as capture
    from probe.capture.config import ProfileConfig

    monkeypatch.setattr(capture, "contention", lambda summary, windows, cores: Contention(1.5, True))
    made = capture.profile_torch(ProfileConfig(engine="cached", prompt=8, new_tokens=6, device="cpu"), tmp_path)
    assert "probe: WARNING: other processes took 1.50 cores while this trace ran (contended)" in capsys.readouterr().err
    meta = json.loads(made.meta.read_text())
    assert meta["contention"] == {"other_cpu_cores": 1.5, "contended": True}
    proc = cli("compare", made.trace, made.trace)
    assert proc.returncode == 0 and "contended: not judged" in proc.stdout
    rows = cmp(made.trace, made.trace).rows
    assert {r.verdict for r in rows if r.kind == "timing"} == {"contended: not judged"}


# ---------------------------------------------------------------------------------------------------------
# what can be compared: one rule (probe.analysis.regression.comparable), shared with the explorer (issue 35, item 4)

ENGINES = ROOT.parent / "shared" / "traces" / "engines"
SGLANG_DECODE = ENGINES / "sglang_qwen3_decode_x3_tiled.json.gz"
VLLM_DECODE = ROOT.parent / "shared" / "traces" / "public" / "rocm_vllm_decode_cudagraph.trace.json.gz"


def work_pair(base_work: str | None, cur_work: str | None) -> tuple[SampleSet, SampleSet]:
    """Two traces' decode steps, the current one launching 2 more ops a step, each side's work as given."""
    env = Environment(torch="x", transformers="y", device="cuda", device_name="H100")
    units = [
        Unit("decode", {"launches": n}, {"launches": {"aten::mm": n}}, {}, False, (), work)
        for n, work in ((10.0, base_work), (12.0, cur_work))
    ]
    return tuple(
        SampleSet(name, "trace", env, ConfigIdentity(), {"decode": u}) for name, u in zip("ab", units, strict=True)
    )


def test_the_same_work_is_judged_and_different_work_is_said_not_judged():
    same = compare(*work_pair("32 sequences, 32 new tokens", "32 sequences, 32 new tokens"))
    assert same.alerts and not same.work_differs  # 10 -> 12 launches on the same work: a regression
    unsaid = compare(*work_pair(None, "32 sequences"))  # a side whose markers do not say: judged as before
    assert unsaid.alerts and not unsaid.work_differs
    other = compare(*work_pair("32 sequences, 32 new tokens", "8 sequences, 8 new tokens"))
    assert not other.alerts and other.work_differs
    assert all(r.verdict == "skipped: work differs" for r in other.rows)
    said = "decode: 32 sequences, 32 new tokens (baseline) vs 8 sequences, 8 new tokens (current)"
    assert other.comparable.warning.endswith(said) and other.comparable.warning in other.warnings


@pytest.mark.skipif(not (SGLANG_DECODE.exists() and VLLM_DECODE.exists()), reason="the engine traces are not here")
def test_two_engines_serving_two_models_are_not_judged_either_way_round(cli):
    """SGLang's Qwen3 decode (12 launches a step) and vLLM's (5), both 32 sequences of one new token, over 32,753
    and 55,054 cached tokens: before, REGRESSION one way round and "no regression" the other."""
    for base, cur in ((VLLM_DECODE, SGLANG_DECODE), (SGLANG_DECODE, VLLM_DECODE)):
        proc = cli("compare", base, cur)
        assert proc.returncode == 0 and "REGRESSION" not in proc.stdout, proc.stdout
        assert "not gated: the two sides' steps did different work" in proc.stdout
        assert "32,753 cached" in proc.stderr and "55,054 cached" in proc.stderr


@pytest.mark.skipif(not VLLM_DECODE.exists(), reason="the public traces are not here")
def test_no_step_kind_in_common_is_refused_in_one_line(cli):
    prefill = shared_trace("public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz")
    line = one_line_error(cli("compare", prefill, VLLM_DECODE))
    assert "no step kind in common (baseline: prefill; current: decode)" in line
