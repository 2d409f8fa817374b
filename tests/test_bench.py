"""The benchmark runner and its CLI: fields, files, parity, bad input, Ctrl-C."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pandas as pd
import pytest
import torch

from probe.analysis.records.environment import Environment
from probe.analysis.records.results import Cell, Parity, load_results
from probe.analysis.records.telemetry import Contention
from probe.capture import cell as capture_cell
from probe.capture.cell import PeakMemory, sync_cost_ms
from probe.capture.config import settle
from probe.capture.parity import NEAR_TIE_ULPS, Checked, judge
from probe.capture.sweep import bench, mismatches
from probe.errors import ProbeError
from probe.settings import BenchConfig, ProfileConfig
from tests.conftest import run_probe

SMALL = dict(prompts=(8, 24), new_tokens=5, runs=2, warmup=1, device="cpu")
REQUIRED = (
    "engine",
    "prompt_tokens",
    "new_tokens",
    "ttft_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "decode_tok_s",
    "total_ms",
    "peak_mem_bytes",
    "tokens_match_naive",
)


def test_bench_writes_cells_raw_latencies_and_env(tmp_path):
    results = bench(BenchConfig(**SMALL), tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["complete"] is True and len(data["cells"]) == 4
    for cell in data["cells"]:
        assert all(k in cell for k in REQUIRED)
        assert cell["tokens_match_naive"] is True and cell["deterministic"] is True
        assert len(cell["itl_runs_ms"]) == 2 and all(len(r) == 4 for r in cell["itl_runs_ms"])
        assert cell["ttft_ms"] > 0 and cell["peak_mem_bytes"] > 0
        steps = [x for r in cell["itl_runs_ms"] for x in r]
        assert min(steps) <= cell["itl_p50_ms"] <= cell["itl_p90_ms"] <= max(steps)
    for key in ("torch", "transformers", "device_name", "cpu_model", "dtype", "commit", "dirty"):
        assert key in data["env"]
    table = pd.read_parquet(tmp_path / "cells.parquet")
    assert list(table["engine"]) == ["naive", "cached", "naive", "cached"]
    csv = pd.read_csv(tmp_path / "cells.csv")  # the same rows and columns, for a spreadsheet
    assert list(csv.columns) == list(table.columns) and list(csv["engine"]) == list(table["engine"])
    assert csv["itl_p99_ms"].tolist() == pytest.approx(table["itl_p99_ms"].tolist())
    assert load_results(tmp_path).cells == results.cells
    assert {c.parity_mode for c in results.cells} == {"exact"}  # float32


def test_decode_rate_excludes_prefill(tmp_path):
    cell = bench(BenchConfig(**SMALL | dict(engines=("cached",), prompts=(8,))), None).cells[0]
    per_run = [4 / (sum(r) / 1e3) for r in cell.itl_runs_ms]  # 4 decode steps after the first token
    assert cell.decode_tok_s == pytest.approx(statistics.median(per_run))
    for total, ttft, steps in zip(cell.total_runs_ms, cell.ttft_runs_ms, cell.itl_runs_ms, strict=True):
        assert total >= ttft + sum(steps)  # a run's wall time holds its prefill and every step
    assert cell.tokens_match_naive is not None  # naive reference computed even when naive is not benched


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_cli_json_and_mismatch_exit_code(tmp_path):
    args = [
        "bench",
        "--engines",
        "naive,cached,tests.variants:WrongTokensEngine",
        "--prompts",
        "8",
        "--new-tokens",
        "4",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--device",
        "cpu",
    ]
    bad = run_probe(*args, "--json")
    assert bad.returncode == 1, bad.stderr
    cells = json.loads(bad.stdout)["cells"]
    assert [c["tokens_match_naive"] for c in cells] == [True, True, False]
    assert "tokens differ from naive for wrong p8" in bad.stderr
    ok = run_probe(*args, "--allow-mismatch", "--out", str(tmp_path / "o"))
    assert ok.returncode == 0, ok.stderr
    assert "MISMATCH" in ok.stdout and (tmp_path / "o" / "results.json").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engines", "naive,turbo"], "unknown engine 'turbo'"),
        (["--model", "gpt-17"], "unknown model 'gpt-17'"),
        (["--prompts", "16,abc"], "malformed integer list"),
        (["--prompts", "16,,32"], "malformed integer list"),
        (["--prompts", "9000"], "exceeds the model's maximum of 8192"),
        (["--model", "/no/such/model"], "does not exist"),
        (["--out", "/proc/probe-out"], "cannot write to output folder"),
        (["--new-tokens", "1"], "at least 2"),
        (["--dtype", "float8"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_without_traceback(args, message):
    result = run_probe("bench", "--device", "cpu", *args, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_config_validation():
    with pytest.raises(ProbeError):
        BenchConfig(runs=0)


def test_bench_records_telemetry_per_cell_and_raw_samples(tmp_path):
    bench(BenchConfig(**SMALL | dict(engines=("cached",), prompts=(8,))), tmp_path)
    cell = json.loads((tmp_path / "results.json").read_text())["cells"][0]
    t = cell["telemetry"]
    assert t["rss_bytes_peak"] >= t["rss_bytes_mean"] > 0 and t["threads_peak"] >= 1
    assert t["power_w_mean"] is None and t["energy_per_token_j"] is None  # no NVML on a CPU: None, never 0
    assert len(cell["decode_windows_ns"]) == 2  # one decode phase per recorded run
    rows = pd.read_parquet(tmp_path / "telemetry.parquet")
    start, end = cell["decode_windows_ns"][0]
    assert rows["t_ns"].min() <= start and rows["t_ns"].max() >= end and set(rows["cell"]) == {0}


def test_telemetry_can_be_switched_off(tmp_path):
    results = bench(BenchConfig(**SMALL | dict(engines=("cached",), prompts=(8,), telemetry_ms=0)), tmp_path)
    assert (
        results.cells[0].telemetry is None
        and results.cells[0].decode_windows_ns == []
        and not (tmp_path / "telemetry.parquet").exists()
    )


def test_serving_figures_follow_vllms_definitions():
    """Two runs of 4 tokens, figures worked out by hand (numpy's linear percentiles, population std, as vLLM)."""
    cell = Cell.from_runs(
        engine="cached",
        prompt_tokens=8,
        batch=1,
        ttft_ms=[10.0, 20.0],
        itl_ms=[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
        total_ms=[16.5, 36.0],
        tokens=[[[1, 2, 3, 4]], [[1, 2, 3, 4]]],
        peak_mem_bytes=1,
        peak_mem_kind="cpu_rss",
    )
    assert cell.ttft_p50_ms == 15.0 and cell.ttft_p99_ms == pytest.approx(10 + 0.99 * 10)
    assert cell.itl_mean_ms == 3.5 and cell.itl_std_ms == pytest.approx((35 / 12) ** 0.5)
    assert cell.itl_p95_ms == pytest.approx(5.75) and cell.itl_p99_ms == pytest.approx(5.95)  # ranks 4.75, 4.95 of 0..5
    assert cell.tpot_ms == pytest.approx(((16.5 - 10) / 3 + (36 - 20) / 3) / 2)  # per run (E2E - TTFT) / (N - 1)
    assert cell.e2e_ms == pytest.approx(26.25)


def test_results_written_before_the_parity_and_serving_fields_still_load(tmp_path):
    results = bench(BenchConfig(**SMALL | dict(engines=("cached",), prompts=(8,), telemetry_ms=0)), tmp_path)
    doc = json.loads((tmp_path / "results.json").read_text())
    new = ("parity_mode", "first_divergence_step", "differing_steps", "worst_gap_ulps", "nonfinite_steps", "tpot_ms")
    for cell in doc["cells"]:
        for name in new + ("ttft_p50_ms", "itl_mean_ms", "e2e_ms"):
            del cell[name]
    doc["version"] = 2
    (tmp_path / "results.json").write_text(json.dumps(doc))
    old = load_results(tmp_path).cells[0]
    assert old.tokens_match_naive is True and old.parity_mode is None and old.parity is None and old.tpot_ms is None
    assert results.cells[0].parity == Parity("exact", True, None, 0, None, 0)


def test_judge_exact_and_teacher_forced():
    """Hand-made steps: naive chose 5 6 7 8."""
    ref, finite = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4, dtype=torch.bool)
    zero = torch.zeros(1, 4)
    assert judge("exact", Checked(ref.clone(), zero, finite), ref, finite) == Parity("exact", True, None, 0, None, 0)
    off = Checked(torch.tensor([[5, 6, 9, 9]]), zero, finite)
    assert judge("exact", off, ref, finite) == Parity("exact", False, 2, 2, None, 0)
    tie = Checked(torch.tensor([[5, 9, 7, 8]]), torch.tensor([[0.0, 3.0, 0.0, 0.0]]), finite)
    assert judge("teacher-forced", tie, ref, finite) == Parity("teacher-forced", True, 1, 1, 3.0, 0)
    far = Checked(tie.argmax, torch.tensor([[0.0, NEAR_TIE_ULPS + 1.0, 0.0, 0.0]]), finite)
    assert judge("teacher-forced", far, ref, finite).match is False
    nan = finite.clone()
    nan[0, 3] = False  # naive's own last step had a NaN: no cell can match it
    verdict = judge("teacher-forced", Checked(ref.clone(), zero, finite), ref, nan)
    assert (verdict.match, verdict.nonfinite_steps, verdict.first_divergence_step) == (False, 1, None)


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_parity_is_teacher_forced(dtype):
    """In half precision free-running tokens leave naive's at a near-tie; fed naive's tokens, every step's argmax
    is naive's token or within the near-tie margin, so the cell matches, and the first divergence is recorded."""
    cfg = BenchConfig(
        engines=("naive", "cached", "static-eager", "batched"),
        prompts=(16, 256),
        new_tokens=48,
        runs=1,
        warmup=0,
        dtype=dtype,
        device="cpu",
        telemetry_ms=0,
    )
    results = bench(cfg)
    assert not mismatches(results) and {c.parity_mode for c in results.cells} == {"teacher-forced"}
    naive = {c.prompt_tokens: c for c in results.cells if c.engine == "naive"}
    diverged = [c for c in results.cells if c.tokens != naive[c.prompt_tokens].tokens]
    for c in diverged:
        ref = naive[c.prompt_tokens].tokens[0]
        first = next(i for i, (a, b) in enumerate(zip(c.tokens[0], ref, strict=True)) if a != b)
        assert c.first_divergence_step == first and c.differing_steps >= 1
        assert c.worst_gap_ulps is not None and c.worst_gap_ulps <= NEAR_TIE_ULPS
    if dtype == "bfloat16":  # measured here: cached leaves naive's tokens at p256 step 11 and p16 step 35
        assert diverged, "no cell left naive's tokens: exact judging would have passed too"


def test_nan_logits_fail_parity_even_when_the_tokens_match():
    cfg = BenchConfig(engines=("naive", "tests.variants:NaNLogitsEngine"), **SMALL | dict(prompts=(8,)))
    results = bench(dataclasses.replace(cfg, telemetry_ms=0))
    naive, nan = results.cells
    assert nan.tokens == naive.tokens  # argmax took the NaN for the largest logit
    assert mismatches(results) == [nan] and nan.nonfinite_steps == 4  # every decode step; the prefill is finite


def test_naive_can_be_timed_at_fewer_prompts_and_still_be_the_reference():
    results = bench(BenchConfig(**SMALL | dict(naive_prompts=(8,), telemetry_ms=0)))
    assert [(c.engine, c.prompt_tokens) for c in results.cells] == [("naive", 8), ("cached", 8), ("cached", 24)]
    assert all(c.tokens_match_naive for c in results.cells)
    with pytest.raises(ProbeError, match="must be among --prompts"):
        BenchConfig(prompts=(8,), naive_prompts=(16,))


def test_sync_cost_alternates_pairs_and_takes_the_median():
    """Fake runs (no CUDA here): each returns a total in ns and says which kind it was."""
    calls, totals = [], {"synced": iter([1300, 1250, 9000]), "unsynced": iter([1000, 1100, 1000])}

    def run(kind):
        def go():
            calls.append(kind)
            return next(totals[kind])

        return go

    cost = sync_cost_ms(run("synced"), run("unsynced"), pairs=3, steps=10)
    assert calls == ["synced", "unsynced", "unsynced", "synced", "synced", "unsynced"]  # ABBA...
    assert cost == pytest.approx(30 / 1e6)  # per-step differences 30, 15, 800 ns: the median, 30 ns


def test_auto_model_and_dtype_follow_the_device():
    assert (settle(BenchConfig(), "cuda").model, settle(BenchConfig(), "cuda").dtype) == ("qwen2.5-1.5b", "float16")
    assert (settle(BenchConfig(), "cpu").model, settle(BenchConfig(), "cpu").dtype) == ("tiny", "float32")
    assert settle(ProfileConfig(), "cuda").model == "qwen2.5-1.5b"
    explicit = BenchConfig(model="tiny", dtype="bfloat16")
    assert settle(explicit, "cuda") == explicit


class Built(Exception):
    """Raised by the fake model loader: what the command would have built."""


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--prompts", "16", "--new-tokens", "4"],
        ["profile", "--prompt", "16"],
        ["overhead"],
        ["count", "--prompts", "16"],
    ],
)
def test_commands_default_to_the_write_ups_model_on_a_gpu(monkeypatch, tmp_path, argv):
    """A fake CUDA device (torch.device("cuda") from a fake resolve_device; no GPU here) and a fake loader that
    stops at the build: every command asks for the 1.5B preset in float16, as `probe run` does."""
    import engines.models
    import probe.capture.machine
    import probe.capture.profile
    import probe.capture.sweep
    from probe import cli

    def fake_load(spec, dtype, *args, **kwargs):
        raise Built(spec, dtype)

    for module in (engines.models, probe.capture.sweep, probe.capture.machine, probe.capture.profile):
        monkeypatch.setattr(module, "resolve_device", lambda device: torch.device("cuda"), raising=False)
        monkeypatch.setattr(module, "load_model", fake_load, raising=False)
    monkeypatch.setattr(probe.capture.sweep, "environment", lambda device, dtype: Environment(dtype=dtype))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Built) as built:
        cli.main(argv)
    assert built.value.args == ("qwen2.5-1.5b", "float16")


def test_every_cell_starts_after_the_previous_cells_leftovers_are_let_go(monkeypatch):
    """Issue 24: a later cell's peak memory must not hold the previous cell's leftovers. The runner lets go of them
    (PeakMemory.between_cells; tests/test_results.py shows what that frees) before every cell, not once a sweep."""
    calls = []
    release = PeakMemory.between_cells
    monkeypatch.setattr(PeakMemory, "between_cells", lambda self: calls.append(self.device.type) or release(self))
    results = bench(BenchConfig(**SMALL | dict(telemetry_ms=0)))
    assert calls == ["cpu"] * len(results.cells) == ["cpu"] * 4


def test_baseline_warns_of_contended_cells_as_bench_does(tmp_path, cli, monkeypatch):
    """Issue 36 §3: `probe baseline` ran with 1.8-1.9 other cores busy and printed no warning. The contention rule
    (tested on a real busy loop in tests/test_sweep_faults.py) forced to say "contended"."""
    monkeypatch.setattr(capture_cell, "contention", lambda summary, windows, cores: Contention(1.85, True))
    args = ["--engines", "cached", "--prompts", "8", "--new-tokens", "4", "--runs", "2", "--warmup", "0"]
    done = cli("baseline", *args, "--out", tmp_path / "b.json", "--no-history")
    assert done.returncode == 0, done.stderr
    assert "probe: warning: 1 of 1 cells ran while other processes used the CPU (cores beside this one: " in done.stderr
    assert "cached p8 (1.85)" in done.stderr
