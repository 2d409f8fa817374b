"""Hostile sizes (issue 37): a JSON file larger than its kind could be, an event bomb, the explorer's caches, a file
name that is not UTF-8. Each is the real command in a process of its own, under a memory cap where memory is the
subject: exit 2 and one line naming the file, or the answer."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import tracemalloc
from pathlib import Path

import pytest

from probe.analysis.records.files import MAX_JSON_BYTES, read_json
from probe.errors import ProbeError
from probe.explorer import loaders
from probe.explorer.cache import nbytes
from probe.explorer.step_clock import step_clock
from tests.conftest import DATA, ROOT, run_probe

TRACE = ROOT / "traces" / "tiny_cached_cpu_p64_n16.trace.json.gz"  # probe's own, with its sidecar beside it
NSYS = ROOT / "traces" / "tiny_cached_cpu_p64_n16.nsys.sqlite.gz"
MIB = 1 << 20


def capped(mib: int):
    """A preexec_fn that caps the child's address space at `mib` MiB (what `prlimit --as` does)."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (mib * MIB, mib * MIB))


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("probe: error: "), result.stderr[-2000:]
    return lines[0]


def sparse(path: Path, size: int) -> Path:
    """A file of `size` NUL bytes that takes no disk (what a hostile sidecar or results file costs nothing to make)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# 8. JSON files read whole: each kind is refused by its size, before a byte is read, in one line with size and cap


def test_a_huge_sidecar_beside_a_small_trace_is_refused_by_its_size(tmp_path):
    trace = Path(shutil.copy(TRACE, tmp_path))
    meta = sparse(tmp_path / "tiny_cached_cpu_p64_n16.meta.json", 200 * MIB)
    line = one_line(run_probe("analyze", str(trace), preexec_fn=capped(1024)))
    assert line == f"probe: error: {meta}: 200.0 MiB, larger than any sidecar (probe reads one up to 1.0 MiB)"


def test_a_huge_results_file_and_device_file_are_refused_by_their_size(tmp_path):
    results = sparse(tmp_path / "results.json", 300 * MIB)
    line = one_line(run_probe("compare", str(results), str(results), preexec_fn=capped(1024)))
    assert line == f"probe: error: {results}: 300.0 MiB, larger than any results file (probe reads one up to 256.0 MiB)"
    device = tmp_path / "device.json"
    device.write_text(json.dumps({"name": "x", "memory_bandwidth_bytes_s": 1e12}) + " " * (2 * MIB))
    line = one_line(run_probe("analyze", str(TRACE), "--device-file", str(device), preexec_fn=capped(1024)))
    assert line == f"probe: error: {device}: 2.0 MiB, larger than any device file (probe reads one up to 1.0 MiB)"


def test_a_results_file_under_its_cap_costs_a_few_times_its_size_not_eleven(tmp_path):
    """200 MiB of NUL bytes: under the 256 MiB cap, so read and found not JSON. The depth check once built int32
    arrays of the file's length (~11x, 2.2 GB); now it holds a copy or two of the text."""
    results = sparse(tmp_path / "results.json", 200 * MIB)
    line = one_line(run_probe("compare", str(results), str(results), preexec_fn=capped(1024)))
    assert line.startswith(f"probe: error: cannot read {results}: not valid JSON")


@pytest.mark.parametrize("kind", sorted(MAX_JSON_BYTES))
def test_every_json_kind_has_a_cap_checked_before_reading(tmp_path, kind):
    cap = MAX_JSON_BYTES[kind]
    sparse(tmp_path / "at.json", cap)  # at the cap: read (NULs are not JSON)
    with pytest.raises(ProbeError, match="not valid JSON"):
        read_json(tmp_path / "at.json", kind)
    sparse(tmp_path / "past.json", cap + 1)
    with pytest.raises(ProbeError, match=rf"past.json: .*, larger than any {kind} \(probe reads one up to "):
        read_json(tmp_path / "past.json", kind)


# 9. An event bomb: refused by its count of events, as the pieces come, before the memory is spent


def event_bomb(path: Path, events: int) -> Path:
    """`events` identical tiny events: ~230 bytes of gzip a thousand of them, ~350 bytes of memory each once read."""
    event = b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1},'
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents":[')
        for _ in range(events // 100_000):
            f.write(event * 100_000)
        f.write(event[:-1] + b"]}")
    return path


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
def test_an_event_bomb_is_refused_before_its_memory_is_spent(tmp_path):
    """5M events in ~1.2 MB of gzip need ~2 GB to analyze; under a 1.2 GiB cap the reader once ended in numpy's
    MemoryError traceback. Now: the most events the memory left holds, said in one line."""
    bomb = event_bomb(tmp_path / "bomb.json.gz", 5_000_000)
    assert bomb.stat().st_size < 2 * MIB
    line = one_line(run_probe("analyze", str(bomb), preexec_fn=capped(1200)))
    assert line.startswith(f"probe: error: {bomb}: more than ")
    assert line.endswith("GiB of free memory holds at 400 bytes each; set PROBE_MAX_EVENTS to read more")


@pytest.mark.parametrize("trace", [TRACE, NSYS], ids=["chrome", "nsys"])
def test_probe_max_events_bounds_every_reader(trace):
    line = one_line(run_probe("analyze", str(trace), env=os.environ | {"PROBE_MAX_EVENTS": "100"}))
    assert line == f"probe: error: {trace}: more than 100 events, the most PROBE_MAX_EVENTS=100 allows; set " + (
        "PROBE_MAX_EVENTS to read more"
    )
    bad = one_line(run_probe("analyze", str(trace), env=os.environ | {"PROBE_MAX_EVENTS": "lots"}))
    assert bad == "probe: error: PROBE_MAX_EVENTS='lots': a whole number of events"
    assert run_probe("analyze", str(trace), env=os.environ | {"PROBE_MAX_EVENTS": "10000000"}).returncode == 0


# 12. The explorer's caches hold at most their bytes, whatever the count of windows looked at


def one_step_trace(path: Path, launches: int) -> Path:
    """One ProfilerStep of `launches` kernel launches and their kernels, 1 us apart."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0,
               "dur": 2 * launches + 10}]  # fmt: skip
    for i in range(launches):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 2 * i + 1, "dur": 1, "args": {"correlation": i}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": 2 * i + 2,
                       "dur": 1, "args": {"correlation": i}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_the_timeline_cache_stays_under_its_bytes_after_many_windows(tmp_path, monkeypatch):
    trace = one_step_trace(tmp_path / "step.trace.json", 20_000)
    args = (loaders.key(tmp_path), loaders.key(trace), (1, 2), 0, loaders.Reading())
    cache = loaders.load_timeline.cache
    cache.clear()
    first = loaders.load_timeline(*args, (0, 40_000_000))
    one = cache.total_bytes
    assert one == nbytes(first) > 1 * MIB
    # the estimate is honest: within a factor of what the timeline's allocations still hold (tracemalloc)
    analysis = loaders.load_analysis(*args[:3], args[4])
    events = loaders.load_events(args[1], args[2])
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    again = step_clock(events, analysis, 0, loaders.analyze_options(args[0], args[1], args[4]), (0, 40_000_000))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held / 2 < nbytes(again) < 3 * held
    monkeypatch.setattr(cache, "max_bytes", 3 * one)
    for w in range(7):  # seven windows of the same size, each a new entry
        loaders.load_timeline(*args, (w * 1000, 40_000_000 + w * 1000))
        assert cache.total_bytes <= cache.max_bytes
    assert 1 <= len(cache) <= 3
    cache.clear()


# 16. A file name that is not UTF-8: `--json` writes its bytes escaped, for one trace and for a job


def test_a_name_that_is_not_utf8_prints_as_json(tmp_path):
    folder = os.fsencode(tmp_path)
    bad = os.path.join(folder, b"tr\xff.json.gz")
    shutil.copy(TRACE, bad)
    one = run_probe("analyze", os.fsdecode(bad), "--json")
    assert one.returncode == 0, one.stderr[-2000:]
    assert json.loads(one.stdout)["source"] == f"{tmp_path}/tr\\xff.json.gz"
    shutil.copy(DATA / "hand_decode.trace.json.gz", tmp_path / "ok.json.gz")
    for argv in ([str(tmp_path)], [os.fsdecode(bad), str(tmp_path / "ok.json.gz")]):
        job = run_probe("analyze", *argv, "--json")
        assert job.returncode == 0, job.stderr[-2000:]
        sources = {t["source"] for t in json.loads(job.stdout)["traces"]}
        assert f"{tmp_path}/tr\\xff.json.gz" in sources and f"{tmp_path}/ok.json.gz" in sources
