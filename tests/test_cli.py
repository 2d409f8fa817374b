"""The CLI's own behaviour on a wrong command line: one line on stderr, one `probe:` prefix, the nearest flag or
choice suggested (difflib's closeness), exit 2, before any command module does its work."""

from __future__ import annotations

import pytest


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
