"""probe analyze over several traces: each in a process of its own; lined up step by step only when they are the
ranks of one job (probe.analysis.ledger.ranks.check_job), else a list of traces; a trace whose analysis raises or whose
process dies is that trace's failure, and signals end the workers with the command."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from probe.analysis.ledger.ranks import (
    RankStep,
    TraceFailure,
    analyze_one,
    check_job,
    expand,
    held_by_rank,
    lost_trace,
    rank_in_name,
    ranks,
)
from probe.pool import pool_map
from tests.conftest import DATA, ROOT, run_probe, shared_trace
from tests.ranks import make_collective_job, make_gloo_job, make_rank_traces


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    make_rank_traces(folder, ranks=4, slow_rank=2, stretch=1.25)
    return folder


@pytest.fixture(scope="module")
def analyses(rank_folder):
    return [analyze_one((p, None)) for p in sorted(rank_folder.iterdir())]


def test_a_folder_of_rank_traces_names_the_straggler(rank_folder):
    result = run_probe("analyze", str(rank_folder), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["one_job"] is True and doc["not_a_job"] is None
    assert [t["rank"] for t in doc["traces"]] == [0, 1, 2, 3]
    assert [t["source"] for t in doc["traces"]] == [str(rank_folder / f"rank{r}.trace.json.gz") for r in range(4)]
    assert all(len(t["steps"]) == 5 for t in doc["traces"])  # each trace's own ledger, as `probe analyze` gives it
    assert len(doc["by_step"]) == 5
    for step in doc["by_step"]:
        walls = {r["rank"]: r["wall_us"] for r in step["ranks"]}
        # rank 2's events are stretched by 1.25 about the trace's start; the other three are the same copy
        assert step["slowest_rank"] == 2 and step["median_wall_us"] == walls[0] == walls[1] == walls[3]
        assert step["slowest_wall_us"] == walls[2] == pytest.approx(1.25 * walls[0], rel=1e-6)
        assert step["trails_median_pct"] == pytest.approx(25.0, abs=1e-4)
        assert [r["launches"] for r in step["ranks"]] == [870] * 4  # the V100 trace's 870 launches a step
    assert doc["straggler"]["rank"] == 2 and doc["straggler"]["slowest_steps"] == doc["straggler"]["steps"] == 5
    # the V100 trace records NCCL's host ranges but no communication kernel: the wall decides
    assert doc["straggler"]["rule"] == "wall" and {s["rule"] for s in doc["by_step"]} == {"wall"}
    assert doc["failed"] == []


def test_the_straggler_is_the_rank_the_collectives_wait_for(tmp_path):
    """tests/ranks.make_collective_job: ranks 0-3 enter each step 0, 100, 200, 300 us after the period's start and
    their collectives all end at 700, when rank 3 joins. Walls 900 - entry: 900, 800, 700, 600 us, rank 0 the
    slowest (the wall rule named it); time in collectives 480 - entry: 480, 380, 280, 180 us. Rank 3 waits least: it
    is the one the others wait for, in both steps, against a median of (380 + 280) / 2 = 330 us."""
    make_collective_job(tmp_path / "job")
    result = run_probe("analyze", str(tmp_path / "job"), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["straggler"]["rank"] == 3  # the wall rule named rank 0, the first to enter
    for step in doc["by_step"]:
        assert [r["wall_us"] for r in step["ranks"]] == [900.0, 800.0, 700.0, 600.0] and step["slowest_rank"] == 0
        assert [r["collectives_us"] for r in step["ranks"]] == [480.0, 380.0, 280.0, 180.0]
        assert (step["rule"], step["held_by"], step["median_collectives_us"]) == ("collectives", 3, 330.0)
    assert doc["straggler"] == {
        "rank": 3,
        "slowest_steps": 2,
        "steps": 2,
        "rule": "collectives",
        "median_trail_pct": None,
        "collectives_us": 180.0,
        "median_collectives_us": 330.0,
    }
    table = run_probe("analyze", str(tmp_path / "job"), env={**os.environ, "COLUMNS": "200"})
    line = " ".join(table.stdout.split())
    assert (
        "straggler: rank 3, the last to reach the collectives in 2 of 2 steps: 0.180 ms in collectives against a "
        "median of 0.330 ms: the others wait for it (rule: the least wait in collectives" in line
    )


def test_a_gloo_jobs_straggler_is_read_from_its_host_collectives(tmp_path):
    """tests/ranks.make_gloo_job: the same job on CPUs with Gloo, no GPU side. Each rank's time in collectives is
    the span of Gloo's `gloo:all_reduce` range on its own thread inside the step (StepLedger.host_collectives_ns):
    480 - entry = 480, 380, 280, 180 us; rank 3 waits least, the one the others wait for, though rank 0 has the
    slowest wall. Without the Gloo ranges (c10d's op alone, 10 us on every rank) the wall decides: rank 0."""
    make_gloo_job(tmp_path / "job")
    doc = json.loads(run_probe("analyze", str(tmp_path / "job"), "--json").stdout)
    assert all(not t["on_gpu"] for t in doc["traces"])
    for step in doc["by_step"]:
        assert [r["collectives_us"] for r in step["ranks"]] == [480.0, 380.0, 280.0, 180.0]
        assert (step["rule"], step["held_by"], step["slowest_rank"]) == ("collectives", 3, 0)
    assert (doc["straggler"]["rank"], doc["straggler"]["rule"]) == (3, "collectives")
    for path in (tmp_path / "job").iterdir():
        trace = json.loads(path.read_text())
        trace["traceEvents"] = [e for e in trace["traceEvents"] if e["name"] != "gloo:all_reduce"]
        path.write_text(json.dumps(trace))
    doc = json.loads(run_probe("analyze", str(tmp_path / "job"), "--json").stdout)
    assert (doc["straggler"]["rank"], doc["straggler"]["rule"]) == (0, "wall")


def test_a_step_some_rank_holds_no_collective_in_is_decided_by_the_wall():
    """The one definition (ranks.held_by_rank): collectives only where every rank's step holds them."""
    rows = [RankStep(0, 900, 0, 2, 480), RankStep(1, 800, 0, 2, 0), RankStep(2, 950, 0, 2, 280)]
    assert held_by_rank(rows) == ("wall", 2)
    rows[1] = RankStep(1, 800, 0, 2, 280)
    assert held_by_rank(rows) == ("collectives", 1)  # a tie goes to the lower rank


def test_the_job_table_and_a_trace_that_cannot_be_read(rank_folder, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(rank_folder, folder)
    (folder / "rank4.trace.json").write_text('{"traceEvents": [ {"ph": "X", "ts": ')  # cut off mid-event
    result = run_probe("analyze", str(folder))
    assert result.returncode == 1
    assert "straggler: rank 2, the slowest in 5 of 5 steps" in result.stdout.replace("\n", " ").replace("  ", " ")
    assert "traces that could not be read" in result.stdout and "rank4.trace.json" in result.stdout
    assert f"probe: error: {folder / 'rank4.trace.json'}: " in result.stderr


def test_one_trace_keeps_todays_output(rank_folder, tmp_path):
    single = tmp_path / "one"
    single.mkdir()
    shutil.copy(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz"), single)
    by_file = run_probe("analyze", str(single / "rocm_vllm_decode_cudagraph.trace.json.gz"), "--json")
    by_folder = run_probe("analyze", str(single), "--json")
    assert by_file.returncode == by_folder.returncode == 0
    assert by_folder.stdout == by_file.stdout and "by_step" not in json.loads(by_file.stdout)


def test_a_runs_traces_folder_is_a_list_of_traces_with_no_straggler():
    """One trace per engine (naive and cached, the same six steps each, no rank anywhere): not ranks of one job."""
    folder = DATA / "app" / "traces"
    result = run_probe("analyze", str(folder), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["straggler"] is None and doc["by_step"] == []  # today's code named naive the straggler
    assert doc["one_job"] is False and "no distinct rank" in doc["not_a_job"]
    assert [t["rank"] for t in doc["traces"]] == [None, None] and all(len(t["steps"]) == 6 for t in doc["traces"])
    table = run_probe("analyze", str(folder))
    assert table.returncode == 0 and "straggler" not in table.stdout and "wall per step and rank" not in table.stdout
    assert "not the ranks of one job (no distinct rank" in table.stdout.replace("\n", " ")


@pytest.mark.parametrize(
    "names, why",
    [
        # Both record ProfilerStep#1009 and #1010, and both say distributedInfo.rank 1: two runs, not two ranks.
        (("peer/hta_trace_compare_base.trace.json.gz", "peer/hta_trace_compare_test.trace.json.gz"), "no distinct"),
        # One ProfilerStep#6 each, on an H100 and on an MI300X, no rank: two machines' runs.
        (("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz",
          "public/mi300x_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"), "no distinct"),
        # Rank 1 of HTA's sampled job beside the V100 run: 2 steps and 5.
        (("peer/hta_cuda_sampled_rank1.trace.json.gz",
          "public/cuda_train_ns_resolution_5steps.trace.json.gz"), "steps"),
    ],
)  # fmt: skip
def test_the_shared_traces_are_not_one_job(names, why):
    paths = [str(shared_trace(n)) for n in names]
    result = run_probe("analyze", *paths, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["straggler"] is None and doc["by_step"] == []
    assert doc["one_job"] is False and why in doc["not_a_job"]
    assert [t["source"] for t in doc["traces"]] == paths  # in the order given


def test_a_rank_comes_from_distributed_info_or_from_the_file_names(analyses):
    """The four rank traces, their declared ranks and file names varied: each case is the rule's, exactly."""
    assert check_job(analyses).ranks == (0, 1, 2, 3) and check_job(analyses).one_job

    def vary(**change):
        return [dataclasses.replace(a, **{k: v[i] for k, v in change.items()}) for i, a in enumerate(analyses)]

    undeclared = vary(rank=[None] * 4)
    assert check_job(undeclared).ranks == (0, 1, 2, 3)  # rank<N> in every file name
    renamed = vary(rank=[None] * 4, source=[f"/x/worker_rank-{r}.pt.trace.json" for r in (3, 1, 0, 2)])
    assert check_job(renamed).ranks == (3, 1, 0, 2)
    assert [t.source for t in ranks(renamed).traces] == [f"/x/worker_rank-{r}.pt.trace.json" for r in range(4)]
    repeated = vary(rank=[0] * 4)  # distributedInfo repeats a rank: the names decide
    assert check_job(repeated).ranks == (0, 1, 2, 3)
    nameless = vary(rank=[0] * 4, source=[f"/x/host{r}.trace.json" for r in range(4)])
    assert not check_job(nameless).one_job and "no distinct rank" in check_job(nameless).why_not
    declared_only = vary(source=[f"/x/host{r}.trace.json" for r in range(4)])
    assert check_job(declared_only).ranks == (0, 1, 2, 3)
    twice = vary(rank=[None] * 4, source=["/a/rank0.json", "/b/rank1.json", "/b/rank3.json", "/c/rank3.json"])
    assert not check_job(twice).one_job
    # Only the file name counts, "rank" inside another word is not a rank, nor are two ranks in one name.
    assert [rank_in_name(n) for n in ("job-RANK_12.pt.trace.json.gz", "rank7.json", "/rank9/x.json")] == [12, 7, None]
    assert rank_in_name("frank0.json") is None and rank_in_name("rank1_rank2.json") is None


def test_the_same_steps_in_every_trace(analyses):
    fewer = [*analyses[:3], dataclasses.replace(analyses[3], steps=analyses[3].steps[:4])]
    assert check_job(fewer).why_not.endswith("rank3.trace.json.gz has 4 steps, " + analyses[0].source + " 5")
    steps = list(analyses[1].steps)
    steps[2] = dataclasses.replace(steps[2], name="x")
    other = [analyses[0], dataclasses.replace(analyses[1], steps=tuple(steps)), *analyses[2:]]
    why = check_job(other).why_not
    assert why == f"step 2 is 'ProfilerStep#103' in {analyses[0].source}, 'x' in {analyses[1].source}"
    assert not check_job(analyses[:1]).one_job and ranks(analyses[:1]).straggler is None
    listed = ranks([*fewer, TraceFailure("x", "bad")])
    assert (listed.ranks, listed.by_step, listed.straggler, listed.failed) == (
        (),
        (),
        None,
        (TraceFailure("x", "bad"),),
    )
    assert [t.source for t in listed.traces] == [a.source for a in fewer]


def test_paths_expand_from_folders_and_globs(rank_folder):
    assert expand([str(rank_folder / "rank[02].trace.json.gz"), rank_folder]) == [
        rank_folder / f"rank{r}.trace.json.gz" for r in (0, 2, 1, 3)
    ]
    with pytest.raises(Exception, match="no file matches"):
        expand([str(rank_folder / "nothing*.json")])


def test_a_folder_holds_its_plain_json_chrome_traces_not_its_other_json(tmp_path):
    """kineto's `export_chrome_trace("x.json")` names a trace plain .json: in a folder it is a trace by its content;
    a model's config.json, a results file or a sidecar beside it is not."""
    (tmp_path / "run.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1}]}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "x.meta.json").write_text(json.dumps({"schema": 1}))
    assert expand([tmp_path]) == [tmp_path / "run.json"]
    (tmp_path / "run.json").unlink()
    with pytest.raises(Exception, match="a folder with no traces"):
        expand([tmp_path])


def _square_or_fail(n: int) -> int:
    if n == 2:
        raise MemoryError
    if n == 3:
        os._exit(7)
    if n == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return n * n


def test_the_pool_keeps_every_call_that_did_not_fail():
    """A MemoryError, a process that exits and one the OOM killer would kill are each that call's failure."""
    out = pool_map(_square_or_fail, [0, 1, 2, 3, 4, 5], workers=2, lost=lambda n, why: (n, why))
    assert out[:2] == [0, 1] and out[5] == 25
    assert out[2] == (2, "MemoryError")
    assert out[3] == (3, "the process analyzing it exited with status 7 before it answered")
    assert out[4] == (4, "the process analyzing it was killed by SIGKILL (what the OOM killer sends)")
    assert lost_trace(("a.json", None), "MemoryError") == TraceFailure("a.json", "MemoryError")


def _analyze(folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "probe", "analyze", str(folder), "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _children(proc: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The pool's first `count` processes, oldest first, as soon as they are there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = psutil.Process(proc.pid).children()
        if len(found) >= count:
            return sorted(found, key=lambda p: (p.create_time(), p.pid))
        time.sleep(0.005)
    raise AssertionError(f"no {count} pool processes: {proc.communicate()}")


def _running(p: psutil.Process) -> bool:
    """Not ended (a zombie has ended: whoever inherited it has not reaped it yet)."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_a_killed_worker_fails_its_trace_and_the_others_finish(tmp_path):
    """rank0 takes 2 s to analyze (its steps played 12 times); its process is killed as the OOM killer would."""
    make_rank_traces(tmp_path, ranks=1, repeat=12)
    make_rank_traces(tmp_path / "short", ranks=4)
    for p in sorted((tmp_path / "short").iterdir())[1:]:
        p.rename(tmp_path / p.name)
    proc = _analyze(tmp_path)
    first = _children(proc, 1)[0]
    first.kill()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    doc = json.loads(out)
    assert doc["failed"] == [
        {
            "source": str(tmp_path / "rank0.trace.json.gz"),
            "error": "the process analyzing it was killed by SIGKILL (what the OOM killer sends)",
        }
    ]
    assert [t["rank"] for t in doc["traces"]] == [1, 2, 3] and doc["straggler"]["rank"] == 2
    assert "Traceback" not in err and "rank0.trace.json.gz: the process analyzing it was killed" in err


def test_sigterm_ends_the_workers_and_the_callers_pipes_close(tmp_path):
    """SIGTERM to `probe analyze DIR` while its pool works: the command and every pool process end with it, so a
    caller reading its output to the end is not left waiting. Four traces of 2 s each, two at a time: a worker left
    running would hold the pipes for seconds more, many times the second allowed here."""
    [long] = make_rank_traces(tmp_path, ranks=1, repeat=12)
    for r in (1, 2, 3):
        shutil.copy(long, tmp_path / f"copy{r}.trace.json.gz")
    proc = _analyze(tmp_path)
    workers = _children(proc, 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    deadline = time.monotonic() + 1
    while (alive := [p for p in workers if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive == []
    assert proc.communicate(timeout=5) == ("", "")  # both pipes at EOF: nothing holds them any more


def test_unrelated_traces_answer_a_line_each_and_show_their_ledgers_only_with_detail(cli):
    """Issue 36 §2: eight unrelated traces printed eight ledgers and no verdict. Now the first lines are one a trace
    (its verdict, the figure it rests on, the first fix), each the same headline `probe analyze TRACE` gives."""
    public = ["rocm_vllm_decode_cudagraph", "cpu_only_small"]
    paths = [str(DATA / "hand_decode.trace.json.gz")] + [str(shared_trace(f"public/{n}.trace.json.gz")) for n in public]
    paths.append(str(shared_trace("wild", "a100_switch_transformer_moe_forward_cold.trace.json.gz")))  # a cold step
    result = cli("analyze", *paths)
    assert result.returncode == 0, result.stderr

    def answers(out: str) -> list[str]:
        """The answer of each trace, in order, each one line again (the console wraps a long one at words)."""
        text = " ".join(out.split("each trace's ledger")[0].split())
        starts = [text.index(f"{p}: ") for p in paths]
        return [text[a:b].strip() for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]

    lines = answers(result.stdout)
    for path, line in zip(paths, lines, strict=True):
        alone = json.loads(cli("analyze", path, "--json").stdout)["diagnosis"]["median"]
        assert line.startswith(f"{path}: {alone['headline']}")
        if alone["what_if"]:
            fix = alone["what_if"][0]
            assert f" First fix: {fix['change']}, saves {fix['saving_ms']:.3f} ms" in line
        else:
            assert line.endswith(" No fix proposed.")
    assert "host time on each step's thread" not in result.stdout and "--detail" in result.stdout
    detail = cli("analyze", *paths, "--detail")
    assert detail.stdout.startswith(result.stdout.split("each trace's ledger")[0])  # the answers still first
    assert detail.stdout.count("host time on each step's thread by purpose") == len(paths)
    doc = json.loads(cli("analyze", *paths, "--json").stdout)
    assert [t["diagnosis"]["bound"] for t in doc["traces"]] == ["host", "gpu", "cpu_only", "host"]
    assert "First fix: profile a warm iteration, saves 512.315 ms" in lines[-1]  # the line's warm rule is the page's
