"""probe analyze over several traces: the ranks of one job, analyzed in a local process pool, step by step."""

from __future__ import annotations

import json
import shutil

import pytest

from probe.analysis.job import TraceFailure, analyze_one, expand, job
from tests.conftest import DATA, run_probe
from tests.ranks import make_rank_traces


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    make_rank_traces(folder, ranks=4, slow_rank=2, stretch=1.25)
    return folder


def test_a_folder_of_rank_traces_names_the_straggler(ranks):
    result = run_probe("analyze", str(ranks), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [t["rank"] for t in doc["traces"]] == [0, 1, 2, 3]
    assert [t["source"] for t in doc["traces"]] == [str(ranks / f"rank{r}.trace.json.gz") for r in range(4)]
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
    assert doc["failed"] == []


def test_the_job_table_and_a_trace_that_cannot_be_read(ranks, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(ranks, folder)
    (folder / "rank4.trace.json").write_text('{"traceEvents": [ {"ph": "X", "ts": ')  # cut off mid-event
    result = run_probe("analyze", str(folder))
    assert result.returncode == 1
    assert "straggler: rank 2, the slowest in 5 of 5 steps" in result.stdout.replace("\n", " ").replace("  ", " ")
    assert "traces that could not be read" in result.stdout and "rank4.trace.json" in result.stdout
    assert f"probe: error: {folder / 'rank4.trace.json'}: " in result.stderr


def test_one_trace_keeps_todays_output(ranks, tmp_path):
    single = tmp_path / "one"
    single.mkdir()
    shutil.copy(DATA / "rocm_vllm_decode_cudagraph.trace.json.gz", single)
    by_file = run_probe("analyze", str(single / "rocm_vllm_decode_cudagraph.trace.json.gz"), "--json")
    by_folder = run_probe("analyze", str(single), "--json")
    assert by_file.returncode == by_folder.returncode == 0
    assert by_folder.stdout == by_file.stdout and "by_step" not in json.loads(by_file.stdout)


def test_ranks_are_the_file_order_when_the_traces_do_not_say(tmp_path):
    """Two copies of one trace both claim rank 0: ranks come from the order they were given."""
    a = analyze_one((DATA / "cuda_alexnet.trace.json.gz", None))
    result = job([a, a])
    assert result.ranks == (0, 1) and "missing or repeated" in result.warnings[0]
    assert [s.slowest_rank for s in result.by_step] == [0] * len(result.by_step)  # a tie goes to the lower rank
    broken = job([TraceFailure("x", "bad"), a])
    assert broken.ranks == (0,) and broken.failed == (TraceFailure("x", "bad"),)


def test_paths_expand_from_folders_and_globs(ranks):
    assert expand([str(ranks / "rank[02].trace.json.gz"), ranks]) == [
        ranks / f"rank{r}.trace.json.gz" for r in (0, 2, 1, 3)
    ]
    with pytest.raises(Exception, match="no file matches"):
        expand([str(ranks / "nothing*.json")])
