"""The benchmark runner and its CLI: fields, files, parity, bad input, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pandas as pd
import pytest

from probe.analysis.results import load_results
from probe.capture.bench import bench
from probe.capture.config import BenchConfig
from probe.errors import ProbeError
from tests.conftest import ROOT, run_probe

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
    for key in ("torch", "transformers", "device_name", "cpu_model", "dtype", "git_commit"):
        assert key in data["env"]
    table = pd.read_parquet(tmp_path / "cells.parquet")
    assert list(table["engine"]) == ["naive", "cached", "naive", "cached"]
    assert load_results(tmp_path).cells == results.cells


def test_decode_rate_excludes_prefill(tmp_path):
    cell = bench(BenchConfig(**SMALL | dict(engines=("cached",), prompts=(8,))), None).cells[0]
    per_run = [4 / (sum(r) / 1e3) for r in cell.itl_runs_ms]  # 4 decode steps after the first token
    assert cell.decode_tok_s == pytest.approx(statistics.median(per_run))
    for total, ttft, steps in zip(cell.total_runs_ms, cell.ttft_runs_ms, cell.itl_runs_ms, strict=True):
        assert total >= ttft + sum(steps)  # a run's wall time holds its prefill and every step
    assert cell.tokens_match_naive is not None  # naive reference computed even when naive is not benched


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
    assert "tokens differ from naive for wrong@p8" in bad.stderr
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


def test_ctrl_c_keeps_finished_cells(tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "probe",
            "bench",
            "--prompts",
            "8,16,32,64,128,256",
            "--new-tokens",
            "16",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    results = out / "results.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(json.loads(results.read_text())["cells"]) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    data = json.loads(results.read_text())
    assert data["complete"] is False and len(data["cells"]) >= 2
    assert "finished cell(s) kept" in err and "Traceback" not in err


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
