"""The CLI a newcomer meets first: a wrong command line is one line on stderr, one `probe:` prefix, the nearest flag
or choice suggested (difflib's closeness), exit 2, before any command module does its work (issue 33); every
command's help states the defaults it really uses on this machine, once per flag, and `probe models` lists what can be
built and on what (issue 36)."""

from __future__ import annotations

import json
import re

import pytest

from probe.cli import COMMANDS
from probe.here import device_here, shown
from probe.settings import defaults_for
from tests.conftest import run_probe


@pytest.mark.parametrize(
    "argv, line",
    [
        (["run", "--modle", "tiny"], "probe: error: run: unrecognized arguments: --modle tiny: did you mean --model?"),
        (
            ["analyze", "t.json", "--stpe", "3"],
            "probe: error: analyze: unrecognized arguments: --stpe 3: did you mean --step?",
        ),
        (
            ["compare", "a", "b", "--treshold=2"],
            "probe: error: compare: unrecognized arguments: --treshold=2: did you mean --threshold?",
        ),
        # a subcommand's flag is suggested from that subcommand's own parser
        (
            ["history", "check", "--windw", "3"],
            "probe: error: history check: unrecognized arguments: --windw 3: did you mean --window?",
        ),
    ],
)
def test_a_wrong_flag_is_one_line_with_the_nearest_flag(cli, argv, line):
    result = cli(*argv)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [line]
    assert result.stdout == ""


def test_a_wrong_choice_or_command_suggests_the_nearest_one(cli):
    result = cli("bench", "--dtype", "flaot16")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("probe: error: bench: argument --dtype: invalid choice: 'flaot16'")
    assert result.stderr.endswith(": did you mean float16?\n")
    result = cli("anlyze", "t.json")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("probe: error: argument command: invalid choice: 'anlyze'")
    assert result.stderr.endswith(": did you mean analyze?\n")


def test_nothing_close_is_suggested_as_nothing(cli):
    result = cli("run", "--zzzzzz")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["probe: error: run: unrecognized arguments: --zzzzzz"]


def flags_help(command: str) -> dict[str, str]:
    """`probe COMMAND --help`'s options, flag -> its help text on one line (a real process: what a user reads)."""
    result = run_probe(command, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout.split("options:", 1)[1]
    out, flag = {}, None
    for line in text.splitlines():
        if m := re.match(r"  (-[-\w]+)", line):
            flag = m.group(1)
            out[flag] = line
        elif flag is not None:
            out[flag] += " " + line.strip()
    return {f: " ".join(t.split()) for f, t in out.items()}


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "history"])
def test_each_flag_states_its_default_once(command):
    for flag, text in flags_help(command).items():
        assert text.count("(default") <= 1, (flag, text)
        assert "(default: None)" not in text and "(default: )" not in text, (flag, text)


def test_run_help_shows_what_run_uses_on_this_machine():
    """probe run on a CPU runs CPU_DEFAULTS (and --quick QUICK_CPU), not BenchConfig's GPU-sized fields."""
    here = device_here()
    full, quick = defaults_for(here, False), defaults_for(here, True)
    flags = flags_help("run")
    assert (
        f"(default: {shown('prompts', full['prompts'])}; --quick: {shown('prompts', quick['prompts'])})"
        in (flags["--prompts"])
    )
    assert f"(default: {full['new_tokens']}; --quick: {quick['new_tokens']})" in flags["--new-tokens"]
    assert f"(default: {full['model']})" in flags["--model"]
    if here == "cpu":
        assert "4096" not in flags["--prompts"] and "the floor runs fastest at" in flags["--threads"]


def test_baseline_help_shows_the_baseline_configuration():
    flags = flags_help("baseline")
    for flag, default in {"--prompts": "16,64", "--new-tokens": "32", "--warmup": "1", "--threads": "1"}.items():
        assert f"(default: {default})" in flags[flag], flags[flag]
    assert "none: the run is not recorded" in flags["--history"]


def test_auto_is_shown_as_what_it_is_here():
    flags = flags_help("bench")
    assert f"(default: auto, which is {device_here()} here)" in flags["--device"]


def test_probe_models_lists_presets_families_devices_and_where_to_get_a_config(cli):
    doc = json.loads(cli("models", "--json").stdout)
    assert {"tiny", "qwen2.5-1.5b"} <= set(doc["presets"]) and doc["presets"]["tiny"]["family"] == "qwen2"
    engines = doc["engines"]
    assert set(engines) == {"naive", "cached", "static", "static-eager", "batched"}
    assert "llama" in engines["naive"]["serves"] and engines["naive"]["refuses"] == {}
    # each engine's own refusal, asked of each family (docs/models.md's matrix)
    assert set(engines["static"]["refuses"]) == {"gpt_neo", "opt"}
    assert set(engines["batched"]["refuses"]) == {"falcon_h1", "mamba", "qwen3_next"}
    assert {"H100-SXM", "A10", "MI300X"} <= set(doc["devices"])
    assert "config.json" in doc["other_models"]
    table = cli("models").stdout
    assert "presets (--model NAME)" in table and "H100-SXM" in table and "--model path/to/config.json" in table
