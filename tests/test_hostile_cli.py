"""Hostile input at the command line and in the explorer: every bad flag or file is one line (exit 2), and text
from a results file is shown as text, never as markup."""

from __future__ import annotations

import json
import shutil

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
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    heading = at.subheader[0].value
    assert "\\[click\\]\\(http://evil\\.example\\) \\*\\*bold\\*\\*" in heading


def test_writes_never_follow_a_planted_symlink(tmp_path):
    """Symlinks planted in an output folder, at the names a writer there might use (the final file, the fixed
    write-test and temp names of earlier versions), pointing outside: no write goes through any of them."""
    from probe.analysis.files import atomic_path, atomic_write
    from probe.capture.bench import check_writable

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
