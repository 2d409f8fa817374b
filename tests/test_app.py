"""app.py under Streamlit's AppTest: every view on the committed fixtures (a bench run with its report, our CPU
traces from probe profile), on the public GPU traces of ../shared/traces, an empty root, a corrupt file, and the root
gate.

The root is tests/data, or `public_root` (the fixtures beside the public traces), unless a test builds its own;
widgets are found by key (source, baseline, view, step, top_ops_scope) and charts by the key in their element id.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.trace import load_trace
from probe.explorer import loaders
from probe.explorer.figures import history as history_figures
from probe.explorer.sources import ROOT_ENV
from tests import oracle
from tests.conftest import shared_trace

ROOT = Path(__file__).resolve().parents[1]
APP_PY = ROOT / "app.py"
DATA = Path(__file__).parent / "data"
RUN_A, RUN_B = "run: app/runs/tiny-cpu-a", "run: app/runs/tiny-cpu-b"
QWEN_PRESET = Path(__file__).resolve().parents[1] / "engines" / "presets" / "qwen1.5-0.5b.json"
CACHED = "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz"
NAIVE = "trace: app/traces/tiny_naive_cpu_p16_n6.trace.json.gz"
TIMEOUT = 60  # seconds a run may take: the first parse of a trace on a busy 2-core machine
PUBLIC = (GPU, VLLM, H100, SGLANG, MI300X) = (
    "trace: cuda_train_ns_resolution_5steps.trace.json.gz",
    "trace: rocm_vllm_decode_cudagraph.trace.json.gz",
    "trace: h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
    "trace: rocm_sglang_qwen3_8b_extend_step.trace.json.gz",
    "trace: mi300x_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
)


@pytest.fixture(scope="module")
def public_root(tmp_path_factory) -> Path:
    """A root holding tests/data/app beside the public traces the views are checked on, copied from ../shared/traces
    for the session (the app reads only under its root; the repository keeps no other project's trace)."""
    root = tmp_path_factory.mktemp("public_root")
    shutil.copytree(DATA / "app", root / "app")
    for source in PUBLIC:
        shutil.copy(shared_trace("public/" + source.removeprefix("trace: ")), root)
    return root


def app(monkeypatch, root: Path, source: str | None = None, view: str | None = None, **widgets) -> AppTest:
    """The app over `root`, after picking a source, then a view, then any other keyed selectbox."""
    monkeypatch.setenv(ROOT_ENV, str(root))
    at = AppTest.from_file(str(APP_PY), default_timeout=TIMEOUT).run()
    if source is not None:
        at.selectbox(key="source").set_value(source).run()
    if view is not None:
        at.radio(key="view").set_value(view).run()
    for key, value in widgets.items():
        at.selectbox(key=key).set_value(value).run()
    assert not at.exception, at.exception
    return at


def chart(at: AppTest, key: str) -> list[dict]:
    """The traces of the plotly chart with this key, arrays decoded (plotly 7 writes numpy arrays as base64)."""
    found = [c for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    assert found, f"no chart {key}; charts: {[c.proto.id for c in at.get('plotly_chart')]}"
    return [{k: _decode(v) for k, v in t.items()} for t in json.loads(found[0].proto.spec)["data"]]


def shown(at: AppTest, key: str) -> str:
    """What a selectbox shows (and the URL holds): its option as formatted, whatever object it returns."""
    box = at.selectbox(key=key)
    return box.format_func(box.value)


def charts(at: AppTest) -> list[str]:
    return [c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")]


def _decode(value):
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return value


def named(traces: list[dict], name: str) -> list[dict]:
    return [t for t in traces if t.get("name") == name]


def judged(source: str) -> str:
    """The step the Diagnosis judged (the median steady step), as the step picker shows it."""
    path = source.removeprefix("trace: ")
    trace = load_trace(DATA / path if path.startswith("app/") else shared_trace("public/" + path))
    analysis = analyze(trace)
    result = diagnose_trace(analysis, Context.of(trace))
    step = analysis.steps[result.position_of(result.median)]
    return f"{step.position}: {step.name}"


def top_level_ops_per_step(source: str) -> list[int]:
    """Each prefill / decode#i step's top-level cpu_ops, counted from the trace's events by tests/oracle.py."""
    events = oracle.read(DATA / source.removeprefix("trace: "))
    steps = oracle.step_ranges(events, {"prefill", *(f"decode#{i}" for i in range(64))})
    return [oracle.top_level_ops(events, s.start, s.end, s.pid, s.tid) for s in steps]


# ---- empty, missing and hostile roots ------------------------------------------------------------------------


def test_an_empty_root_says_what_to_do(monkeypatch, tmp_path):
    at = app(monkeypatch, tmp_path)
    assert "Nothing to show" in at.info[0].value and "probe run" in at.info[0].value
    assert not at.get("plotly_chart") and not at.error


def test_a_missing_root_is_an_error_box(monkeypatch, tmp_path):
    at = app(monkeypatch, tmp_path / "nope")
    assert "is not a folder" in at.error[0].value


def test_files_linked_from_outside_the_root_are_not_offered(monkeypatch, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "stolen.trace.json.gz").symlink_to(DATA / "hand_decode.trace.json.gz")
    (root / "run").symlink_to(DATA / "app" / "runs" / "tiny-cpu-a", target_is_directory=True)
    at = app(monkeypatch, root)
    assert "Nothing to show" in at.info[0].value


def test_a_run_whose_report_links_outside_is_refused(monkeypatch, tmp_path):
    (tmp_path / "root" / "run").mkdir(parents=True)
    shutil.copy(DATA / "app" / "runs" / "tiny-cpu-a" / "results.json", tmp_path / "root" / "run")
    (tmp_path / "root" / "run" / "report.json").symlink_to(DATA / "app" / "runs" / "tiny-cpu-a" / "report.json")
    at = app(monkeypatch, tmp_path / "root")
    assert "outside the app's root" in at.error[0].value and not at.get("plotly_chart")


def test_a_corrupt_file_shows_an_error_box_and_the_app_keeps_working(monkeypatch, tmp_path):
    (tmp_path / "broken.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00 this was cut short")
    shutil.copy(DATA / "hand_decode.trace.json.gz", tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text('{"cells": [')
    at = app(monkeypatch, tmp_path, "trace: broken.trace.json.gz")
    assert "Cannot show broken\\.trace\\.json\\.gz" in at.error[0].value and not at.get("plotly_chart")
    at.selectbox(key="source").set_value("run: run").run()
    assert not at.exception and "Cannot show run:" in at.error[0].value
    at.selectbox(key="source").set_value("trace: hand_decode.trace.json.gz").run()
    assert not at.exception and not at.error and charts(at) == ["diagnosis_chart"]  # a trace opens on its answer
    at.radio(key="view").set_value("Step ledger").run()
    busy = named(chart(at, "ledger_chart"), "GPU busy")
    assert [t["x"] for t in busy] == [["0: prefill", "1: decode#0", "2: decode#1"]]


# ---- 0. the answer first -------------------------------------------------------------------------------------


def test_a_trace_opens_on_its_diagnosis(monkeypatch, public_root):
    """vLLM's decode is GPU-bound (docs/diagnosis.md): the verdict, its evidence line by line, then the chart."""
    at = app(monkeypatch, public_root, VLLM)
    assert at.radio(key="view").value == "Diagnosis"
    # the words of probe analyze (verdict.bound_words, the headline), the hole after the host window named in both
    assert at.subheader[0].value.replace("\\", "") == "GPU-bound, beside a 5.962 ms hole: the median decode step"
    text = at.markdown[0].value.replace("\\", "")
    assert "GPU-bound. The GPU works 10.718 ms for 2.253 ms of host work (4.76x)." in text
    assert "Beside it, a hole of 5.962 ms (56% of the measured step)" in text
    assert "5.962 ms after it closed" in at.markdown[1].value.replace("\\", "")
    busy = named(chart(at, "diagnosis_chart"), "GPU busy")[0]
    assert busy["x"] == [pytest.approx(10.717708)]
    assert any("does not name its device" in c.value for c in at.caption)  # so no roofline: said, not hidden


def test_every_view_and_rerun_of_a_trace_reads_it_once(monkeypatch, tmp_path):
    """The trace is parsed once and its ledger and answer built once, however many views and reruns show it: each is
    cached on the file's path, size and mtime. A touched file is read again."""
    trace = tmp_path / "t.trace.json.gz"  # a path no other test has cached
    shutil.copy(shared_trace("public/" + VLLM.removeprefix("trace: ")), trace)
    calls: dict[str, int] = {}

    def counted(name, real):
        def run(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(loaders, name, run)

    for name in ("load_trace", "analyze", "answer", "step_clock"):
        counted(name, getattr(loaders, name))
    at = app(monkeypatch, tmp_path, "trace: t.trace.json.gz")
    for view in ("Step ledger", "One step", "Op roofline", "Kernels", "Top ops", "Diagnosis", "One step"):
        at.radio(key="view").set_value(view).run()
        assert not at.exception, (view, at.exception)
    at.run()
    assert calls == {"load_trace": 1, "analyze": 1, "answer": 1, "step_clock": 1}
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1_000_000_000))
    at.run()
    assert calls["load_trace"] == 2 and calls["analyze"] == 2


def test_the_sglang_step_is_external_then_gpu_bound(monkeypatch, public_root):
    at = app(monkeypatch, public_root, SGLANG)
    assert at.subheader[0].value == "external, then GPU\\-bound: the median step"
    assert "60 B host to device copy" in at.markdown[0].value.replace("\\", "")
    bars = {t["name"]: t["x"] for t in chart(at, "diagnosis_chart")}
    assert bars["external wait"] == [pytest.approx(493.255004)]
    fixes = at.dataframe[0].value
    # what issue 32 priced: the wait was almost all on earlier work, so overlapping it saves the step's own 1.3 ms,
    # and the GPU work behind it (the step is GPU-bound once the wait is gone) saves more brought to its roof
    change = fixes["change"].tolist()
    assert change[0].startswith("bring the top GPU ops to their roof") and change[1:] == [
        "overlap the wait on unseen device work"
    ]


def test_a_trace_recorded_contended_opens_on_that_caveat(monkeypatch, tmp_path):
    """The sidecar's contention verdict (probe profile records it) is the Diagnosis's first word, as in
    probe analyze; the same trace recorded quiet has no such warning."""
    name = CACHED.removeprefix("trace: app/traces/").removesuffix(".trace.json.gz")
    for contended in (True, False):
        root = tmp_path / str(contended)
        root.mkdir()
        shutil.copy(DATA / "app" / "traces" / f"{name}.trace.json.gz", root)
        meta = json.loads((DATA / "app" / "traces" / f"{name}.meta.json").read_text())
        meta["contention"] = {"other_cpu_cores": 0.91, "contended": contended}
        (root / f"{name}.meta.json").write_text(json.dumps(meta))
        at = app(monkeypatch, root, f"trace: {name}.trace.json.gz", "Diagnosis")
        warned = [w.value.replace("\\", "") for w in at.warning if "recorded contended" in w.value]
        if contended:
            assert len(warned) == 1 and warned[0].startswith("recorded contended: 0.91 cores of other work"), warned
        else:
            assert warned == []


def test_a_model_in_the_sidebar_puts_the_roofline_beside_the_step(monkeypatch, public_root):
    """H100 Qwen1.5-0.5B by its preset name and 16 x 559 tokens (the trace's shapes; the flags agree): 2.686 GB to
    move and 5.768 TFLOP to do, 5.829 ms at the H100's peaks (tests/test_step_roofline.py works them out)."""
    at = app(monkeypatch, public_root, H100)
    at.text_input(key="model").set_value("qwen1.5-0.5b").run()
    at.number_input(key="tokens").set_value(8944).run()
    at.number_input(key="batch").set_value(16).run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value.set_index("figure")["value"]
    assert (table["bytes to move"], table["FLOPs to do"]) == ("2.686 GB", "5.768 TFLOP")
    # the trace's recorded shapes say 16 x 559 themselves (its embedding's indices): a flag fills only what it does not
    assert table["predicted GPU"] == "5.829 ms (compute binds)"
    assert table["tokens from"] == "recorded shapes (aten::embedding [16, 559])"
    assert any("the host term is what departs" in m.value for m in at.markdown)
    rows = {t["name"]: t["y"] for t in chart(at, "diagnosis_chart")}
    assert rows["traffic time"] == ["roofline traffic"] and rows["compute time"] == ["roofline compute"]
    fixes = at.dataframe[1].value
    # the sync priced by its own wait (issue 32; test_what_if derives it): 14.122 ms before, most of it on earlier work
    assert fixes["change"][0].startswith("remove the sync") and fixes["saving_ms"][0] == pytest.approx(2.233793)


def test_a_model_path_outside_the_root_is_refused(monkeypatch, tmp_path):
    shutil.copy(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"), tmp_path)
    (tmp_path.parent / "config.json").write_text(QWEN_PRESET.read_text())
    at = app(monkeypatch, tmp_path)
    at.text_input(key="model").set_value("../config.json").run()
    assert not at.exception and "outside the app's root" in at.sidebar.error[0].value
    assert "diagnosis_chart" in charts(at)  # the diagnosis stands without the roofline
    at.text_input(key="model").set_value("no-such-preset").run()
    assert not at.exception and "no\\-such\\-preset" in at.sidebar.error[0].value


def test_a_run_opens_on_its_predictions_and_each_trace_s_verdict(monkeypatch, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", run)
    (run / "traces").mkdir()
    shutil.copy(DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz", run / "traces")
    at = app(monkeypatch, tmp_path)
    assert at.radio(key="view").options == ["Diagnosis", "Sweep", "Compare", "Alerts"]
    report = json.loads((run / "report.json").read_text())
    bars = chart(at, "predictions_chart")
    ratios = [b + y for t in bars for b, y in zip(t["base"], t["y"], strict=True)]  # each bar from 1 to its ratio
    assert set(b for t in bars for b in t["base"]) == {1.0}
    assert sorted(ratios) == pytest.approx(sorted(p["ratio"] for p in report["predictions"]))
    claims = at.markdown[0].value.replace("\\", "")
    assert all(v["claim"] in claims for v in report["verdicts"])
    traces = at.markdown[-1].value.replace("\\", "")
    assert "tiny_cached_cpu_p16_n6.trace.json.gz" in traces and "CPU only" in traces and "view=Diagnosis" in traces


def test_a_run_whose_machine_was_not_measured_opens_without_its_predictions(monkeypatch, tmp_path):
    """report.json's machine is null when measuring the machine failed: no prediction, so no floor or bandwidth to
    caption, and both of the run's views still open."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", run)
    report = json.loads((run / "report.json").read_text())
    report.update(machine=None, predictions=[], failed={"machine": "the host floor could not be measured"})
    (run / "report.json").write_text(json.dumps(report))
    at = app(monkeypatch, tmp_path)
    assert "predictions_chart" in charts(at) and not any("host floor" in c.value for c in at.caption)
    at.radio(key="view").set_value("Sweep").run()
    assert not at.exception and "sweep_chart" in charts(at)
    assert not named(chart(at, "sweep_chart"), "host floor") and not any("Dashed" in c.value for c in at.caption)


def test_the_op_roofline_of_a_trace_with_shapes(monkeypatch, public_root):
    at = app(monkeypatch, public_root, H100, "Op roofline")
    points = [t for t in chart(at, "op_roofline_chart") if t["mode"] == "markers"]
    table = at.dataframe[0].value
    modelled = table[table["intensity"] != "-"]  # the table writes "-" where an op has no model, never "None"
    assert sum(len(t["x"]) for t in points) == len(modelled) > 10
    assert not table.isin(["None"]).any().any() and table.notna().all().all()
    roofs = [t["name"] for t in chart(at, "op_roofline_chart") if t["mode"] == "lines"]
    assert any(r.startswith("H100-SXM bfloat16 roof") for r in roofs)  # the trace names its device
    at = app(monkeypatch, public_root, CACHED, "Op roofline")
    assert "nothing to hold against the roofs" in at.info[0].value and not at.get("plotly_chart")


# ---- 1. sweep ------------------------------------------------------------------------------------------------


def test_sweep_plots_each_engine_with_the_prediction_lines(monkeypatch):
    at = app(monkeypatch, DATA, view="Sweep")
    assert shown(at, "source") == RUN_A and at.radio(key="view").value == "Sweep"
    traces = chart(at, "sweep_chart")
    for engine in ("cached", "naive"):
        lines = named(traces, engine)
        assert len(lines) == 3 and all(t["x"] == [16, 64, 256] for t in lines)
    results = json.loads((DATA / "app" / "runs" / "tiny-cpu-a" / "results.json").read_text())
    itl = {c["prompt_tokens"]: c["itl_p50_ms"] for c in results["cells"] if c["engine"] == "cached"}
    assert named(traces, "cached")[1]["y"] == [itl[16], itl[64], itl[256]]
    report = json.loads((DATA / "app" / "runs" / "tiny-cpu-a" / "report.json").read_text())
    floor = named(traces, "host floor")[0]
    assert floor["line"]["dash"] == "dash" and floor["y"][0] == report["machine"]["floor_ms"]
    assert named(traces, "bandwidth roofline")[0]["line"]["dash"] == "dot"
    assert "host floor" in at.caption[0].value
    assert not at.error  # every cell's tokens matched naive's


def test_sweep_flags_cells_whose_tokens_differ(monkeypatch, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", run)
    doc = json.loads((run / "results.json").read_text())
    cell = next(c for c in doc["cells"] if c["engine"] == "cached" and c["prompt_tokens"] == 64)
    cell["tokens_match_naive"] = False
    (run / "results.json").write_text(json.dumps(doc))
    (run / "report.json").unlink()  # a probe bench folder: no predictions
    at = app(monkeypatch, tmp_path, view="Sweep")
    flagged = named(chart(at, "sweep_chart"), "tokens differ from naive")
    assert [t["x"] for t in flagged] == [[64]] * 3
    assert "Tokens differ from naive's for: cached p64" in at.error[0].value
    assert not named(chart(at, "sweep_chart"), "host floor") and "No report.json" in at.caption[0].value


# ---- 2. step ledger ------------------------------------------------------------------------------------------


def test_step_ledger_of_our_cpu_trace(monkeypatch):
    at = app(monkeypatch, DATA, CACHED, "Step ledger")
    views = ["Diagnosis", "Step ledger", "One step", "Op roofline", "Kernels", "Top ops", "Compare", "Alerts"]
    assert at.radio(key="view").options == views
    traces = chart(at, "ledger_chart")
    steps = ["0: prefill"] + [f"{i + 1}: decode#{i}" for i in range(5)]  # by position, then name
    cache = named(traces, "host: cache bookkeeping")[0]
    assert cache["x"] == steps and all(y > 0 for y in cache["y"])
    line = [t for t in traces if t["type"] == "scatter"][0]
    counts = top_level_ops_per_step(CACHED)  # a stack walk over the trace's own events, step by step
    assert line["name"].startswith("top-level ops per step") and line["y"] == counts
    assert not named(traces, "GPU busy")
    assert {m.label: m.value for m in at.metric}["top-level ops / step"] == f"{counts[-1]}"


def test_step_ledger_of_a_public_gpu_trace(monkeypatch, public_root):
    at = app(monkeypatch, public_root, GPU, "Step ledger")
    traces = chart(at, "ledger_chart")
    busy = named(traces, "GPU busy")[0]
    assert busy["x"] == [f"{i}: ProfilerStep#{101 + i}" for i in range(5)] and all(y > 90 for y in busy["y"])
    line = [t for t in traces if t["type"] == "scatter"][0]
    assert line["name"].startswith("kernel launches per step") and line["y"] == [870] * 5
    assert "launches / step" in [m.label for m in at.metric]


def test_the_step_ledger_heads_with_the_diagnosis_not_the_host_window(monkeypatch, public_root):
    """vLLM's decode: the Step ledger's "step p50" was its 2.409 ms host window, where the Diagnosis measures the
    step at 10.718 ms (the GPU's work). The Diagnosis's figures come first now, the host window named as such."""
    at = app(monkeypatch, public_root, VLLM, "Step ledger")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["measured step"] == metrics["GPU work"] == "10.718 ms" and metrics["host window"] == "2.409 ms"
    assert metrics["host window p50 (not the measured step)"] == "2.409 ms" and "step p50" not in metrics
    assert at.markdown[0].value.replace("\\", "").startswith("**GPU-bound, beside a 5.962 ms hole**")


# ---- 3. one step ---------------------------------------------------------------------------------------------


def test_one_step_timeline_highlights_the_cache(monkeypatch):
    at = app(monkeypatch, DATA, CACHED, "One step")
    assert shown(at, "step") == judged(CACHED)  # the step the Diagnosis judged: the median decode step
    at.selectbox(key="step").set_value("3: decode#2").run()
    traces = chart(at, "timeline_chart")
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-timeline_chart")).proto.spec)
    lanes = spec["layout"]["yaxis"]["ticktext"]
    update = named(traces, "cache update")
    assert update and update[0]["orientation"] == "h"
    # cache.update ranges and the ops inside them feed cache_update: on a range lane and on an op lane
    assert {lanes[y].split(" ")[0] for y in update[0]["y"]} == {"ranges", "ops"}
    assert not any(lane.startswith("GPU") for lane in lanes)  # a CPU trace has no GPU lane
    parts = chart(at, "partitions_chart")
    assert {t["y"][0] for t in parts} == {"by purpose", "by mechanism"}
    frames_or_ops = [d.value for d in at.dataframe]
    assert frames_or_ops[0].columns[0] in ("frame", "op")  # the step's top frames, or its top ops


def test_one_step_of_a_gpu_trace(monkeypatch, public_root):
    at = app(monkeypatch, public_root, GPU, "One step")
    assert shown(at, "step") == judged(GPU) == "3: ProfilerStep#104"
    assert "(the median step, the one the Diagnosis judged)" in at.markdown[0].value
    traces = chart(at, "timeline_chart")
    assert any(t["name"].startswith("GPU: ") for t in traces)  # kernels by category on a stream lane
    assert [m.label for m in at.metric][:4] == ["measured step", "host window", "host work", "GPU work"]


def test_one_step_draws_the_vllm_decode_on_one_clock(monkeypatch, public_root):
    """vLLM's decode: 2.409 ms of host window, then its GPU work from 8.371 ms to 19.114 ms, after the host window
    closed: 434 GPU ops, 421 of them replayed by one hipGraphLaunch (the other 13: 9 copies, 4 kernels launched
    one by one). Picking a kernel draws the arrow from the call that launched it."""
    at = app(monkeypatch, public_root, VLLM, "One step")
    spec = _spec(at, "timeline_chart")
    lanes = spec["layout"]["yaxis"]["ticktext"]
    assert lanes[-2:] == ["GPU idle (this step's gaps)", "GPU 2 stream 0"]
    # the step read whole: its GPU window opens 8.370878 ms in and lasts 10.743181 ms (the ledger's figures)
    assert spec["layout"]["xaxis"]["range"] == [0, pytest.approx((8_370_878 + 10_743_181) / 1e6)]
    (lead,) = named(chart(at, "timeline_chart"), "before the step's first GPU op")
    assert lead["base"] == [0] and lead["x"] == [pytest.approx(8.370878)]
    assert not spec["layout"].get("annotations")
    options = at.selectbox(key="link").options
    assert sum("launch call hipGraphLaunch: its 421 GPU ops" in o for o in options) == 1
    kernel = next(o for o in options if " ms " in o and "launch call" not in o)  # the step's first GPU op
    at.selectbox(key="link").set_value(kernel).run()
    assert not at.exception
    (arrow,) = _spec(at, "timeline_chart")["layout"]["annotations"]
    assert arrow["ax"] < 2.409 < arrow["x"]  # from the launch inside the host window to a kernel after it


def test_zooming_into_the_step_draws_merged_events_one_by_one(monkeypatch, public_root):
    at = app(monkeypatch, public_root, VLLM, "One step")
    whole = sum(len(t["x"]) for t in chart(at, "timeline_chart") if t["type"] == "bar")
    assert any("merged" in c.value for c in at.caption)
    at.slider(key="window").set_value((8.3, 8.6)).run()
    assert not at.exception
    assert _spec(at, "timeline_chart")["layout"]["xaxis"]["range"] == [pytest.approx(8.3), pytest.approx(8.6)]
    zoomed = [t for t in chart(at, "timeline_chart") if t["type"] == "bar"]
    assert 0 < sum(len(t["x"]) for t in zoomed) < whole


def _spec(at: AppTest, key: str) -> dict:
    found = [c for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    assert found, f"no chart {key}"
    return json.loads(found[0].proto.spec)


def test_telemetry_samples_are_drawn_under_the_timeline(monkeypatch, tmp_path):
    import pandas as pd

    shutil.copy(DATA / "hand_decode.trace.json.gz", tmp_path)
    pd.DataFrame({"t_ns": [0, 10_000_000, 20_000_000], "rss_bytes": [1e8, 2e8, 3e8]}).to_parquet(
        tmp_path / "hand_decode.telemetry.parquet", index=False
    )  # the trace's own samples, as probe profile names them
    at = app(monkeypatch, tmp_path, view="One step")
    assert charts(at) == ["partitions_chart", "timeline_chart", "trace_telemetry_chart"]
    assert chart(at, "trace_telemetry_chart")[0]["y"] == [1e8, 2e8, 3e8]
    assert any("No clock anchor" in c.value for c in at.caption)  # no sidecar: drawn from their own start


def test_a_cpu_trace_s_gpu_columns_read_a_dash_not_zero(monkeypatch, public_root):
    table = app(monkeypatch, public_root, CACHED, "Step ledger").dataframe[0].value
    assert (table[["gpu_window_ms", "gpu_busy_ms", "gpu_idle_ms"]] == "-").all().all()  # nothing measured there
    assert (table["wall_ms"] > 0).all()
    gpu = app(monkeypatch, public_root, GPU, "Step ledger").dataframe[0].value
    assert (gpu["gpu_busy_ms"] > 90).all()  # a GPU trace's are figures (the ledger's own, above)


def test_a_long_source_label_is_shown_by_its_end_and_a_short_one_whole(monkeypatch, tmp_path):
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", tmp_path / "runs" / "a-long-run-folder-name-1")
    shutil.copy(DATA / "app" / "runs" / "tiny-cpu-a" / "results.json", tmp_path)  # the root itself: "run: ."
    at = app(monkeypatch, tmp_path)
    assert shown(at, "source") == "run: ." and not at.get("html")  # fits: drawn as it reads
    at.selectbox(key="source").set_value("run: runs/a-long-run-folder-name-1").run()
    styles = [h.proto.body for h in at.get("html")]
    assert len(styles) == 1 and ".st-key-source input:not(:focus) { direction: rtl;" in styles[0]


# ---- 4. top ops ----------------------------------------------------------------------------------------------


def test_top_ops_over_the_decode_steps_and_one_step(monkeypatch):
    at = app(monkeypatch, DATA, CACHED, "Top ops")
    assert shown(at, "top_ops_scope") == "all 5 decode steps" and at.selectbox(key="top_ops_scope").value is None
    bars = chart(at, "top_ops_chart")[0]
    assert bars["x"] == sorted(bars["x"]) and len(bars["x"]) == 10  # drawn bottom-up: largest last
    at.selectbox(key="top_ops_scope").set_value("0: prefill").run()
    assert not at.exception and len(chart(at, "top_ops_chart")[0]["x"]) == 20


def test_top_ops_over_every_step_says_so_once(monkeypatch, public_root):
    """A trace without decode steps is summarized over all its steps: "all 5 steps", not "all all steps"; a trace of
    one step over "its one step", not "all 1 steps"."""
    at = app(monkeypatch, public_root, GPU, "Top ops")
    assert shown(at, "top_ops_scope") == "all 5 steps"
    assert at.selectbox(key="top_ops_scope").options[1:] == [f"{i}: ProfilerStep#{101 + i}" for i in range(5)]
    at = app(monkeypatch, public_root, SGLANG, "Top ops")
    assert shown(at, "top_ops_scope") == "its one step"


# ---- 5. compare ----------------------------------------------------------------------------------------------


def test_compare_two_traces_by_category(monkeypatch, public_root):
    at = app(monkeypatch, public_root, CACHED, "Compare")
    assert "Pick a baseline" in at.info[0].value
    assert at.selectbox(key="baseline").options[0] == "(none)" and GPU in at.selectbox(key="baseline").options
    at.selectbox(key="baseline").set_value(NAIVE).run()
    traces = chart(at, "compare_chart")
    assert [t["name"] for t in traces] == [f"baseline: {NAIVE[7:]}", f"current: {CACHED[7:]}"]
    table = at.dataframe[0].value.set_index("what")
    assert table.loc["cache bookkeeping", "baseline"] == 0 and table.loc["cache bookkeeping", "current"] > 0
    decode = slice(1, None)  # the decode steps: their mean is what the comparison holds
    cached, naive = top_level_ops_per_step(CACHED)[decode], top_level_ops_per_step(NAIVE)[decode]
    assert table.loc["dispatch / step", "delta"] == sum(cached) / len(cached) - sum(naive) / len(naive)


def test_compare_two_runs_cell_by_cell(monkeypatch):
    at = app(monkeypatch, DATA, RUN_B, "Compare", baseline=RUN_A)
    traces = chart(at, "compare_chart")
    assert len(traces) == 6 and traces[0]["x"][0] == "naive p16 n8"  # in the run's cell order
    assert len(at.dataframe[0].value) == 18


# ---- 6. alerts -----------------------------------------------------------------------------------------------


def test_alerts_name_the_ops_that_grew(monkeypatch):
    at = app(monkeypatch, DATA, CACHED, "Alerts", baseline=NAIVE)
    assert at.error[0].value == "REGRESSION: 2 alert(s)"
    alerts = [m.value for m in at.markdown if m.value.startswith("- ")]
    naive = top_level_ops_per_step(NAIVE)[-1]
    assert len(alerts) == 2 and f"**decode** launches/step {naive}" in alerts[1] and "aten::copy\\_" in alerts[1]
    assert "launches/step" in at.dataframe[0].value["metric"].tolist()


def test_alerts_the_other_way_round_are_timing_alerts_only(monkeypatch):
    at = app(monkeypatch, DATA, NAIVE, "Alerts", baseline=CACHED)
    alerts = [m.value for m in at.markdown if m.value.startswith("- ")]
    # naive dispatches fewer ops than cached (no alert) but recomputes the prompt every step (slower).
    assert at.error[0].value == "REGRESSION: 1 alert(s)" and "**decode** host µs/step rose" in alerts[0]
    table = at.dataframe[0].value
    assert table[table["metric"] == "launches/step"]["verdict"].tolist() == ["improvement", "improvement"]


def test_alerts_across_devices_are_not_gated_and_say_what_changed(monkeypatch, public_root):
    """An H100 and an MI300X trace of one model: the device from each trace's deviceProperties, nothing gated, and
    what changed listed as probe compare lists it (kernels by category across vendors)."""
    at = app(monkeypatch, public_root, MI300X, "Alerts", baseline=H100)
    assert not at.error and any("device differs" in w.value for w in at.warning)
    assert "Not gated" in at.info[0].value
    changed = next(m.value for m in at.markdown if m.value.startswith("**What changed, per step**"))
    assert "kernel categories" in changed and "elementwise" in changed


def test_no_regression_is_said(monkeypatch, tmp_path):
    trace = DATA / CACHED.removeprefix("trace: ")
    for name in ("one", "two"):  # the same recording twice: equal counts, equal timings
        shutil.copy(trace, tmp_path / f"{name}.trace.json.gz")
    at = app(monkeypatch, tmp_path, "trace: two.trace.json.gz", "Alerts", baseline="trace: one.trace.json.gz")
    assert at.success[0].value == "No regression." and not at.error
    assert set(at.dataframe[0].value["verdict"]) <= {"ok", "too few samples"}


def test_alerts_on_configs_that_cannot_be_compared_is_an_error_box(monkeypatch, tmp_path):
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", tmp_path / "run")
    (tmp_path / "baselines").mkdir()
    shutil.copy(ROOT / "baselines" / "cpu-tiny.json", tmp_path / "baselines")  # 32 new tokens, the run has 8
    at = app(monkeypatch, tmp_path, "run: run", "Alerts", baseline="run: baselines/cpu-tiny.json")
    assert "probe compare cannot compare these" in at.error[0].value and "no cell in common" in at.error[0].value


@pytest.mark.parametrize("view", ["Compare", "Alerts"])
def test_a_prefill_is_not_held_to_a_decode_in_either_view(monkeypatch, public_root, view):
    """SGLang's prefill against vLLM's decode: before, Compare drew +21603% while Alerts refused. Both views refuse
    now, in probe compare's one line, and draw nothing."""
    at = app(monkeypatch, public_root, VLLM, view, baseline=SGLANG)
    assert at.error[0].value.replace("\\", "") == (  # md() escapes Markdown: the text as written
        "probe compare cannot compare these: mismatched configs: no step kind in common (baseline: prefill; "
        "current: decode)"
    )
    assert not at.get("plotly_chart") and not at.dataframe


SGLANG_DECODE = ROOT.parent / "shared" / "traces" / "engines" / "sglang_qwen3_decode_x3_tiled.json.gz"


@pytest.mark.skipif(not SGLANG_DECODE.exists(), reason="../shared/traces/engines is not here")
def test_two_engines_decodes_are_said_to_differ_the_same_way_in_both_views(monkeypatch, tmp_path):
    """SGLang's and vLLM's decode of 32 sequences over different cached contexts: Compare draws the figures without a
    percentage and Alerts gates nothing, each with the same warning, the rule's own line."""
    shutil.copy(SGLANG_DECODE, tmp_path / "sglang_decode.json.gz")
    shutil.copy(shared_trace("public/" + VLLM.removeprefix("trace: ")), tmp_path)
    sides = {"baseline": "trace: sglang_decode.json.gz"}
    compare = app(monkeypatch, tmp_path, VLLM, "Compare", **sides)
    alerts = app(monkeypatch, tmp_path, VLLM, "Alerts", **sides)
    said = [w.value for w in compare.warning]
    assert len(said) == 1 and "the steps did different work" in said[0] and "32,753 cached" in said[0]
    assert said[0] in [w.value for w in alerts.warning]
    assert (compare.dataframe[0].value["delta_pct"] == "-").all()  # no percentage across different work
    assert "%" not in " ".join(t.get("text") and " ".join(t["text"]) or "" for t in chart(compare, "compare_chart"))
    assert not alerts.error and "Not gated" in alerts.info[0].value
    assert set(alerts.dataframe[0].value["verdict"]) == {"skipped: work differs"}


@pytest.mark.parametrize("view", ["Sweep", "Compare", "Alerts"])
def test_every_run_view_renders_without_an_exception(monkeypatch, view):
    at = app(monkeypatch, DATA, RUN_A, view, baseline=RUN_B)
    assert not at.error or view == "Alerts"


# ---- any trace: kernels, Python frames, the analyze flags in the sidebar ----------------------------------------


def test_kernels_view_draws_categories_per_step_and_top_kernels(monkeypatch, public_root):
    at = app(monkeypatch, public_root, VLLM, "Kernels")
    bars = {t["name"]: t["y"] for t in chart(at, "kernel_categories_chart") if t["type"] == "bar"}
    # tests/test_any_trace.py holds these to a brute-force oracle; here the view must draw what the ledger says
    from probe.analysis.ledger.build import analyze
    from probe.analysis.trace import load_trace

    (step,) = analyze(load_trace(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz"))).steps
    assert {name: y[0] for name, y in bars.items()} == pytest.approx(
        {c: ns / 1e6 for c, ns in step.kernels_by_category.items()}
    )
    top = at.dataframe[-1].value
    assert top["kernel"][0].startswith("_matmul_ogs") and top["category"][0] == "moe"


def test_top_ops_view_shows_the_python_frames(monkeypatch, public_root):
    at = app(monkeypatch, public_root, VLLM, "Top ops")
    frames = at.dataframe[-1].value
    assert frames["frame"][0] == "vllm/v1/worker/gpu_model_runner.py(931): _update_states"
    assert "frames_chart" in charts(at)


def test_the_sidebar_sets_the_steps_regex_and_parts(monkeypatch, public_root):
    at = app(monkeypatch, public_root, VLLM, "Step ledger")
    at.text_input(key="steps").set_value("forward|execute_.*").run()
    at.text_area(key="parts").set_value("inputs=_prepare_inputs").run()
    assert not at.exception
    assert "found by --steps" in " ".join(c.value for c in at.caption).replace("\\", "")
    assert any(t["name"] == "host: part: inputs" for t in chart(at, "ledger_chart"))
    at.text_input(key="steps").set_value("(").run()
    assert "not a regular expression" in at.error[0].value and not at.exception


def test_no_view_draws_markup_from_the_names_in_a_trace(monkeypatch, tmp_path):
    """Op, kernel and step names holding a link, a style and emphasis (tests/test_view.py's hostile trace), in
    every trace view and against a baseline: every chart holds them as text (entities), no view as markup."""
    from tests.test_view import OURS, hostile_trace, strings

    hostile_trace(tmp_path / "evil.trace.json.gz")
    shutil.copy(tmp_path / "evil.trace.json.gz", tmp_path / "base.trace.json.gz")
    at = app(monkeypatch, tmp_path, "trace: evil.trace.json.gz")
    at.text_input(key="steps").set_value(".*evil step.*").run()
    at.selectbox(key="baseline").set_value("trace: base.trace.json.gz").run()
    drawn = []
    for view in ("Diagnosis", "Step ledger", "One step", "Op roofline", "Kernels", "Top ops", "Compare", "Alerts"):
        at.radio(key="view").set_value(view).run()
        assert not at.exception and not at.error, (view, at.error)
        for c in at.get("plotly_chart"):
            drawn.append(c.proto.id.rsplit("-", 1)[-1])
            assert [s for s in strings(json.loads(c.proto.spec)) if OURS.search(s)] == [], (view, drawn[-1])
        if view == "Step ledger":  # the names are there, as entities
            assert "0: &lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;it&lt;/i&gt; evi…" in strings(chart(at, "ledger_chart"))
    assert set(drawn) >= {"diagnosis_chart", "ledger_chart", "timeline_chart", "kernels_chart", "top_ops_chart"}
    assert {"partitions_chart", "compare_chart"} <= set(drawn)


def test_every_pattern_from_the_url_goes_through_analyze_options_parse(monkeypatch):
    """Issue 28 item 3: the URL's --steps, --part and --kernel-category reach the one place that compiles user
    patterns (AnalyzeOptions.parse, linear-time there), as they were typed; the app compiles none itself."""
    from probe.analysis.ledger.types import AnalyzeOptions

    seen = []
    parse = AnalyzeOptions.parse.__func__

    def recording(cls, steps=None, parts=(), kernel_categories=(), event_cost=None):
        seen.append((steps, tuple(parts), tuple(kernel_categories)))
        return parse(cls, steps, parts, kernel_categories, event_cost)

    monkeypatch.setattr(AnalyzeOptions, "parse", classmethod(recording))
    at = app(monkeypatch, DATA, "trace: hand_decode.trace.json.gz")
    at.text_input(key="steps").set_value("decode#[01]|prefill").run()
    at.text_area(key="parts").set_value("embed=aten::embedding\nsampling_ops=argmax").run()
    at.text_area(key="kernel_categories").set_value("mine=gemv_.*").run()
    assert not at.exception and not at.error
    assert seen[-1] == ("decode#[01]|prefill", ("embed=aten::embedding", "sampling_ops=argmax"), ("mine=gemv_.*",))


# ---- 7. history ------------------------------------------------------------------------------------------------

HISTORY = "history: probe-history.duckdb"
BENCH_CONFIG = "tiny float32 cached,naive p16,64,256 n8"


def history_root(tmp_path: Path) -> Path:
    """A root holding the two committed runs and a copy of the first with one aten::clone per layer added to the
    cached engine's decode step, recorded in that order at three commits, and a profiled trace before them."""
    import dataclasses
    import datetime as dt

    from probe.analysis.regression import history

    for name in ("tiny-cpu-a", "tiny-cpu-b"):
        shutil.copytree(DATA / "app" / "runs" / name, tmp_path / "runs" / name)
    shutil.copytree(tmp_path / "runs" / "tiny-cpu-a", tmp_path / "runs" / "extra-op")
    doc = json.loads((tmp_path / "runs" / "extra-op" / "results.json").read_text())
    for cell in doc["cells"]:
        if cell["engine"] == "cached" and cell["prompt_tokens"] == 16:
            cell["decode_ops"] += 4
            cell["decode_ops_by_op"]["aten::clone"] = 4
    (tmp_path / "runs" / "extra-op" / "results.json").write_text(json.dumps(doc))
    start = dt.datetime(2026, 1, 2, 9, 0)
    trace = history.file_record(DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz")
    records = [trace] + [history.folder_record(tmp_path / "runs" / n) for n in ("tiny-cpu-a", "tiny-cpu-b", "extra-op")]
    for i, record in enumerate(records):
        when = start + dt.timedelta(hours=i)
        history.append(
            tmp_path / history.DEFAULT_FILE,
            dataclasses.replace(record, commit=f"{i}" * 40, dirty=False, recorded_at=when),
        )
    return tmp_path


def test_history_view_marks_the_runs_check_flagged(monkeypatch, tmp_path):
    at = app(monkeypatch, history_root(tmp_path), HISTORY)
    assert at.radio(key="view").options == ["History"]
    assert shown(at, "history_config").startswith(BENCH_CONFIG)  # the one with the most runs first
    assert at.selectbox(key="history_unit").options[:2] == ["naive p16 n8", "cached p16 n8"]
    at.selectbox(key="history_unit").set_value("cached p16 n8").run()
    assert not at.exception
    traces = chart(at, "history_chart")
    launches = named(traces, "launches / step")[0]
    base = launches["y"][0]
    assert launches["x"] == [0, 1, 2] and launches["y"] == [base, base, base + 4]
    counted, timed = named(traces, history_figures.COUNT_ALERT)[0], named(traces, history_figures.TIMING_ALERT)[0]
    # plotly reads HTML in hover text: the alert's ">" is an entity there, and shows as written
    assert counted["x"] == [2] and "step 262 -&gt; 266 (+4): aten::clone 0 -&gt; 4 (new)" in counted["text"][0]
    # run 1 (tiny-cpu-b) against run 0: a slower session, caught by the timing rule
    assert timed["x"][0] == 1 and "host µs/step rose" in timed["text"][0]
    assert len(named(traces, "host µs/step (median step; a bench cell is not split)")[0]["y"]) == 3
    # the newest run is open: against its predecessor, the op it added
    assert at.selectbox(key="history_run").value == counted["customdata"][0]
    assert "REGRESSION" in at.error[0].value
    assert any("aten::clone 0 \\-\\> 4 \\(new\\)" in m.value for m in at.markdown)  # Markdown-escaped
    assert any("extra-op" in m.value and "?source=run" in m.value for m in at.markdown)  # a link to its folder


def test_history_opens_on_the_configuration_with_the_most_runs(monkeypatch, tmp_path):
    """Not on the most recent one: a profiled trace recorded after the three bench runs is one run, one bar."""
    import dataclasses
    import datetime as dt

    from probe.analysis.regression import history

    root = history_root(tmp_path)
    later = dt.datetime(2026, 1, 3, 9, 0)
    trace = history.file_record(DATA / "app" / "traces" / "tiny_naive_cpu_p16_n6.trace.json.gz")
    history.append(root / history.DEFAULT_FILE, dataclasses.replace(trace, commit="9" * 40, recorded_at=later))
    at = app(monkeypatch, root, HISTORY)
    configs = at.selectbox(key="history_config").options
    assert (
        configs[0].startswith(BENCH_CONFIG) and ", 3 runs)" in configs[0] and shown(at, "history_config") == configs[0]
    )
    assert "1 run)" in configs[1]  # the newest configuration, one run: second


def test_history_view_opens_an_older_run_and_splits_a_profiled_step(monkeypatch, tmp_path):
    at = app(monkeypatch, history_root(tmp_path), HISTORY)
    first = at.selectbox(key="history_run").options[-1]
    at.selectbox(key="history_run").set_value(first).run()
    assert not at.exception and "not enough history" in at.info[0].value
    profile = next(o for o in at.selectbox(key="history_config").options if o.startswith("profile"))
    at.selectbox(key="history_config").set_value(profile).run()
    at.selectbox(key="history_unit").set_value("cached p16 n6 decode").run()
    assert not at.exception
    bars = {t["name"]: t["y"] for t in chart(at, "history_chart") if t["type"] == "bar"}
    assert {"host: rest of model", "host: cache_update", "host: sample"} <= set(bars)  # the purpose partition
    from probe.analysis.ledger.build import analyze
    from probe.analysis.trace import load_trace

    decode = [s for s in analyze(load_trace(DATA / CACHED.removeprefix("trace: "))).steps if s.kind == "decode"]
    mean_wall_us = sum(s.wall_ns for s in decode) / len(decode) / 1e3
    assert sum(y[0] for y in bars.values()) == pytest.approx(mean_wall_us)  # the parts add up to the mean step


def test_a_broken_or_empty_history_is_an_error_or_a_hint(monkeypatch, tmp_path):
    from probe.analysis.regression import history

    (tmp_path / "broken.duckdb").write_text("not a database")
    with history.connect(tmp_path / "empty.duckdb", write=True):
        pass
    at = app(monkeypatch, tmp_path, "history: broken.duckdb")
    assert "not a DuckDB database" in at.error[0].value and not at.get("plotly_chart")
    at.selectbox(key="source").set_value("history: empty.duckdb").run()
    assert not at.exception and "No runs recorded" in at.info[0].value


def test_a_click_on_the_history_chart_names_its_run():
    from probe.explorer.figures.history import clicked_run

    assert clicked_run({"selection": {"points": [{"x": 2, "customdata": "20260102-110000-abcdef"}]}}) == (
        "20260102-110000-abcdef"
    )
    assert clicked_run({"selection": {"points": [{"customdata": ["r1"]}]}}) == "r1"
    assert clicked_run({"selection": {"points": []}}) is None and clicked_run(None) is None


def test_a_folder_of_rank_traces_opens_as_one_job(monkeypatch, tmp_path):
    """The cross-rank view: each rank's wall per step, the straggler circled and named; a trace that
    cannot be read is named and the others still load."""
    from tests.ranks import make_rank_traces

    make_rank_traces(tmp_path / "job", ranks=3, slow_rank=1, stretch=1.2)
    (tmp_path / "job" / "rank3.trace.json").write_text("not a trace")
    at = app(monkeypatch, tmp_path, "job: job", "Ranks")
    lines = chart(at, "ranks_chart")
    ranks = [t for t in lines if t["name"].startswith("rank")]
    walls = {t["name"]: t["y"] for t in ranks if t.get("yaxis", "y") == "y"}
    busy = {t["name"]: t["y"] for t in ranks if t.get("yaxis") == "y2"}  # a GPU job: busy per step below
    assert list(walls) == list(busy) == ["rank 0", "rank 1", "rank 2"] and all(len(y) == 5 for y in walls.values())
    for step in range(5):  # rank 1's events are stretched by 1.2: it is the slowest at every step
        assert walls["rank 1"][step] == pytest.approx(1.2 * walls["rank 0"][step], rel=1e-6)
    circled = next(t for t in lines if t["name"] == "straggler")  # no collective kernel: the slowest wall decides
    assert circled["y"] == walls["rank 1"]
    assert [m.value for m in at.metric] == ["3", "rank 1", "5 of 5 steps"]
    table = at.dataframe[0].value
    assert list(table["straggler"]) == list(table["slowest rank"]) == [1] * 5 and list(table["by"]) == ["wall"] * 5
    assert table["trails %"].tolist() == pytest.approx([20.0] * 5, abs=1e-4)
    assert any("rank3.trace.json" in e.value.replace("\\", "") for e in at.error)


def test_a_folder_of_unrelated_traces_is_a_list_not_a_job(monkeypatch, tmp_path):
    """Two traces of different runs in one folder are not ranks (probe.analysis.ledger.ranks's rule): the Ranks view
    says
    why and links each trace, and draws no cross-rank chart."""
    (tmp_path / "two").mkdir()  # named as ranks (so listed as a job), but their steps differ
    shutil.copy(DATA / "hand_decode.trace.json.gz", tmp_path / "two" / "rank0.trace.json.gz")
    shutil.copy(DATA / CACHED.removeprefix("trace: "), tmp_path / "two" / "rank1.trace.json.gz")
    at = app(monkeypatch, tmp_path, "job: two", "Ranks")
    assert not at.exception and not at.get("plotly_chart") and not at.metric
    assert "not the ranks of one job" in at.info[0].value
    links = [m.value for m in at.markdown if "rank0.trace.json.gz" in m.value or "rank1.trace.json.gz" in m.value]
    assert len(links) == 2 and all("](" in m for m in links)


def test_a_sweep_with_a_failed_cell_shows_its_error(monkeypatch, tmp_path):
    run = tmp_path / "runs" / "r"
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", run)
    results = json.loads((run / "results.json").read_text())
    failed = {"engine": "cached", "prompt_tokens": 4096, "new_tokens": 8, "batch": 1, "status": "failed"}
    results["cells"].append(
        failed | {"error": "OutOfMemoryError: CUDA out of memory", "host": "gpu-7", "device": "cuda:3"}
    )
    (run / "results.json").write_text(json.dumps(results))
    at = app(monkeypatch, tmp_path, "run: runs/r", "Sweep")
    errors = [e.value.replace("\\", "") for e in at.error]
    assert any("cached p4096 failed on gpu-7 cuda:3: OutOfMemoryError: CUDA out of memory" in e for e in errors)
    assert 4096 not in chart(at, "sweep_chart")[0]["x"]  # the figures hold the finished cells only


# ---- hostile files: each is one line, and the app keeps working (issue 28 items 14 and 17) ----------------------


def test_a_file_name_that_is_not_utf8_is_listed_and_opened(monkeypatch, tmp_path):
    """Names are bytes: one that is not UTF-8 (Latin-1 é) is shown with its byte escaped, and opens."""
    root = os.fsencode(tmp_path)
    shutil.copy(DATA / "hand_decode.trace.json.gz", os.fsdecode(root + b"/caf\xe9.trace.json.gz"))
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", os.fsdecode(root + b"/run-\xff"))
    at = app(monkeypatch, tmp_path)
    labels = at.selectbox(key="source").options
    assert labels == ["run: run-\\xff", "trace: caf\\xe9.trace.json.gz"]
    assert charts(at) == ["predictions_chart"] and not at.error  # a run opens on its predictions
    at.selectbox(key="source").set_value("trace: caf\\xe9.trace.json.gz").run()
    assert not at.exception and not at.error
    at.radio(key="view").set_value("Step ledger").run()
    busy = named(chart(at, "ledger_chart"), "GPU busy")
    assert [t["x"] for t in busy] == [["0: prefill", "1: decode#0", "2: decode#1"]]


def test_a_fifo_where_a_file_belongs_is_one_line_not_a_hang(monkeypatch, tmp_path):
    """A FIFO named as a history, a run's results.json, its telemetry or a trace: each source says it is not a
    regular file (a reader would wait for a writer forever), and every other source still opens."""
    os.mkfifo(tmp_path / "runs.duckdb")
    os.mkfifo(tmp_path / "stuck.trace.json")
    (tmp_path / "fifo-run").mkdir()
    os.mkfifo(tmp_path / "fifo-run" / "results.json")
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", tmp_path / "good-run")
    os.mkfifo(tmp_path / "good-run" / "telemetry.parquet")
    at = app(monkeypatch, tmp_path, "history: runs.duckdb")
    assert "not a regular file" in at.error[0].value and not at.get("plotly_chart")
    for source in ("run: fifo-run", "trace: stuck.trace.json"):
        at.selectbox(key="source").set_value(source).run()
        assert not at.exception and "not a regular file" in at.error[0].value.replace("\\", ""), source
    at.selectbox(key="source").set_value("run: good-run").run()
    at.radio(key="view").set_value("Sweep").run()
    assert charts(at) == ["sweep_chart"] and len(at.error) == 1 and "not a regular file" in at.error[0].value
