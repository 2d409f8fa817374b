"""Hostile input, third pass: files and folders someone else prepared. A checkout whose git configuration names
commands, a trace of someone else's beside probe profile's output, pattern flags that are not UTF-8, a Ray address
no resolver can take, and scripts/gpu-run.sh failing on the way. Each ends in exit 2 and one line naming the file
and the problem, or a correct answer; nothing runs that the user did not ask for, and nothing is lost."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path

import duckdb
import pytest

from probe.analysis.records.environment import git_state
from probe.analysis.records.sidecar import sidecar_paths, unpaired_traces
from tests.conftest import DATA, ROOT, run_probe

TINY = ["--engines", "cached", "--prompts", "8", "--new-tokens", "2", "--runs", "1", "--warmup", "0"]
TINY += ["--telemetry-ms", "0", "--threads", "1"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("probe: error: "), proc.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# 1. a checkout's configured commands


@pytest.fixture
def booby_trapped_repo(tmp_path):
    """A repository whose fsmonitor and whose filter driver (for every tracked file) each touch a marker file,
    with its tracked file's stat changed, so that git status would run both."""
    repo, marker = tmp_path / "repo", tmp_path / "ran"
    repo.mkdir()
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / ".gitattributes").write_text("* filter=trap\n")
    (repo / "model.py").write_text("# the code under test\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "filter.trap.clean", str(script))
    os.utime(repo / "model.py", (0, 0))  # stat no longer matches the index: git status compares the content
    return repo, marker


def test_git_state_runs_no_command_the_checkout_configures(booby_trapped_repo):
    repo, marker = booby_trapped_repo
    head = git(repo, "rev-parse", "HEAD")
    assert git_state(repo) == (head, False)
    (repo / "model.py").write_text("# edited\n")
    assert git_state(repo) == (head, True)
    assert not marker.exists()
    git(repo, "status", "--porcelain")  # the trap is real: plain git status springs it
    assert marker.exists()


def test_git_state_runs_no_command_a_submodule_configures(booby_trapped_repo, tmp_path):
    """git status asks each submodule for its own status, with the submodule's configuration: not here."""
    sub, marker = booby_trapped_repo
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q")
    git(top, "config", "user.email", "t@example.com")
    git(top, "config", "user.name", "t")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(top, "commit", "-qm", "top")
    for key in ("core.fsmonitor", "filter.trap.clean"):
        git(top / "sub", "config", key, git(sub, "config", key))
    os.utime(top / "sub" / "model.py", (0, 0))
    assert git_state(top) == (git(top, "rev-parse", "HEAD"), False)
    assert not marker.exists()


def test_a_bench_in_a_booby_trapped_checkout_records_its_commit_and_runs_nothing(booby_trapped_repo, tmp_path):
    repo, marker = booby_trapped_repo
    history = tmp_path / "h.duckdb"
    env = os.environ | {"PYTHONPATH": str(ROOT), "PROBE_HISTORY": str(history)}
    proc = run_probe("bench", *TINY, "--out", str(tmp_path / "bench"), cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "history: recorded run" in proc.stderr
    assert not marker.exists()
    with duckdb.connect(str(history), read_only=True) as con:
        rows = con.execute("SELECT git_commit, git_dirty FROM runs").fetchall()
    assert rows == [(git(repo, "rev-parse", "HEAD"), False)]


# ---------------------------------------------------------------------------------------------------------
# 13. a sidecar paired with someone else's trace

STEM = "tiny_cached_cpu_p8_n2"  # what probe profile names the tiny cached run of 8 prompt tokens and 2 new ones


@pytest.mark.parametrize(
    "foreign, force", [(f"{STEM}.trace.json", []), (f"{STEM}.json.gz", ["--force"]), (f"{STEM}.sqlite", [])]
)
def test_profile_refuses_to_write_a_sidecar_someone_elses_trace_would_read(tmp_path, foreign, force):
    out = tmp_path / "out"
    out.mkdir()
    (out / foreign).write_bytes(b"someone's trace")
    proc = run_probe("profile", "--engine", "cached", "--prompt", "8", "--new-tokens", "2", "--out", str(out), *force)
    assert one_line_error(proc) == (
        f"probe: error: {out / foreign}: a trace this run did not write, with no sidecar of its own, would read "
        "this run's sidecar as its own: move it, or choose another --out"
    )
    assert sorted(p.name for p in out.iterdir()) == [foreign]  # nothing written, the foreign trace untouched
    assert (out / foreign).read_bytes() == b"someone's trace"


def test_an_nsys_export_reads_its_own_sidecar_before_the_torch_traces(tmp_path):
    """probe run writes both tools' traces of one configuration beside each other: each reads its own sidecar."""
    torch_meta, nsys_meta = tmp_path / f"{STEM}.meta.json", tmp_path / f"{STEM}.nsys.meta.json"
    assert sidecar_paths(tmp_path / f"{STEM}.sqlite") == (nsys_meta, torch_meta)
    assert sidecar_paths(tmp_path / f"{STEM}.trace.json.gz") == (torch_meta, nsys_meta)
    torch_meta.write_text("{}")
    nsys_meta.write_text("{}")
    assert unpaired_traces(tmp_path, STEM, [tmp_path / f"{STEM}.sqlite", nsys_meta]) == []
    (tmp_path / f"{STEM}.trace.json.gz").write_text("probe's own, with its sidecar")
    (tmp_path / f"{STEM}.json").write_text("someone's")
    assert unpaired_traces(tmp_path, STEM, [tmp_path / f"{STEM}.sqlite", nsys_meta]) == []  # each has a sidecar
    torch_meta.unlink()
    writing = [tmp_path / f"{STEM}.sqlite", nsys_meta]
    assert unpaired_traces(tmp_path, STEM, writing) == [tmp_path / f"{STEM}.trace.json.gz", tmp_path / f"{STEM}.json"]


# ---------------------------------------------------------------------------------------------------------
# 14. a pattern flag that is not UTF-8: the shell's byte 0xff reaches Python as the lone surrogate \udcff

HAND = DATA / "hand_decode.trace.json.gz"


@pytest.mark.parametrize(
    "flag, value, line",
    [
        ("--steps", "\udcff", "--steps '\\udcff': not UTF-8 text: '\\udcff' at character 0"),
        ("--part", "x=a\udcff", "--part x=a\\udcff: not UTF-8 text: '\\udcff' at character 1"),
        ("--kernel-category", "c=\udcff", "--kernel-category c=\\udcff: not UTF-8 text: '\\udcff' at character 0"),
        (
            "--kernel-category",
            "\udcff=gemm",
            "--kernel-category '\\udcff=gemm': the category is not UTF-8 text: '\\udcff' at character 0",
        ),
    ],
)
def test_a_pattern_flag_that_is_not_utf8_is_one_line(flag, value, line):
    proc = run_probe("analyze", str(HAND), "--json", flag, value)
    assert one_line_error(proc) == f"probe: error: {line}"


# ---------------------------------------------------------------------------------------------------------
# 15. a Ray address no resolver can take: refused before Ray is imported

LONG_LABEL = "a" * 64


@pytest.mark.parametrize("command", [["bench", *TINY], ["analyze", str(HAND), str(HAND)]])
@pytest.mark.parametrize(
    "address, host, why",
    [
        (f"{LONG_LABEL}.example:6379", f"{LONG_LABEL}.example", "label empty or too long"),
        (f"ray://{LONG_LABEL}:10001", LONG_LABEL, "label too long"),
        ("\udcff.example:6379", "\udcff.example", "Invalid character '\\udcff'"),
    ],
)
def test_a_ray_address_no_resolver_takes_is_one_line_before_ray_is_imported(tmp_path, command, address, host, why):
    fake = tmp_path / "fake" / "ray"  # a `ray` that leaves a mark when imported
    fake.mkdir(parents=True)
    marker = tmp_path / "ray-imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = os.environ | {"PYTHONPATH": f"{fake.parent}{os.pathsep}{ROOT}"}
    proc = run_probe(*command, "--executor", "ray", "--address", address, env=env)
    assert one_line_error(proc) == (
        f"probe: error: --address {address!r}: host {host!r} is not a name a resolver takes: {why} "
        "(a name is labels of 1 to 63 characters that IDNA can encode)"
    )
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------
# 18. scripts/gpu-run.sh: its own failures, run here with stubs (an interpreter that records its calls and whose
# `probe run` writes a small run folder; a tar that fails), from a copy of the script in tmp_path (it packs the
# runs/ folder beside it)

GPU_RUN = ROOT / "scripts" / "gpu-run.sh"
STUB_PYTHON = """#!/usr/bin/env bash
echo "$*" >>"$STUB_CALLS"
if [ "$1" = - ]; then cat >/dev/null; exit 0; fi  # the self-check, read from stdin
if [ "$1 $2" = "-m probe" ]; then
  mkdir -p runs/gpu-quick/traces && echo '{}' >runs/gpu-quick/results.json
  echo trace | gzip >runs/gpu-quick/traces/x.trace.json.gz
  exit "${STUB_RUN_EXIT:-0}"
fi
"""  # anything else is `-m pip install`: it succeeds


def gpu_run(tmp_path: Path, out: Path, run_exit: int = 0, failing: str | None = None):
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    (root / "scripts" / "gpu-run.sh").write_text(GPU_RUN.read_text())
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "python").write_text(STUB_PYTHON)
    if failing:
        (stubs / failing).write_text(f"#!/bin/sh\necho '{failing}: stub failure' >&2\nexit 2\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = os.environ | {
        "OUT": str(out),
        "PYTHON": str(stubs / "python"),
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "STUB_CALLS": str(tmp_path / "calls"),
        "STUB_RUN_EXIT": str(run_exit),
        "GPU_RUN_SITE": str(tmp_path / "site"),
    }
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu-run.sh")], capture_output=True, text=True, env=env)
    return proc, tmp_path / "calls"


def last_line(proc: subprocess.CompletedProcess) -> str:
    """The script's last line without its clock (` (+N s)`)."""
    return re.sub(r" \(\+\d+ s\)$", "", proc.stdout.strip().splitlines()[-1])


def test_gpu_run_script_parses():
    assert subprocess.run(["bash", "-n", str(GPU_RUN)]).returncode == 0


def test_gpu_run_packs_what_a_failed_run_wrote_and_exits_with_its_status(tmp_path):
    out = tmp_path / "out"
    proc, _ = gpu_run(tmp_path, out, run_exit=1)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert last_line(proc) == "gpu-run: done, exit 1"
    with tarfile.open(out / "run.tar.gz") as tar:
        assert "runs/gpu-quick/results.json" in tar.getnames()
    with tarfile.open(out / "traces.tar") as tar:
        assert tar.getnames() == ["runs/gpu-quick/traces/x.trace.json.gz"]


@pytest.mark.parametrize("run_exit", [0, 1])
def test_gpu_run_fails_when_packing_fails(tmp_path, run_exit):
    out = tmp_path / "out"
    proc, _ = gpu_run(tmp_path, out, run_exit=run_exit, failing="tar")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert last_line(proc) == (
        "gpu-run: FAILED packing: tar of run.tar.gz exited 2; tar of traces.tar exited 2; "
        f"run.tar.gz is not in {out} (probe run exited {run_exit}): exit 3"
    )
    assert not (out / "run.tar.gz").exists()
    assert (tmp_path / "root" / "runs" / "gpu-quick" / "results.json").exists()  # the run's files are kept


def test_gpu_run_checks_out_first(tmp_path):
    (tmp_path / "file").write_text("a regular file: nothing can be made under it, even by root")
    out = tmp_path / "file" / "sub"
    proc, calls = gpu_run(tmp_path, out)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"gpu-run: FAILED: $OUT={out} is not a folder this user can write to: nothing installed or run"
    ]
    assert proc.stdout == ""
    assert not calls.exists()  # no pip, no self-check, no probe run
