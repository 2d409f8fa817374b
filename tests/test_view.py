"""probe.view, the app's data shaping and figures, without Streamlit: the root gate, the file listing, the
frames (checked against the ledger's hand-worked figures) and what each figure draws."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe.analysis.ledger import analyze, step_timeline
from probe.analysis.report import load_report
from probe.analysis.results import CellKey, load_results
from probe.analysis.trace import load_trace
from probe.errors import ProbeError
from probe.explorer import figures, sources

DATA = Path(__file__).parent / "data"
APP = DATA / "app"
RUN_A, RUN_B = APP / "runs" / "tiny-cpu-a", APP / "runs" / "tiny-cpu-b"
CACHED = APP / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz"
NAIVE = APP / "traces" / "tiny_naive_cpu_p16_n6.trace.json.gz"
GPU = DATA / "cuda_train_ns_resolution_5steps.trace.json.gz"
HAND = DATA / "hand_decode.trace.json.gz"


@pytest.fixture(scope="module")
def cached():
    trace = load_trace(CACHED)
    return trace, analyze(trace)


@pytest.fixture(scope="module")
def hand():
    return analyze(load_trace(HAND))


@pytest.fixture(scope="module")
def gpu():
    return analyze(load_trace(GPU))


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
        "trace: traces/a.trace.json.gz",
        "trace: traces/b.trace.json",
        "trace: x.nsys.sqlite.gz",
        "trace: y.sqlite",
        "job: .",  # a folder of two traces or more opens as a job too (the Ranks view)
        "job: traces",
    ]


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
    assert sources.stamp(tmp_path / "missing.json.gz") == (("missing.json.gz", None, None),)


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
    frame = figures.sweep_frame(results)
    assert list(frame["line"]) == ["cached"] * 3 + ["naive"] * 3
    assert list(frame["prompt_tokens"]) == [16, 64, 256] * 2
    assert not frame["mismatch"].any()
    bad = dataclasses.replace(results.cells[1], tokens_match_naive=False)
    results.cells[1] = bad
    frame = figures.sweep_frame(results)
    assert frame[frame["mismatch"]][["line", "prompt_tokens"]].values.tolist() == [[bad.engine, bad.prompt_tokens]]


def test_batched_cells_get_their_own_line():
    results = load_results(RUN_A)
    results.cells.append(dataclasses.replace(results.cells[0], engine="batched", batch=4))
    assert "batched B=4" in set(figures.sweep_frame(results)["line"])


def test_prediction_frame_is_one_row_a_prompt_from_report_json():
    report = load_report(RUN_A)
    frame = figures.prediction_frame(report)
    assert list(frame["prompt_tokens"]) == [16, 64, 256]
    first = next(p for p in report.predictions if p.prompt_tokens == 64)
    row = frame[frame["prompt_tokens"] == 64].iloc[0]
    assert (row["floor_ms"], row["traffic_ms"], row["predicted_ms"]) == (
        first.floor_ms,
        first.traffic_ms,
        first.predicted_ms,
    )
    assert figures.prediction_frame(None).empty


def test_sweep_figure_lines_predictions_and_flags():
    results, report = load_results(RUN_A), load_report(RUN_A)
    fig = figures.sweep_figure(results, report)
    assert [len(_traces(fig, n)) for n in ("cached", "naive")] == [3, 3]  # tok/s, ITL, TTFT
    assert all(ax.type == "log" for ax in (fig.layout.xaxis, fig.layout.xaxis2, fig.layout.xaxis3))
    floor, roof = _traces(fig, "host floor")[0], _traces(fig, "bandwidth roofline")[0]
    assert floor.line.dash == "dash" and roof.line.dash == "dot" and floor.xaxis == "x2"  # on the ITL panel
    pred = figures.prediction_frame(report)
    assert np.allclose(np.asarray(floor.y), pred["floor_ms"]) and np.allclose(np.asarray(roof.y), pred["traffic_ms"])
    tok_s = _traces(fig, "prediction")[0]
    assert np.allclose(np.asarray(tok_s.y), 1e3 / pred["predicted_ms"]) and tok_s.xaxis == "x"
    assert all(len(t.x) == 0 for t in _traces(fig, "tokens differ from naive"))
    results.cells[0] = dataclasses.replace(results.cells[0], tokens_match_naive=False)
    flagged = _traces(figures.sweep_figure(results, None), "tokens differ from naive")
    assert [len(t.x) for t in flagged] == [1, 1, 1] and flagged[0].showlegend
    assert not _traces(figures.sweep_figure(results, None), "host floor")  # no report.json: no predictions


# ---- 2. step ledger ------------------------------------------------------------------------------------------


def test_ledger_frame_matches_the_hand_worked_ledger(hand):
    frame = figures.ledger_frame(hand).set_index("step")
    d0 = frame.loc["decode#0"]
    # tests/test_ledger.py works these out by hand: wall 90 us, cache 15, unattributed 20, busy 28.99, idle 22.01
    # (the 51 us GPU window less the busy time).
    assert (d0["wall_ms"], d0["cache_ms"], d0["unattributed_ms"]) == (0.09, 0.015, 0.02)
    assert (d0["gpu_busy_ms"], d0["gpu_idle_ms"]) == (0.02899, 0.02201)
    assert d0["dispatch"] == 2  # one kernel launch + one graph launch
    host = [f"{k}_ms" for k, _ in figures.HOST_CATEGORIES]
    assert np.allclose(frame[host].sum(axis=1), frame["wall_ms"], rtol=0, atol=1e-12)


def test_ledger_frame_on_a_cpu_trace_counts_top_level_ops(cached):
    _, analysis = cached
    frame = figures.ledger_frame(analysis)
    assert list(frame["step"]) == ["prefill"] + [f"decode#{i}" for i in range(5)]
    assert list(frame["dispatch"]) == [s.top_level_ops for s in analysis.steps]
    assert (frame["cache_ms"] > 0).all() and (frame["gpu_busy_ms"] == 0).all()


def test_ledger_figure_on_a_gpu_trace_stacks_host_and_gpu_side_by_side(gpu):
    fig = figures.ledger_figure(gpu)
    names = [t.name for t in fig.data]
    n = len(figures.HOST_CATEGORIES)
    assert names[:n] == ["host: " + label for _, label in figures.HOST_CATEGORIES]
    assert names[n : n + 2] == ["GPU busy", "GPU idle"] and names[n + 2].startswith("kernel launches per step")
    busy, idle = _traces(fig, "GPU busy")[0], _traces(fig, "GPU idle")[0]
    assert busy.offsetgroup == idle.offsetgroup == "gpu" and fig.data[0].offsetgroup == "host"
    assert np.allclose(np.asarray(idle.base), np.asarray(busy.y))  # idle sits on busy
    ops, attention = fig.data[0], fig.data[1]
    assert np.allclose(np.asarray(attention.base), np.asarray(ops.y))
    assert list(fig.data[n + 2].y) == [s.launches + s.graph_launches for s in gpu.steps] == [870] * 5
    assert fig.data[n + 2].yaxis == "y2"


def test_ledger_figure_on_a_cpu_trace_says_top_level_ops(cached):
    _, analysis = cached
    fig = figures.ledger_figure(analysis)
    assert not _traces(fig, "GPU busy")
    line = fig.data[-1]
    assert "top-level ops" in line.name and "no launches" in line.name
    assert "top-level ops" in fig.layout.yaxis2.title.text


# ---- 3. one step ---------------------------------------------------------------------------------------------


def test_timeline_frame_keeps_order_and_marks_cache(cached):
    trace, analysis = cached
    items = step_timeline(trace, analysis.step("decode#1"))
    frame = figures.timeline_frame(items)
    assert len(frame) == len(items) and list(frame["name"]) == [it.name for it in items]
    assert frame["start_us"].is_monotonic_increasing
    cache_ranges = frame[frame["cache"] & (frame["kind"] == "range")]
    # The tiny preset has 4 layers: a cache.update each, plus the seq_length and mask_sizes queries.
    assert list(cache_ranges["name"][cache_ranges["part"] == "cache_update"]) == [f"cache.update#{i}" for i in range(4)]
    assert {"cache.seq_length", "cache.mask_sizes"} <= set(cache_ranges["name"])


def test_timeline_parts_match_a_brute_force_enclosing_range(cached):
    """Each op or call takes the highest-priority part among the ranges that enclose it, checked pair by pair."""
    from probe.analysis.host import BUILTIN_PARTS

    trace, analysis = cached
    for step in analysis.steps[:4]:
        items = step_timeline(trace, step)
        ranges = [(it.start_us, it.start_us + it.dur_us, it.part) for it in items if it.kind == "range"]
        for it in items:
            if it.kind == "range":
                continue
            inside = [p for s, e, p in ranges if p != "range" and s <= it.start_us and it.start_us + it.dur_us <= e]
            if inside:
                assert it.part == min(inside, key=BUILTIN_PARTS.index), it
            else:
                assert it.part in ("ops", "attention", "sync"), it
        assert any(it.part.startswith("cache") and it.kind == "op" for it in items)


def test_timeline_figure_puts_cache_ranges_on_their_own_lane_and_shades_them(cached):
    trace, analysis = cached
    items = step_timeline(trace, analysis.step("decode#1"))
    fig = figures.timeline_figure(items)
    update = _traces(fig, "cache_update")[0]
    assert "cache" in list(update.y) and update.orientation == "h"
    n_cache_ranges = sum(it.kind == "range" and it.part.startswith("cache") for it in items)
    assert len(fig.layout.shapes) == n_cache_ranges > 0
    drawn = sum(len(t.x) for t in fig.data)
    assert drawn == len(items)


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
    loaded = figures.telemetry_frame(path)
    assert list(loaded["t_s"]) == [0.0, 0.01, 0.02] and "gpu_util_pct" not in loaded  # all-missing: dropped
    fig = figures.telemetry_figure(loaded)
    assert [t.name for t in fig.data] == ["rss_bytes", "sys_cpu_pct"]
    (tmp_path / "bad-telemetry.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(ProbeError, match="cannot read"):
        figures.telemetry_frame(tmp_path / "bad-telemetry.parquet")


def test_telemetry_files_skip_links_out_of_the_root(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    _touch(outside / "telemetry.parquet")
    (root / "telemetry.parquet").symlink_to(outside / "telemetry.parquet")
    assert sources.telemetry_files(root, root) == []


# ---- 4. top ops ----------------------------------------------------------------------------------------------


def test_top_ops_are_ranked_by_host_self_time(cached):
    _, analysis = cached
    frame = figures.top_ops_frame(analysis.summary.top_ops)
    assert frame["self_ms"].is_monotonic_decreasing
    assert list(frame["op"]) == [o.name for o in analysis.summary.top_ops]
    assert list(frame["calls"]) == [o.calls for o in analysis.summary.top_ops]
    fig = figures.top_ops_figure(analysis.summary.top_ops)
    assert list(fig.data[0].y)[-1] == frame["op"][0]  # the largest is drawn at the top


def test_steady_steps_follow_the_summary(cached, gpu):
    assert [s.name for s in figures.steady_steps(cached[1])] == [f"decode#{i}" for i in range(5)]
    assert len(figures.steady_steps(gpu)) == 5  # no decode ranges: every ProfilerStep


# ---- 5. compare ----------------------------------------------------------------------------------------------


def test_trace_categories_are_means_that_add_up_to_wall(cached):
    _, analysis = cached
    cats = figures.trace_categories(analysis)
    decode = figures.steady_steps(analysis)
    assert cats["wall"] == pytest.approx(np.mean([s.wall_ns / 1e6 for s in decode]))
    assert sum(cats[k] for k, _ in figures.HOST_CATEGORIES) == pytest.approx(cats["wall"])
    assert cats["dispatch"] == np.mean([s.top_level_ops for s in decode])
    assert "gpu_busy" not in cats  # a CPU trace: no GPU side


def test_trace_categories_of_a_gpu_trace_include_busy_and_idle(gpu):
    cats = figures.trace_categories(gpu)
    assert cats["gpu_busy"] == pytest.approx(np.mean([s.gpu_busy_ns / 1e6 for s in gpu.steps]))
    assert cats["dispatch"] == 870


def test_trace_compare_frame_naive_against_cached(cached):
    frame = figures.trace_compare_frame(analyze(load_trace(NAIVE)), cached[1]).set_index("what")
    assert frame.loc["cache bookkeeping", "baseline"] == 0  # naive keeps no cache
    assert frame.loc["cache bookkeeping", "current"] > 0
    row = frame.loc["wall"]
    assert row["delta"] == pytest.approx(row["current"] - row["baseline"])
    assert row["delta_pct"] == pytest.approx(100 * row["delta"] / row["baseline"])
    fig = figures.trace_compare_figure(frame.reset_index(), "naive", "cached")
    assert [t.name for t in fig.data] == ["baseline: naive", "current: cached"]
    assert "dispatch / step" not in list(fig.data[0].x)  # a count, not ms: in the table only


def test_run_compare_frame_pairs_cells_by_key():
    a, b = load_results(RUN_A), load_results(RUN_B)
    frame = figures.run_compare_frame(a, b)
    assert len(frame) == 6 * 3
    row = frame[(frame["cell"] == "cached p64 n8") & (frame["metric"] == "ITL p50 (ms)")].iloc[0]
    ca, cb = (next(c for c in r.cells if c.key == CellKey("cached", 64, 8, 1)) for r in (a, b))
    assert (row["baseline"], row["current"]) == (ca.itl_p50_ms, cb.itl_p50_ms)
    b.cells = [c for c in b.cells if c.engine == "naive"]
    assert set(figures.run_compare_frame(a, b)["cell"]) == {"naive p16 n8", "naive p64 n8", "naive p256 n8"}
    fig = figures.run_compare_figure(frame, "a", "b")
    assert len(fig.data) == 6


# ---- 6. alerts -----------------------------------------------------------------------------------------------


def test_alerts_come_from_probe_compare(tmp_path):
    from probe.analysis.compare import COLUMNS, compare

    sides = [sources.Source(p.relative_to(DATA).as_posix(), "trace") for p in (NAIVE, CACHED)]
    sets = [sources.samples_for(DATA, s, analyze(load_trace(DATA / s.rel))) for s in sides]
    result = compare(*sets)
    assert [a.key for a in result.alerts] == ["prefill", "decode"]  # the cache adds copy_ and slice ops
    assert "aten::copy_" in result.alerts[1].message
    assert sets[0].env.torch  # the sidecar was read
    frame = figures.comparison_frame(result)
    assert list(frame.columns) == list(COLUMNS) and len(frame) == len(result.rows)


def test_a_sidecar_linking_out_of_the_root_is_not_read(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    shutil.copy(CACHED, root / CACHED.name)
    _touch(outside / "x.meta.json", json.dumps({"env": {"torch": "from outside"}}))
    (root / CACHED.name.replace(".trace.json.gz", ".meta.json")).symlink_to(outside / "x.meta.json")
    assert sources.trace_meta(root, root / CACHED.name) is None
    (root / CACHED.name.replace(".trace.json.gz", ".meta.json")).unlink()
    shutil.copy(CACHED.with_name(CACHED.name.replace(".trace.json.gz", ".meta.json")), root)
    assert sources.trace_meta(root, root / CACHED.name).config.engine == "cached"


def test_md_escape_keeps_op_names_literal():
    assert figures.md_escape("aten::_foo_bar *x*") == "aten::\\_foo\\_bar \\*x\\*"


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


def test_probe_app_refuses_a_missing_root(capsys, tmp_path):
    from probe.cli import main

    assert main(["app", "--root", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err


def view_app_py() -> Path:
    return Path(__file__).resolve().parents[1] / "app.py"


def test_trace_telemetry_lines_up_with_the_trace_steps(tmp_path):
    """probe profile's samples, moved onto the trace's clock by the sidecar's anchor, bracket its steps."""
    from probe.analysis.ledger import analyze
    from probe.analysis.trace import load_trace
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_torch

    capture = profile_torch(ProfileConfig(prompt=16, new_tokens=12, device="cpu"), tmp_path)
    samples = sources.trace_telemetry(tmp_path, capture.trace)
    assert samples == tmp_path / "tiny_cached_cpu_p16_n12.telemetry.parquet"
    analysis = analyze(load_trace(capture.trace))
    offset = figures.telemetry_offset_ns(sources.trace_meta(tmp_path, capture.trace), analysis)
    frame = figures.telemetry_frame(samples, offset)
    first, last = analysis.steps[0], analysis.steps[-1]
    # the sampler starts before the recorded run and stops after it: its first and last rows bracket the steps
    # (within a millisecond: the anchor pairs two clocks read a few microseconds apart)
    assert frame["t_ms"].min() < first.start_ns / 1e6 + 1
    assert frame["t_ms"].max() > (last.start_ns + last.wall_ns) / 1e6 - 1
    fig = figures.telemetry_figure(frame, analysis.steps)
    panels = len([c for c in frame.columns if c not in ("t_ms", "t_ns")])
    assert len(fig.layout.shapes) == panels * len(analysis.steps)  # every step shaded behind every panel
    assert figures.telemetry_offset_ns(None, analysis) is None
