"""Hostile input at the command line and in the explorer: every bad flag or file is one line (exit 2), and text
from a results file is shown as text, never as markup."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engines.configs import PRESET_DIR
from probe.explorer.sources import ROOT_ENV
from tests.conftest import DATA, ROOT, run_probe


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("probe: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["bench", "--engines", ":"], "unknown engine ':'"),
        (["bench", "--engines", "os:path"], "'os:path' is not an Engine subclass"),
        (["bench", "--telemetry-ms", "nan"], "--telemetry-ms must be 0 (off) or more, got nan"),
        (["bench", "--prompts", "8,x"], "malformed integer list"),
        (["analyze", str(DATA / "hand_decode.trace.json.gz"), "--step", "²"], "no step '²'"),
    ],
)
def test_bad_flags_are_one_line(argv, why):
    assert why in one_line(run_probe(*argv))


def test_a_config_with_a_string_where_an_int_belongs_is_one_line(tmp_path):
    config = json.loads((PRESET_DIR / "tiny.json").read_text())
    config["hidden_size"] = "256"
    (tmp_path / "config.json").write_text(json.dumps(config))
    line = one_line(run_probe("bench", "--model", str(tmp_path / "config.json"), "--prompts", "8"))
    assert "hidden_size" in line
    config["hidden_size"], config["num_hidden_layers"] = 256, 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert "num_hidden_layers must be a positive integer" in one_line(
        run_probe("roofline", "--model", str(tmp_path / "config.json"))
    )


def test_text_from_a_results_file_is_not_markup(monkeypatch, tmp_path):
    """A model name that is Markdown (a link, emphasis) must show as the characters it is."""
    run = tmp_path / "runs" / "r"
    shutil.copytree(DATA / "app" / "runs" / "tiny-cpu-a", run)
    results = json.loads((run / "results.json").read_text())
    results["config"]["model"] = "[click](http://evil.example) **bold**"
    (run / "results.json").write_text(json.dumps(results))
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()  # a run opens on its Diagnosis
    assert not at.exception
    shown = [e.value for e in (*at.markdown, *at.subheader, *at.caption)]
    assert not any("](http://evil.example)" in text for text in shown)  # nowhere a live link
    at.radio(key="view").set_value("Sweep").run()  # the sweep's heading names the model
    assert not at.exception
    heading = at.subheader[0].value
    assert "\\[click\\]\\(http://evil\\.example\\) \\*\\*bold\\*\\*" in heading


def test_writes_never_follow_a_planted_symlink(tmp_path):
    """Symlinks planted in an output folder, at the names a writer there might use (the final file, the fixed
    write-test and temp names of earlier versions), pointing outside: no write goes through any of them."""
    from probe.analysis.records.files import atomic_path, atomic_write
    from probe.analysis.records.runfolder import check_writable

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    names = ["results.json", "results.json.tmp", ".results.json.tmp", ".probe-write-test", "cells.parquet.tmp"]
    for name in names:
        (outside / name).write_text("precious")
        (out / name).symlink_to(outside / name)
    check_writable(out)
    atomic_write(out / "results.json", '{"new": 1}')
    with atomic_path(out / "cells.parquet") as tmp:
        tmp.write_bytes(b"PAR1")
    assert all((outside / name).read_text() == "precious" for name in names)
    assert not (out / "results.json").is_symlink() and json.loads((out / "results.json").read_text()) == {"new": 1}
    assert (out / "cells.parquet").read_bytes() == b"PAR1"
    # a failed write leaves nothing behind
    before = set(out.iterdir())
    with pytest.raises(RuntimeError), atomic_path(out / "report.json"):
        raise RuntimeError("writer failed")
    assert set(out.iterdir()) == before


# ---- records that cross from capture to analysis (issue 28: items 6, 8, 16, 18, 20) ----------------------------

RUN_A = DATA / "app" / "runs" / "tiny-cpu-a"
TRACE = DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz"
TINY = ("--new-tokens", "3", "--runs", "1", "--warmup", "0", "--device", "cpu", "--no-history")
NOT_UTF8 = os.fsdecode(b"\xff")  # the byte 0xff in a name, as Python hands it over: a lone surrogate
DEEP = "[" * 200_000 + "]" * 200_000  # JSON nested 200k deep: a RecursionError for Python's parser


def results_doc() -> dict:
    return json.loads((RUN_A / "results.json").read_text())


def write_results(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(doc))  # a lone surrogate written as its escape, \ud800
    return folder


def with_sidecar(folder: Path, text: str) -> Path:
    """The cached trace copied into `folder`, with `text` as its .meta.json."""
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / TRACE.name
    shutil.copy(TRACE, trace)
    (folder / TRACE.name.replace(".trace.json.gz", ".meta.json")).write_text(text)
    return trace


def history_import(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    result = run_probe("history", "import", str(path), "--history", str(tmp_path / "h.duckdb"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


def skipped(result: subprocess.CompletedProcess) -> list[str]:
    lines = result.stderr.strip().splitlines()
    assert all(line.startswith("skipped: ") for line in lines), result.stderr
    return lines


def test_an_out_folder_whose_name_is_not_utf8_is_refused_before_any_work(tmp_path):
    """It once ran the whole sweep, then lost it at the save (Parquet cannot hold the name)."""
    out = tmp_path / f"sweep{NOT_UTF8}" / "o"
    line = one_line(run_probe("bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(out)))
    assert "sweep\\xff/o'" in line and "its name is not UTF-8" in line
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing run


def test_history_import_keeps_names_it_can_hold_and_names_the_rest_in_a_line(tmp_path):
    """Lone surrogates in a results file's model name, torch version and commit, a run folder named with a byte
    that is not UTF-8, and an engine name with a space: each ended the import in a traceback."""
    root = tmp_path / "runs"
    for name, edit in (
        ("model", lambda d: d["config"].__setitem__("model", "tiny\ud800")),
        ("torch", lambda d: d["env"].__setitem__("torch", "\udcff2.13")),
        ("commit", lambda d: d["env"].__setitem__("git_commit", "abc\ud800")),
    ):
        doc = results_doc()
        edit(doc)
        write_results(root / name, doc)
    write_results(root / f"run{NOT_UTF8}", results_doc())
    spaced = results_doc()
    for cell in spaced["cells"]:
        cell["engine"] = "my engine" if cell["engine"] == "cached" else cell["engine"]
    write_results(root / "spaced", spaced)
    result = history_import(root, tmp_path)
    assert "1 run(s) added" in result.stdout and "bench tiny float32 my engine,naive p16,64,256 n8" in result.stdout
    lines = skipped(result)
    assert len(lines) == 4
    assert sum("a lone surrogate: text no file or table can hold" in line for line in lines) == 3
    assert any("run\\xff'" in line and "its name is not UTF-8" in line for line in lines)


@pytest.mark.parametrize("where", ["results", "sidecar", "config"])
def test_json_nested_200k_deep_is_one_line_in_every_reader(tmp_path, where):
    """results.json (compare, history import), a trace's sidecar (compare, analyze, history import) and a model's
    config.json (bench, roofline): each was a RecursionError traceback."""
    if where == "results":
        doc = json.dumps(results_doc()).replace('"model": "tiny"', f'"model": {DEEP}', 1)
        folder = tmp_path / "deep"
        folder.mkdir()
        (folder / "results.json").write_text(doc)
        commands = [("compare", str(RUN_A), str(folder), "--counts-only")]
    elif where == "sidecar":
        meta = json.loads(TRACE.with_name(TRACE.name.replace(".trace.json.gz", ".meta.json")).read_text())
        trace = with_sidecar(tmp_path / "deep", json.dumps(meta).replace('"tokens": [', f'"tokens": [{DEEP}, ', 1))
        folder = trace.parent
        commands = [("compare", str(trace), str(trace)), ("analyze", str(trace))]
    else:
        config = json.loads((PRESET_DIR / "tiny.json").read_text())
        folder = tmp_path / "deep"
        folder.mkdir()
        (folder / "config.json").write_text(
            json.dumps(config).replace('"rms_norm_eps"', f'"x": {DEEP}, "rms_norm_eps"')
        )
        commands = [("bench", "--model", str(folder / "config.json"), "--prompts", "8", *TINY)]
        commands.append(("roofline", "--model", str(folder / "config.json")))
    depth = r"JSON nested 20000[12] deep; probe reads at most 100 levels"  # the list, and the object around it
    for argv in commands:
        assert re.search(depth, one_line(run_probe(*argv))), argv
    if where != "config":
        assert re.search(depth, skipped(history_import(folder, tmp_path))[0])


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: d.__setitem__("version", 99), "written by a newer probe (schema 99; this probe reads up to 5)"),
        (lambda d: d.__setitem__("version", "x"), "version 'x' is not a schema version"),
        (lambda d: d.__setitem__("version", 0), "version 0 is not a schema version"),
        (lambda d: d["cells"][0].__setitem__("decode_ops", -3), "impossible value in `decode_ops`: -3"),
        (lambda d: d["cells"][0]["decode_ops_by_op"].__setitem__("aten::mm", -1), "`decode_ops_by_op`: op counts"),
        (lambda d: d["cells"][0].__setitem__("batch", 0), "impossible value in `batch`: 0 (it is 1..2147483647)"),
        (
            lambda d: d["cells"][0].__setitem__("prompt_tokens", 2**70),
            f"`prompt_tokens`: {2**70} (it is 1..2147483647)",
        ),
    ],
)
def test_results_that_cannot_be_true_are_one_line(tmp_path, edit, why):
    """Each was compared without a word ("239 -> -3 improvement")."""
    doc = results_doc()
    edit(doc)
    bad = write_results(tmp_path / "bad", doc)
    assert why in one_line(run_probe("compare", str(RUN_A), str(bad), "--counts-only"))


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_a_save_that_fails_leaves_the_folder_as_it_was(tmp_path):
    """A disk that fills during a --resume save (here a file-size limit on the process, which makes the larger
    files fail as a full disk does) once left results.json and telemetry new and cells.parquet / .csv stale."""
    import resource

    out = tmp_path / "o"
    args = ("bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(out))
    assert run_probe(*args).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    sizes = {name: len(data) for name, data in before.items()}
    # The next save (two cells) writes every file larger than now; the limit lets the small ones through (these
    # sizes are measured by the first sweep) and stops cells.parquet, the largest, as a full disk would.
    limit = sizes["cells.parquet"] - 1
    assert max(sizes["results.json"], sizes["telemetry.parquet"]) * 2 < limit, sizes

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    more = run_probe(
        "bench", "--engines", "cached", "--prompts", "8,16", *TINY, "--out", str(out), "--resume",
        preexec_fn=small_files,
    )  # fmt: skip
    assert more.returncode == 2, more.stderr
    line = more.stderr.strip().splitlines()[-1]
    assert line == f"probe: error: cannot save to {out}: File too large; it holds the results saved before this cell"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old set, every byte, and no temp file


def test_malformed_sidecars_are_one_line_each_in_history_import(tmp_path):
    """Wrong field types gave four different tracebacks."""
    meta = json.loads(TRACE.with_name(TRACE.name.replace(".trace.json.gz", ".meta.json")).read_text())
    cases = {
        "prompt": (lambda d: d["config"].__setitem__("prompt", "16"), "Expected `int`, got `str` - at `$.prompt`"),
        "env": (lambda d: d.__setitem__("env", {"cpu_count": "2"}), "Expected `int | null`, got `str`"),
        "clock": (lambda d: d.__setitem__("clock", {"epoch_ns": "x"}), "Expected `int`, got `str` - at `$.epoch_ns`"),
        "cost": (lambda d: d.__setitem__("event_cost_ns", {"op": "1"}), "event_cost_ns is {'op': '1'}"),
    }
    for name, (edit, _) in cases.items():
        doc = json.loads(json.dumps(meta))
        edit(doc)
        with_sidecar(tmp_path / "traces" / name, json.dumps(doc))
    result = history_import(tmp_path / "traces", tmp_path)
    assert "0 run(s) added" in result.stdout
    lines = skipped(result)
    for name, (_, why) in cases.items():
        assert any(f"/{name}/" in line and why in line for line in lines), (name, lines)


def test_a_malformed_sidecar_is_one_line_in_the_explorer(monkeypatch, tmp_path):
    """A clock of the wrong type reached the telemetry panel's arithmetic: a traceback on the page."""
    from probe.analysis.records.telemetry import write_samples

    meta = json.loads(TRACE.with_name(TRACE.name.replace(".trace.json.gz", ".meta.json")).read_text())
    trace = with_sidecar(tmp_path / "traces", json.dumps(meta | {"clock": {"perf_counter_ns": "0", "epoch_ns": 0}}))
    write_samples(
        [{"t_ns": i, "rss_bytes": 1e8} for i in range(3)], trace.with_name("tiny_cached_cpu_p16_n6.telemetry.parquet")
    )
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    [error] = [e.value.replace("\\", "") for e in at.error]  # as text: Markdown's escapes taken out
    assert "tiny_cached_cpu_p16_n6.meta.json: Expected `int`, got `str` - at `$.perf_counter_ns`" in error


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_files_follow_the_umask_and_a_replaced_file_keeps_its_mode(tmp_path):
    """They were written 0600 whatever the umask, so a team's shared run folder became unreadable to the team."""
    out = tmp_path / "o"
    args = ("bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(out))
    assert run_probe(*args, preexec_fn=lambda: os.umask(0o002)).returncode == 0
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == dict.fromkeys(
        ("results.json", "cells.parquet", "cells.csv", "telemetry.parquet"), 0o664
    )
    os.chmod(out / "results.json", 0o640)  # the team's choice for this one
    resumed = run_probe(*args[:4], "8,16", *args[5:], "--resume", preexec_fn=lambda: os.umask(0o022))
    assert resumed.returncode == 0, resumed.stderr
    assert stat.S_IMODE((out / "results.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((out / "cells.csv").stat().st_mode) == 0o664  # kept too: the file it replaced had it


@pytest.mark.slow  # four profiles in processes of their own
def test_two_configs_never_share_a_trace_name_and_no_trace_is_replaced_without_force(tmp_path):
    """configs/llama.json and configs/mistral.json were both `configs`: the second trace overwrote the first."""
    configs, out = tmp_path / "configs", tmp_path / "traces"
    configs.mkdir()
    tiny = json.loads((PRESET_DIR / "tiny.json").read_text())
    (configs / "llama.json").write_text(json.dumps(tiny))
    (configs / "mistral.json").write_text(json.dumps(tiny | {"num_hidden_layers": 2}))
    args = ("profile", "--engine", "cached", "--prompt", "8", "--new-tokens", "3", "--device", "cpu", "--no-history")
    for name in ("llama", "mistral"):
        made = run_probe(*args, "--model", str(configs / f"{name}.json"), "--out", str(out))
        assert made.returncode == 0, made.stderr
    digests = {hashlib.sha256((configs / f"{n}.json").read_bytes()).hexdigest()[:8] for n in ("llama", "mistral")}
    traces = sorted(p.name for p in out.glob("*.trace.json.gz"))
    assert traces == sorted(f"qwen2-{d}_cached_cpu_p8_n3.trace.json.gz" for d in digests)  # model_type, hash
    again = one_line(run_probe(*args, "--model", str(configs / "llama.json"), "--out", str(out)))
    assert "already exists: --force to replace it" in again
    forced = run_probe(*args, "--model", str(configs / "llama.json"), "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
