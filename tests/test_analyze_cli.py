"""`probe analyze TRACE [--json] [--step N]`: tables, JSON, one step's detail, and one-line errors."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from benchmarks.synthetic_traces import make_trace
from probe.render.ledger import FIRST_ROWS, STEP_ROWS
from tests.conftest import run_probe, shared_trace
from tests.test_trace import BAD, _bad_files

DATA = Path(__file__).parent / "data"
HAND = DATA / "hand_decode.trace.json.gz"


@pytest.fixture
def run(cli):
    """`probe analyze ARGS` in this process: (exit code, stdout, stderr)."""

    def analyze(*args: str) -> tuple[int, str, str]:
        done = cli("analyze", *args)
        return done.returncode, done.stdout, done.stderr

    return analyze


def test_json_output_has_the_documented_shape(run):
    code, out, err = run(str(HAND), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["format"] == "torch_chrome"
    assert [s["name"] for s in doc["steps"]] == ["prefill", "decode#0", "decode#1"]
    step = doc["steps"][1]
    want = {
        "name": "decode#0",
        "kind": "decode",
        "index": 0,
        "start_us": 110.0,
        "wall_us": 90.0,
        "launches": 1,
        "graph_launches": 1,
        "kernels": 3,
        "gpu_busy_us": 28.99,
        "gpu_idle_us": 22.01,
        "cache_us": 15.0,
    }
    assert {k: step[k] for k in want} == want
    assert (step["purpose_us"]["model"], step["mechanism_us"]["unattributed"]) == (48.0, 31.0)
    assert step["top_ops"][0] == {"name": "aten::addmm", "self_us": 9.0, "calls": 1}
    assert doc["totals"] == {
        "events": 54,
        "kernels": 11,
        "launches": 8,  # cudaFooBar too: a kernel joins it
        "graph_launches": 1,
        "gpu_ops": 13,
        "runtime_calls": 13,
        "cpu_ops": 10,
        "python_frames": 0,
        "unattributed_gpu_ops": 1,
        "gpu_busy_us": 102.01,
        "span_us": 310.0,
    }
    assert doc["summary"]["step_p50_us"] == 70.0


def test_tables_name_every_step_and_the_summary(run):
    code, out, _ = run(str(HAND))
    assert code == 0
    for text in (
        "prefill",
        "decode#0",
        "decode#1",
        "GPU busy",
        "kernel wait",
        "GPU window",
        "found by probe ranges",
        "summary over 2 decode step(s)",
        "measured step p50 ms (max of host window, GPU busy)",
        "host window p50 / p90 ms",
        "0.070 / 0.086",
        "cache share of wall",
        "aten::addmm",
    ):
        assert text in out, text


def test_a_long_trace_shows_its_first_and_its_longest_steps(run, tmp_path):
    """Past STEP_ROWS steps a table of steps holds the first FIRST_ROWS and the longest of the rest, in order, and
    says how many it left out where; --json still holds every step."""
    path = tmp_path / "long.trace.json"
    path.write_bytes(make_trace(100, 100 * 66))
    code, out, _ = run(str(path), "--json")
    walls = [s["wall_us"] for s in json.loads(out)["steps"]]
    code, out, _ = run(str(path))
    words = " ".join(out.split())  # a title wraps where its length puts it
    assert code == 0 and words.count(f"{STEP_ROWS} of 100 steps: the first {FIRST_ROWS}") == 4  # steps, idle, host x2
    steps_table = out[out.index("long.trace.json  (") : out.index("GPU idle in each step")]
    shown = [int(n) for n in re.findall(r"^│ +(\d+) │ decode#", steps_table, re.M)]
    longest = sorted(range(FIRST_ROWS, 100), key=lambda i: (-walls[i], i))[: STEP_ROWS - FIRST_ROWS]
    assert shown == sorted([*range(FIRST_ROWS), *longest])
    left_out = [int(n) for n in re.findall(r"(\d+) steps? not shown", steps_table)]
    assert sum(left_out) + len(shown) == 100


def test_cpu_trace_shows_top_level_ops_instead_of_launches(run):
    code, out, _ = run(str(shared_trace("public/cpu_only_small.trace.json.gz")))
    assert code == 0
    assert "ProfilerStep#551" in out and "top-level ops per step" in out and "launches per step" not in out


@pytest.mark.parametrize("key", ["1", "decode#0"])
def test_one_step_by_position_or_name(run, key):
    code, out, _ = run(str(HAND), "--step", key, "--json")
    assert code == 0
    doc = json.loads(out)
    assert [s["name"] for s in doc["steps"]] == ["decode#0"]
    assert [(t["name"], t["part"]) for t in doc["timeline"]][:3] == [
        ("forward", "range"),
        ("aten::linear", "model"),
        ("cache.update#0", "cache_update"),
    ]
    code, out, _ = run(str(HAND), "--step", key)
    assert code == 0 and "step 1: decode#0" in out and "cudaGraphLaunch" in out
    assert "host by purpose: cache_update" in out


def test_unknown_step_is_one_line(run):
    code, out, err = run(str(HAND), "--step", "decode#9")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no step 'decode#9'" in err


def test_reference_counts_in_the_table(run):
    code, out, _ = run(str(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz")))
    assert code == 0 and "434 / 10.718" in out and "425 / 4 / 1" in out


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    return _bad_files(tmp_path_factory.mktemp("bad-cli"))


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_in_the_cli(bad_files, run, case):
    code, out, err = run(str(bad_files[case]))
    assert code == 2 and out == ""
    assert err.startswith("probe: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_as_a_user_runs_it(tmp_path):
    """A fresh process, as from a shell: the JSON and a bad file's one-line error."""
    good = run_probe("analyze", str(shared_trace("public/cuda_alexnet.trace.json.gz")), "--json", timeout=120)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["totals"]["kernels"] == 79
    (tmp_path / "bad.json").write_text("{")
    bad = run_probe("analyze", str(tmp_path / "bad.json"), timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_cpu_only_trace_prints_dashes_for_gpu_figures(run):
    """22 §5: a trace with no GPU activity has no GPU busy fraction to show; a dash, never "0.0 %" (the old table
    printed "GPU busy fraction ... 0.0 %" and "GPU ops / GPU busy ms 0 / 0.000")."""
    trace = str(shared_trace("public/cpu_only_small.trace.json.gz"))
    code, out, _ = run(trace)
    assert code == 0
    assert re.search(r"GPU busy fraction \(of the GPU windows\)\s*│\s*-\s*│", out)
    assert re.search(r"trace: GPU ops / GPU busy ms\s*│\s*0 / -\s*│", out)
    code, out, _ = run(trace, "--step", "0")
    assert code == 0 and re.search(r"GPU busy ms\s*│\s*-\s*│", out) and re.search(r"kernels\s*│\s*-\s*│", out)


def test_kernels_are_shown_by_their_short_names(run):
    """The table shows `at::native::elementwise_kernel`, not the 300-character template; --json keeps the whole."""
    trace = str(shared_trace("public/cuda_alexnet.trace.json.gz"))
    code, out, _ = run(trace)
    assert code == 0 and "at::native::elementwise_kernel " in out and "void at::native" not in out
    code, out, _ = run(trace, "--json")
    assert any(k["name"].startswith("void at::native::elementwise_kernel<") for k in json.loads(out)["kernels"])


def _eight_gpus(tmp_path: Path, name: str) -> Path:
    """The hand trace, its deviceProperties listing eight GPUs of one name."""
    doc = json.loads(gzip.decompress(HAND.read_bytes()))
    doc["deviceProperties"] = [{"id": i, "name": name, "totalGlobalMem": 10 * 2**30} for i in range(8)]
    path = tmp_path / "eight.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_device_is_named_once_however_many_gpus_the_trace_lists(run, tmp_path):
    code, out, _ = run(str(_eight_gpus(tmp_path, "NVIDIA Imaginary X1")), "--json")
    notes = json.loads(out)["answer_notes"]
    assert code == 0 and any("(NVIDIA Imaginary X1) is not in the device table" in n for n in notes)
    assert sum(n.count("Imaginary") for n in notes) == 1
    code, out, _ = run(str(_eight_gpus(tmp_path, "NVIDIA GeForce RTX 4080 Laptop GPU")), "--json")
    (note,) = [n for n in json.loads(out)["answer_notes"] if "Laptop" in n]
    assert "has no published figures" in note and note.count("Laptop GPU") == 2  # the name, and NVIDIA's page


def test_device_file_gives_the_roofline_its_device(run, tmp_path):
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"name": "Imaginary X1", "memory_bandwidth_bytes_s": 1e12, "peak_flops_s": {}}))
    code, out, _ = run(str(_eight_gpus(tmp_path, "NVIDIA Imaginary X1")), "--json", "--device-file", str(card))
    doc = json.loads(out)
    assert code == 0 and doc["roofline"]["device"] == "Imaginary X1"
    assert not any("not in the device table" in n for n in doc["answer_notes"])
    card.write_text("{}")
    code, _, err = run(str(HAND), "--device-file", str(card))
    assert code == 2 and err.count("\n") == 1 and f"--device-file {card}" in err


def test_steps_kind_from_the_command_line(run):
    code, out, err = run(str(HAND), "--steps", "forward", "--steps-kind", "range", "--json")
    assert code == 0 and [s["name"] for s in json.loads(out)["steps"]] == ["forward", "forward"]
    code, _, err = run(str(HAND), "--steps", "forward", "--steps-kind", "python")
    assert code == 0 and "matched no range" in err  # no Python frame is named so: the rules below it
    code, _, err = run(str(HAND), "--steps", "forward", "--steps-kind", "frames")
    assert code == 2 and "use one or more of range, cpu_op, python" in err
