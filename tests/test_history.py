"""The run history (probe.analysis.regression.history, `probe history`): every measuring command appends its run, the
trend
check catches an engine that adds a host op, concurrent writers both land and readers see whole runs, an older
file is migrated, and bad input is one line.

The measured history is built once, by real `probe` processes in a scratch git repository (so the commit and
dirty flag are the repository's): bench, baseline, profile and run on the tiny preset at commit 1, then, at
commit 2 with a tracked file modified, a bench of tests.variants:ExtraOpCacheEngine (the cached engine plus one
aten::clone per layer, named `cached`, so its cells are the same configuration as the bench's).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from probe.analysis.records.results import RESULTS_FILE, load_results
from probe.analysis.regression import history
from probe.text import md_escape
from tests.conftest import DATA, ROOT, run_probe

SMALL = ["--prompts", "8", "--new-tokens", "4", "--runs", "2", "--warmup", "0", "--telemetry-ms", "0"]
SMALL += ["--threads", "1"]
BENCH = ["--engines", "cached", *SMALL]
EXTRA = "tests.variants:ExtraOpCacheEngine"
RUN_A = DATA / "app" / "runs" / "tiny-cpu-a"  # a probe run folder (results.json + report.json), no traces


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def probe_in(repo: Path, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`probe ...` run from `repo`, finding this checkout's packages (tests.variants included)."""
    full = os.environ | {"PYTHONPATH": str(ROOT)} | (env or {})
    return run_probe(*args, cwd=repo, env=full, **kw)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("probe: error: "), proc.stderr
    return lines[0]


def runs_json(path: Path, *args: str) -> list[dict]:
    """`probe history list --json`, in this process."""
    from probe.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["history", "list", "--json", "--history", str(path), *args]) == 0
    return json.loads(buffer.getvalue())


# Five measuring commands in processes of their own, minutes on this 2-core machine: the tests that read them run
# under `pytest -m slow` (and in .ci/run).
@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A scratch repository whose history holds a bench, a baseline, a profile and a run at commit 1, and the
    extra-op variant's bench at commit 2 (dirty)."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "model.py").write_text("# the code under test\n")
    git(repo, "add", "model.py")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    path = repo / "h.duckdb"
    env = {"PROBE_HISTORY": str(path)}
    ok(probe_in(repo, "bench", *BENCH, "--out", "bench", env=env))
    ok(probe_in(repo, "baseline", *BENCH, "--out", "baseline.json", env=env))
    ok(probe_in(repo, "profile", "--engine", "cached", "--prompt", "8", "--new-tokens", "4", "--out", "tr", env=env))
    ok(probe_in(repo, "run", *BENCH, "--no-next", "--out", "run", env=env))
    git(repo, "commit", "-qm", "two", "--allow-empty")
    (repo / "model.py").write_text("# the code under test, edited\n")
    extra = ok(probe_in(repo, "bench", "--engines", EXTRA, *SMALL, "--out", "extra", env=env))
    return {"repo": repo, "path": path, "first": first, "second": git(repo, "rev-parse", "HEAD"), "extra": extra}


# ---------------------------------------------------------------------------------------------------------
# recording


@pytest.mark.slow
def test_every_measuring_command_appends_its_run(measured):
    runs = runs_json(measured["path"])
    assert [r["command"] for r in runs] == ["bench", "run", "profile", "baseline", "bench"]  # newest first
    assert [(r["commit"], r["dirty"]) for r in runs] == [(measured["second"], True)] + [(measured["first"], False)] * 4
    assert "history: recorded run " + runs[0]["run_id"] in measured["extra"].stderr
    bench, baseline = runs[4], runs[3]
    assert bench["config_id"] == baseline["config_id"] == runs[0]["config_id"]  # same settings, same configuration
    assert bench["config"] == "tiny float32 cached p8 n4 threads=1"
    assert runs[2]["config"] == "profile tiny float32 cached p8 n4" and runs[2]["kind"] == "trace"
    assert runs[1]["config"] == bench["config"] + " +traces"  # probe run: its cells and its profiled traces
    repo = measured["repo"]
    assert bench["source"] == str(repo / "bench") and runs[2]["source"].endswith(".trace.json.gz")


@pytest.mark.slow
def test_a_bench_run_stores_its_cells_counts_ops_and_samples(measured):
    cell = load_results(measured["repo"] / "bench").cells[0]
    run_id = runs_json(measured["path"], "--last", "5")[4]["run_id"]
    with duckdb.connect(str(measured["path"]), read_only=True) as con:

        def one(sql: str):
            return con.execute(sql, [run_id]).fetchall()

        assert one("SELECT unit, decode_ops, decode_tok_s FROM cells WHERE run_id = ?") == [
            ("cached p8 n4", cell.decode_ops, cell.decode_tok_s)
        ]
        counts = dict(one("SELECT metric, value FROM counts WHERE run_id = ?"))
        assert counts == {"decode_launches": cell.decode_ops, "prefill_launches": cell.prefill_ops}
        ops = dict(one("SELECT op, count FROM op_counts WHERE run_id = ? AND metric = 'decode_launches'"))
        assert ops == cell.decode_ops_by_op
        host = one("SELECT value FROM samples WHERE run_id = ? AND metric = 'host_us_per_step' ORDER BY i")
        assert [x for (x,) in host] == pytest.approx([x * 1e3 for run in cell.itl_runs_ms for x in run])
        assert one("SELECT count(*) FROM samples WHERE run_id = ? AND metric = 'ttft_ms'") == [(2,)]
        torch_version, env = one("SELECT torch, env_json FROM runs WHERE run_id = ?")[0]
        assert torch_version == json.loads(env)["torch"] == load_results(measured["repo"] / "bench").env.torch


@pytest.mark.slow
def test_a_profiled_run_stores_its_per_step_ledger(measured):
    from probe.analysis.ledger.build import analyze
    from probe.analysis.trace import load_trace

    runs = runs_json(measured["path"])
    profile, run = runs[2], runs[1]
    trace = Path(profile["source"])
    steps = analyze(load_trace(trace)).steps
    with duckdb.connect(str(measured["path"]), read_only=True) as con:
        stored = con.execute(
            "SELECT unit, position, wall_ns, dispatched FROM steps WHERE run_id = ? ORDER BY position",
            [profile["run_id"]],
        ).fetchall()
        assert stored == [(f"cached p8 n4 {s.kind}", s.position, s.wall_ns, s.dispatched) for s in steps]
        # the host parts add up to the wall, exactly, step by step
        sums = con.execute(
            "SELECT s.wall_ns, sum(p.ns) FROM steps s JOIN step_parts p USING (run_id, unit, position) "
            "WHERE run_id = ? GROUP BY s.run_id, s.unit, s.position, s.wall_ns",
            [profile["run_id"]],
        ).fetchall()
        assert len(sums) == len(steps) and all(wall == total for wall, total in sums)
        units = con.execute("SELECT DISTINCT unit FROM counts WHERE run_id = ? ORDER BY unit", [run["run_id"]])
        # probe run: the bench cell, and the step kinds of the trace it profiled (9 new tokens, at the prompt)
        assert [u for (u,) in units.fetchall()] == ["cached p8 n4", "cached p8 n9 decode", "cached p8 n9 prefill"]
        assert con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run["run_id"]]).fetchone() == (9,)


def test_no_history_records_nothing(tmp_path):
    path = tmp_path / "h.duckdb"
    ok(probe_in(tmp_path, "bench", *BENCH, "--no-history", env={"PROBE_HISTORY": str(path)}))
    assert not path.exists()


def test_a_failed_history_write_keeps_the_results_and_says_why(tmp_path):
    bad = tmp_path / "h.duckdb"
    bad.write_text("not a database")
    proc = probe_in(tmp_path, "bench", *BENCH, "--out", "out", "--history", str(bad))
    assert (tmp_path / "out" / RESULTS_FILE).is_file()  # the run's own results are written first
    assert proc.returncode == 2  # a history the user named: a failed write is visible in the exit code
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"probe: history not updated: {bad}: not a DuckDB database, so not a probe history"
    )


def test_with_the_default_file_a_failed_write_only_warns(monkeypatch, tmp_path):
    """The append policy the measuring commands share (probe.analysis.regression.history.record; their --no-history is
    test_no_history_records_nothing): unnamed, the history is the command's own output folder's."""
    monkeypatch.delenv("PROBE_HISTORY")
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "out"
    home.mkdir()
    (home / history.DEFAULT_FILE).write_text("not a database")
    results = load_results(RUN_A)
    assert history.record(None, "bench", 0, results=results, home=home).code == 0
    failed = history.record(None, "bench", 1, results=results, home=home)
    assert failed.code == 1 and failed.message.startswith("probe: history not updated: ")
    assert history.record(home / history.DEFAULT_FILE, "bench", 0, results).code == 2
    (home / history.DEFAULT_FILE).unlink()
    done = history.record(None, "bench", 0, results=results, home=home)
    assert (
        done.code == 0
        and done.message == f"history: recorded run {done.message.split()[3]} in {home / 'probe-history.duckdb'}"
    )
    with history.connect(home / history.DEFAULT_FILE) as con:  # recorded in the command's own folder
        (run,) = history.list_runs(con)
    assert run.commit is None and run.dirty is None  # tmp_path is no repository: no commit, not probe's own
    assert list(tmp_path.glob("*.duckdb")) == []  # nothing in the current folder


@pytest.mark.slow  # five commands in processes of their own
def test_the_history_goes_only_where_asked(tmp_path):
    """Issue 36 §3: bench without --out, and baseline, record nothing and say so; bench and run with --out record in
    their own folder and say where; nothing is written into the current folder unless it is named."""
    env = {"PROBE_HISTORY": ""}
    bench = ok(probe_in(tmp_path, "bench", *BENCH, env=env))
    assert bench.stderr.strip().splitlines()[-1] == (
        "history: this run is not recorded (name a history file with --history PATH or $PROBE_HISTORY)"
    )
    ok(probe_in(tmp_path, "baseline", *BENCH, "--out", "b.json", env=env))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no probe-history.duckdb here
    run = ok(probe_in(tmp_path, "run", *BENCH, "--no-next", "--out", "r", env=env))
    assert run.stderr.strip().splitlines()[-1].endswith(f" in {Path('r') / 'probe-history.duckdb'}")
    assert (tmp_path / "r" / "probe-history.duckdb").is_file() and not (tmp_path / "probe-history.duckdb").exists()
    named = ok(probe_in(tmp_path, "bench", *BENCH, "--history", "probe-history.duckdb", env=env))
    assert named.stderr.strip().splitlines()[-1].endswith(" in probe-history.duckdb")
    assert (tmp_path / "probe-history.duckdb").is_file()  # the current folder, because it was named


# ---------------------------------------------------------------------------------------------------------
# list, check, show


@pytest.mark.slow
def test_check_exits_1_naming_the_op_the_variant_added(measured, tiny, tmp_path, cli):
    layers = tiny.config.num_hidden_layers
    decode_ops = load_results(measured["repo"] / "bench").cells[0].decode_ops
    md = tmp_path / "comment.md"
    proc = run_probe("history", "check", "--history", str(measured["path"]), "--markdown", str(md))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        f"launches/decode step {decode_ops} -> {decode_ops + layers} (+{layers}): aten::clone 0 -> {layers} (new)"
        in out
    )
    assert "REGRESSION" in out and "timings span sessions" in out and "probe ab" in out
    assert "not enough history" in out  # the profile and the run configurations have one run each
    text = md.read_text()
    assert md_escape(f"aten::clone 0 -> {layers} (new)") in text and text.startswith("## probe history check")
    doc = json.loads(cli("history", "check", "--json", "--history", str(measured["path"])).stdout)
    assert doc["regression"] is True and doc["window"] == history.WINDOW
    checked = [c for c in doc["configs"] if c["status"] == "checked"]
    assert len(checked) == 1 and len(checked[0]["window"]) == 2  # the bench and the baseline before it
    alerts = {a["metric"]: a["message"] for a in checked[0]["comparison"]["alerts"]}
    assert "aten::clone" in alerts["decode_launches"] and "aten::clone" in alerts["prefill_launches"]
    assert {c["status"] for c in doc["configs"]} == {"checked", "not enough history"}


@pytest.mark.slow
def test_check_counts_only_and_a_config_filter(measured, cli):
    proc = cli("history", "check", "--counts-only", "--config", "profile", "--history", str(measured["path"]))
    assert proc.returncode == 0 and "not enough history" in proc.stdout and "aten::clone" not in proc.stdout
    proc = cli("history", "check", "--counts-only", "--config", "p8 n4 threads=1", "--history", str(measured["path"]))
    assert proc.returncode == 1 and "timings span sessions" not in proc.stdout  # no timing compared
    assert "host µs/step" not in proc.stdout
    assert one_line_error(cli("history", "check", "--config", "nothing", "--history", str(measured["path"])))


@pytest.mark.slow
def test_list_filters_and_limits(measured, cli):
    path = str(measured["path"])
    assert [r["command"] for r in runs_json(measured["path"], "--last", "2")] == ["bench", "run"]
    assert [r["command"] for r in runs_json(measured["path"], "--config", "profile")] == ["profile"]
    config_id = runs_json(measured["path"])[0]["config_id"]
    assert [r["command"] for r in runs_json(measured["path"], "--config", config_id[:4])] == [
        "bench",
        "baseline",
        "bench",
    ]
    table = ok(cli("history", "list", "--history", path)).stdout
    assert "tiny float32 cached p8 n4 threads=1" in table and measured["second"][:10] + "+dirty" in table


@pytest.mark.slow
def test_show_holds_a_run_against_its_predecessor(measured, cli):
    runs = runs_json(measured["path"])
    path = str(measured["path"])
    proc = cli("history", "show", runs[0]["run_id"][:-2], "--history", path)  # a prefix is enough
    assert proc.returncode == 1 and "aten::clone" in proc.stdout
    doc = json.loads(cli("history", "show", runs[0]["run_id"], "--json", "--history", path).stdout)
    assert doc["previous"] == runs[3]["run_id"] and doc["window"] == [runs[3]["run_id"]]  # the baseline before it
    assert doc["comparison"]["baseline"] == f"{runs[3]['run_id']} @ {measured['first'][:10]}"
    # the baseline against the bench: the same code, so the same launch counts. Their timings are two real
    # measurements on a shared machine and may differ, so only the exact counts are gated here.
    same = cli("history", "show", runs[3]["run_id"], "--counts-only", "--history", path)
    assert same.returncode == 0 and "no regression" in same.stdout, same.stdout
    first = ok(cli("history", "show", runs[4]["run_id"], "--history", path))
    assert "not enough history" in first.stdout
    assert "no run 'nope'" in one_line_error(cli("history", "show", "nope", "--history", path))
    assert "matches 5 runs" in one_line_error(cli("history", "show", "2", "--history", path))


@pytest.mark.slow
def test_importing_the_same_folders_adds_nothing_twice(measured, tmp_path, cli):
    copy = tmp_path / "h.duckdb"
    shutil.copy(measured["path"], copy)
    proc = ok(cli("history", "import", str(measured["repo"]), "--history", str(copy)))
    # the hooks and the importer fingerprint the same measurements the same way
    assert "0 run(s) added" in proc.stdout and "5 already there" in proc.stdout
    fresh = tmp_path / "fresh.duckdb"
    proc = ok(cli("history", "import", str(measured["repo"]), "--history", str(fresh)))
    assert "5 run(s) added" in proc.stdout
    runs = runs_json(fresh)
    assert sorted(r["command"] for r in runs) == ["baseline", "bench", "bench", "profile", "run"]
    assert {r["config_id"] for r in runs} == {r["config_id"] for r in runs_json(measured["path"])}


def test_import_of_the_committed_runs_and_traces(tmp_path, cli):
    path = tmp_path / "h.duckdb"
    proc = ok(cli("history", "import", str(DATA / "app"), "--history", str(path)))
    assert "4 run(s) added" in proc.stdout
    runs = runs_json(path)
    assert sorted(r["command"] for r in runs) == ["profile", "profile", "run", "run"]
    env = load_results(RUN_A).env
    # an imported folder keeps the commit its results recorded (probe's own checkout, then)
    assert {r["commit"] for r in runs} == {env.commit}
    single = ok(cli("history", "import", str(DATA / "hand_decode.trace.json.gz"), "--history", str(path)))
    assert "0 run(s) added" in single.stdout and "no .meta.json" in single.stderr


def test_a_configuration_keeps_the_id_and_label_histories_already_hold():
    """ConfigIdentity is stored and hashed as the dict the history always used: these ids were written by the code
    before it (a dict per run), so a history file's runs still meet new runs of their configuration."""
    run = history.folder_record(RUN_A)
    assert (run.config_id, run.label) == ("61482b0c83", "tiny float32 cached,naive p16,64,256 n8")
    assert (
        run.config.to_json()["cells"][:2] == ["cached p16 n8", "cached p256 n8"]
        and "traces" not in run.config.to_json()
    )
    with_traces = history.ConfigIdentity(kind="results", model="tiny", dtype="float32", traces=("cached p16 n6",))
    assert with_traces.label.endswith(" +traces") and with_traces.to_json()["traces"] == ["cached p16 n6"]
    trace = history.file_record(DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz")
    assert (trace.config_id, trace.label) == ("c75ead3d5a", "profile tiny float32 cached p16 n6")
    assert trace.config.to_json() == {
        "model": "tiny",
        "dtype": "float32",
        "seed": 0,
        "warmup": 1,
        "prompt": 16,
        "new_tokens": 6,
        "batch": 1,
        "kind": "trace",
        "tool": "torch.profiler",
        "engine": "cached",
    }


# ---------------------------------------------------------------------------------------------------------
# the queries docs/history.md shows


def readme_queries() -> list[str]:
    text = (ROOT / "docs" / "history.md").read_text()
    return re.findall(r"```sql\n(.*?)```", text, flags=re.S)


@pytest.mark.slow
def test_the_readme_queries_run_and_answer(measured, tiny):
    queries = readme_queries()
    assert len(queries) == 2
    with duckdb.connect(str(measured["path"]), read_only=True) as con:
        per_commit = con.execute(queries[0]).df()
        changed = con.execute(queries[1]).df()
    bench = per_commit[(per_commit["unit"] == "cached p8 n4") & (per_commit["config"].str.endswith("threads=1"))]
    assert bench["git_commit"].tolist() == [measured["second"], measured["first"]]  # newest first
    assert (bench["host_us_per_step"] > 0).all()
    layers = tiny.config.num_hidden_layers  # the variant: one more aten::clone per layer, prefill and decode
    assert sorted(zip(changed["unit"], changed["metric"], changed["after"] - changed["before"], strict=True)) == [
        ("cached p8 n4", "decode_launches", layers),
        ("cached p8 n4", "prefill_launches", layers),
    ]
    assert set(changed["git_commit"]) == {measured["second"]}


# ---------------------------------------------------------------------------------------------------------
# concurrency: real processes


def distinct_runs(folder: Path, n: int, tag: str) -> list[Path]:
    """n copies of a run folder whose measurements differ (so that each is a new run to the history)."""
    out = []
    doc = json.loads((RUN_A / RESULTS_FILE).read_text())
    for i in range(n):
        run = folder / f"{tag}-{i}"
        run.mkdir(parents=True)
        doc["cells"][0]["ttft_ms"] = 1000 + i + (0.5 if tag == "b" else 0)
        (run / RESULTS_FILE).write_text(json.dumps(doc))
        out.append(run)
    return out


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import duckdb
    from probe.analysis.regression import history
    path, go, folders = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    records = [history.folder_record(Path(f)) for f in folders]
    print("ready", flush=True)
    conflicts, connect = [0], duckdb.connect
    def counting(*args, **kw):  # DuckDB's own connect, counting the times the file was found locked
        try:
            return connect(*args, **kw)
        except duckdb.IOException as e:
            conflicts[0] += "lock" in str(e).lower()
            raise
    duckdb.connect = counting
    while not go.exists():  # both writers start together, while another process holds the file
        time.sleep(0.001)
    for record in records:
        assert history.append(path, record) is not None
    print(conflicts[0])
    """
)

READER = textwrap.dedent(
    """
    import sys, time
    import duckdb
    path, seconds = sys.argv[1], float(sys.argv[2])
    deadline, seen = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        time.sleep(0.02)  # a reader that reads and closes, as probe's readers do, and lets writers in between
        try:
            con = duckdb.connect(path, read_only=True)
        except duckdb.Error:
            continue
        try:
            # every run a reader can see is whole: as many units in counts as the run says, its cells, its samples
            bad = con.execute(
                "SELECT r.run_id FROM runs r LEFT JOIN (SELECT run_id, count(DISTINCT unit) AS n FROM counts "
                "GROUP BY run_id) c USING (run_id) WHERE coalesce(c.n, 0) <> r.units OR r.run_id NOT IN "
                "(SELECT run_id FROM samples) OR r.run_id NOT IN (SELECT run_id FROM cells)"
            ).fetchall()
        except duckdb.Error:
            bad = []  # the schema is being created
        finally:
            con.close()
        if bad:
            print("HALF", bad, flush=True)
            sys.exit(1)
        seen += 1
    print(seen)
    """
)


@pytest.mark.slow  # two recording processes and a reader
def test_two_processes_recording_at_once_both_land_and_a_reader_sees_whole_runs(tmp_path):
    """Two writers start appending while a third process holds the file's write lock, so each must find it locked
    and wait (a collision made certain, not left to the scheduler); both land, and a reader meanwhile sees whole
    runs only."""
    path = tmp_path / "h.duckdb"
    go = tmp_path / "go"
    folders = {tag: distinct_runs(tmp_path / tag, 15, tag) for tag in ("a", "b")}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(go), *map(str, runs)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for runs in folders.values()
    ]
    for w in writers:  # both have imported probe and read their folders
        assert w.stdout.readline().strip() == "ready", w.stderr.read()
    holder = hold(path, 2, "rollback")
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), "14"], stdout=subprocess.PIPE, text=True)
    go.touch()
    outs = [w.communicate(timeout=300) for w in writers]
    assert holder.wait(timeout=60) == 0
    assert [w.returncode for w in writers] == [0, 0], outs
    reader_out = reader.communicate(timeout=60)[0]
    assert reader.returncode == 0, reader_out  # never a run without its cells, counts or samples
    runs = runs_json(path)
    assert sorted(Path(r["source"]).name for r in runs) == sorted(p.name for p in folders["a"] + folders["b"])
    # they did collide: each writer's first append found the file held (by the holder, the other writer or the reader)
    assert all(int(out) > 0 for out, _ in outs), outs


HOLDER = textwrap.dedent(
    """
    import sys, time
    from probe.analysis.regression import history
    path, seconds, end = sys.argv[1], float(sys.argv[2]), (sys.argv[3:] or ["commit"])[0]
    with history.connect(path, write=True) as con:
        con.begin()  # a run begun and not yet committed: its row and none of its cells
        con.execute(
            "INSERT INTO runs (run_id, recorded_at, command, fingerprint, kind, config_id, config, env_id, units) "
            "VALUES ('slow', now()::TIMESTAMP, 'bench', 'x', 'results', 'c', 'c', 'e', 1)"
        )
        print("holding", flush=True)
        time.sleep(seconds)
        con.commit() if end == "commit" else con.rollback()
    """
)


def hold(path: Path, seconds: float, end: str = "commit") -> subprocess.Popen:
    """A process holding the file's write lock for `seconds` with a run begun; then it commits or rolls back."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(seconds), end],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "holding"
    return proc


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_a_writer_waits_for_the_lock_then_lands(tmp_path):
    path = tmp_path / "h.duckdb"
    holder = hold(path, 5)
    proc = run_probe("history", "import", str(RUN_A), "--history", str(path), env=os.environ | {history.WAIT_ENV: "60"})
    assert proc.returncode == 0 and "1 run(s) added" in proc.stdout, proc.stderr
    assert holder.wait(timeout=30) == 0
    assert sorted(r["run_id"] == "slow" for r in runs_json(path)) == [False, True]  # both landed


def test_a_lock_held_too_long_is_a_one_line_error_and_a_killed_writer_leaves_nothing(tmp_path):
    path = tmp_path / "h.duckdb"
    holder = hold(path, 120)
    try:
        short = os.environ | {history.WAIT_ENV: "0.5"}
        line = one_line_error(run_probe("history", "list", "--history", str(path), env=short))
        assert f"locked by another process (PID {holder.pid}) for more than 0.5 s" in line
        proc = run_probe("history", "import", str(RUN_A), "--history", str(path), env=short)
        assert "locked by another process" in one_line_error(proc)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # mid-transaction: its run must vanish, not stay half written
        holder.wait()
    assert runs_json(path) == []
    ok(run_probe("history", "import", str(RUN_A), "--history", str(path)))
    assert len(runs_json(path)) == 1


# ---------------------------------------------------------------------------------------------------------
# versions


SCHEMA_1 = [  # the first schema, as probe wrote it: bench runs only, no ledger tables, no driver column
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "INSERT INTO meta VALUES ('schema_version', '1')",
    """CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, recorded_at TIMESTAMP NOT NULL, command VARCHAR NOT NULL,
       source VARCHAR, fingerprint VARCHAR NOT NULL, kind VARCHAR NOT NULL, config_id VARCHAR NOT NULL,
       config VARCHAR NOT NULL, config_json JSON, env_id VARCHAR NOT NULL, git_commit VARCHAR, git_dirty BOOLEAN,
       torch VARCHAR, transformers VARCHAR, python VARCHAR, device VARCHAR, device_name VARCHAR, cuda VARCHAR,
       cpu_model VARCHAR, cpu_count INTEGER, torch_threads INTEGER, dtype VARCHAR, env_json JSON, complete BOOLEAN,
       units INTEGER)""",
    """CREATE TABLE cells (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, engine VARCHAR, prompt_tokens INTEGER,
       new_tokens INTEGER, batch INTEGER, runs INTEGER, ttft_ms DOUBLE, itl_p50_ms DOUBLE, itl_p90_ms DOUBLE,
       decode_tok_s DOUBLE, total_ms DOUBLE, peak_mem_bytes BIGINT, peak_mem_kind VARCHAR, spread_pct DOUBLE,
       tokens_match_naive BOOLEAN, deterministic BOOLEAN, decode_ops INTEGER, prefill_ops INTEGER)""",
    "CREATE TABLE counts (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL, value DOUBLE)",
    """CREATE TABLE op_counts (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL,
       op VARCHAR NOT NULL, count DOUBLE)""",
    """CREATE TABLE samples (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL,
       i INTEGER NOT NULL, value DOUBLE)""",
    """INSERT INTO runs VALUES ('old', TIMESTAMP '2026-01-02 03:04:05', 'bench', '/ci/run', 'f0', 'results',
       'c0', 'tiny float32 cached p8 n4', '{}', 'e0', 'abc', false, '2.13.0', '5.24.0', '3.11', 'cpu', 'cpu',
       NULL, 'x86', 2, 1, 'float32', '{"torch": "2.13.0"}', true, 1)""",
    "INSERT INTO counts VALUES ('old', 'cached p8 n4', 'decode_launches', 262)",
    "INSERT INTO op_counts VALUES ('old', 'cached p8 n4', 'decode_launches', 'aten::mm', 20)",
    "INSERT INTO samples VALUES ('old', 'cached p8 n4', 'host_us_per_step', 0, 2000.0)",
    "INSERT INTO cells (run_id, unit, engine, decode_ops) VALUES ('old', 'cached p8 n4', 'cached', 262)",
]


def old_history(path: Path) -> Path:
    with duckdb.connect(str(path)) as con:
        for statement in SCHEMA_1:
            con.execute(statement)
    return path


def test_a_history_from_an_older_probe_is_read_as_it_is_and_migrated_by_the_next_append(tmp_path, cli):
    """Reading never writes (issue 28 item 5): list and show read schema 1 as it is, byte for byte unchanged; the
    next append migrates it in place and keeps the old run."""
    path = old_history(tmp_path / "old.duckdb")
    before = path.read_bytes()
    (run,) = runs_json(path)
    assert run["run_id"] == "old" and run["commit"] == "abc" and run["config"] == "tiny float32 cached p8 n4"
    shown = ok(cli("history", "show", "old", "--history", str(path)))
    assert "not enough history" in shown.stdout
    ok(cli("history", "check", "--history", str(path)))
    assert path.read_bytes() == before and not path.with_name(path.name + ".wal").exists()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
    ok(cli("history", "import", str(RUN_A), "--history", str(path)))  # and it takes new runs
    assert len(runs_json(path)) == 2
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(history.SCHEMA_VERSION),
        )
        assert con.execute("SELECT driver FROM runs WHERE run_id = 'old'").fetchall() == [(None,)]  # schema 2's
        assert con.execute("SELECT count(*) FROM steps").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM units WHERE run_id = 'old'").fetchone() == (0,)  # schema 3's


def test_a_history_from_a_newer_probe_is_refused(tmp_path, cli):
    path = old_history(tmp_path / "new.duckdb")
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    line = one_line_error(cli("history", "list", "--history", str(path)))
    assert f"written by a newer probe (schema 99; this probe knows up to {history.SCHEMA_VERSION})" in line


# ---------------------------------------------------------------------------------------------------------
# bad input


def test_bad_history_files_are_one_line_errors(tmp_path, cli):
    missing = tmp_path / "missing.duckdb"
    assert "no history at" in one_line_error(cli("history", "check", "--history", str(missing)))
    assert not missing.exists()  # reading never creates a file
    text = tmp_path / "text.duckdb"
    text.write_text("hello, not a database\n")
    for command in ("list", "check"):
        assert "not a DuckDB database" in one_line_error(cli("history", command, "--history", str(text)))
    empty = tmp_path / "empty.duckdb"
    empty.touch()
    assert "not a valid DuckDB database" in one_line_error(cli("history", "list", "--history", str(empty)))
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    assert "without probe's tables" in one_line_error(cli("history", "list", "--history", str(other)))
    assert "a folder" in one_line_error(cli("history", "list", "--history", str(tmp_path)))
    corrupt = tmp_path / "corrupt.duckdb"
    with duckdb.connect(str(corrupt)) as con:
        con.execute("CREATE TABLE t AS SELECT range AS x FROM range(100000)")
    with open(corrupt, "r+b") as f:  # a DuckDB header over damaged blocks
        f.seek(4096)
        f.write(bytes(range(256)) * 64)
    assert "Corrupt database file" in one_line_error(cli("history", "list", "--history", str(corrupt)))
    nothing = tmp_path / "nothing.duckdb"
    with history.connect(nothing, write=True):
        pass
    assert "holds no runs" in one_line_error(cli("history", "check", "--history", str(nothing)))
    assert "--window must be at least 1" in one_line_error(
        cli("history", "check", "--window", "0", "--history", str(nothing))
    )


def test_a_history_with_one_run_says_not_enough_history(tmp_path, cli):
    path = tmp_path / "h.duckdb"
    ok(cli("history", "import", str(RUN_A), "--history", str(path)))
    proc = cli("history", "check", "--history", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "not enough history" in proc.stdout and "is the first run of this configuration" in proc.stdout
    doc = json.loads(cli("history", "check", "--json", "--history", str(path)).stdout)
    assert doc["regression"] is False and doc["configs"][0]["status"] == "not enough history"


def test_a_run_in_another_environment_is_not_compared(tmp_path, cli):
    path = tmp_path / "h.duckdb"
    runs = distinct_runs(tmp_path / "runs", 2, "a")
    doc = json.loads((runs[1] / RESULTS_FILE).read_text())
    doc["env"]["torch"] = "9.9.9"
    (runs[1] / RESULTS_FILE).write_text(json.dumps(doc))
    for run in runs:
        ok(cli("history", "import", str(run), "--history", str(path)))
        time.sleep(0.01)
    proc = ok(cli("history", "check", "--history", str(path)))
    assert "not enough history" in proc.stdout and "1 earlier run(s) of it ran in another environment" in proc.stdout


# ---------------------------------------------------------------------------------------------------------
# the explorer's History view in a real browser: a click on a point opens that run

POINT_JS = """([name, i]) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(d =>
        (d._fullData || []).some(t => t.name === name));
    const t = gd._fullData.find(t => t.name === name);
    const xa = gd._fullLayout[t.xaxis.replace('x', 'xaxis')], ya = gd._fullLayout[t.yaxis.replace('y', 'yaxis')];
    const box = gd.getBoundingClientRect();
    return {x: box.left + xa._offset + xa.d2p(t.x[i]), y: box.top + ya._offset + ya.d2p(t.y[i])};
}"""


@pytest.mark.browser
@pytest.mark.slow
def test_clicking_a_point_of_the_history_opens_that_run(tmp_path):
    from probe.explorer.figures.history import COUNT_ALERT
    from tests.test_app import HISTORY, history_root
    from tests.test_app_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, missing, open_view, serve

    reason = missing()
    if reason:
        if os.environ.get("PROBE_CI") == "1":
            pytest.fail(f"PROBE_CI=1 and {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    (tmp_path / "root").mkdir()
    root = history_root(tmp_path / "root")
    with serve(root, tmp_path / "streamlit.log") as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        query = {"source": HISTORY, "history_unit": "cached p16 n8"}
        drawn = open_view(page, url, query, "launches / step", SCREENSHOTS / "history.png")
        names = {t["name"]: t["n"] for t in drawn[0]}
        assert names["launches / step"] == 3 and names[COUNT_ALERT] == 1  # the run that added aten::clone
        assert "aten::clone" in page.inner_text("body")  # the newest run is open, with its alert
        point = page.evaluate(POINT_JS, ["launches / step", 0])  # the oldest run
        page.mouse.click(point["x"], point["y"])
        page.wait_for_function("() => document.body.innerText.includes('not enough history')", timeout=60_000)
        assert "is the first run of this configuration" in page.inner_text("body")
        assert "history_run=20260102-100000" in page.url  # the clicked run, bound to the URL
        browser.close()
        assert not errors, errors


def test_the_history_commands_need_no_torch(tmp_path):
    from tests.test_layout import HIDE_TORCH

    path = tmp_path / "h.duckdb"
    code = (
        "from probe.cli import main\n"
        f"rc = [main(['history', *argv, '--history', {str(path)!r}]) for argv in "
        "(['import', " + repr(str(RUN_A)) + "], ['list'], ['check'], ['show', 'latest'])]\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(max(rc))"
    )
    proc = subprocess.run([sys.executable, "-c", HIDE_TORCH + code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 run(s) added" in proc.stdout and "not enough history" in proc.stdout


# ---------------------------------------------------------------------------------------------------------
# hostile histories (issue 28 items 2, 4, 5, 7, 16) and contended runs (issue 22 section 4)


def imported(path: Path, cli) -> Path:
    ok(cli("history", "import", str(RUN_A), "--history", str(path)))
    return path


def test_a_history_cannot_make_probe_read_another_file(tmp_path, cli):
    """Item 2: a table replaced by a view over read_text(), or a macro over it, is refused in one line, and the
    other file's text is never shown (external access is off for every connection, and only probe's own tables
    are read)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TEXT\n")
    for name, statements in {
        "view": [
            "ALTER TABLE runs RENAME TO runs_kept",
            f"CREATE VIEW runs AS SELECT * REPLACE ((SELECT content FROM read_text('{secret}')) AS config) "
            "FROM runs_kept",
        ],
        "macro": [f"CREATE MACRO contains(a, b) AS (SELECT content FROM read_text('{secret}')) IS NOT NULL"],
    }.items():
        path = imported(tmp_path / f"{name}.duckdb", cli)
        with duckdb.connect(str(path)) as con:
            for statement in statements:
                con.execute(statement)
        for argv in (["list"], ["list", "--config", "x"], ["check"], ["show", "latest"]):
            proc = cli("history", *argv, "--history", str(path))
            assert "TOP-SECRET" not in proc.stdout + proc.stderr, (name, argv)
            line = one_line_error(proc)
            assert "not a probe history" in line and ("not probe's table" in line or "views or macros" in line)


@pytest.mark.parametrize("name", [":memory:", ":memory:named", "md:my_db", "s3://bucket/h.duckdb"])
def test_a_history_that_is_not_a_file_here_is_refused(tmp_path, cli, name):
    """Item 4: DuckDB reads these names as an in-memory (or remote) database, so `1 run(s) added` stored nothing."""
    line = one_line_error(cli("history", "import", str(RUN_A), "--history", name))
    assert "in-memory or remote database" in line
    recorded = history.record(name, "bench", results=load_results(RUN_A))  # what bench, run, profile... append with
    assert recorded.code == 2 and "in-memory or remote database" in recorded.message
    proc = run_probe("history", "list", env=os.environ | {"PROBE_HISTORY": name})
    assert "in-memory or remote database" in one_line_error(proc)


@pytest.mark.parametrize("value", ["x", "1.5", "-1", "", "99999999999999999999"])
def test_a_schema_version_that_is_not_one_probe_writes_is_one_line_and_nothing_is_written(tmp_path, cli, value):
    """Item 5: never a traceback, never a migration (the file's bytes stay as they were)."""
    path = old_history(tmp_path / "odd.duckdb")
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [value])
    before = path.read_bytes()
    for argv in (["list"], ["check"], ["import", str(RUN_A)]):
        line = one_line_error(cli("history", *argv, "--history", str(path)))
        assert "schema" in line and "not a probe history" in line or "newer probe" in line, line
    assert path.read_bytes() == before


def test_reading_a_history_on_read_only_storage(tmp_path, cli):
    """Item 5: a reader opens the file read-only, so an old history in a folder nobody may write still reads."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = old_history(folder / "old.duckdb")
    folder.chmod(0o555)
    path.chmod(0o444)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user whom permissions do not stop (root)")
        assert [r["run_id"] for r in runs_json(path)] == ["old"]
    finally:
        folder.chmod(0o755)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifos_in_the_historys_paths_are_one_line_never_a_hang(tmp_path):
    """Item 7: a FIFO named like a run's files in a folder to import, and --history naming a FIFO. Real processes
    with a timeout: the subject is that they end."""
    folder = tmp_path / "runs"
    shutil.copytree(RUN_A, folder / "a")
    (folder / "fifo").mkdir()
    for name in ("baseline.json", "x.trace.json", "x.meta.json"):
        os.mkfifo(folder / "fifo" / name)
    (folder / "fifo-run").mkdir()
    os.mkfifo(folder / "fifo-run" / RESULTS_FILE)
    path = tmp_path / "h.duckdb"
    proc = run_probe("history", "import", str(folder), "--history", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 run(s) added" in proc.stdout and "Traceback" not in proc.stderr
    skipped = proc.stderr.splitlines()
    assert len(skipped) == 2 and all(line.startswith("skipped: ") for line in skipped), proc.stderr
    assert "x.trace.json: " in skipped[0] and f"{RESULTS_FILE}: is not a regular file" in skipped[1]
    fifo = tmp_path / "h.fifo"
    os.mkfifo(fifo)
    for argv in (["list"], ["import", str(RUN_A)]):
        line = one_line_error(run_probe("history", *argv, "--history", str(fifo), timeout=120))
        assert "not a regular file" in line, line
    os.mkfifo(tmp_path / "h.duckdb.wal")
    line = one_line_error(run_probe("history", "list", "--history", str(path), timeout=120))
    assert "h.duckdb.wal: not a regular file" in line


@pytest.mark.parametrize(
    "statement,why",
    [
        ("UPDATE counts SET value = -3 WHERE metric = 'decode_launches'", "decode_launches = -3.0, not a finite"),
        ("UPDATE samples SET value = 'nan' WHERE i = 0", "not a finite figure"),
        ("UPDATE counts SET metric = 'made_up'", "metric 'made_up', not a count probe records"),
        ("UPDATE samples SET metric = 'decode_launches'", "not a timing probe records"),
    ],
)
def test_figures_that_cannot_be_true_are_refused_on_read(tmp_path, cli, statement, why):
    """Item 16, as far as the history reads results: a count below 0, a NaN sample, a metric probe never wrote."""
    path = tmp_path / "h.duckdb"
    imported(path, cli)
    doc = json.loads((RUN_A / RESULTS_FILE).read_text())
    doc["cells"][0]["ttft_ms"] += 1  # a second run of the configuration, so show and check compare two
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / RESULTS_FILE).write_text(json.dumps(doc))
    ok(cli("history", "import", str(tmp_path / "b"), "--history", str(path)))
    with duckdb.connect(str(path)) as con:
        con.execute(statement)
    for argv in (["show", "latest"], ["check"]):
        assert why in one_line_error(cli("history", *argv, "--history", str(path)))


def test_a_contended_run_is_not_judged_by_history_check(tmp_path, cli):
    """Issue 22 section 4: the latest run is 3x slower but its cell ran contended: no timing verdict, and the
    History view's verdict (trend) says so."""
    path = imported(tmp_path / "h.duckdb", cli)
    doc = json.loads((RUN_A / RESULTS_FILE).read_text())
    for cell in doc["cells"]:
        cell["contended"] = True
        cell["itl_runs_ms"] = [[x * 3 for x in run] for run in cell["itl_runs_ms"]]
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / RESULTS_FILE).write_text(json.dumps(doc))
    ok(cli("history", "import", str(tmp_path / "slow"), "--history", str(path)))
    proc = cli("history", "check", "--history", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "contended: not judged" in proc.stdout and "REGRESSION" not in proc.stdout
    with history.connect(path) as con:
        (config,) = history.configs(con)
        frame = history.trend(con, config.config_id, config.units[0])
    assert frame["verdict"].tolist() == ["not enough history", "contended: not judged"]


# ---- the property tests of the readers, extended to the history file (issue 28, "Done when") ---------------------

_BASE: dict[str, Path] = {}
_TABLES = history.TABLES  # probe's tables: a hostile history may hold anything their column types allow


def _base_history(tmp_root: Path, cli) -> Path:
    """Two imported runs of one configuration (so show and check compare them), made once for every example."""
    if "path" not in _BASE:
        path = tmp_root / "base.duckdb"
        imported(path, cli)
        doc = json.loads((RUN_A / RESULTS_FILE).read_text())
        doc["cells"][0]["ttft_ms"] += 1
        (tmp_root / "b").mkdir()
        (tmp_root / "b" / RESULTS_FILE).write_text(json.dumps(doc))
        ok(cli("history", "import", str(tmp_root / "b"), "--history", str(path)))
        _BASE["path"] = path
    return _BASE["path"]


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    table=st.sampled_from(_TABLES),
    pick=st.integers(min_value=0, max_value=40),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40),
        st.sampled_from(["{", "[]", '{"torch": 3}', '{"device": null}', "null", "1e999", "\udcff"]),
    ),
)
def test_any_value_in_a_history_is_read_or_one_line(tmp_path_factory, cli, table, pick, value):
    """A history whose every table may hold any value its column type allows (a damaged file, another tool's
    writes): list, check and show either answer or say what is wrong in one line (exit 2), never a traceback."""
    base = _base_history(tmp_path_factory.getbasetemp(), cli)
    work = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    path = Path(shutil.copy(base, work / "h.duckdb"))
    with duckdb.connect(str(path)) as con:
        columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
        column = columns[pick % len(columns)]
        try:
            con.execute(f'UPDATE {table} SET "{column}" = ?', [value])
        except duckdb.Error:
            assume(False)  # the column's type refuses the value: DuckDB's own guard, nothing for probe to read
    for argv in (["list"], ["check"], ["show", "latest"]):
        done = cli("history", *argv, "--history", str(path))
        assert "Traceback" not in done.stderr, (argv, table, column, value, done.stderr[-2000:])
        if done.returncode == 2:
            one_line_error(done)
        else:
            assert done.returncode in (0, 1), (argv, table, column, value, done.returncode, done.stderr[-2000:])
