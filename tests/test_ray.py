"""Sweeps and trace analysis on a real Ray instance: started once for the module with this machine's 2 CPUs and no
dashboard; the CLI's processes join it with --address, as they would join a cluster."""

from __future__ import annotations

import json
import signal

import pytest
import ray

from probe.analysis.results import load_results
from probe.capture.config import BenchConfig
from probe.capture.raysweep import bench_on_ray
from probe.capture.sweep import bench
from tests.conftest import interrupt_sweep, run_probe
from tests.ranks import make_rank_traces
from tests.variants import RAISE_AT_PROMPT

SMALL = dict(prompts=(8, 24), new_tokens=5, runs=1, warmup=0, device="cpu")


@pytest.fixture(scope="module")
def cluster():
    # "local": a new instance of the test's own, never a cluster a `ray start` left on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def test_a_ray_sweep_gives_the_cells_a_local_run_gives(cluster, tmp_path):
    cfg = BenchConfig(**SMALL, engines=("naive", "cached", "batched"), batch=(1, 2))
    here = bench(cfg, tmp_path / "local")
    there = bench_on_ray(cfg, tmp_path / "ray", None)
    assert [c.key for c in there.cells] == [c.key for c in here.cells]
    assert len(here.cells) == 12  # 3 engines, 2 prompts, 2 batches
    for a, b in zip(here.cells, there.cells, strict=True):
        assert (b.tokens, b.decode_ops, b.prefill_ops) == (a.tokens, a.decode_ops, a.prefill_ops)
        assert b.decode_ops_by_op == a.decode_ops_by_op and b.parity == a.parity and b.tokens_match_naive
        assert (b.host, b.device) == (a.host, "cpu")
    folder = tmp_path / "ray"
    for name in ("results.json", "cells.parquet", "cells.csv", "telemetry.parquet"):
        assert (folder / name).is_file()
    assert load_results(folder).env.executor == "ray" and load_results(folder).complete
    same = run_probe("compare", str(tmp_path / "local"), str(folder), "--counts-only")
    assert same.returncode == 0, same.stdout + same.stderr


def test_on_ray_a_cell_that_raises_or_kills_its_worker_is_recorded_and_the_rest_finish(cluster, tmp_path):
    out = tmp_path / "o"
    engines = "naive,tests.variants:RaisingEngine,tests.variants:DyingEngine"
    result = run_probe(
        "bench",
        "--executor",
        "ray",
        "--address",
        cluster,
        "--engines",
        engines,
        "--prompts",
        f"8,{RAISE_AT_PROMPT},24",
        "--new-tokens",
        "4",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--device",
        "cpu",
        "--no-history",
        "--out",
        str(out),
    )
    assert result.returncode == 1, result.stderr
    results = load_results(out)
    failed = {f.engine: f for f in results.failed}
    assert set(failed) == {"raising", "dying"} and {f.prompt_tokens for f in failed.values()} == {RAISE_AT_PROMPT}
    assert failed["raising"].error.startswith("RuntimeError: out of memory")
    assert failed["dying"].error.startswith("the worker died under this cell")
    # Every other cell finished, the dying engine's p24 on the worker Ray restarted after it died.
    assert len(results.cells) == 7 and all(c.tokens_match_naive for c in results.cells)
    assert ("dying", 24) in {(c.engine, c.prompt_tokens) for c in results.cells}
    assert "9/9 0 running, 2 failed" in result.stderr  # the progress bar's last state
    assert "2 of 9 cells failed: raising p16 on " in result.stderr


def test_on_ray_resume_after_an_interrupt_runs_only_the_missing_cells(cluster, tmp_path):
    out = tmp_path / "sweep"
    args = ["bench", "--executor", "ray", "--address", cluster, "--prompts", "8,16,32,64,128,256"]
    args += ["--new-tokens", "16", "--runs", "2", "--warmup", "0", "--device", "cpu", "--no-history", "--out", str(out)]
    results = out / "results.json"
    stopped = interrupt_sweep(args, out, signal.SIGINT)
    err = stopped.stderr
    assert stopped.returncode == 130, err
    kept = load_results(out)
    assert 2 <= len(kept.cells) < 12 and not kept.complete
    assert f"interrupted: {len(kept.cells)} of 12 cells kept in {results}; rerun with --resume to finish" in err

    done = run_probe(*args, "--resume")
    assert done.returncode == 0, done.stderr
    final = load_results(out)
    assert final.complete and len(final.cells) == 12 and all(c.tokens_match_naive for c in final.cells)
    by_key = {c.key: c for c in final.cells}
    for c in kept.cells:  # kept, not run again
        assert by_key[c.key].ttft_runs_ms == c.ttft_runs_ms and by_key[c.key].itl_runs_ms == c.itl_runs_ms


def test_analyze_on_ray_names_the_same_straggler_as_the_local_pool(cluster, tmp_path):
    make_rank_traces(tmp_path / "job", ranks=4, slow_rank=1, stretch=1.5)
    local = run_probe("analyze", str(tmp_path / "job"), "--json")
    remote = run_probe("analyze", str(tmp_path / "job"), "--json", "--executor", "ray", "--address", cluster)
    assert local.returncode == remote.returncode == 0, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert b["by_step"] == a["by_step"] and b["straggler"] == a["straggler"]
    assert b["straggler"]["rank"] == 1 and b["straggler"]["slowest_steps"] == 5
    assert b["straggler"]["median_trail_pct"] == pytest.approx(50.0, abs=1e-4)


def test_probe_run_sends_its_sweeps_to_ray(cluster, tmp_path):
    out = tmp_path / "run"
    result = run_probe(
        "run", "--executor", "ray", "--address", cluster, "--prompts", "8", "--new-tokens", "4", "--runs", "1",
        "--warmup", "0", "--device", "cpu", "--no-history", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    main, batched = load_results(out), load_results(out / "next-batched")
    assert main.env.executor == batched.env.executor == "ray"
    assert [(c.engine, c.batch) for c in main.cells + batched.cells] == [
        ("naive", 1), ("cached", 1), ("batched", 1), ("batched", 2), ("batched", 4), ("batched", 8),
    ]  # fmt: skip
    assert all(c.tokens_match_naive and c.host and c.device == "cpu" for c in main.cells + batched.cells)
    assert (out / "report.json").is_file() and "report folder:" in result.stdout
