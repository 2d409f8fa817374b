"""The typed records that cross from capture to analysis (the environment, the settings, a trace's sidecar, a
cell's key, a trace's name), the one JSON reader, and how a folder's files are written: each read back as written,
old files read as they were, and anything else one line."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import stat

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from probe.analysis.records import files
from probe.analysis.records.environment import EnvDifference, Environment
from probe.analysis.records.files import MAX_JSON_DEPTH, TraceStem, parse_json, parse_stem, read_json, trace_stem
from probe.analysis.records.results import CELLS_CSV, CELLS_FILE, RESULTS_FILE, BenchResults, CellKey, load_results
from probe.analysis.records.sidecar import Sidecar, read_sidecar
from probe.capture.cell import PeakMemory
from probe.counts import MAX_COUNT
from probe.errors import ProbeError
from probe.settings import BenchConfig, ProfileConfig
from tests.conftest import DATA, ROOT

RUN_A = DATA / "app" / "runs" / "tiny-cpu-a"
SIDECAR = DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.meta.json"


# ---- a cell's key ------------------------------------------------------------------------------------------------


def test_a_cell_key_has_one_spelling_each_for_what_it_is_used_for():
    key = CellKey("cached", 16, 32, 4)
    assert (str(key), key.label, key.shape) == ("cached p16 n32 b4", "cached p16 b4", "p16 n32 b4")
    one = CellKey("cached", 16, 32)  # batch 1 is left out, as probe compare and the history always keyed it
    assert (str(one), one.label, one.shape) == ("cached p16 n32", "cached p16", "p16 n32")
    spaced = CellKey("my engine", 16, 32, 2)  # a name with a space is kept whole: nothing splits the text back
    assert spaced.engine == "my engine" and str(spaced) == "my engine p16 n32 b2"
    cell = load_results(RUN_A).cells[0]
    assert cell.key == CellKey("naive", 16, 8, 1) and cell.label == "naive p16"


# ---- the environment ---------------------------------------------------------------------------------------------


def test_an_old_environment_reads_its_dirty_suffix_once():
    env = Environment.from_json(json.loads((RUN_A / RESULTS_FILE).read_text())["env"])
    assert env.commit == "1650b60f80fd506cf62c11e7a265dd4ac6c5fdff" and env.dirty is True
    clean = Environment.from_json({"git_commit": "abc", "torch": "2.1", "unknown_key": [1]})
    assert (clean.commit, clean.dirty, clean.torch) == ("abc", False, "2.1")
    assert Environment.from_json(env.to_json()) == env  # written as commit and dirty, read back the same
    with pytest.raises(ValueError, match=r"environment: Expected `int \| null`, got `str` - at `\$.cpu_count`"):
        Environment.from_json({"cpu_count": "two"})


def test_identity_is_the_hash_histories_already_hold():
    """history.env_id before this type: sha256 of the JSON of torch, transformers, the device kind, its name, the
    driver and the CPU (sort_keys), first 10 hex digits. Written out here, so a history recorded then still
    groups its runs with the ones recorded now."""
    env = Environment(torch="2.13.0+cpu", transformers="5.24.0", device="cuda:3", device_name="H100", cpu_model="x")
    key = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "device": "cuda", "device_name": "H100"}
    key |= {"driver": None, "cpu_model": "x"}
    assert env.identity() == hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    assert env.identity() == dataclasses.replace(env, device="cuda:0", python="3.12").identity()
    assert env.identity() != dataclasses.replace(env, driver="550.54").identity()


def test_what_differs_is_typed_per_rule():
    base = Environment(torch="2.1", transformers="4", device="cuda:0", device_name="A100", dtype="float16")
    base = dataclasses.replace(base, cpu_model="EPYC", torch_threads=8)
    other = dataclasses.replace(base, torch="2.2", device="cuda:1", cpu_model=None, torch_threads=4)
    assert base.differs_for_counts(other) == [EnvDifference("torch", "2.1", "2.2")]  # cuda:0 vs cuda:1: one kind
    gpu = dataclasses.replace(base, device_name="H100")
    assert base.differs_for_counts(gpu) == [EnvDifference("device", "cuda (A100)", "cuda (H100)")]
    # timings: a CPU model one side did not record is not a difference; the thread count is
    assert base.differs_for_timings(other) == [EnvDifference("torch_threads", 8, 4)]
    assert base.differs_for_resume(other) == [EnvDifference("torch", "2.1", "2.2")]
    assert base.differs_for_resume(dataclasses.replace(base, dtype="bfloat16")) == [
        EnvDifference("dtype", "float16", "bfloat16")
    ]


# ---- the settings ------------------------------------------------------------------------------------------------


def test_what_resume_may_change_is_said_on_the_knobs():
    resumable = {f.name for f in dataclasses.fields(BenchConfig) if f.metadata["resumable"]}
    assert resumable == {"engines", "prompts", "batch", "naive_prompts", "allow_mismatch"}  # bench.RESUMABLE, before
    held = BenchConfig(model="tiny", dtype="float32")
    assert BenchConfig(model="tiny", dtype="float32", prompts=(8,), engines=("static",)).resume_conflict(held) is None
    assert BenchConfig(model="tiny", dtype="float32", seed=1).resume_conflict(held) == ("seed", 0, 1)


def test_configs_read_back_as_written_and_old_ones_with_their_defaults():
    cfg = BenchConfig(engines=("naive", "cached"), prompts=(8, 16), model="tiny", dtype="float32", threads=2)
    assert BenchConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    old = BenchConfig.from_json(json.loads((RUN_A / RESULTS_FILE).read_text())["config"])  # schema 1: no threads
    assert old.threads == 0 and old.prompts == (16, 64, 256) and old.telemetry_ms == 10.0
    profile = ProfileConfig(engine="static", prompt=32, batch=2)
    assert ProfileConfig.from_json(profile.to_json() | {"future_field": 1}) == profile
    with pytest.raises(ValueError, match=r"Expected `int`, got `str` - at `\$.runs`"):
        BenchConfig.from_json({"runs": "5"})
    with pytest.raises(ValueError, match="--runs must be at least 1, got 0"):
        BenchConfig.from_json({"runs": 0})
    with pytest.raises(ValueError, match="unknown dtype 'float64'"):
        ProfileConfig.from_json({"dtype": "float64"})


def test_results_hold_their_config_typed_and_one_dtype():
    results = load_results(RUN_A)
    assert isinstance(results.config, BenchConfig) and isinstance(results.env, Environment)
    assert results.dtype == results.config.dtype == "float32"
    # a config that was never settled answers with what the environment recorded
    unsettled = BenchResults([], Environment(dtype="bfloat16"), BenchConfig())
    assert unsettled.dtype == "bfloat16"


# ---- a trace's sidecar and name ----------------------------------------------------------------------------------


def test_a_sidecar_reads_back_typed_and_keeps_what_probe_does_not_read():
    doc = json.loads(SIDECAR.read_text())
    meta = Sidecar.from_json(doc)
    assert meta.config == ProfileConfig(engine="cached", prompt=16, new_tokens=6, model="tiny", dtype="float32")
    assert meta.env.torch == "2.13.0+cpu" and meta.tool == "torch.profiler" and meta.clock is None
    assert meta.details["itl_ms"] == doc["itl_ms"]
    again = Sidecar.from_json(json.loads(json.dumps(meta.to_json())))
    assert again == meta
    assert read_sidecar(SIDECAR.with_name("tiny_cached_cpu_p16_n6.trace.json.gz")) == meta


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: d["config"].__setitem__("prompt", "16"), r"Expected `int`, got `str` - at `\$.prompt`"),
        (lambda d: d["config"].__setitem__("batch", 0), "--batch must be at least 1"),
        (lambda d: d["env"].__setitem__("torch", 2), r"environment: Expected `str \| null`, got `int`"),
        (lambda d: d.__setitem__("clock", "now"), r"Expected `object`, got `str` \(in clock or tool\)"),
        (lambda d: d.__setitem__("event_cost_ns", [1, 2]), "event_cost_ns is \\[1, 2\\], not an object"),
        (lambda d: d.__setitem__("tool", "perf"), r"Invalid enum value 'perf' \(in clock or tool\)"),
        (lambda d: d.__setitem__("config", ["engine"]), "not a probe sidecar"),
    ],
)
def test_a_malformed_sidecar_is_one_line_naming_the_field(tmp_path, edit, why):
    doc = json.loads(SIDECAR.read_text())
    edit(doc)
    (tmp_path / "t.meta.json").write_text(json.dumps(doc))
    with pytest.raises(ProbeError, match=why) as info:
        read_sidecar(tmp_path / "t.trace.json.gz")
    assert "\n" not in str(info.value) and str(info.value).startswith(str(tmp_path / "t.meta.json"))


@given(
    model=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(lambda t: "/" not in t),
    engine=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,11}", fullmatch=True),
    device=st.sampled_from(["cpu", "cuda"]),
    shape=st.tuples(st.integers(1, MAX_COUNT), st.integers(2, MAX_COUNT), st.integers(1, 512)),  # past it: no stem
)
def test_a_trace_name_reads_back_whatever_the_model_is_called(model, engine, device, shape):
    prompt, new, batch = shape
    name = trace_stem(model, engine, device, prompt, new, batch) + ".trace.json.gz"
    assert parse_stem(name) == TraceStem(model, engine, device, prompt, new, batch)


def test_a_trace_name_is_never_ambiguous():
    assert trace_stem("tiny", "cached", "cpu", 64, 8) == "tiny_cached_cpu_p64_n8"  # batch 1: the name it always had
    assert parse_stem("tiny_cached_cpu_p64_n8.nsys.sqlite") == TraceStem("tiny", "cached", "cpu", 64, 8, 1)
    assert parse_stem("hand_decode.trace.json.gz") is None
    with pytest.raises(ProbeError, match="cannot name a trace"):
        trace_stem("tiny", "my_engine", "cpu", 64, 8)  # would read back as model "tiny_my", engine "engine"


# ---- the one JSON reader -----------------------------------------------------------------------------------------


def test_json_is_read_to_its_bound_and_no_deeper(tmp_path):
    assert parse_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, "x") is not None
    with pytest.raises(ProbeError, match=f"nested {MAX_JSON_DEPTH + 1} deep; probe reads at most {MAX_JSON_DEPTH}"):
        parse_json(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "x")
    # brackets inside strings (escaped quotes included) are text, not nesting
    assert parse_json(json.dumps({"a": "[" * 500 + '\\"{' * 500}).encode(), "x") == {"a": "[" * 500 + '\\"{' * 500}
    deep = tmp_path / "deep.json"
    deep.write_bytes(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    with pytest.raises(ProbeError, match="deep.json: JSON nested 200001 deep"):
        read_json(deep, "model config")


def test_json_holds_text_any_file_can_hold(tmp_path):
    assert parse_json(b'"\\ud83d\\ude00"', "x") == "\N{GRINNING FACE}"  # a surrogate pair is one character
    with pytest.raises(ProbeError, match=r"holds '\\ud800', a lone surrogate"):
        parse_json(b'{"model": "\\ud800"}', "x")
    with pytest.raises(ProbeError, match=r"not UTF-8 text \(byte 11: b'\\xff'\)"):
        parse_json(b'{"model": "\xff"}', "x")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ProbeError, match="is not a regular file .*, not a JSON file"):
        read_json(tmp_path / "fifo.json", "sidecar")  # at once: the FIFO is never waited on


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(doc, prefix=()):
    """Every place in a JSON document, as a path of keys and indices."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _replaced(doc, path, value):
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    here = doc
    for step in path[:-1]:
        here = here[step]
    here[path[-1]] = value
    return doc


RESULTS_DOC = json.loads((RUN_A / RESULTS_FILE).read_text())
RESULTS_PATHS = list(_paths(RESULTS_DOC))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(RESULTS_PATHS), value=JSON_VALUES)
def test_any_results_file_loads_whole_or_is_one_line_and_what_loads_saves_back_the_same(tmp_path, where, value):
    """A real results file with any one value replaced by any JSON value: load_results gives results or a
    one-line ProbeError; results it accepts are written and read back unchanged (nothing it lets in is lost or
    breaks the writer)."""
    folder = tmp_path / "r"
    folder.mkdir(exist_ok=True)
    (folder / RESULTS_FILE).write_text(json.dumps(_replaced(RESULTS_DOC, where, value)))
    try:
        results = load_results(folder)
    except ProbeError as e:
        assert "\n" not in str(e)
        return
    results.save(folder)
    assert load_results(folder) == results


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(BenchConfig)]), JSON_VALUES))
def test_any_config_is_a_config_or_one_line(doc):
    try:
        cfg = BenchConfig.from_json(doc)
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert BenchConfig.from_json(cfg.to_json()) == cfg


SIDECAR_DOC = json.loads(SIDECAR.read_text())


@settings(max_examples=150, deadline=None)
@given(where=st.sampled_from(list(_paths(SIDECAR_DOC))), value=JSON_VALUES)
def test_any_sidecar_is_a_sidecar_or_one_line(where, value):
    try:
        meta = Sidecar.from_json(_replaced(SIDECAR_DOC, where, value))
    except ValueError as e:
        assert "\n" not in str(e)
        return
    text = json.dumps(meta.to_json(), sort_keys=True)  # as text: a NaN the details hold equals itself there
    assert json.dumps(Sidecar.from_json(json.loads(text)).to_json(), sort_keys=True) == text


PRESET = json.loads((ROOT / "engines" / "presets" / "tiny.json").read_text())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(where=("num_hidden_layers",), value=None)  # null layers: a TypeError in the layer cap's comparison once
@given(where=st.sampled_from(list(_paths(PRESET))), value=JSON_VALUES)
def test_any_model_config_is_a_config_or_one_line(tmp_path, where, value):
    """A model's config.json with any one value replaced: the transformers config, or a one-line error (probe's
    ProbeError, or engines.configs.ModelError, a ValueError the CLI prints in one line)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_replaced(PRESET, where, value)))
    try:
        files.model_config(str(path))
    except (ProbeError, ValueError) as e:
        assert "\n" not in str(e)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_are_a_json_value_or_one_line(data):
    try:
        parse_json(data, "x")
    except ProbeError as e:
        assert "\n" not in str(e)


# ---- writing a folder's files ------------------------------------------------------------------------------------


def test_a_failed_save_leaves_the_old_set(tmp_path, monkeypatch):
    """The disk fills while cells.csv is written: results.json and cells.parquet must not be the new ones either
    (the folder would hold a mix: --resume trusting a results.json whose cells.csv is stale)."""
    results = load_results(RUN_A)
    folder = tmp_path / "run"
    results.save(folder)
    before = {name: (folder / name).read_bytes() for name in (RESULTS_FILE, CELLS_FILE, CELLS_CSV)}

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    fewer = dataclasses.replace(results, cells=results.cells[:2])
    with pytest.raises(OSError, match="No space left"):
        fewer.save(folder)
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(before)  # and no temp file left behind


def test_files_get_the_umask_and_a_replaced_file_keeps_its_mode(tmp_path):
    old = os.umask(0o002)
    try:
        files.atomic_write(tmp_path / "new.json", "{}")
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o664  # 0666 less the umask
        (tmp_path / "shared.json").write_text("{}")
        os.chmod(tmp_path / "shared.json", 0o640)
        files.atomic_write(tmp_path / "shared.json", '{"new": 1}')
        assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o640
        load_results(RUN_A).save(tmp_path / "run")
        assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "run").iterdir()} == {0o664}
    finally:
        os.umask(old)


# ---- peak memory between cells -----------------------------------------------------------------------------------


def test_a_cells_peak_does_not_hold_the_previous_cells_garbage():
    """256 MiB left in a reference cycle (as an engine's buffers can be), which only the cycle collector frees; the
    collector kept off, as it is whenever it has not happened to run yet. between_cells collects it, returns the
    freed memory and resets the peak, so the next cell's peak RSS is at least 200 MiB lower than with it held."""
    mem = PeakMemory(torch.device("cpu"))
    gc.collect()
    gc.disable()
    try:
        junk = {"buffer": torch.ones(64 * 2**20)}  # 64 Mi float32 = 256 MiB, written, so resident
        junk["self"] = junk
        del junk
        mem.reset()
        holding = mem.peak()
        mem.between_cells()
        assert holding - mem.peak() >= 200 * 2**20
    finally:
        gc.enable()
