"""probe.explorer, the app's data shaping and figures, without Streamlit: the root gate, the file listing, the
frames (checked against the ledger's hand-worked figures) and what each figure draws."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe import text
from probe.analysis.diagnosis.report import load_report
from probe.analysis.diagnosis.verdict import bound_words, diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import steady
from probe.analysis.records.results import CellKey, load_results
from probe.analysis.trace import load_trace
from probe.errors import ProbeError
from probe.explorer import figures, sources
from probe.explorer.step_clock import step_clock
from tests.conftest import DATA, shared_trace

ROOT_DIR = Path(__file__).resolve().parents[1]
APP = DATA / "app"
RUN_A, RUN_B = APP / "runs" / "tiny-cpu-a", APP / "runs" / "tiny-cpu-b"
CACHED = APP / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz"
NAIVE = APP / "traces" / "tiny_naive_cpu_p16_n6.trace.json.gz"
HAND = DATA / "hand_decode.trace.json.gz"
VLLM = "public/rocm_vllm_decode_cudagraph.trace.json.gz"  # ../shared/traces/ (shared_trace)
H100 = "public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"
ENGINES = ROOT_DIR.parent / "shared" / "traces" / "engines"
GPT_OSS = ENGINES / "vllm_gptoss_mixed_x4_tiled.json.gz"
PART_EXTERNAL = "external wait (no GPU op of the trace ran)"


@pytest.fixture(scope="module")
def cached():
    trace = load_trace(CACHED)
    return trace, analyze(trace)


@pytest.fixture(scope="module")
def hand():
    return analyze(load_trace(HAND))


@pytest.fixture(scope="module")
def gpu():
    """HTA's V100 training trace (five ProfilerSteps), in ../shared/traces."""
    return analyze(load_trace(shared_trace("public/cuda_train_ns_resolution_5steps.trace.json.gz")))


# ---- the root and the files under it ------------------------------------------------------------------------


def test_root_from_app_args_then_env_then_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sources.app_root(["/x/app.py", "--root", "sub"], {sources.ROOT_ENV: "/elsewhere"}) == tmp_path / "sub"
    assert sources.app_root(["/x/app.py"], {sources.ROOT_ENV: str(tmp_path / "env")}) == tmp_path / "env"
    assert sources.app_root(["/x/app.py"], {}) == tmp_path
    # Under AppTest sys.argv is pytest's: its options are not the app's.
    assert sources.app_root(["pytest", "--root", "nope", "-q"], {}) == tmp_path


def test_resolve_under_refuses_everything_outside_the_root(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.json.gz").write_text("x")
    (root / "a" / "t.json.gz").write_text("x")
    (root / "link.json.gz").symlink_to(outside / "secret.json.gz")
    (root / "inner.json.gz").symlink_to(root / "a" / "t.json.gz")
    assert sources.resolve_under(root, "a/t.json.gz") == (root / "a" / "t.json.gz").resolve()
    assert sources.resolve_under(root, "inner.json.gz") == (root / "a" / "t.json.gz").resolve()
    for rel in ("../outside/secret.json.gz", "link.json.gz", str(outside / "secret.json.gz"), "a/../../outside"):
        with pytest.raises(ProbeError, match="outside the app's root"):
            sources.resolve_under(root, rel)


def test_a_run_whose_report_links_out_of_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    shutil.copy(RUN_A / "results.json", root / "run")
    assert sources.source_path(root, sources.Source("run", "run")) == (root / "run").resolve()
    _touch(outside / "report.json")
    (root / "run" / "report.json").symlink_to(outside / "report.json")
    with pytest.raises(ProbeError, match="outside the app's root"):
        sources.source_path(root, sources.Source("run", "run"))


def _touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_list_sources_finds_runs_baselines_and_traces_and_nothing_else(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    _touch(root / "runs" / "r1" / "results.json")
    _touch(root / "runs" / "r1" / "next-static" / "results.json")  # probe run's nested sweeps are runs too
    _touch(root / "baselines" / "cpu-tiny.json")
    _touch(root / "traces" / "a.trace.json.gz")
    _touch(root / "traces" / "a.meta.json")  # a sidecar, not a trace
    _touch(root / "traces" / "b.trace.json")
    _touch(root / "x.nsys.sqlite.gz")
    _touch(root / "y.sqlite")
    _touch(root / "config.json")  # plain JSON outside baselines/: not listed
    _touch(root / "prof.json", '{"traceEvents": []}')  # export_chrome_trace("prof.json"): a trace by its content
    _touch(root / "job" / "rank0.trace.json.gz")  # traces that each name a rank: one job's
    _touch(root / "job" / "rank_1.trace.json.gz")
    _touch(root / ".venv" / "lib" / "z.json.gz")  # hidden folders are skipped
    _touch(root / "node_modules" / "q.json.gz")
    _touch(outside / "results.json")
    _touch(outside / "far.json.gz")
    (root / "linked_run").symlink_to(outside, target_is_directory=True)  # never entered
    (root / "escape.json.gz").symlink_to(outside / "far.json.gz")  # resolves outside: left out
    found, truncated = sources.list_sources(root)
    assert not truncated
    assert [s.label for s in found] == [
        "run: baselines/cpu-tiny.json",
        "run: runs/r1",
        "run: runs/r1/next-static",
        "trace: job/rank0.trace.json.gz",
        "trace: job/rank_1.trace.json.gz",
        "trace: prof.json",
        "trace: traces/a.trace.json.gz",
        "trace: traces/b.trace.json",
        "trace: x.nsys.sqlite.gz",
        "trace: y.sqlite",
        "job: job",  # its traces name distinct ranks (the Ranks view); `.` and `traces` hold unrelated traces
    ]
    assert not sources.could_be_ranks(["rank0.trace.json.gz", "rank0.json.gz"])  # one rank twice
    assert sources.source_of(root, root / "prof.json").kind == "trace"  # a history naming it
    assert sources.source_of(root, root / "baselines" / "cpu-tiny.json").kind == "run"
    _touch(root / "plain" / "rank0.json", '{"traceEvents": []}')
    _touch(root / "plain" / "rank1.json", '{"traceEvents": []}')
    _touch(root / "plain" / "config.json")
    assert [p.name for p in sources.job_traces(root, root / "plain")] == ["rank0.json", "rank1.json"]
    assert not sources.could_be_ranks(["rank3.trace.json.gz"])


def test_list_sources_is_bounded_in_depth_and_count(tmp_path):
    _touch(tmp_path / "a" / "b" / "c" / "deep.json.gz")
    assert [s.rel for s in sources.list_sources(tmp_path, max_depth=3)[0]] == ["a/b/c/deep.json.gz"]
    assert sources.list_sources(tmp_path, max_depth=2)[0] == []
    for i in range(5):
        _touch(tmp_path / f"t{i}.json.gz")
    found, truncated = sources.list_sources(tmp_path, limit=3)
    assert truncated and len(found) == 3


def test_the_root_itself_can_be_a_run_folder(tmp_path):
    shutil.copy(RUN_A / "results.json", tmp_path / "results.json")
    assert [s.label for s in sources.list_sources(tmp_path)[0]] == ["run: ."]
    assert sources.resolve_under(tmp_path, ".") == tmp_path.resolve()


def test_stamp_changes_when_a_file_is_rewritten(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN_A, run)
    before = sources.stamp(run)
    text = (run / "report.json").read_text()
    (run / "report.json").write_text(text + "\n")
    os.utime(run / "report.json", ns=(1, 1))
    assert sources.stamp(run) != before
    assert sources.stamp(tmp_path / "missing.json.gz") == ((b"missing.json.gz", None, None),)  # names as bytes


def test_load_report(tmp_path):
    assert load_report(tmp_path) is None
    report = load_report(RUN_A)
    assert report.machine.floor_ms > 0 and report.predictions and report.verdicts
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(ProbeError, match="cannot read"):
        load_report(tmp_path)
    (tmp_path / "report.json").write_text('{"machine": 1}')
    with pytest.raises(ProbeError, match="not a probe report"):
        load_report(tmp_path)


# ---- 1. sweep ------------------------------------------------------------------------------------------------


def _traces(fig, name: str | None = None) -> list:
    return [t for t in fig.data if name is None or t.name == name]


def test_sweep_frame_one_line_per_engine_and_flags_mismatches():
    results = load_results(RUN_A)
    frame = figures.sweep.sweep_frame(results)
    assert list(frame["line"]) == ["cached"] * 3 + ["naive"] * 3
    assert list(frame["prompt_tokens"]) == [16, 64, 256] * 2
    assert not frame["mismatch"].any()
    bad = dataclasses.replace(results.cells[1], tokens_match_naive=False)
    results.cells[1] = bad
    frame = figures.sweep.sweep_frame(results)
    assert frame[frame["mismatch"]][["line", "prompt_tokens"]].values.tolist() == [[bad.engine, bad.prompt_tokens]]


def test_batched_cells_get_their_own_line():
    results = load_results(RUN_A)
    results.cells.append(dataclasses.replace(results.cells[0], engine="batched", batch=4))
    assert "batched B=4" in set(figures.sweep.sweep_frame(results)["line"])


def test_prediction_frame_is_one_row_a_prompt_from_report_json():
    report = load_report(RUN_A)
    frame = figures.sweep.prediction_frame(report)
    assert list(frame["prompt_tokens"]) == [16, 64, 256]
    first = next(p for p in report.predictions if p.prompt_tokens == 64)
    row = frame[frame["prompt_tokens"] == 64].iloc[0]
    assert (row["floor_ms"], row["traffic_ms"], row["predicted_ms"]) == (
        first.floor_ms,
        first.traffic_ms,
        first.predicted_ms,
    )
    assert figures.sweep.prediction_frame(None).empty


def test_sweep_figure_lines_predictions_and_flags():
    results, report = load_results(RUN_A), load_report(RUN_A)
    fig = figures.sweep.sweep_figure(results, report)
    assert [len(_traces(fig, n)) for n in ("cached", "naive")] == [3, 3]  # tok/s, ITL, TTFT
    assert all(ax.type == "log" for ax in (fig.layout.xaxis, fig.layout.xaxis2, fig.layout.xaxis3))
    floor, roof = _traces(fig, "host floor")[0], _traces(fig, "bandwidth roofline")[0]
    assert floor.line.dash == "dash" and roof.line.dash == "dot" and floor.xaxis == "x2"  # on the ITL panel
    pred = figures.sweep.prediction_frame(report)
    assert np.allclose(np.asarray(floor.y), pred["floor_ms"]) and np.allclose(np.asarray(roof.y), pred["traffic_ms"])
    tok_s = _traces(fig, "prediction")[0]
    assert np.allclose(np.asarray(tok_s.y), 1e3 / pred["predicted_ms"]) and tok_s.xaxis == "x"
    assert all(len(t.x) == 0 for t in _traces(fig, "tokens differ from naive"))
    results.cells[0] = dataclasses.replace(results.cells[0], tokens_match_naive=False)
    flagged = _traces(figures.sweep.sweep_figure(results, None), "tokens differ from naive")
    assert [len(t.x) for t in flagged] == [1, 1, 1] and flagged[0].showlegend
    assert not _traces(figures.sweep.sweep_figure(results, None), "host floor")  # no report.json: no predictions


# ---- 2. step ledger ------------------------------------------------------------------------------------------


def test_ledger_frame_matches_the_hand_worked_ledger(hand):
    frame = figures.ledger.ledger_frame(hand).set_index("step")
    d0 = frame.loc["decode#0"]
    # tests/test_ledger.py works these out by hand: wall 90 us, cache 15, the rest of the model 48, busy 28.99,
    # idle 22.01 (the 51 us GPU window less the busy time).
    assert (d0["wall_ms"], d0["cache_ms"], d0["model_ms"]) == (0.09, 0.015, 0.048)
    assert (d0["gpu_busy_ms"], d0["gpu_idle_ms"]) == (0.02899, 0.02201)
    assert d0["dispatch"] == 2  # one kernel launch + one graph launch
    host = [f"{k}_ms" for k, _ in figures.style.HOST_CATEGORIES]
    assert np.allclose(frame[host].sum(axis=1), frame["wall_ms"], rtol=0, atol=1e-12)
    mechanism = [figures.ledger.mechanism_column(k) for k, _ in figures.style.MECHANISM_CATEGORIES]
    assert np.allclose(frame[mechanism].sum(axis=1), frame["wall_ms"], rtol=0, atol=1e-12)  # the other partition
    assert d0["by_mechanism_sync_wait_ms"] == 0.016  # decode#0's one blocking call, cudaStreamSynchronize 182-198


def test_ledger_frame_on_a_cpu_trace_counts_top_level_ops(cached):
    _, analysis = cached
    frame = figures.ledger.ledger_frame(analysis)
    assert list(frame["step"]) == ["prefill"] + [f"decode#{i}" for i in range(5)]
    assert list(frame["dispatch"]) == [s.top_level_ops for s in analysis.steps]
    assert (frame["cache_ms"] > 0).all()
    # a CPU-only trace measured nothing on a GPU: its GPU columns are missing (shown "-"), not 0
    assert frame[list(figures.ledger.GPU_COLUMNS)].isna().all().all()


def test_ledger_figure_on_a_gpu_trace_stacks_host_and_gpu_side_by_side(gpu):
    fig = figures.ledger.ledger_figure(gpu)
    names = [t.name for t in fig.data]
    n = len(figures.style.HOST_CATEGORIES)
    m = n + len(figures.style.MECHANISM_CATEGORIES)
    assert names[:n] == ["host: " + label for _, label in figures.style.HOST_CATEGORIES]
    assert names[n:m] == ["by mechanism: " + label for _, label in figures.style.MECHANISM_CATEGORIES]
    assert names[m : m + 2] == ["GPU busy", "GPU idle"] and names[m + 2].startswith("kernel launches per step")
    busy, idle = _traces(fig, "GPU busy")[0], _traces(fig, "GPU idle")[0]
    assert busy.offsetgroup == idle.offsetgroup == "gpu" and fig.data[0].offsetgroup == "host"
    assert {t.offsetgroup for t in fig.data[n:m]} == {"mechanism"}
    assert np.allclose(np.asarray(idle.base), np.asarray(busy.y))  # idle sits on busy
    ops, attention = fig.data[0], fig.data[1]
    assert np.allclose(np.asarray(attention.base), np.asarray(ops.y))
    assert list(fig.data[m + 2].y) == [s.launches + s.graph_launches for s in gpu.steps] == [870] * 5
    assert fig.data[m + 2].yaxis == "y2"


def test_ledger_figure_on_a_cpu_trace_says_top_level_ops(cached):
    _, analysis = cached
    fig = figures.ledger.ledger_figure(analysis)
    assert not _traces(fig, "GPU busy")
    line = fig.data[-1]
    assert "top-level ops" in line.name and "no launches" in line.name
    assert "top-level ops" in fig.layout.yaxis2.title.text


def test_the_dispatch_axis_is_ticked_at_round_counts(gpu, cached):
    # 870 launches a step: 15% headroom makes 1000.5, a fifth of that 200.1, whose nearest round step is 200; the
    # axis ends on the first multiple of it above 1000.5. (The old axis, 0..1.15 x top, ticked 47, 95, 142 ...)
    axis = figures.ledger.ledger_figure(gpu).layout.yaxis2
    assert (axis.tick0, axis.dtick, list(axis.range)) == (0, 200, [0, 1200])
    # the CPU trace's most top-level ops in a step, with the same headroom, on a step of 1, 2 or 5 x 10^k
    top = max(s.top_level_ops for s in cached[1].steps)
    axis = figures.ledger.ledger_figure(cached[1]).layout.yaxis2
    assert axis.dtick in (10, 20, 50, 100) and axis.range[1] % axis.dtick == 0 and axis.range[1] >= 1.15 * top


@pytest.mark.parametrize(
    ("low", "high", "integer", "expected"),
    [
        (0, 123, True, (0, 20, 140)),  # 123 x 1.1 = 135.3; /5 = 27.06, nearest round step 20; 135.3 -> 140
        (0, 2, True, (0, 1, 3)),  # 2.2 / 5 = 0.44: a count steps by at least 1
        (0, 0.9, False, (0, 0.2, 1.0)),  # 0.99 / 5 = 0.198 -> 0.2; 0.99 rounds up to 1.0
        (261, 267, True, (261, 1, 268)),  # 267 + 0.1 x 6 = 267.6; 6.6 / 5 = 1.32, nearer 1 than 2; 267.6 -> 268
    ],
)
def test_round_axis(low, high, integer, expected):
    axis = figures.style.round_axis(low, high, integer=integer)
    start, step, end = expected
    assert axis["tick0"] == pytest.approx(start) and axis["dtick"] == pytest.approx(step)
    assert axis["range"] == pytest.approx([start, end])


# ---- 3. one step ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_clock():
    trace = load_trace(HAND)
    return step_clock(trace, analyze(trace), 1)  # decode#0: tests/test_timeline.py works it out by hand


def test_timeline_figure_draws_every_bar_on_its_lane(hand_clock):
    tl = hand_clock
    fig = figures.step.timeline_figure(tl)
    bars = [t for t in fig.data if t.type == "bar" and not t.name.startswith("shading")]
    assert sum(len(t.x) for t in bars) == len(tl.bars) == 28
    assert list(fig.layout.yaxis.ticktext) == [lane.label for lane in tl.lanes]
    assert tuple(fig.layout.yaxis.range) == (9.5, -0.5)  # the first lane on top
    gemv = next(t for t in bars if t.name == "GPU: gemm")
    assert list(gemv.y) == [9] and list(gemv.base) == [0.015] and list(gemv.x) == [0.015]
    # a bar shorter than a column (112 ns) is drawn at its length, never more (plotly widens it to a pixel)
    wait = next(t for t in bars if t.name == "GPU idle: kernel wait")
    tiny = [i for i, c in enumerate(wait.customdata) if c[6] == 10]
    assert len(tiny) == 1 and wait.x[tiny[0]] == pytest.approx(10 / 1e6)
    # the host window lane, the Diagnosis's way: 72 + 2 us of host work and 16 us of external wait, 90 us in all
    window = {t.name: sum(t.x) for t in bars if list(t.y) == [7] * len(t.y)}
    assert window == pytest.approx({"host work (the window less its sync wait)": 0.074, PART_EXTERNAL: 0.016})
    # idle gaps shaded across the GPU lanes (8-9), the external wait across the host lanes (0-7), both host edges
    shading = [t for t in fig.data if t.name.startswith("shading")]  # one wide bar trace each, under the lanes'
    assert {(t.y[0] + t.width / 2, t.y[0] - t.width / 2) for t in shading} == {(9.5, 7.5), (7.5, -0.5)}
    assert all(t.hoverinfo == "skip" for t in shading)  # no hover, and a click on it selects nothing
    assert [s.x0 for s in fig.layout.shapes if s.type == "line"] == [0, 0.09]
    (mark,) = [t for t in fig.data if t.name == "sync call sites"]
    assert list(mark.x) == [0.072]
    assert not fig.layout.annotations  # no arrow until something is selected


def test_a_selection_draws_an_arrow_from_each_launch_to_its_op(hand_clock):
    tl = hand_clock
    graph = next(o for o in tl.ops if o.name == "graph_kernel_a").call_row
    fig = figures.step.timeline_figure(tl, [graph])
    arrows = sorted((a.ax, a.ay, a.x, a.y) for a in fig.layout.annotations)
    assert arrows == [(0.045, 6, 0.056, 9), (0.045, 6, 0.06001, 9)]  # cudaGraphLaunch at 45 us to both kernels


def test_a_click_names_the_bar_it_hit(hand_clock):
    fig = figures.step.timeline_figure(hand_clock)
    gemv = next(t for t in fig.data if t.name == "GPU: gemm")
    event = {"selection": {"points": [{"customdata": list(gemv.customdata[0])}]}}
    row = next(o.row for o in hand_clock.ops if o.name == "gemv_kernel")
    assert figures.step.clicked_bar(event) == (row, 15_000, 15_000, 1)
    mark = {"selection": {"points": [{"customdata": ["cudaStreamSynchronize", "waited"]}]}}
    assert figures.step.clicked_bar(mark) is None and figures.step.clicked_bar(None) is None


def test_timeline_frame_lists_the_drawn_bars_in_time_order(hand_clock):
    frame = figures.step.timeline_frame(hand_clock)
    assert len(frame) == 28 and frame["start_ms"].is_monotonic_increasing
    assert list(frame["name"][frame["kind"] == "kernel"]) == ["gemv_kernel", "graph_kernel_a", "graph_kernel_b"]
    assert "merged" not in figures.step.merged_text(hand_clock) and "28" in figures.step.merged_text(hand_clock)


def test_both_host_partitions_of_one_step_add_up_to_its_wall(hand, cached):
    for step in (hand.steps[1], cached[1].steps[2]):
        frame = figures.step.partitions_frame(step)
        sums = frame.groupby("partition")["ms"].sum()
        assert sums["by purpose"] == pytest.approx(step.wall_ns / 1e6) == sums["by mechanism"]
    fig = figures.step.partitions_figure(hand.steps[1])
    assert {t.y[0] for t in fig.data} == {"by purpose", "by mechanism"} and all(min(t.x) > 0 for t in fig.data)


# ---- the diagnosis ------------------------------------------------------------------------------------------


def _answer(path: Path, **kw):
    from probe.analysis.diagnosis.answer import answer

    trace = load_trace(path)
    return answer(trace, analyze(trace), **kw)


def test_the_diagnosis_figure_is_the_host_window_beside_the_gpu_work():
    """The SGLang extend step: the host window 522.741 ms, of which 493.255 ms external wait (0.037 ms more of sync
    wait ran beside this trace's GPU work), beside 492.807 ms of GPU work (docs/diagnosis.md)."""
    d = _answer(shared_trace("public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz")).diagnosis.median
    assert bound_words(d) == "external, then GPU-bound"
    frame = figures.diagnosis.step_frame(d)
    host = frame[frame["row"] == "host window"].set_index("piece")["ms"]
    assert host.sum() == pytest.approx(d.evidence.wall_ns / 1e6)
    assert host["external wait"] == pytest.approx(d.evidence.external_wait_ns / 1e6)
    assert frame.set_index("piece").loc["GPU busy", "ms"] == pytest.approx(492.806877)
    fig = figures.diagnosis.step_figure(d)
    assert {t.name for t in fig.data} >= {"external wait", "GPU busy", "op dispatch"}  # (the fixture has no frames)
    what = figures.diagnosis.what_if_frame(d)
    # the roof what-if first (it saves more, issue 32), then the overlap, priced on the step's own wait
    assert list(what["change"])[1:] == ["overlap the wait on unseen device work"]
    # max(host 29.449 + own wait 0.037 + carried 464.626, GPU 492.807) = 494.112 -> 492.807 (probe analyze's line)
    assert what["saving_ms"][1] == pytest.approx(494.112 - 492.807, abs=1e-3)


def test_a_cpu_step_says_where_its_host_time_went(cached):
    from probe.analysis.diagnosis.verdict import diagnose

    d = diagnose(cached[1].steps[2], on_gpu=False)
    assert bound_words(d).startswith("CPU only, mostly ")
    assert "GPU busy" not in set(figures.diagnosis.step_frame(d)["piece"])


def test_the_roofline_beside_the_step_and_the_op_roofline():
    """H100 Qwen1.5-0.5B, 16 x 559 tokens: the step's roofline (tests/test_step_roofline.py works it out), and each
    GEMM against the H100's bf16 roofs: 989.5 TFLOP/s, 3.35 TB/s, ridge 989.5e12 / 3.35e12 = 295.4 FLOP/B."""
    from probe.analysis.roofline.devices import device
    from probe.analysis.roofline.step import TokenFlags

    path = shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")
    result = _answer(path, model="qwen1.5-0.5b", flags=TokenFlags(8944, 16, 0))
    r = result.rooflines[0]
    table = figures.diagnosis.roofline_frame(r).set_index("figure")["value"]
    assert table["bytes to move"] == f"{r.bytes / 1e9:,.3f} GB" and table["predicted GPU"].endswith("(compute binds)")
    ops = figures.diagnosis.op_roofline_frame(result.op_roofline)
    mm = ops[(ops["op"] == "aten::mm") & (ops["shapes"] == "[(8944, 1024), (1024, 2816)]")].iloc[0]
    assert mm["gflop"] == pytest.approx(51.581550592) and mm["mb"] == pytest.approx(74.457088)  # MB, as probe analyze
    h100 = device("H100-SXM")
    fig = figures.diagnosis.op_roofline_figure(result.op_roofline, h100)
    points = sum(len(t.x) for t in fig.data if t.mode == "markers")
    assert points == sum(1 for o in result.op_roofline if o.intensity and o.tflops_s_median)
    (bf16,) = [t for t in fig.data if t.mode == "lines" and "bfloat16" in t.name]
    assert "ridge 295 FLOP/B" in bf16.name
    for x, y in zip(bf16.x, bf16.y, strict=True):
        assert y == pytest.approx(min(989.5, x * 3.35))  # TFLOP/s: the compute roof, else the bandwidth slope
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"


def test_a_run_shows_its_predictions_and_claims_as_probe_run_prints_them():
    report = load_report(RUN_A)
    frame = figures.diagnosis.predictions_frame(report)
    assert len(frame) == len(report.predictions)
    first = report.predictions[0]
    assert frame.iloc[0]["measured/pred"] == first.ratio and frame.iloc[0]["the gap points at"] == first.points_at
    fig = figures.diagnosis.predictions_figure(report)
    assert sum(len(t.y) for t in fig.data) == len(frame) and fig.layout.yaxis.type == "log"


def test_telemetry_samples_become_one_panel_a_figure(tmp_path):
    t0 = 5_000_000_000
    frame = pd.DataFrame(
        {
            "t_ns": [t0, t0 + 10_000_000, t0 + 20_000_000],
            "rss_bytes": [1.0, 2.0, 3.0],
            "gpu_util_pct": [np.nan] * 3,
            "sys_cpu_pct": [50.0, 60.0, 55.0],
        }
    )
    path = tmp_path / "telemetry.parquet"
    frame.to_parquet(path, index=False)
    (tmp_path / "cells.parquet").write_bytes(b"")  # not telemetry
    assert sources.telemetry_files(tmp_path, tmp_path) == [path]
    loaded = figures.telemetry.read_telemetry(path)
    assert list(loaded.x) == [0.0, 0.01, 0.02] and "gpu_util_pct" not in loaded.names  # all-missing: dropped
    assert loaded.per_point == 1 and list(loaded.series[0].low) == list(loaded.series[0].high) == [1.0, 2.0, 3.0]
    fig = figures.telemetry.telemetry_figure(loaded)
    assert [t.name for t in fig.data] == ["rss_bytes", "sys_cpu_pct"]
    (tmp_path / "bad-telemetry.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(ProbeError, match="cannot read"):
        figures.telemetry.read_telemetry(tmp_path / "bad-telemetry.parquet")


def test_long_telemetry_is_drawn_as_envelopes_that_keep_every_spike(tmp_path):
    """20,000 samples (a few minutes of a sweep at 10 ms): 1,000 points a panel, each the min and max of its 20
    samples, so a one-sample spike and a one-sample dip both still show."""
    rss = np.ones(20_000)
    rss[12_345], rss[777] = 9.0, -1.0
    t = np.arange(20_000, dtype=np.int64) * 10_000_000
    path = tmp_path / "telemetry.parquet"
    pd.DataFrame({"t_ns": t, "rss_bytes": rss, "sys_cpu_pct": np.full(20_000, 50.0)}).to_parquet(path, index=False)
    telemetry = figures.telemetry.read_telemetry(path)
    assert (telemetry.rows, telemetry.per_point, len(telemetry.x)) == (20_000, 20, 1_000)
    series = telemetry.series[0]
    assert series.high.max() == 9.0 and series.low.min() == -1.0 and np.count_nonzero(series.high != 1.0) == 1
    # sample 12,345 is in bucket 12,345 // 20 = 617, which starts at sample 617 x 20 = 12,340, at 123.4 s
    assert series.high[617] == 9.0 and telemetry.x[617] == pytest.approx(123.4)
    fig = figures.telemetry.telemetry_figure(telemetry)
    assert [len(tr.x) for tr in fig.data] == [1_000] * 4 and all(tr.mode == "lines" for tr in fig.data)
    assert max(fig.data[0].y) == 9.0 and min(fig.data[1].y) == -1.0 and fig.data[1].fill == "tonexty"
    assert "up to 20 of the 20,000 samples" in fig.layout.xaxis2.title.text


def test_telemetry_files_skip_links_out_of_the_root(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    _touch(outside / "telemetry.parquet")
    (root / "telemetry.parquet").symlink_to(outside / "telemetry.parquet")
    assert sources.telemetry_files(root, root) == []


# ---- 4. top ops ----------------------------------------------------------------------------------------------


def test_top_ops_are_ranked_by_host_self_time(cached):
    _, analysis = cached
    frame = figures.ops.top_ops_frame(analysis.summary.top_ops)
    assert frame["self_ms"].is_monotonic_decreasing
    assert list(frame["op"]) == [o.name for o in analysis.summary.top_ops]
    assert list(frame["calls"]) == [o.calls for o in analysis.summary.top_ops]
    fig = figures.ops.top_ops_figure(analysis.summary.top_ops)
    assert list(fig.data[0].y)[-1] == f"1. {frame['op'][0]}"  # the largest is drawn at the top, ranked 1


def test_steady_steps_follow_the_summary(cached, gpu):
    assert [s.name for s in steady(cached[1].steps)] == [f"decode#{i}" for i in range(5)]
    assert len(steady(gpu.steps)) == 5  # no decode ranges: every ProfilerStep


# ---- 5. compare ----------------------------------------------------------------------------------------------


def test_trace_categories_are_means_that_add_up_to_wall(cached):
    _, analysis = cached
    cats = figures.compare.trace_categories(analysis, "decode")
    decode = steady(analysis.steps)
    assert cats["wall"] == pytest.approx(np.mean([s.wall_ns / 1e6 for s in decode]))
    assert sum(cats[k] for k, _ in figures.style.HOST_CATEGORIES) == pytest.approx(cats["wall"])
    assert cats["dispatch"] == np.mean([s.top_level_ops for s in decode])
    assert "gpu_busy" not in cats  # a CPU trace: no GPU side


def test_trace_categories_of_a_gpu_trace_include_busy_and_idle(gpu):
    cats = figures.compare.trace_categories(gpu, "profiler_step")
    assert cats["gpu_busy"] == pytest.approx(np.mean([s.gpu_busy_ns / 1e6 for s in gpu.steps]))
    assert cats["dispatch"] == 870


def test_trace_compare_frame_naive_against_cached(cached):
    frame = figures.compare.trace_compare_frame(analyze(load_trace(NAIVE)), cached[1], "decode").set_index("what")
    assert frame.loc["cache bookkeeping", "baseline"] == 0  # naive keeps no cache
    assert frame.loc["cache bookkeeping", "current"] > 0
    row = frame.loc["wall"]
    assert row["delta"] == pytest.approx(row["current"] - row["baseline"])
    assert row["delta_pct"] == pytest.approx(100 * row["delta"] / row["baseline"])
    fig = figures.compare.trace_compare_figure(frame.reset_index(), "naive", "cached")
    assert [t.name for t in fig.data] == ["baseline: naive", "current: cached"]
    assert "dispatch / step" not in list(fig.data[0].y)  # a count, not ms: in the table only
    assert list(fig.data[0].y)[-1] == "wall"  # the first row, drawn at the top


def test_trace_compare_bars_keep_room_for_their_labels(cached):
    frame = figures.compare.trace_compare_frame(analyze(load_trace(NAIVE)), cached[1], "decode")
    fig = figures.compare.trace_compare_figure(frame, "naive", "cached")
    current = fig.data[1]
    assert current.orientation == "h" and current.textposition == "outside" and current.cliponaxis is False
    widest = max(max(t.x) for t in fig.data)
    assert fig.layout.xaxis.range[1] >= 1.35 * widest  # the change is written right of the longest bar, in view
    assert len(set(current.y)) == len(current.y) == len(frame) - 1  # one row a category (dispatch: table only)


def test_run_compare_frame_pairs_cells_by_key():
    a, b = load_results(RUN_A), load_results(RUN_B)
    cells = [str(c.key) for c in a.cells]
    frame = figures.compare.run_compare_frame(a, b, cells)
    assert len(frame) == 6 * 3
    row = frame[(frame["cell"] == "cached p64 n8") & (frame["metric"] == "ITL p50 (ms)")].iloc[0]
    ca, cb = (next(c for c in r.cells if c.key == CellKey("cached", 64, 8, 1)) for r in (a, b))
    assert (row["baseline"], row["current"]) == (ca.itl_p50_ms, cb.itl_p50_ms)
    b.cells = [c for c in b.cells if c.engine == "naive"]
    naive = {"naive p16 n8", "naive p64 n8", "naive p256 n8"}
    assert set(figures.compare.run_compare_frame(a, b, cells)["cell"]) == naive
    assert set(figures.compare.run_compare_frame(a, a, ["naive p16 n8"])["cell"]) == {"naive p16 n8"}
    fig = figures.compare.run_compare_figure(frame, "a", "b")
    assert len(fig.data) == 6


# ---- 6. alerts -----------------------------------------------------------------------------------------------


def test_alerts_come_from_probe_compare(tmp_path):
    from probe.analysis.regression.compare import COLUMNS, compare

    sides = [sources.Source(p.relative_to(DATA).as_posix(), "trace") for p in (NAIVE, CACHED)]
    sets = [sources.samples_for(DATA, s, analyze(load_trace(DATA / s.rel))) for s in sides]
    result = compare(*sets)
    assert [a.key for a in result.alerts] == ["prefill", "decode"]  # the cache adds copy_ and slice ops
    assert "aten::copy_" in result.alerts[1].message
    assert sets[0].env.torch  # the sidecar was read
    frame = figures.compare.comparison_frame(result)
    assert list(frame.columns) == list(COLUMNS) and len(frame) == len(result.rows)


def test_a_sidecar_linking_out_of_the_root_is_not_read(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    shutil.copy(CACHED, root / CACHED.name)
    _touch(outside / "x.meta.json", json.dumps({"env": {"torch": "from outside"}}))
    (root / CACHED.name.replace(".trace.json.gz", ".meta.json")).symlink_to(outside / "x.meta.json")
    assert sources.sidecar(root, root / CACHED.name) is None
    (root / CACHED.name.replace(".trace.json.gz", ".meta.json")).unlink()
    shutil.copy(CACHED.with_name(CACHED.name.replace(".trace.json.gz", ".meta.json")), root)
    assert sources.sidecar(root, root / CACHED.name).config.engine == "cached"


def test_md_escape_keeps_op_names_literal():
    assert figures.style.md("aten::_foo_bar *x*") == "aten::\\_foo\\_bar \\*x\\*"


def test_the_explorer_says_units_names_and_escapes_as_the_terminal_does():
    """One vocabulary (probe.text): the explorer's Markdown is the terminal's escape of the printable text, on one line
    (a newline in a name cannot start a heading or end a list item); a figure not measured stays None on a chart."""
    name = "aten::_foo\n=== <b>"
    assert figures.style.md(name) == text.md_escape(name) == "aten::\\_foo === \\<b\\>"
    assert figures.style.md("bad \udcff byte") == text.md_escape("bad \\xff byte")
    assert (text.ns_to_ms(1_234_567), text.ns_to_us(1_500), text.ns_to_ms(None)) == (1.234567, 1.5, None)
    assert (text.ms(1_234_567), text.us(1_500), text.pct(0.25, 0), text.ms(None)) == ("1.235", "1.5", "25", text.DASH)


# ---- probe app and the localhost default ---------------------------------------------------------------------


def test_probe_app_runs_streamlit_on_localhost_over_the_root(tmp_path):
    from probe.cli import COMMANDS
    from probe.commands import app

    assert "app" in COMMANDS
    cmd = app.streamlit_command(tmp_path, 8555)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"] and Path(cmd[4]) == view_app_py()
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8555"
    assert cmd[-3:] == ["--", "--root", str(tmp_path.resolve())]


def test_bare_streamlit_run_binds_to_localhost_too():
    text = (view_app_py().parent / ".streamlit" / "config.toml").read_text()
    section = text.split("[server]", 1)[1].split("\n[", 1)[0]
    assert 'address = "127.0.0.1"' in section.splitlines()


def test_probe_app_answers_only_loopback_names_and_its_own_address(tmp_path):
    """DNS rebinding: the Host headers the server answers (server.allowedHosts) are the loopback names and the
    --address given, for probe app and for a bare `streamlit run app.py` (.streamlit/config.toml) alike."""
    from probe.commands import app

    def hosts(cmd: list[str]) -> list[str]:
        return [cmd[i + 1] for i, flag in enumerate(cmd) if flag == "--server.allowedHosts"]

    assert hosts(app.streamlit_command(tmp_path, 8555)) == ["localhost", "127.0.0.1", "::1"]
    assert hosts(app.streamlit_command(tmp_path, 8555, "192.0.2.7")) == ["localhost", "127.0.0.1", "::1", "192.0.2.7"]
    wide = hosts(app.streamlit_command(tmp_path, 8555, "0.0.0.0"))  # every interface: this machine's addresses
    assert wide[:3] == ["localhost", "127.0.0.1", "::1"] and "0.0.0.0" not in wide and len(wide) > 3
    text = (view_app_py().parent / ".streamlit" / "config.toml").read_text()
    section = text.split("[server]", 1)[1].split("\n[", 1)[0]  # (tomllib is 3.11+; the project runs on 3.10)
    line = next(x for x in section.splitlines() if x.startswith("allowedHosts = "))
    assert json.loads(line.removeprefix("allowedHosts = ")) == list(app.LOOPBACK_HOSTS)


def test_probe_app_refuses_a_missing_root(capsys, tmp_path):
    from probe.cli import main

    assert main(["app", "--root", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err


def view_app_py() -> Path:
    return Path(__file__).resolve().parents[1] / "app.py"


def test_trace_telemetry_lines_up_with_the_trace_steps(tmp_path):
    """probe profile's samples, moved onto the trace's clock by the sidecar's anchor, bracket its steps."""
    from probe.analysis.ledger.build import analyze
    from probe.analysis.trace import load_trace
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_torch

    capture = profile_torch(ProfileConfig(prompt=16, new_tokens=12, device="cpu"), tmp_path)
    samples = sources.trace_telemetry(tmp_path, capture.trace)
    assert samples == tmp_path / "tiny_cached_cpu_p16_n12.telemetry.parquet"
    analysis = analyze(load_trace(capture.trace))
    offset = figures.telemetry.telemetry_offset_ns(sources.sidecar(tmp_path, capture.trace), analysis)
    telemetry = figures.telemetry.read_telemetry(samples, offset)
    first, last = analysis.steps[0], analysis.steps[-1]
    # the sampler starts before the recorded run and stops after it: its first and last rows bracket the steps
    # (within a millisecond: the anchor pairs two clocks read a few microseconds apart)
    assert telemetry.aligned and telemetry.per_point == 1  # a short trace: every sample drawn
    assert telemetry.x.min() < first.start_ns / 1e6 + 1
    assert telemetry.x.max() > (last.start_ns + last.wall_ns) / 1e6 - 1
    fig = figures.telemetry.telemetry_figure(telemetry, analysis.steps)
    panels = len(telemetry.series)
    assert len(fig.layout.shapes) == panels * len(analysis.steps)  # every step shaded behind every panel
    assert figures.telemetry.telemetry_offset_ns(None, analysis) is None


# ---- hostile names: what a trace, a results file or a history names is shown as text, never as markup ---------

# What plotly reads as HTML in a label, hover or title: a link, a style, emphasis.
LINK = '<a href="https://evil.example/">link</a>'
STYLE = '<span style="font-size:90px">big</span>'
BOLD = "<b>bold</b> & <i>it</i>"
OURS = re.compile(r"<(?!br>|/?extra>)")  # the only markup in a chart is the app's own line breaks and hover box


def hostile_trace(path: Path) -> Path:
    """The hand-worked trace with every op and kernel name, and every step range, ending in markup; its steps are
    the ranges matching `.*evil step.*` (--steps), named `<b>bold</b> & <i>it</i> evil step N`."""
    doc = json.loads(gzip.decompress(HAND.read_bytes()))
    steps = iter(range(100))
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e["name"] += LINK
        elif e.get("cat") in ("kernel", "Kernel"):
            e["name"] += STYLE
        elif e.get("cat") == "user_annotation" and e["name"].startswith(("prefill", "decode#")):
            e["name"] = f"{BOLD} evil step {next(steps)}"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def strings(spec) -> list[str]:
    """Every string in a figure's JSON, keys included."""
    if isinstance(spec, dict):
        return [s for k, v in spec.items() for s in [k, *strings(v)]]
    if isinstance(spec, list | tuple):
        return [s for v in spec for s in strings(v)]
    return [spec] if isinstance(spec, str) else []


def markup(fig) -> list[str]:
    return [s for s in strings(fig.to_plotly_json()) if OURS.search(s)]


def test_names_from_a_trace_reach_every_figure_as_text(tmp_path):
    from probe.analysis.ledger.host import FrameTime
    from probe.analysis.ledger.types import AnalyzeOptions

    trace = load_trace(hostile_trace(tmp_path / "evil.trace.json.gz"))
    analysis = analyze(trace, AnalyzeOptions.parse(".*evil step.*"))
    assert [s.name for s in analysis.steps] == [f"{BOLD} evil step {i}" for i in range(3)]
    assert any(LINK in o.name for o in analysis.summary.top_ops) and any(STYLE in k.name for k in analysis.kernels)
    frames = [FrameTime(f"model.py(1): forward{LINK}", 1000, 1)]
    drawn = [
        figures.ledger.ledger_figure(analysis),
        figures.step.timeline_figure(step_clock(trace, analysis, 1), title=BOLD),
        figures.step.partitions_figure(analysis.steps[1]),
        figures.diagnosis.step_figure(diagnose_trace(analysis).median),
        figures.ops.top_ops_figure(analysis.summary.top_ops, title=STYLE),
        figures.ops.frames_figure(frames),
        figures.kernels.kernels_figure(analysis.kernels),
        figures.kernels.kernel_category_figure(analysis),
        figures.compare.trace_compare_figure(
            figures.compare.trace_compare_frame(analysis, analysis, analysis.steps[0].kind), LINK, STYLE
        ),
    ]
    for fig in drawn:
        assert markup(fig) == []
    # escaped, not dropped: plotly shows the entities as the characters they stand for
    names = strings(drawn[0].to_plotly_json())
    assert "0: &lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;it&lt;/i&gt; evi…" in names  # by position, then its name, cut


def test_names_from_results_and_a_history_reach_their_figures_as_text(tmp_path):
    import datetime as dt

    results = load_results(RUN_A)
    results.cells[:] = [dataclasses.replace(c, engine=c.engine + LINK) for c in results.cells]
    other = load_results(RUN_B)
    other.cells[:] = [dataclasses.replace(c, engine=c.engine + LINK) for c in other.cells]
    frame = figures.compare.run_compare_frame(results, other, [str(c.key) for c in results.cells])
    assert len(frame) == 18
    for fig in (
        figures.sweep.sweep_figure(results, load_report(RUN_A)),
        figures.compare.run_compare_figure(frame, STYLE, BOLD),
    ):
        assert markup(fig) == []
    trend = pd.DataFrame(
        {
            "position": [0, 1],
            "run_id": [f"r0{BOLD}", f"r1{LINK}"],
            "recorded_at": [dt.datetime(2026, 1, 2, 9), dt.datetime(2026, 1, 2, 10)],
            "commit": ["a" * 7, STYLE],
            "dirty": [False, False],
            "host_us": [10.0, 12.0],
            "launches": [262, 266],
            "decode_tok_s": [90.0, 80.0],
            "count_alerts": ["", f"step 262 -> 266 (+4): {LINK} 0 -> 4 (new)"],
            "timing_alerts": ["", f"host µs/step rose: {STYLE}"],
            "part:ops": [6.0, 7.0],
        }
    )
    # (the columns are those of probe.analysis.regression.history.trend, which tests/test_history.py holds to the
    # database)
    fig = figures.history.history_figure(trend, unit=f"cached{BOLD} p16 n8")
    assert markup(fig) == []


# ---- what a run folder's telemetry can make the app allocate (issue 28 item 17) --------------------------------

PEAK_JS = """
import sys, pyarrow as pa
from pathlib import Path
from probe.errors import ProbeError
from probe.explorer.figures.telemetry import read_telemetry
try:
    t = read_telemetry(Path(sys.argv[1]))
    print("read", t.names, t.rows)
except ProbeError as e:
    print("refused", e)
print(pa.default_memory_pool().max_memory())
"""


def arrow_peak(path: Path) -> tuple[str, int]:
    """What read_telemetry says of a file, and the most memory Arrow held meanwhile, in a fresh process."""
    result = subprocess.run([sys.executable, "-c", PEAK_JS, str(path)], capture_output=True, text=True, cwd=ROOT_DIR)
    assert result.returncode == 0, result.stderr
    *said, peak = result.stdout.strip().splitlines()
    return "\n".join(said), int(peak)


def test_telemetry_is_checked_before_it_is_read(tmp_path):
    """A small file can decode to gigabytes: the rows and columns are checked from the footer before a value is
    read, and only numeric columns are ever read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # 6M rows of one repeated sample: 6M x 2 columns x 8 bytes = 96 MB decoded, a few hundred KB on disk
    many = tmp_path / "many-telemetry.parquet"
    chunk = pa.table({"t_ns": pa.array(np.zeros(1_000_000, np.int64)), "rss_bytes": pa.array(np.ones(1_000_000))})
    with pq.ParquetWriter(many, chunk.schema) as w:
        for _ in range(6):
            w.write_table(chunk)
    assert many.stat().st_size < 2_000_000
    said, peak = arrow_peak(many)
    assert (
        said
        == f"refused {many}: 6,000,000 rows and 2 columns, more than the explorer draws (5,000,000 rows, 64 columns)"
    )
    assert peak < 1_000_000  # the footer only
    wide = tmp_path / "wide-telemetry.parquet"
    pq.write_table(pa.table({"t_ns": [1, 2], **{f"c{i}": [1.0, 2.0] for i in range(80)}}), wide)
    assert "81 columns, more than the explorer draws" in arrow_peak(wide)[0]
    # 100 samples with a 1 MB text each: 100 MB decoded, a few KB on disk (dictionary-encoded, compressed)
    text = tmp_path / "text-telemetry.parquet"
    pq.write_table(pa.table({"t_ns": np.arange(100), "note": ["x" * 1_000_000] * 100, "threads": [4.0] * 100}), text)
    assert text.stat().st_size < 200_000
    said, peak = arrow_peak(text)
    assert said == "read ['threads'] 100" and peak < 10_000_000  # the text column is never read


# ---- the pictures agree with the answer (issue 35) --------------------------------------------------------------


@pytest.mark.skipif(not GPT_OSS.exists(), reason="../shared/traces/engines is not here")
def test_steps_of_one_name_are_one_bar_each():
    """gpt-oss: four `execute_8192_context_9...` steps of one name. Keyed by position, Kernels draws four bars of
    156.086 ms each (the GPU work the Diagnosis names), never one of 624 ms; the Step ledger four groups."""
    analysis = analyze(load_trace(GPT_OSS))
    fig = figures.kernels.kernel_category_figure(analysis)
    bars = [t for t in fig.data if t.type == "bar"]
    assert all(len(t.x) == 4 for t in bars) and list(bars[0].x)[0].startswith("0: execute_8192_context_9")
    heights = np.sum([list(t.y) for t in bars], axis=0)
    assert heights == pytest.approx([156.086] * 4, abs=1e-3)
    ledger = figures.ledger.ledger_figure(analysis)
    assert len(set(ledger.data[0].x)) == 4 and ledger.layout.xaxis.type == "category"


def test_the_step_figure_draws_the_diagnosis_and_the_hole():
    """vLLM decode: host window 2.409 ms (2.253 host work, 0.155 external wait), GPU work 10.718 ms, and the 5.962
    ms hole between the window's close and the first GPU op; the measured-step label sits above the plot."""
    d = diagnose_trace(analyze(load_trace(shared_trace(VLLM)))).median
    frame = figures.diagnosis.step_frame(d).set_index("piece")["ms"]
    assert frame["hole: no work of the trace"] == pytest.approx(d.evidence.hole_ns / 1e6)
    assert frame["GPU busy"] == pytest.approx(10.718, abs=1e-3)
    fig = figures.diagnosis.step_figure(d)
    (label,) = fig.layout.annotations
    assert label.yanchor == "bottom" and label.y == 1.0 and label.text.startswith("measured step 10.718")
    metrics = dict(figures.diagnosis.evidence_metrics(d))
    assert metrics["measured step"] == "10.718 ms" and metrics["host window"] == "2.409 ms"
    assert metrics["external wait"] == "0.155 ms" and metrics["hole"] == f"{d.evidence.hole_ns / 1e6:.3f} ms"


def test_the_rooflines_bars_take_colours_of_their_own():
    from probe.analysis.roofline.step import TokenFlags

    result = _answer(shared_trace(H100), model="qwen1.5-0.5b", flags=TokenFlags(8944, 16, 0))
    fig = figures.diagnosis.step_figure(result.diagnosis.median, result.rooflines[0])
    colours = [t.marker.color for t in fig.data]
    assert len(colours) == len(set(colours))  # no two pieces alike (traffic was the external wait's red)


def test_the_op_roofline_names_what_it_cannot_bound_and_rings_what_is_over():
    from probe.analysis.roofline.devices import device
    from probe.analysis.roofline.ops import OpRoofline

    h100 = device("H100-SXM")
    base = dict(shapes="[(8, 8)]", count=1, flops=1, bytes=1, kernel_us_total=1.0, kernel_us_median=1.0)
    base |= dict(tflops_s_median=1.0, tb_s_median=1.0, intensity=1.0, roof_pct=None, model="m")
    no_dtype = OpRoofline(op="aten::x", dtype=None, bound=None, **base)
    over = OpRoofline(
        op="aten::y", dtype="bfloat16", bound="memory", **base | {"roof_pct": 150.0}, over_roof=True,
        over_roof_why="4.00 TB/s is past H100-SXM's 3.35 TB/s of memory bandwidth",
    )  # fmt: skip
    assert figures.diagnosis.point_group(no_dtype, h100) == "no dtype"
    assert figures.diagnosis.point_group(no_dtype, None) == "no device"
    fig = figures.diagnosis.op_roofline_figure([no_dtype, over], h100)
    points = {t.name: t for t in fig.data if t.mode == "markers"}
    assert set(points) == {"no dtype", "memory-bound"}
    ring = points["memory-bound"].marker.line
    assert list(ring.color) == [figures.style.COLORS["flagged"]] and list(ring.width) == [3]
    assert "over its roof: 4.00 TB/s is past" in points["memory-bound"].customdata[0][7]
    frame = figures.diagnosis.op_roofline_frame([no_dtype, over])
    assert frame["over_roof"].tolist() == [False, True] and "mb" in frame.columns and "mib" not in frame.columns


@pytest.mark.parametrize(
    "name",
    ["h100_hf_qwen1.5-0.5b_prefill_b16", "mi300x_hf_qwen1.5-0.5b_prefill_b16", "rocm_sglang_qwen3_8b_extend_step"],
)
def test_no_op_roofline_point_sits_over_a_roof_unflagged(name):
    """Every point the Op roofline draws lies under its roof, or is flagged over_roof with why. Before, the
    embedding's index_select sat at 359% (H100), 559% (MI300X) and 709% (SGLang's extend) of the bandwidth roof,
    aten::mean at 145% and aten::copy_ at 120% (H100), without a word."""
    from probe.analysis.roofline.devices import device

    result = _answer(shared_trace(f"public/{name}.trace.json.gz"))
    h100 = device(result.device)
    for o in result.op_roofline:
        if o.intensity and o.tflops_s_median and o.dtype and h100.flops_s(o.dtype):
            roof = min(h100.flops_s(o.dtype), o.intensity * h100.memory_bandwidth_bytes_s) / 1e12
            assert o.tflops_s_median <= roof * (1 + 1e-9) or (o.over_roof and o.over_roof_why), o


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.3, 40, [0.5, 1, 2, 5, 10, 20]),  # 1, 2, 5 of each power of ten inside
        (2.2, 7.9, [3, 4, 5, 6, 7]),  # a narrow range: every digit, never one unreadable tick
        (120, 480, [200, 300, 400]),
        (1.5e-7, 3000, [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000]),  # ten decades: powers of ten only
        (1e-12, 1e12, [1e-12, 1e-9, 1e-6, 1e-3, 1, 1e3, 1e6, 1e9, 1e12]),  # 25 powers: every third
    ],
)
def test_log_ticks_read_as_written(low, high, expected):
    ticks = figures.style.log_ticks(low, high)
    assert ticks == pytest.approx(expected)
    axis = figures.style.log_axis([low, high], "t", pad=1.0)
    assert axis["ticktext"] == [f"{t:g}" for t in ticks]


def test_a_ratio_under_one_falls_from_one(tmp_path):
    """A cell faster than predicted (measured / predicted 0.5) is a bar from 1 down to 0.5, not one rising from the
    axis floor; a contended cell is hatched and its hover says so."""
    report = load_report(APP / "runs" / "tiny-cpu-a")
    fig = figures.diagnosis.predictions_figure(
        report, {(report.predictions[0].engine, report.predictions[0].prompt_tokens, 1)}
    )
    bar = fig.data[0]
    assert list(bar.base) == [1.0] * len(bar.x)
    ratios = [c[3] for c in bar.customdata]
    assert list(bar.y) == pytest.approx([r - 1 for r in ratios])
    assert bar.marker.pattern.shape[0] == "/" and "CONTENDED" in bar.customdata[0][4]


def test_a_drag_across_the_timeline_is_a_window():
    event = {"selection": {"points": [], "box": [{"xref": "x", "yref": "y", "x": [8.9, 8.3], "y": [0, 5]}]}}
    assert figures.step.dragged_window(event) == (8.3, 8.9)
    assert figures.step.dragged_window({"selection": {"points": [], "box": []}}) is None
    assert figures.step.dragged_window(None) is None


def test_contended_cells_are_marked_in_the_sweep_and_report_md():
    """Cells measured while other processes took the CPU (Cell.contended): one line says which, the same line
    `probe run` warns with, in report.md's Cells and beside the run's predictions; the Sweep crosses each one."""
    from probe.render.markdown import report_markdown

    results = load_results(RUN_A)
    assert results.contention is None and "Contended" not in report_markdown(results, load_report(RUN_A))
    results.cells[:] = [
        dataclasses.replace(c, contended=True, other_cpu_cores=1.5) if c.prompt_tokens == 64 else c
        for c in results.cells
    ]
    said = results.contention
    assert said is not None and said.startswith("2 of 6 cells ran while other processes used the CPU")
    assert "naive p64 (1.50), cached p64 (1.50)" in said
    assert f"**Contended:** {said}" in report_markdown(results, load_report(RUN_A)).replace("\\", "")
    fig = figures.sweep.sweep_figure(results, load_report(RUN_A))
    crossed = [t for t in fig.data if t.name == "contended: other processes took the CPU"]
    assert len(crossed) == 3 and all(list(t.x) == [64, 64] for t in crossed)  # one panel a metric
    assert crossed[0].showlegend and "1.50 other cores" in crossed[0].text[0]
    assert figures.diagnosis.contended_cells(results) == {("cached", 64, 1), ("naive", 64, 1)}


def test_kernels_of_one_short_name_are_told_apart():
    """Two elementwise kernels differ in their functor: each is named by it. Two gemv differ only in a number: each
    by its place. Never two bars under one label."""
    names = [
        "void at::native::elementwise_kernel<128, 4, at::native::BinaryFunctor<float>>(int)",
        "void at::native::elementwise_kernel<128, 4, at::native::FillFunctor<float>>(int)",
        "void gemv<float, 4>(int)",
        "void gemv<float, 8>(int)",
        "Memcpy DtoD (Device -> Device)",
    ]
    assert figures.kernels.kernel_labels(names) == [
        "at::native::elementwise_kernel [BinaryFunctor]",
        "at::native::elementwise_kernel [FillFunctor]",
        "gemv #1",
        "gemv #2",
        "Memcpy DtoD (Device -> Device)",
    ]


def test_a_commit_tick_is_a_short_hash_or_the_whole_word():
    """History's x tick read "no comm": a recorded commit that is not a hash is written whole."""
    assert figures.history.commit_tick("0123456789abcdef0123+dirty") == "0123456"
    assert figures.history.commit_tick("no commit") == "no commit"


def test_coinciding_ranks_are_said_and_drawn_inside_each_other(hand):
    """Four ranks of which three have the same wall at every step: the chart drew two lines for four ranks. Each rank
    has its own dash, marker and width now (the first the widest), and the three are named as one."""
    from probe.analysis.ledger.ranks import ranks

    slower = tuple(dataclasses.replace(s, wall_ns=s.wall_ns + 1_000) for s in hand.steps)
    rank_traces = [dataclasses.replace(hand, rank=r, steps=slower if r == 2 else hand.steps) for r in range(4)]
    result = ranks(rank_traces)
    assert result.one_job and figures.ranks.coinciding(result) == [(0, [1, 3])]
    fig = figures.ranks.ranks_figure(result)
    walls = [t for t in fig.data if t.name.startswith("rank ") and t.showlegend is not False]
    assert [t.name for t in walls] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert len({t.line.dash for t in walls}) == len({t.marker.symbol for t in walls}) == 4
    widths = [t.line.width for t in walls]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 4


def test_the_ranks_chart_circles_the_rank_the_collectives_wait_for(tmp_path):
    """tests/ranks.make_collective_job: rank 0 has the slowest wall (it enters first and waits longest in the
    collective), rank 3 the least time in collectives; the chart circles rank 3's wall at each step, as probe analyze
    names it, and the table says by which rule."""
    from probe.analysis.ledger.ranks import analyze_one, ranks
    from tests.ranks import make_collective_job

    result = ranks([analyze_one((p, None)) for p in make_collective_job(tmp_path / "job")])
    assert result.straggler is not None and result.straggler.rank == 3
    fig = figures.ranks.ranks_figure(result)
    (circled,) = [t for t in fig.data if t.name == "straggler"]
    rank3 = next(t for t in fig.data if t.name == "rank 3")
    assert list(circled.y) == list(rank3.y) == [0.6, 0.6]
    assert circled.text[0] == "rank 3: 0.180 ms in collectives against a median of 0.330 ms: the others wait for it"
    table = figures.ranks.ranks_frame(result)
    assert list(table["straggler"]) == [3, 3] and list(table["by"]) == ["collectives"] * 2
    assert list(table["slowest rank"]) == [0, 0]


def test_a_link_the_app_will_not_open_says_why_without_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "notes.txt").write_text("x")
    listed = {"trace: a.trace.json.gz"}
    assert sources.link_refusal(root, "trace: a.trace.json.gz", listed) is None
    said = {
        asked: sources.link_refusal(root, asked, listed)
        for asked in ("trace: ../secret.trace.json.gz", "trace: gone.trace.json.gz", "trace: deep/notes.txt", "x")
    }
    assert said == {
        "trace: ../secret.trace.json.gz": "The link's trace lies outside the app's root, so it is not opened.",
        "trace: gone.trace.json.gz": "The link's trace gone.trace.json.gz is not under the root (moved, or never "
        "there).",
        "trace: deep/notes.txt": "The link's trace deep/notes.txt is under the root but not listed: not a trace the "
        f"app reads, or in a hidden or virtual-env folder, deeper than {sources.MAX_DEPTH} folders, or past the first "
        f"{sources.MAX_SOURCES} files.",
        "x": "The link's source 'x' is not a run, trace, history or job label.",
    }
    assert all(str(tmp_path) not in line for line in said.values() if line)
    error = ProbeError(f"{root.resolve() / 'deep' / 'notes.txt'}: not a trace; {root.resolve()} is the root")
    assert sources.under_root(root, error) == "deep/notes.txt: not a trace; . is the root"


def test_telemetry_titles_sit_between_the_panels_not_on_the_data(tmp_path):
    """Six figures: each panel's title sits in the gap above its panel, that gap at least 30 px, so no title covers
    the panel above it (before, six panels or more were 3% of the figure apart: 26 px here, under a 16 px title)."""
    t = np.arange(50, dtype=np.int64) * 10_000_000
    frame = pd.DataFrame({"t_ns": t} | {f"figure_{i}": np.arange(50.0) for i in range(6)})
    frame.to_parquet(tmp_path / "telemetry.parquet", index=False)
    fig = figures.telemetry.telemetry_figure(figures.telemetry.read_telemetry(tmp_path / "telemetry.parquet"))
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    domains = [fig.layout[f"yaxis{i if i > 1 else ''}"].domain for i in range(1, 7)]  # top panel first
    gaps = [(upper[0] - lower[1]) * plot_px for upper, lower in zip(domains, domains[1:], strict=False)]
    assert min(gaps) >= 30
    titles = [a for a in fig.layout.annotations if a.text.startswith("figure_")]
    assert [a.text for a in titles] == [f"figure_{i}" for i in range(6)]
    for title, domain in zip(titles, domains, strict=True):
        assert title.yanchor == "bottom" and title.y == pytest.approx(domain[1])  # on its own panel's top edge


def test_a_table_writes_a_dash_where_nothing_was_measured():
    """docs/explorer.md promises "-" where a cell measured nothing; the browser's table wrote "None" (an op with no
    dtype in the Op roofline, its GFLOP and MB) whatever the styling said. A column with such a cell is text now,
    its numbers at 4 decimals; a column without keeps its numbers."""
    from probe.explorer.widgets import table_frame

    frame = pd.DataFrame(
        {
            "gflop": [51.5815505, None],
            "dtype": ["bfloat16", None],
            "gpu_ms": [np.nan, np.nan],
            "count": pd.array([48, None], dtype="Int64"),
            "calls": [1, 2],
            "ms": [0.1, 0.2],
        }
    )
    shown = table_frame(frame)
    assert shown.to_dict("list") == {
        "gflop": ["51.5816", "-"],
        "dtype": ["bfloat16", "-"],
        "gpu_ms": ["-", "-"],
        "count": ["48", "-"],
        "calls": [1, 2],
        "ms": [0.1, 0.2],
    }
    assert shown["calls"].dtype == np.int64 and shown["ms"].dtype == np.float64
