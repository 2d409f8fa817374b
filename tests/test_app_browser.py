"""The explorer in a real browser: `probe app` serves app.py on 127.0.0.1 (a free port), headless Chromium opens
it through Playwright, waits for the plotly charts to draw, checks that they hold data, and saves a screenshot
of each view into SCREENSHOTS (printed in the log; CI keeps the folder as an artifact).

Chromium is Debian's (/usr/bin/chromium, `apt-get install chromium`), never Playwright's download. Without
it or the playwright package the test skips and says why, except in CI (PROBE_CI=1), where it fails.

`python -m tests.test_app_browser --root DIR --run RUN --trace TRACE` (from the checkout) takes the README's
screenshots the same way.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from probe.explorer.figures.style import HOST_CATEGORIES
from tests.conftest import IN_CI, SHARED, shared_trace  # PROBE_CI=1: a missing browser fails instead of skipping
from tests.ranks import make_rank_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
QWEN_PRESET = ROOT / "engines" / "presets" / "qwen1.5-0.5b.json"
CHROMIUM = Path(os.environ.get("PROBE_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(os.environ.get("PROBE_SCREENSHOTS", ROOT / "build" / "app-screenshots"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_S = 90  # streamlit's first start on a busy 2-core machine
DRAW_MS = 60_000  # a chart's first draw, parse of the trace included
GPU_TRACES = (  # in ../shared/traces/public (TraceLens's and HTA's test data)
    "rocm_vllm_decode_cudagraph.trace.json.gz",
    "h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
    "cuda_train_ns_resolution_5steps.trace.json.gz",
)


def missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright Python package is not installed (pip install -e '.[dev]')"
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; never `playwright install`)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(root: Path, log: Path):
    """`probe app --root ROOT` on a free port until the block ends; yields the base URL."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "probe", "app", "--root", str(root), "--port", str(port)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"probe app did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url, port
    finally:  # the whole session: probe app execs streamlit, but nothing it started may outlive the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on `port` (IPv4 and IPv6), from /proc via psutil."""
    import psutil

    return {
        c.laddr.ip
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def websocket_handshake(port: int, host: str) -> str:
    """The status line the app's WebSocket answers a browser's handshake with, sent with this Host (and the
    Origin a page served under that name sends)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: streamlit\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return s.recv(4096).split(b"\r\n", 1)[0].decode()


def test_a_page_that_rebinds_its_name_to_this_machine_is_refused(tmp_path):
    """DNS rebinding: a web page whose name now resolves to 127.0.0.1 reaches the port, but its browser sends its
    own name as Host, and the app's WebSocket (the only way to its data) refuses it; this machine's names pass."""
    with serve(DATA, tmp_path / "streamlit.log") as (_, port):
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert websocket_handshake(port, host) == "HTTP/1.1 101 Switching Protocols", host
        for host in (f"rebound.example:{port}", "rebound.example", f"127.0.0.1.rebound.example:{port}"):
            assert websocket_handshake(port, host) == "HTTP/1.1 403 Forbidden", host


# The app's run has ended: Streamlit marks its root with the script's state (the status widget shows only after a
# moment, so a run still computing its second chart can look idle by that alone).
IDLE_JS = """() => { const app = document.querySelector('[data-testid="stApp"]');
    return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
        && !document.querySelector('[data-testid="stStatusWidget"]'); }"""

# What a drawn chart holds: per plotly div, its traces' names and point counts (plotly's own parsed data).
FIGURES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => (d._fullData || []).map(
    t => ({name: t.name, type: t.type, n: (t.x ? t.x.length : 0)})))"""


def open_view(page, url: str, query: dict[str, str], wait_for: str, shot: Path) -> list[list[dict]]:
    """Open a deep link (widgets bound to query params), wait until a chart with a trace named `wait_for` has
    data and the app has stopped running, screenshot the page, and return every chart's traces."""
    page.goto(f"{url}/?{urllib.parse.urlencode(query)}")
    return settle(page, wait_for, shot)


def settle(page, wait_for: str, shot: Path) -> list[list[dict]]:
    page.wait_for_function(
        """name => Array.from(document.querySelectorAll('.js-plotly-plot')).some(d =>
               (d._fullData || []).some(t => t.name === name && t.x && t.x.length > 0))""",
        arg=wait_for,
        timeout=DRAW_MS,
    )
    page.wait_for_function(IDLE_JS, timeout=DRAW_MS)
    page.wait_for_timeout(500)  # plotly's transition after the last rerun
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    return page.evaluate(FIGURES_JS)


def drawn_points(page) -> int:
    """SVG marks plotly drew: bar rectangles and scatter markers across every chart."""
    return page.evaluate("() => document.querySelectorAll('.js-plotly-plot .point').length")


@pytest.fixture(scope="module")
def browser():
    reason = missing()
    if reason:
        if IN_CI:
            pytest.fail(f"PROBE_CI=1 and {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


# Under xdist (.ci/run) the browser's tests share one worker, and so its one Chromium.
@pytest.mark.xdist_group("browser")
@pytest.mark.browser
@pytest.mark.slow
def test_the_app_draws_every_kind_of_chart_in_chromium(browser, capsys, tmp_path):
    with serve(DATA, tmp_path / "streamlit.log") as (url, port):
        assert listening_addresses(port) == {"127.0.0.1"}  # probe app binds to this machine only
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        run = open_view(page, url, {"source": "run: app/runs/tiny-cpu-a"}, "cached", SCREENSHOTS / "run-diagnosis.png")
        assert {t["name"] for t in run[0]} == {"naive", "cached"}  # a run opens on its predictions

        sweep = open_view(
            page, url, {"source": "run: app/runs/tiny-cpu-a", "view": "Sweep"}, "cached", SCREENSHOTS / "sweep.png"
        )
        names = {t["name"]: t["n"] for t in sweep[0]}
        assert names["cached"] == names["naive"] == 3 and names["host floor"] == 3
        assert drawn_points(page) >= 18  # 2 engines x 3 prompts x 3 panels

        cpu = {"source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz"}
        ledger = open_view(
            page, url, cpu | {"view": "Step ledger"}, "host: cache bookkeeping", SCREENSHOTS / "ledger-cpu.png"
        )
        names = {t["name"]: t["n"] for t in ledger[0]}
        assert names["host: rest of model"] == names["by mechanism: op dispatch"] == 6
        assert any(n.startswith("top-level ops per step") for n in names)
        assert drawn_points(page) >= 6 * 7

        # A real click: the One step view of the same trace, through its radio button.
        page.get_by_text("One step", exact=True).click()
        timeline = settle(page, "cache update", SCREENSHOTS / "one-step-cpu.png")
        bars = {t["name"]: t["n"] for chart in timeline for t in chart}
        assert bars["cache update"] >= 4 and bars["op dispatch"] > 0
        assert "view=One+step" in page.url  # the radio is bound to the URL: a view can be linked to

        alerts = {
            "source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz",
            "view": "Compare",
            "baseline": "trace: app/traces/tiny_naive_cpu_p16_n6.trace.json.gz",
        }
        compare = open_view(
            page, url, alerts, "current: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz", SCREENSHOTS / "compare.png"
        )
        n = 1 + len(HOST_CATEGORIES)  # wall and the host categories by purpose: a CPU trace has no GPU
        assert [t["n"] for t in compare[0]] == [n, n]

        assert not errors, errors
    with capsys.disabled():
        print(f"\napp screenshots: {SCREENSHOTS}")
    for name in ("run-diagnosis", "sweep", "ledger-cpu", "one-step-cpu", "compare"):
        assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000


@pytest.mark.xdist_group("browser")
@pytest.mark.browser
@pytest.mark.slow
def test_the_app_draws_the_public_gpu_traces_in_chromium(browser, tmp_path):
    """The GPU views on three public traces of ../shared/traces, copied beside each other under a root of their own
    (the app reads only under its root)."""
    root = tmp_path / "root"
    root.mkdir()
    for name in GPU_TRACES:
        shutil.copy(shared_trace(f"public/{name}"), root)
    with serve(root, tmp_path / "streamlit.log") as (url, _):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        vllm = {"source": "trace: rocm_vllm_decode_cudagraph.trace.json.gz"}
        diagnosis = open_view(page, url, vllm, "GPU busy", SCREENSHOTS / "diagnosis-vllm.png")
        assert {"GPU busy", "Python", "external wait"} <= {t["name"] for t in diagnosis[0]}
        clock = open_view(page, url, vllm | {"view": "One step"}, "GPU: gemm", SCREENSHOTS / "one-step-vllm.png")
        lanes = {t["name"] for chart in clock for t in chart}
        assert {"before the step's first GPU op", "GPU idle: kernel wait", "Python", "launch calls"} <= lanes

        h100 = {"source": "trace: h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz", "view": "Op roofline"}
        roofline = open_view(page, url, h100, "compute-bound", SCREENSHOTS / "op-roofline.png")
        assert any(t["name"].startswith("H100-SXM bfloat16 roof") for t in roofline[0])

        gpu = open_view(
            page,
            url,
            {"source": "trace: cuda_train_ns_resolution_5steps.trace.json.gz", "view": "Step ledger"},
            "GPU busy",
            SCREENSHOTS / "ledger-gpu.png",
        )
        names = {t["name"]: t["n"] for t in gpu[0]}
        assert names["GPU busy"] == names["GPU idle"] == 5

        kernels = open_view(page, url, vllm | {"view": "Kernels"}, "gemm", SCREENSHOTS / "kernels.png")
        categories = {t["name"] for t in kernels[0]}
        assert {"gemm", "attention", "kv_cache", "GPU busy"} <= categories
        assert len(kernels[1]) == 1 and kernels[1][0]["n"] == 20  # the top 20 kernels of the trace
        assert not errors, errors
    for name in ("diagnosis-vllm", "one-step-vllm", "op-roofline", "ledger-gpu", "kernels"):
        assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000


# ---- the pictures agree with the answer (issue 35) ---------------------------------------------------------------

# Every trace of the plotly chart that holds a trace called `name`: its points as plotly parsed them.
CHART_JS = """name => { const d = Array.from(document.querySelectorAll('.js-plotly-plot')).find(d =>
        (d._fullData || []).some(t => t.name === name));
    const list = v => (v === undefined || v === null) ? [] : Array.from(v);
    return d ? d._fullData.map(t => ({name: t.name, type: t.type, mode: t.mode || '', x: list(t.x), y: list(t.y),
        customdata: list(t.customdata).map(list)})) : null; }"""
# Each metric the page shows: its label and its value, as written.
METRICS_JS = """() => Object.fromEntries(Array.from(document.querySelectorAll('[data-testid="stMetric"]')).map(m =>
    [m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(),
     m.querySelector('[data-testid="stMetricValue"]').innerText.trim()]))"""
# What a selectbox shows: its text, and the value of its input (where Streamlit writes the picked option).
PICKED_JS = """key => { const box = document.querySelector('.st-key-' + key);
    return box.textContent + ' ' + Array.from(box.querySelectorAll('input')).map(i => i.value).join(' '); }"""
# The metrics whose value does not fit its column (the browser cuts it with an ellipsis).
CUT_METRICS_JS = """() => Array.from(document.querySelectorAll('[data-testid="stMetricValue"]')).filter(v =>
    Array.from(v.querySelectorAll('*')).concat([v]).some(e => e.scrollWidth > e.clientWidth + 1))
    .map(v => v.innerText)"""
GPT_OSS = ROOT.parent / "shared" / "traces" / "engines" / "vllm_gptoss_mixed_x4_tiled.json.gz"
EXTERNAL = "external wait (no GPU op of the trace ran)"


def chart_of(page, name: str) -> list[dict]:
    """The traces of the chart holding a trace called `name` (each with x, y and customdata)."""
    traces = page.evaluate(CHART_JS, name)
    assert traces is not None, f"no chart holds {name!r}"
    return traces


def open_without_chart(page, url: str, query: dict[str, str], shot: Path) -> str:
    """Open a deep link to a view that answers in words (an error box, a warning), wait for the run to end, and
    screenshot it; the page's text."""
    page.goto(f"{url}/?{urllib.parse.urlencode(query)}")
    page.wait_for_selector('[data-testid="stAlert"]', timeout=DRAW_MS)
    page.wait_for_function(IDLE_JS, timeout=DRAW_MS)
    page.wait_for_timeout(500)
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    return page.evaluate("() => document.body.innerText")


def contended_run(folder: Path) -> Path:
    """The committed run with its p64 cells marked as measured while other processes took 1.5 cores."""
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", folder)
    doc = json.loads((folder / "results.json").read_text())
    for cell in doc["cells"]:
        if cell["prompt_tokens"] == 64:
            cell["contended"], cell["other_cpu_cores"] = True, 1.5
    (folder / "results.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.xdist_group("browser")
@pytest.mark.browser
@pytest.mark.slow
def test_the_pictures_agree_with_the_answer_in_chromium(browser, capsys, tmp_path):
    """Issue 35's numbered items, each as the browser draws it, with a screenshot (SCREENSHOTS/issue35/) and an
    assertion on the figure shown, against the Diagnosis `probe analyze` prints (computed here from the same trace)."""
    from probe.analysis.diagnosis.evidence import Context
    from probe.analysis.diagnosis.verdict import diagnose_trace
    from probe.analysis.ledger.build import analyze
    from probe.analysis.roofline.devices import device
    from probe.analysis.trace import load_trace

    root = tmp_path / "root"
    (root / "traces").mkdir(parents=True)
    for name in (
        "h100_hf_qwen1.5-0.5b_prefill_b16",
        "mi300x_hf_qwen1.5-0.5b_prefill_b16",
        "rocm_vllm_decode_cudagraph",
        "rocm_sglang_qwen3_8b_extend_step",
        "cuda_train_ns_resolution_5steps",
    ):
        shutil.copy(shared_trace("public", f"{name}.trace.json.gz"), root / "traces")
    contended_run(root / "contended")
    if GPT_OSS.is_file():
        shutil.copy(GPT_OSS, root / "traces")
    shots = SCREENSHOTS / "issue35"
    h100, vllm = (
        "trace: traces/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
        "trace: traces/rocm_vllm_decode_cudagraph.trace.json.gz",
    )
    answer = {}
    for name in ("h100_hf_qwen1.5-0.5b_prefill_b16", "rocm_vllm_decode_cudagraph"):
        trace = load_trace(shared_trace("public", f"{name}.trace.json.gz"))
        answer[name] = diagnose_trace(analyze(trace), Context.of(trace)).median.evidence
    with serve(root, tmp_path / "streamlit.log") as (url, _):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        # 1. steps keyed by position: gpt-oss's four steps of one name are four bars of about 156 ms
        if GPT_OSS.is_file():
            source = {"source": f"trace: traces/{GPT_OSS.name}", "view": "Kernels"}
            open_view(page, url, source, "GPU busy", shots / "1-kernels-gpt-oss.png")
            bars = [t for t in chart_of(page, "GPU busy") if t["type"] == "bar"]
            assert all(len(t["x"]) == 4 for t in bars) and [x[:3] for x in bars[0]["x"]] == ["0: ", "1: ", "2: ", "3: "]
            heights = [sum(t["y"][i] for t in bars) for i in range(4)]
            assert heights == pytest.approx([156.086] * 4, abs=0.01), heights

        # 2. One step of the H100 prefill: its external wait is the Diagnosis's 0.722 ms, never most of the 14.1 ms sync
        open_view(page, url, {"source": h100, "view": "One step"}, "GPU: gemm", shots / "2-one-step-h100.png")
        drawn = sum(sum(t["x"]) for t in chart_of(page, "GPU: gemm") if t["name"] == EXTERNAL)
        said = answer["h100_hf_qwen1.5-0.5b_prefill_b16"].external_wait_ns / 1e6
        assert drawn == pytest.approx(said, abs=1e-6) and drawn <= 0.8, (drawn, said)
        assert page.evaluate(CUT_METRICS_JS) == []  # every figure of the step read whole, none cut to "47.151…"

        # 3. Op roofline: no point over its roof without over_roof and why, and the ops' coverage said
        for name, dev in (
            ("h100_hf_qwen1.5-0.5b_prefill_b16", "H100-SXM"),
            ("mi300x_hf_qwen1.5-0.5b_prefill_b16", "MI300X"),
        ):
            query = {"source": f"trace: traces/{name}.trace.json.gz", "view": "Op roofline"}
            open_view(page, url, query, "compute-bound", shots / f"3-op-roofline-{name.split('_')[0]}.png")
            roofs, over = device(dev), 0
            for t in chart_of(page, "compute-bound"):
                for x, y, data in zip(t["x"], t["y"], t["customdata"], strict=True) if t["mode"] == "markers" else ():
                    peak = roofs.flops_s(data[2]) if data[2] != "no dtype" else None
                    if peak is not None and y > min(peak, x * roofs.memory_bandwidth_bytes_s) / 1e12 * (1 + 1e-9):
                        assert data[7].startswith("over its roof: "), (name, data)
                        over += 1
            text = page.evaluate("() => document.body.innerText")
            assert "The ops with a model hold " in text and "of GPU work" in text, name

        # 4. Compare and Alerts refuse a prefill against a decode in the same line, and draw no percentage
        for view in ("Compare", "Alerts"):
            query = {
                "source": vllm,
                "view": view,
                "baseline": "trace: traces/rocm_sglang_qwen3_8b_extend_step.trace.json.gz",
            }
            text = open_without_chart(page, url, query, shots / f"4-{view.lower()}-prefill-vs-decode.png")
            assert "no step kind in common (baseline: prefill; current: decode)" in text, view
            assert page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length") == 0 and "%" not in text

        # 5. the Step ledger heads with the Diagnosis's measured step, not the host window; contended cells marked
        open_view(page, url, {"source": vllm, "view": "Step ledger"}, "GPU busy", shots / "5-ledger-vllm.png")
        metrics = page.evaluate(METRICS_JS)
        e = answer["rocm_vllm_decode_cudagraph"]
        assert metrics["measured step"] == f"{e.measured_ns / 1e6:.3f} ms" == "10.718 ms", metrics
        assert metrics["host window"] == f"{e.wall_ns / 1e6:.3f} ms" and "step p50" not in metrics
        assert page.evaluate(CUT_METRICS_JS) == []
        open_view(page, url, {"source": "run: contended", "view": "Sweep"}, "cached", shots / "5-sweep-contended.png")
        crossed = [t for t in chart_of(page, "cached") if t["name"] == "contended: other processes took the CPU"]
        assert crossed and all(t["x"] == [64, 64] for t in crossed)
        open_view(page, url, {"source": "run: contended"}, "cached", shots / "5-run-diagnosis-contended.png")
        assert "2 of 6 cells ran while other processes used the CPU" in page.evaluate("() => document.body.innerText")

        # 6. One step opens on the step the Diagnosis judged (the median step), not step 0
        query = {"source": "trace: traces/cuda_train_ns_resolution_5steps.trace.json.gz", "view": "One step"}
        open_view(page, url, query, "GPU idle: kernel wait", shots / "6-one-step-judged.png")
        assert "3: ProfilerStep#104" in page.evaluate(PICKED_JS, "step")
        said = page.evaluate("() => document.body.innerText")
        assert "(the median step, the one the Diagnosis judged)" in said and "not the median step" not in said

        # 7. a refused link says why in one line, naming no path outside the root
        query = {"source": "trace: ../outside.trace.json.gz"}
        text = open_without_chart(page, url, query, shots / "7-refused-link.png")
        alerts = page.evaluate("""() => Array.from(document.querySelectorAll('[data-testid="stAlert"]'))
            .map(a => a.innerText).join(' | ')""")
        assert "The link's trace lies outside the app's root, so it is not opened." in alerts
        assert str(tmp_path) not in alerts and "outside.trace" not in alerts  # the sidebar names the root, nothing else

        # 8. the hole with no work of the trace in the headline and in the Diagnosis chart
        open_view(page, url, {"source": vllm}, "GPU busy", shots / "8-diagnosis-hole.png")
        hole = e.hole_ns / 1e6
        heading = page.locator('[data-testid="stMain"] [data-testid="stHeading"]').first.inner_text()
        assert heading.startswith(f"GPU-bound, beside a {hole:.3f} ms hole"), heading
        (piece,) = [t for t in chart_of(page, "GPU busy") if t["name"] == "hole: no work of the trace"]
        assert sum(piece["x"]) == pytest.approx(hole, abs=1e-6)
        assert not errors, errors
    with capsys.disabled():
        print(f"\nissue 35 screenshots: {shots}")


@pytest.mark.xdist_group("browser")
@pytest.mark.browser
@pytest.mark.slow
def test_names_that_are_markup_are_drawn_as_text_in_chromium(browser, tmp_path):
    """Plotly turns <a href> in a label into a link and <span style> into a style: the hostile trace's op and
    kernel names (tests/test_view.py) are drawn as the characters they are, and no chart holds a link."""
    from tests.test_view import LINK, hostile_trace

    hostile_trace(tmp_path / "evil.trace.json.gz")
    with serve(tmp_path, tmp_path / "streamlit.log") as (url, _):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        for view in ("Diagnosis", "Top ops", "Kernels", "One step"):
            time_to_charts(page, url, {"source": "trace: evil.trace.json.gz", "view": view})
            links = page.evaluate("() => document.querySelectorAll('.js-plotly-plot a').length")
            styled = page.evaluate(
                "() => Array.from(document.querySelectorAll('.js-plotly-plot [style]')).filter(e =>"
                " (e.getAttribute('style') || '').includes('90px')).length"
            )
            assert links == 0 and styled == 0, view
            if view == "Top ops":  # the op's name on the axis, as written
                ticks = page.evaluate("() => document.querySelector('.js-plotly-plot').textContent")
                assert f"aten::addmm{LINK}" in ticks


# ---- time to the first chart ------------------------------------------------------------------------------------

# A chart is drawn when plotly has parsed data for it (its div's _fullData) with at least one point.
FIRST_CHART_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(d =>
    (d._fullData || []).some(t => (t.x && t.x.length > 0) || (t.y && t.y.length > 0)))"""
# Every chart element the app sent, drawn: how many, or -1 while one is still waiting for plotly.
ALL_DRAWN_JS = """() => { const charts = document.querySelectorAll('[data-testid="stPlotlyChart"]');
    const drawn = Array.from(charts).filter(c => { const d = c.querySelector('.js-plotly-plot');
        return d && (d._fullData || []).length > 0; });
    return drawn.length === charts.length ? charts.length : -1; }"""


def time_to_charts(page, url: str, query: dict[str, str]) -> tuple[float, float, int]:
    """Seconds from navigation to the first plotly chart drawn with data, and to the app's run ending with every
    chart it sent drawn; and how many charts that was."""
    start = time.perf_counter()
    page.goto(f"{url}/?{urllib.parse.urlencode(query)}")
    page.wait_for_function(FIRST_CHART_JS, timeout=DRAW_MS)
    first = time.perf_counter() - start
    page.wait_for_function(IDLE_JS, timeout=DRAW_MS)
    drawn = page.wait_for_function(f"() => {{ const n = ({ALL_DRAWN_JS})(); return n >= 1 ? n : 0; }}", timeout=DRAW_MS)
    return first, time.perf_counter() - start, drawn.json_value()  # counted when all were drawn, not a moment later


# The One step chart (the one with lanes) and how long the browser takes to zoom it and to show a hover there.
TIMELINE_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).find(d =>
    d._fullLayout && d._fullLayout.yaxis && (d._fullLayout.yaxis.ticktext || []).length > 2)"""


def interaction_times(page) -> str:
    """On the One step chart: seconds from a drag-zoom to plotly's redraw at the new range, and from a hover to its
    label showing; '' when the view has no such chart."""
    if not page.evaluate(f"() => !!({TIMELINE_JS})()"):
        return ""
    page.evaluate(f"() => ({TIMELINE_JS})().scrollIntoView({{block: 'center'}})")
    page.wait_for_timeout(300)
    box = page.evaluate(f"""() => {{ const d = ({TIMELINE_JS})();
        const r = d.querySelector('.nsewdrag').getBoundingClientRect();
        return {{x: r.x, y: r.y, w: r.width, h: r.height, range: d._fullLayout.xaxis.range.slice()}}; }}""")
    y = box["y"] + min(box["h"] * 0.9, 800)  # on screen: a tall chart is centred in the viewport
    start = time.perf_counter()
    page.mouse.move(box["x"] + box["w"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["w"] * 0.6, y, steps=4)
    page.mouse.up()
    page.wait_for_function(
        f"r => {{ const d = ({TIMELINE_JS})(); return d && d._fullLayout.xaxis.range[0] !== r[0]; }}",
        arg=box["range"],
        timeout=DRAW_MS,
    )
    zoom = time.perf_counter() - start
    start = time.perf_counter()
    page.mouse.move(box["x"] + box["w"] * 0.45, y)
    page.mouse.move(box["x"] + box["w"] * 0.46, y)
    try:
        page.wait_for_function("() => !!document.querySelector('.hoverlayer .hovertext')", timeout=5_000)
        hover = f"{time.perf_counter() - start:4.2f} s"
    except Exception:  # the pointer fell on no bar: nothing to show, not a failure
        hover = "none under the pointer"
    page.mouse.dblclick(box["x"] + box["w"] * 0.45, y)  # back to the whole range
    return f"; zoom redrawn {zoom:4.2f} s, hover {hover}"


def timed_views(page, url: str, cases: list[tuple[str, dict[str, str]]]) -> list[str]:
    """One line a case: its name, time to the first chart and to every chart, and on the One step chart its zoom
    and hover; every case draws a chart."""
    lines = []
    for name, query in cases:
        try:
            first, done, charts = time_to_charts(page, url, query)
        except Exception as e:  # say which case, not only that a wait ran out
            raise AssertionError(f"{name}: {str(e).splitlines()[0]}") from e
        assert charts >= 1, name
        extra = interaction_times(page) if query.get("view") == "One step" else ""
        lines.append(f"{name:64s} first chart {first:5.2f} s, all {charts} drawn {done:5.2f} s{extra}")
    return lines


SHAPES = ("h100_hf", "mi300x_hf", "b200_eager")  # the public traces recorded with record_shapes: an Op roofline


def trace_cases(folder: Path, root: Path) -> list[tuple[str, dict[str, str]]]:
    """For each trace in folder, largest first: its first parse (it opens on its Diagnosis), then cached, then the
    One step and Kernels views (and the Op roofline where the trace recorded shapes)."""
    cases = []
    for trace in sorted(folder.glob("*.json.gz"), key=lambda p: -p.stat().st_size):
        source = f"trace: {trace.relative_to(root).as_posix()}"
        size = f"{trace.name} ({trace.stat().st_size / 1e6:.2f} MB)"
        cases += [(f"{size}: first parse", {"source": source}), (f"{size}: cached", {"source": source})]
        cases.append((f"{size}: One step", {"source": source, "view": "One step"}))
        if "cpu_only" not in trace.name:  # no GPU, no kernel chart
            cases.append((f"{size}: Kernels", {"source": source, "view": "Kernels"}))
        if trace.name.startswith(SHAPES):
            cases.append((f"{size}: Op roofline", {"source": source, "view": "Op roofline"}))
    return cases


PUBLIC = SHARED / "public"


@pytest.mark.serial  # its times go in docs/explorer.md: taken with no test beside it
@pytest.mark.browser
@pytest.mark.slow
def test_time_to_the_first_chart_of_every_view(browser, capsys, tmp_path):
    """Measured in the browser, from navigation to a drawn plotly chart: a probe run --quick folder's Sweep (its
    12k telemetry samples included), each committed trace's views, and every public trace, first parsed and then
    cached. Printed, not asserted (timings on a shared machine): the test asserts that each chart appears."""
    root = tmp_path / "root"
    shutil.copytree(DATA / "quick-run", root / "quick-run")
    shutil.copytree(DATA / "app", root / "app")
    if PUBLIC.is_dir():
        shutil.copytree(PUBLIC, root / "public")
        make_rank_traces(root / "ranks")  # a real trace per rank: a folder of unrelated traces is a list, not a job
    cpu = {"source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz"}
    cases = [
        ("warm-up (the server's first page: imports, the frontend)", {"source": "run: app/runs/tiny-cpu-a"}),
        ("probe run --quick: Diagnosis", {"source": "run: quick-run"}),
        ("probe run --quick: Sweep", {"source": "run: quick-run", "view": "Sweep"}),
        ("probe run --quick: Sweep, again", {"source": "run: quick-run", "view": "Sweep"}),
        (
            "a run: Compare",
            {"source": "run: app/runs/tiny-cpu-b", "view": "Compare", "baseline": "run: app/runs/tiny-cpu-a"},
        ),
        ("CPU trace: Diagnosis", cpu),
        ("CPU trace: Step ledger", cpu | {"view": "Step ledger"}),
        ("CPU trace: One step", cpu | {"view": "One step"}),
        ("CPU trace: Top ops", cpu | {"view": "Top ops"}),
        (
            "CPU traces: Compare",
            cpu | {"view": "Compare", "baseline": "trace: app/traces/tiny_naive_cpu_p16_n6.trace.json.gz"},
        ),
    ]
    if PUBLIC.is_dir():
        cases += [("a four-rank job: Ranks", {"source": "job: ranks"}), *trace_cases(root / "public", root)]
    with serve(root, tmp_path / "streamlit.log") as (url, _):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        lines = timed_views(page, url, cases)
        assert not errors, errors
    with capsys.disabled():
        load = os.getloadavg()
        print(f"\ntime to the first chart (load average {load[0]:.1f} on {os.cpu_count()} cores):")
        print("\n".join(lines))
        if not PUBLIC.is_dir():
            print(f"(no public traces at {PUBLIC}: not timed)")


def readme_screenshots(root: Path, out: Path, run: str, trace: str, gpu_trace: str | None = None) -> None:
    """The older pictures docs/ links (docs/app-*.png): the sweep of a run and the step ledger of a trace, on this
    machine's data, and the Kernels view of a GPU trace."""
    from playwright.sync_api import sync_playwright

    with serve(root, out / "streamlit.log") as (url, _), sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 860})
        open_view(page, url, {"source": f"run: {run}", "view": "Sweep"}, "cached", out / "app-sweep.png")
        ledger = {"source": f"trace: {trace}", "view": "Step ledger"}
        open_view(page, url, ledger, "host: rest of model", out / "app-ledger.png")
        if gpu_trace:
            open_view(page, url, {"source": f"trace: {gpu_trace}", "view": "Kernels"}, "gemm", out / "app-kernels.png")
        b.close()
    (out / "streamlit.log").unlink()


# docs/explorer/: each view on real data, the way a person first sees it. Each entry: the file, the query, a chart
# trace to wait for ("" any chart, None a view of tables: Alerts), the viewport's height so that the whole view is in
# the picture, and what to do first: hover the first mark of a named trace, or pick a GPU op to link by its label.
PUBLIC_ROOT = "public"  # the public traces' folder under the docs root
DOC_SHOTS = (
    (
        "diagnosis-vllm.png",
        {"source": "trace: public/rocm_vllm_decode_cudagraph.trace.json.gz"},
        "GPU busy",
        1150,
        None,
    ),
    (
        "diagnosis-sglang.png",
        {"source": "trace: public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz"},
        "external wait",
        1150,
        None,
    ),
    (
        "diagnosis-h100-roofline.png",
        {
            "source": "trace: public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
            "model": "configs/qwen1.5-0.5b.json",
            "tokens": "8944",
            "batch": "16",
        },
        "traffic time",
        1750,
        None,
    ),
    ("diagnosis-run.png", {"source": "run: runs/quick"}, "cached", 1500, None),
    (
        "one-step-vllm.png",
        {"source": "trace: public/rocm_vllm_decode_cudagraph.trace.json.gz", "view": "One step"},
        "GPU: gemm",
        1900,
        ("link", "launch call hipLaunchKernel"),
    ),
    (
        "one-step-vllm-zoomed.png",
        {
            "source": "trace: public/rocm_vllm_decode_cudagraph.trace.json.gz",
            "view": "One step",
            "window": ["8.3", "8.9"],
        },
        "GPU: gemm",
        1300,
        ("hover", "GPU: gemm"),
    ),
    (
        "one-step-sglang.png",
        {"source": "trace: public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz", "view": "One step"},
        "external wait (no GPU op of the trace ran)",
        2300,
        None,
    ),
    (
        "op-roofline-h100.png",
        {"source": "trace: public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz", "view": "Op roofline"},
        "compute-bound",
        1100,
        ("hover", "compute-bound"),
    ),
    (
        "ledger-gpu.png",
        {"source": "trace: public/cuda_train_ns_resolution_5steps.trace.json.gz", "view": "Step ledger"},
        "GPU busy",
        1400,
        None,
    ),
    (
        "kernels-vllm.png",
        {"source": "trace: public/rocm_vllm_decode_cudagraph.trace.json.gz", "view": "Kernels"},
        "gemm",
        1500,
        None,
    ),
    (
        "top-ops-sglang.png",
        {"source": "trace: public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz", "view": "Top ops"},
        "",
        1500,
        None,
    ),
    (
        "alerts-traces.png",
        {
            "source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz",
            "view": "Alerts",
            "baseline": "trace: app/traces/tiny_naive_cpu_p16_n6.trace.json.gz",
        },
        None,
        1300,
        None,
    ),
    ("sweep-quick-run.png", {"source": "run: runs/quick", "view": "Sweep"}, "cached", 1900, None),
    (
        "ledger-cpu.png",
        {"source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz", "view": "Step ledger"},
        "host: cache bookkeeping",
        1200,
        None,
    ),
    (
        "compare-traces.png",
        {
            "source": "trace: app/traces/tiny_cached_cpu_p16_n6.trace.json.gz",
            "view": "Compare",
            "baseline": "trace: app/traces/tiny_naive_cpu_p16_n6.trace.json.gz",
        },
        "",
        1200,
        None,
    ),
    ("history.png", {"source": "history: history/probe-history.duckdb"}, "", 1300, None),
    ("ranks.png", {"source": "job: ranks"}, "", 1000, None),
)


TABLE_JS = "() => !!document.querySelector('[data-testid=\"stDataFrame\"]')"  # a view that shows a table only


def hover_first_bar(page, name: str) -> None:
    """Move the pointer over the first mark of the trace called `name`, in whichever chart holds it."""
    box = page.evaluate(
        """name => { for (const d of document.querySelectorAll('.js-plotly-plot')) {
            const data = d._fullData || [];
            const i = data.findIndex(t => t.name === name);
            if (i < 0) continue;
            const same = data.filter(t => t.type === data[i].type).indexOf(data[i]);
            const layer = data[i].type === 'bar' ? '.barlayer .trace' : '.scatterlayer .trace';
            const mark = d.querySelectorAll(layer)[same].querySelector('.point');
            const r = mark.getBoundingClientRect();
            return {x: r.x + r.width / 2, y: r.y + r.height / 2}; } return null; }""",
        name,
    )
    if box:
        page.mouse.move(box["x"], box["y"])
        page.wait_for_timeout(800)


def pick(page, key: str, text: str) -> None:
    """Open the selectbox with this widget key, type part of an option's label, and take the first match."""
    page.locator(f".st-key-{key}").click()
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    page.wait_for_function(IDLE_JS, timeout=DRAW_MS)
    page.wait_for_timeout(1500)


def small(png: Path) -> None:
    """The picture in 256 colours (Pillow, which Streamlit brings): a third of the bytes, the text as sharp."""
    from PIL import Image

    with Image.open(png) as image:
        image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)


def docs_root(root: Path, run: Path) -> Path:
    """What the docs' pictures are taken over: the public traces, a `probe run --quick` folder (with its traces),
    the committed app fixtures and a model config, a run history and a four-rank job made from a real trace."""
    from tests.test_app import history_root

    shutil.copytree(PUBLIC, root / PUBLIC_ROOT)
    shutil.copytree(run, root / "runs" / "quick")
    shutil.copytree(DATA / "app", root / "app")
    (root / "configs").mkdir()
    shutil.copy(QWEN_PRESET, root / "configs")
    history_root(root / "history")
    make_rank_traces(root / "ranks")
    return root


def explorer_screenshots(root: Path, out: Path) -> None:
    """docs/explorer/: every view of DOC_SHOTS over `root`, each picture saved and its time to the first chart
    printed."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with serve(root, out / "streamlit.log") as (url, _), sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for name, query, wait_for, height, action in DOC_SHOTS:
            page = b.new_page(viewport={"width": 1400, "height": height})
            start = time.perf_counter()
            page.goto(f"{url}/?{urllib.parse.urlencode(query, doseq=True)}")
            page.wait_for_function(FIRST_CHART_JS if wait_for is not None else TABLE_JS, timeout=DRAW_MS)
            first = time.perf_counter() - start
            page.wait_for_function(IDLE_JS, timeout=DRAW_MS)
            if wait_for:
                settle(page, wait_for, out / name)
            page.wait_for_timeout(1500)
            if action and action[0] == "link":
                pick(page, "link", action[1])
            if action and action[0] == "hover":
                hover_first_bar(page, action[1])
            page.screenshot(path=str(out / name))
            small(out / name)
            print(f"{name:32s} first {'chart' if wait_for is not None else 'table'} {first:5.2f} s")
            page.close()
        b.close()
    (out / "streamlit.log").unlink()


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=readme_screenshots.__doc__)
    cli.add_argument("--root", type=Path, required=True)
    cli.add_argument("--run", required=True, help="run folder, relative to the root (--explorer: any run folder)")
    cli.add_argument("--trace", help="trace file, relative to the root")
    cli.add_argument("--gpu-trace", help="a GPU trace for the Kernels view, relative to the root")
    cli.add_argument("--out", type=Path, default=ROOT / "docs")
    cli.add_argument(
        "--explorer",
        action="store_true",
        help="docs/explorer/'s pictures of every view: --root is an empty folder to build, --run a probe run --quick "
        "folder (with its traces), --out docs/explorer",
    )
    a = cli.parse_args()
    if a.explorer:
        explorer_screenshots(docs_root(a.root, Path(a.run)), a.out)
    else:
        readme_screenshots(a.root, a.out, a.run, a.trace, a.gpu_trace)
