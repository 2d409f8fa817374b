"""The trace parser: one event table from chrome JSON and nsys SQLite, exact to the nanosecond."""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import sys
import zlib
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import msgspec
import numpy as np
import pytest

from probe.analysis.trace import (
    COLUMNS,
    COPY_KINDS,
    GRAPH_LAUNCH,
    LAUNCH,
    DeviceInfo,
    Kind,
    Shapes,
    api_base_name,
    capture_side,
    is_graph_instantiate,
    load_trace,
    pieces,
)
from probe.analysis.trace.chrome import decimal_text_to_ns
from probe.errors import ProbeError
from tests.conftest import DATA, shared_trace

HAND = DATA / "hand_decode.trace.json.gz"
sys.path.insert(0, str(DATA))
import make_hand_trace  # noqa: E402
import make_nsys_fixture  # noqa: E402


def exact_ns(text: str) -> int:
    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def write_trace(path: Path, events: list[dict], **top) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def x(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# --- exact time -------------------------------------------------------------------------------------------


def test_float_trap_value_is_read_exactly():
    """T0 of the hand trace is a value where float(ts) * 1000 rounds to the wrong ns; we must not."""
    text = "4497900028327.853"
    assert round(float(text) * 1000) != 4497900028327853  # the trap is real
    trace = load_trace(HAND)
    assert trace.start_ns == 4497900028327853
    first = trace.ts_ns[trace.name_id == trace.names.index("ProfilerStep#3")]
    assert first.tolist() == [4497900028327853]


@pytest.mark.parametrize(
    "text",
    [
        "5082703139188.524",
        "0.039",
        "43425283",
        "-1.5",
        "1712195495519695.8",
        "0",
        "12.",
        "-0.001",
        "-0",
        "9007199254740.993",  # past 2**53 ns: a float cannot even tell neighbouring values apart
        "1.2345",
        "0.0005",
        "0.0015",
        "2.5e-3",
        "1E3",
        "9223372036854775.807",
    ],
)
def test_decimal_text_to_ns_matches_decimal(text):
    assert decimal_text_to_ns([text.encode()]).tolist() == [exact_ns(text)]


def test_decimal_text_to_ns_random_torch_style_values():
    rnd = random.Random(0)
    texts = [f"{rnd.randint(0, 9 * 10**12)}.{rnd.randint(0, 999):03d}" for _ in range(5000)]
    texts += [f"{rnd.randint(0, 10**6)}.{rnd.randint(0, 99)}" for _ in range(500)]  # fewer decimals
    got = decimal_text_to_ns([t.encode() for t in texts])
    assert got.tolist() == [exact_ns(t) for t in texts]
    naive = [round(float(t) * 1000) for t in texts]
    assert naive != got.tolist()  # so this test would catch a float-based conversion


def test_out_of_range_time_is_a_value_error():
    with pytest.raises(ValueError):
        decimal_text_to_ns([b"99999999999999999.5"])
    with pytest.raises(ValueError):
        decimal_text_to_ns([b"1.000", b"9223372036854775.808"])  # three decimals, one ns past int64


@pytest.mark.parametrize(
    "texts",
    [
        [b"1.000", b"2.500", b"-0.001", b"5082703139188.524"],  # all torch-style: the fast reader
        [b"1.000", b"2.5"],
        [b"1.000", b"3"],
        [b"1.000", b"1.0005"],
        [b"1.000", b"1.000e3"],
        [b"12.", b"1.000"],
    ],
)
def test_torch_style_fast_reader_and_its_fallbacks(texts):
    assert decimal_text_to_ns(texts).tolist() == [exact_ns(t.decode()) for t in texts]


def test_every_public_trace_keeps_exact_times(tmp_path):
    """Parse the text ourselves with Decimal and compare every complete event's ts and dur."""
    for path in sorted(DATA.glob("*.trace.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
        events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
        want = sorted((exact_ns(str(e["ts"])), exact_ns(str(e["dur"]))) for e in events if e["dur"] >= 0)
        trace = load_trace(path)
        got = sorted(zip(trace.ts_ns.tolist(), trace.dur_ns.tolist(), strict=True))
        assert got == want, path.name


def test_nested_ts_key_does_not_disturb_exact_times(tmp_path):
    """A "ts" inside args, and a time with four decimals: each event's own ts and dur, exact."""
    path = tmp_path / "t.json"
    path.write_text(
        '{"traceEvents": [\n'
        '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 4497900028327.853, '
        '"dur": 2.5, "args": {"ts": 1.0}},\n'
        '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 4497900028330.001, '
        '"dur": 1.0004}]}'
    )
    trace = load_trace(path)
    assert trace.ts_ns.tolist() == [4497900028327853, 4497900028330001]
    assert trace.dur_ns.tolist() == [2500, 1000]


def test_json_array_format_and_relative_float_times(tmp_path):
    path = tmp_path / "list.json"
    path.write_text('[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.5, "dur": 1.25}]')
    trace = load_trace(path)
    assert (trace.ts_ns.tolist(), trace.dur_ns.tolist(), trace.base_ns) == ([500], [1250], None)


# --- the table --------------------------------------------------------------------------------------------


def test_hand_trace_columns():
    trace = load_trace(HAND)
    assert trace.format == "torch_chrome"
    assert trace.base_ns == 1700000000000000000
    assert len(trace) == len(make_hand_trace.HOST) + len(make_hand_trace.GPU) == 54
    assert trace.skipped == {"M": 1, "i": 1, "s": 1, "f": 1}
    assert trace.dropped == {} and trace.warnings == ()
    counts = {k.label: int(np.sum(trace.kind == k)) for k in Kind}
    assert counts == {
        "cpu_op": 10,
        "user_range": 16,
        "profiler_step": 1,
        "runtime": 13,
        "kernel": 11,
        "gpu_memcpy": 1,
        "gpu_memset": 1,
        "gpu_range": 1,
        "python": 0,
        "other": 0,
    }
    assert np.all(np.diff(trace.ts_ns) >= 0)  # sorted by start
    gpu = np.isin(trace.kind, [Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.GPU_RANGE])
    assert set(trace.stream[gpu].tolist()) == {7} and set(trace.device[gpu].tolist()) == {0}
    assert set(trace.stream[~gpu].tolist()) == {-1} and set(trace.device[~gpu].tolist()) == {-1}
    kernel = trace.name_id == trace.names.index("old_style_kernel")
    assert trace.kind[kernel].tolist() == [Kind.KERNEL]  # the old "Kernel" category
    assert trace.correlation[kernel].tolist() == [13]


def test_api_base_name():
    assert api_base_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_base_name("cudaLaunchKernel_ptsz_v7000") == "cudaLaunchKernel"
    assert api_base_name("cuLaunchKernelEx") == "cuLaunchKernelEx"
    assert api_base_name("hipExtModuleLaunchKernel") == "hipExtModuleLaunchKernel"


def test_capture_call_names():
    """Stream capture's begin and end calls by base name (runtime, driver, HIP; nsys's suffixes), and graph
    instantiation; the capture queries (GetCaptureInfo, IsCapturing) are neither."""
    begins = ("cudaStreamBeginCapture", "cudaStreamBeginCapture_ptsz_v10000", "cuStreamBeginCapture_v2")
    begins += ("cudaStreamBeginCaptureToGraph", "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph")
    assert [capture_side(n) for n in begins] == [1] * len(begins)
    ends = ("cudaStreamEndCapture", "cudaStreamEndCapture_v10000", "cuStreamEndCapture", "hipStreamEndCapture")
    assert [capture_side(n) for n in ends] == [-1] * len(ends)
    others = ("hipStreamGetCaptureInfo", "cudaStreamIsCapturing", "cudaLaunchKernel", "cudaGraphLaunch")
    assert [capture_side(n) for n in others] == [0] * len(others)
    instantiate = ("cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags")
    assert all(is_graph_instantiate(n) for n in (*instantiate, "cuGraphInstantiate_v2"))
    assert not any(is_graph_instantiate(n) for n in ("cudaGraphLaunch", "hipGraphDestroy"))


def test_launches_made_between_a_threads_capture_begin_and_end_are_captured(tmp_path):
    """Thread 1 launches once before its capture, twice inside it, once after; thread 2 launches inside thread 1's
    capture (another thread: not captured) and ends a capture begun before the trace (its first launch is
    captured, its second, after the end, is not)."""
    events = [
        x("cudaLaunchKernel", 1.0, 1.0, cat="cuda_runtime", correlation=1),
        x("cudaStreamBeginCapture", 3.0, 1.0, cat="cuda_runtime", correlation=2),
        x("cudaLaunchKernel", 5.0, 1.0, cat="cuda_runtime", correlation=3),
        x("cudaGraphLaunch", 7.0, 1.0, cat="cuda_runtime", correlation=4),
        x("cudaStreamEndCapture", 9.0, 1.0, cat="cuda_runtime", correlation=5),
        x("cudaLaunchKernel", 11.0, 1.0, cat="cuda_runtime", correlation=6),
        x("cudaLaunchKernel", 4.0, 1.0, cat="cuda_runtime", tid=2, correlation=7),
        x("cudaStreamEndCapture", 6.0, 1.0, cat="cuda_runtime", tid=2, correlation=8),
        x("cudaLaunchKernel", 8.0, 1.0, cat="cuda_runtime", tid=2, correlation=9),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    captured = sorted(int(c) for c in trace.correlation[trace.captured])
    assert captured == [3, 4, 7]


def test_a_runtime_call_a_kernel_joins_is_a_launch_whatever_its_name(tmp_path):
    """MTIA's launch call is "runFunction - job_prep_and_submit_for_execution": a kernel joins it by correlation,
    so it is a kernel launch; the same name joined by nothing is not, a cudaLaunchKernel joined by nothing still is
    (its kernel lost), a copy call joined by a copy is not a kernel launch, and a graph launch stays one."""
    run = "runFunction - job_prep_and_submit_for_execution"
    events = [
        x(run, 1.0, 1.0, cat="mtia_runtime", correlation=1),
        x("fc-dtype_Float", 3.0, 2.0, cat="mtia_ccp_events", pid=9, tid=5, correlation=1),
        x(run, 6.0, 1.0, cat="mtia_runtime", correlation=2),
        x("cudaLaunchKernel", 8.0, 1.0, cat="cuda_runtime", correlation=3),
        x("cudaMemcpyAsync", 10.0, 1.0, cat="cuda_runtime", correlation=4),
        x("Memcpy HtoD (Pageable -> Device)", 12.0, 1.0, cat="gpu_memcpy", pid=0, tid=7, correlation=4),
        x("cudaGraphLaunch", 14.0, 1.0, cat="cuda_runtime", correlation=5),
        x("graph_kernel", 16.0, 1.0, cat="kernel", pid=0, tid=7, correlation=5),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    runtime = trace.kind == Kind.RUNTIME
    got = dict(zip(trace.correlation[runtime].tolist(), trace.launch_kind[runtime].tolist(), strict=True))
    assert got == {1: LAUNCH, 2: 0, 3: LAUNCH, 4: 0, 5: GRAPH_LAUNCH}


def test_text_thread_ids_stay_apart(tmp_path):
    """The 2021 schema writes pid and tid as text: digits read as their number, a GPU row's "stream 7" as stream 7,
    and other text as an id of its own, so two threads named in words are two threads (not one -1)."""
    events = [
        {"ph": "X", "cat": "Operator", "name": "a", "pid": 5, "tid": "25738", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "b", "pid": 5, "tid": "25772", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "c", "pid": 5, "tid": "main", "ts": 3, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "d", "pid": 5, "tid": "worker", "ts": 4, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "e", "pid": 5, "tid": "main", "ts": 5, "dur": 1},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 6, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "f", "pid": 5, "ts": 7, "dur": 1},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(path)
    assert t.tid.tolist() == [25738, 25772, -2, -3, -2, 7, -1]
    assert (t.stream[5], t.device[5]) == (7, 0)


def test_public_traces_load_with_their_categories():
    b200 = load_trace(shared_trace("public/b200_eager.trace.json.gz"))
    assert int(np.sum(b200.kind == Kind.KERNEL)) == 768
    rocm = load_trace(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz"))
    runtime_names = {rocm.names[i] for i in rocm.name_id[rocm.kind == Kind.RUNTIME]}
    assert {"hipGraphLaunch", "hipLaunchKernel", "hipExtModuleLaunchKernel"} <= runtime_names
    h100 = load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"))
    steps = [h100.names[i] for i in h100.name_id[h100.kind == Kind.PROFILER_STEP]]
    assert steps == ["ProfilerStep#6"]  # the GPU copy is a gpu_range, not a second step
    assert int(np.sum((h100.kind == Kind.GPU_RANGE) & (h100.name_id == h100.names.index("ProfilerStep#6")))) == 1
    cpu = load_trace(shared_trace("public/cpu_only_small.trace.json.gz"))
    assert not np.any(np.isin(cpu.kind, [Kind.KERNEL, Kind.RUNTIME]))
    # the "Spans" pid of the profiler's own span is text, not a number: an id of its own, below -1
    assert -2 in cpu.pid.tolist()


# --- nsys SQLite ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_nsys(tmp_path_factory):
    return make_nsys_fixture.build(tmp_path_factory.mktemp("nsys") / "hand.sqlite")


def test_nsys_hand_fixture_table(hand_nsys):
    trace = load_trace(hand_nsys)
    assert trace.format == "nsys_sqlite" and trace.base_ns == make_nsys_fixture.SESSION_START_NS
    counts = {k.label: int(np.sum(trace.kind == k)) for k in Kind if np.any(trace.kind == k)}
    assert counts == {"user_range": 11, "runtime": 8, "kernel": 6, "gpu_memcpy": 1, "gpu_memset": 1}
    names = set(trace.names[i] for i in trace.name_id)
    assert "mask" in names and "marker" not in names  # unregistered text read; marks are not ranges
    assert {"cudaLaunchKernel_v7000", "Memcpy HtoD", "Memset", "graph_kernel_a"} <= names
    ranges = trace.kind == Kind.USER_RANGE
    assert set(zip(trace.pid[ranges].tolist(), trace.tid[ranges].tolist(), strict=True)) == {(4242, 4242), (4242, 4243)}
    kernels = trace.kind == Kind.KERNEL
    assert sorted(set(trace.pid[kernels].tolist())) == [777, 4242]
    assert trace.dur_ns[trace.name_id == trace.names.index("gemv_kernel")].tolist() == [2000]


def test_nsys_cpu_export_without_cupti_tables():
    """A real CPU-only export (probe profile --nsys, stripped): NVTX only, and that is not an error."""
    trace = load_trace(DATA / "cpu_tiny_cached_p16_n3.nsys.sqlite.gz")
    assert trace.format == "nsys_sqlite"
    assert set(trace.kind.tolist()) == {Kind.USER_RANGE}
    labels = [trace.names[i] for i in trace.name_id]
    assert labels.count("prefill") == 1 and labels.count("decode#0") == 1 and labels.count("decode#1") == 1
    assert labels.count("cache.update#3") == 3


def test_unclosed_nvtx_range_is_dropped_and_said(hand_nsys, tmp_path):
    path = tmp_path / "unclosed.sqlite"
    path.write_bytes(hand_nsys.read_bytes())
    con = sqlite3.connect(str(path))
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (25000, NULL, 59, 'decode#2', ?)",
        (make_nsys_fixture.global_tid(4242, 4242),),
    )
    con.commit()
    con.close()
    trace = load_trace(path)
    assert trace.dropped == {"NVTX range never closed": 1}
    assert trace.warnings == ("dropped 1 event(s): NVTX range never closed",)


def test_gzipped_and_plain_sqlite_agree(hand_nsys, tmp_path):
    gz = tmp_path / "hand.sqlite.gz"
    gz.write_bytes(gzip.compress(hand_nsys.read_bytes()))
    a, b = load_trace(hand_nsys), load_trace(gz)
    assert a.ts_ns.tolist() == b.ts_ns.tolist() and a.names == b.names


# --- bad input: one line, never a traceback, never a wrong number ---------------------------------------


def _bad_files(tmp: Path) -> dict[str, Path]:
    good = HAND.read_bytes()
    files = {
        "corrupt gzip": (tmp / "bad.json.gz", good[:100] + bytes(b ^ 0x5A for b in good[100:200]) + good[200:]),
        "empty file": (tmp / "empty.json", b""),
        "whitespace only": (tmp / "blank.json", b"  \n"),
        "not JSON": (tmp / "notjson.json", b"this is not json {"),
        "JSON not a trace": (tmp / "obj.json", b'{"hello": [1, 2, 3]}'),
        "JSON list of numbers": (tmp / "list.json", b"[1, 2, 3]"),
        "trace with no events": (tmp / "none.json", b'{"traceEvents": []}'),
        "only metadata": (tmp / "meta.json", b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}'),
        "only negative durations": (tmp / "neg.json", json.dumps({"traceEvents": [x("a", 1.0, -2.0)]}).encode()),
        "a time past int64": (
            tmp / "huge.json",
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1e30, "dur": 1}]}',
        ),
        "nsys report, not export": (tmp / "r.nsys-rep", b"PK\x03\x04 not really"),
    }
    for path, data in files.values():
        path.write_bytes(data)
    out = {k: p for k, (p, _) in files.items()}
    con = sqlite3.connect(str(tmp / "other.sqlite"))
    con.execute("CREATE TABLE foo (a INTEGER)")
    con.commit()
    con.close()
    out["SQLite without nsys tables"] = tmp / "other.sqlite"
    con = sqlite3.connect(str(tmp / "nostrings.sqlite"))
    con.execute(make_nsys_fixture.SCHEMA[3])  # CUPTI_ACTIVITY_KIND_RUNTIME, but no StringIds
    con.commit()
    con.close()
    out["nsys tables without StringIds"] = tmp / "nostrings.sqlite"
    out["nsys export of OS runtime calls only"] = make_nsys_fixture.build_osrt_only(tmp / "osrt.sqlite")
    (tmp / "garbage.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    out["corrupt SQLite"] = tmp / "garbage.sqlite"
    out["missing file"] = tmp / "does-not-exist.json"
    out["a folder"] = tmp
    return out


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    return _bad_files(tmp_path_factory.mktemp("bad"))


BAD = [
    "corrupt gzip",
    "empty file",
    "whitespace only",
    "not JSON",
    "JSON not a trace",
    "JSON list of numbers",
    "trace with no events",
    "only metadata",
    "only negative durations",
    "a time past int64",
    "nsys report, not export",
    "SQLite without nsys tables",
    "nsys tables without StringIds",
    "nsys export of OS runtime calls only",
    "corrupt SQLite",
    "missing file",
    "a folder",
]


def test_control_characters_in_names_are_shown_escaped(tmp_path, cli):
    """A name is printed to terminals and tables: a newline in it broke the answer's line, and an escape sequence
    (`\x1b[31m`) was obeyed by the terminal. Each control character is shown as its escape, and said."""
    events = [x("aten::mm\n\x1b[31mred", 0.0, 10.0), x("plain", 20.0, 5.0), x("tab\there", 30.0, 1.0)]
    trace = load_trace(write_trace(tmp_path / "c.json", events))
    assert [trace.name(i) for i in range(len(trace))] == ["aten::mm\\n\\x1b[31mred", "plain", "tab\\there"]
    assert trace.warnings[0].startswith("2 name(s) held control characters")
    out = cli("analyze", tmp_path / "c.json")
    assert out.returncode == 0 and "\x1b" not in out.stdout and "aten::mm\\n\\x1b[31mred" in out.stdout


def _cut_short(tmp_path: Path, name: str, text: bytes):
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return load_trace(path)


def test_a_trace_whose_text_stops_mid_event_is_read_to_its_last_whole_event(tmp_path):
    """A profiler stopped mid-export, or a file copied while it was written: its text stops inside its 7th event.
    The six whole ones are read, and the warning says how many bytes after them were left out; in either format,
    plain or gzipped. The JSON Array Format's closing bracket is optional: stopping after a whole event says
    nothing there, and only that the text stops short in an object."""
    events = [json.dumps(x(f"op{i}", 10.0 * i, 5.0)).encode() for i in range(10)]
    for frame, close in ((b'{"traceEvents": [', b"]}"), (b"[", b"]")):
        whole = frame + b", ".join(events) + close
        stop = whole.index(b'"op6"')  # inside the 7th event
        kept = whole.index(b"}", whole.index(b'"op5"')) + 1  # the 6th event's end (its args are empty: {})
        kept = whole.index(b"}", kept) + 1
        for name in ("cut.json", "cut.json.gz"):
            trace = _cut_short(tmp_path, name, whole[:stop])
            assert [trace.names[trace.name_id[r]] for r in trace.rows(Kind.CPU_OP)] == [f"op{i}" for i in range(6)]
            assert trace.warnings == (
                "the trace's text stops inside an event (a profiler stopped mid-export, or a copy not finished): "
                f"read to its last whole event, the {stop - kept:,} bytes after it left out",
            )
        number = whole.index(b"60.0", kept) + 3  # inside the 7th event's time, after its point: "invalid number"
        trace = _cut_short(tmp_path, "number.json", whole[:number])
        assert len(trace.rows(Kind.CPU_OP)) == 6 and "the trace's text stops inside an event" in trace.warnings[0]
        trace = _cut_short(tmp_path, "whole.json", whole[:kept] + b",")  # it stops after the 6th event and a comma
        assert len(trace.rows(Kind.CPU_OP)) == 6
        said = () if frame == b"[" else ("the trace's text stops before its JSON closes (a profiler stopped "
                                         "mid-export, or a copy not finished): read to its last event",)  # fmt: skip
        assert trace.warnings == said


def test_a_gzip_that_stops_early_gives_all_it_held(tmp_path):
    """A gzip cut at half its bytes: every event its readable part holds whole is read (the count from zlib's own
    reading of the same bytes), not "empty file" (the 8 MiB read that hit its end used to lose what it held)."""
    events = [json.dumps(x(f"op{i}", 10.0 * i, 5.0, shapes="x" * (i % 7))).encode() for i in range(20_000)]
    text = b'{"traceEvents": [' + b", ".join(events) + b"]}"
    packed = gzip.compress(text)
    path = tmp_path / "half.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    readable = zlib.decompressobj(wbits=31).decompress(packed[: len(packed) // 2])
    whole = readable.count(b"}}")  # an event ends its args and itself there, and only there
    trace = load_trace(path)
    assert len(trace.rows(Kind.CPU_OP)) == whole > 5_000
    assert trace.warnings[0].startswith("the trace's text stops inside an event")


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line(bad_files, case):
    with pytest.raises(ProbeError) as info:
        load_trace(bad_files[case])
    message = str(info.value)
    assert message and "\n" not in message
    assert str(bad_files[case].name) in message


def test_an_nsys_export_without_cuda_or_nvtx_is_named_for_what_it_is(bad_files):
    """An export of `nsys profile --trace=osrt` was refused as 'SQLite but not an Nsight Systems export': it is one,
    recorded without the traces probe reads. The refusal says so, what it holds, and how to record what probe reads."""
    with pytest.raises(ProbeError) as info:
        load_trace(bad_files["nsys export of OS runtime calls only"])
    assert str(info.value).endswith(
        "osrt.sqlite: an Nsight Systems export without a CUDA or NVTX trace (it holds OS runtime calls): probe reads "
        "CUDA kernels, copies, API calls and NVTX ranges; record them with nsys profile --trace=cuda,nvtx,osrt"
    )
    with pytest.raises(ProbeError, match="SQLite but not an Nsight Systems export"):
        load_trace(bad_files["SQLite without nsys tables"])


def test_negative_durations_are_dropped_and_said(tmp_path):
    path = write_trace(tmp_path / "t.json", [x("a", 1.0, 2.0), x("b", 5.0, -1.0), x("c", 10.0, 0.5)])
    trace = load_trace(path)
    assert [trace.name(i) for i in range(len(trace))] == ["a", "c"]
    assert trace.dropped == {"negative duration": 1}
    assert trace.warnings == ("dropped 1 event(s): negative duration",)


def test_events_without_times_are_dropped_and_said(tmp_path):
    events = [x("a", 1.0, 2.0), {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 3.0}, "not an event"]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert len(trace) == 1
    assert trace.dropped == {"missing or non-numeric dur": 1, "not an object": 1}


def test_odd_json_types_do_not_crash(tmp_path):
    """Names, categories, phases, ids and args of the wrong JSON type: kept where they can be, never a crash."""
    events = [
        {"ph": ["X"], "ts": 1.0},  # a phase that is a list: skipped, counted under its text
        {
            "ph": "X",
            "cat": 7,
            "name": ["aten::mm"],
            "pid": {"a": 1},
            "tid": "main",
            "ts": 2.0,
            "dur": 1.0,
            "args": [1, 2],
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 3.0,
            "dur": 1.0,
            "args": {"correlation": "12", "stream": None, "device": 1.5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 3.5,
            "dur": 1.0,
            "args": {"correlation": 3.0},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 2.5,
            "dur": 0.1,
            "args": {"correlation": 2**70},
        },
    ]
    trace = load_trace(write_trace(tmp_path / "odd.json", events))
    assert len(trace) == 4 and trace.skipped == {"['X']": 1}
    assert [trace.names[i] for i in trace.name_id] == ["['aten::mm']", "cudaLaunchKernel", "k", "k2"]
    assert trace.kind.tolist() == [Kind.OTHER, Kind.RUNTIME, Kind.KERNEL, Kind.KERNEL]
    assert trace.pid.tolist() == [-1, 1, 0, 0] and trace.tid.tolist() == [-2, 1, 7, 7]  # text: an id of its own
    # Only JSON integers are ids: "12" and 3.0 are not, and 2**70 does not fit.
    assert trace.correlation.tolist() == [-1, -1, -1, -1]
    assert trace.device.tolist() == [-1, -1, 0, 0] and trace.stream.tolist() == [-1, -1, 7, 7]
    from probe.analysis.ledger.build import analyze

    totals = analyze(trace).totals
    assert (totals.kernels, totals.launches, totals.unattributed_gpu_ops) == (2, 1, 2)


# --- streaming: pieces of any size give the same table ---------------------------------------------------


def _table(trace) -> tuple:
    """A trace's content with ids resolved to what they name (the order of the name table is not content)."""
    cols = {c: getattr(trace, c).tolist() for c in COLUMNS if c not in ("name_id", "cat_id", "shape_id")}
    names = [trace.names[i] for i in trace.name_id]
    cats = [trace.names[i] for i in trace.cat_id]
    shapes = [trace.shapes[i] if i >= 0 else None for i in trace.shape_id.tolist()]
    top = (trace.base_ns, trace.rank, trace.devices, trace.skipped, trace.dropped, trace.warnings)
    return cols, names, cats, shapes, top


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Cut the events array every few hundred bytes, so even the small fixtures are read in many pieces."""
    monkeypatch.setattr(pieces, "PIECE_BYTES", 300)
    monkeypatch.setattr(pieces, "_LOOKAHEAD", 50)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.trace.json.gz")), ids=lambda p: p.name)
def test_reading_in_small_pieces_gives_the_same_trace(path, monkeypatch):
    whole = _table(load_trace(path))
    monkeypatch.setattr(pieces, "PIECE_BYTES", 300)
    monkeypatch.setattr(pieces, "_LOOKAHEAD", 50)
    assert _table(load_trace(path)) == whole


def test_a_piece_consumer_that_keeps_a_view_fails_loudly_unless_it_is_raising():
    """A consumer that keeps a view into the piece it was handed makes the reader fail (the buffer moves on); one
    interrupted mid-decode (Ctrl-C, its frames holding views) lets its own exception through: a BufferError used to
    replace the KeyboardInterrupt, and `probe analyze` died with a traceback, not "probe: interrupted"."""
    kept = []

    def keeps(array: memoryview) -> bool:
        kept.append(msgspec.json.decode(array, type=list[msgspec.Raw]))  # Raw values hold the view
        return True

    def interrupted(array: memoryview) -> bool:
        kept.append(msgspec.json.decode(array, type=list[msgspec.Raw]))  # Raw values hold the view
        raise KeyboardInterrupt

    buf = bytearray(b'[{"a": 1}, {"b": 2}]')
    with pytest.raises(BufferError):
        pieces._whole_in_place(keeps, buf, 9)
    kept.clear()
    with pytest.raises(KeyboardInterrupt):
        pieces._whole_in_place(interrupted, bytearray(buf), 9)


def test_false_cuts_and_keys_after_the_events(tmp_path, tiny_pieces):
    """`}, {` inside a name and between objects nested in args is no place to cut; top-level keys after the
    events array (themselves holding `}, {`) are still read."""
    events = [x(f"op{i}", 10.0 * i, 1.0) for i in range(40)]
    events[5]["name"] = 'a}, {"ph": "X", "ts": 1, "dur": 1}, {b'
    events[9]["args"]["shapes"] = [{"a": 1}, {"b": 2}, {"c": [{"d": 3}, {"e": 4}]}]
    events[30]["args"]["blob"] = [{}] * 200
    doc = {"traceEvents": events, "baseTimeNanoseconds": 17, "distributedInfo": {"rank": 3}, "x": [{}, {}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1))
    trace = load_trace(path)
    assert [trace.name(i) for i in range(len(trace))] == [e["name"] for e in events]
    assert trace.ts_ns.tolist() == [10_000 * i for i in range(40)]
    assert (trace.base_ns, trace.rank) == (17, 3)


def test_odd_types_in_one_piece_leave_the_others_typed(tmp_path, tiny_pieces):
    events = [x(f"op{i}", float(i), 0.5) for i in range(60)]
    events[20]["name"], events[21]["pid"], events[22] = None, "main", 7
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert len(trace) == 59 and trace.dropped == {"not an object": 1}
    assert trace.name(20) == "" and trace.pid[21] == -2 and trace.name(21) == "op21"  # pid "main": its own id


def _begin_end(events: list[dict]) -> list[dict]:
    """`events` (X) as duration events: each a begin (B: its category, name and args) and an end (E: its pid, tid
    and time only), in order of time, an end before a begin at the same time (as a tracer writes them)."""
    marks = []
    for i, e in enumerate(events):
        begin = {k: v for k, v in e.items() if k != "dur"} | {"ph": "B"}
        end = {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}
        marks += [(e["ts"], 1, i, begin), (e["ts"] + e["dur"], 0, -i, end)]
    return [m for *_, m in sorted(marks, key=lambda m: m[:3])]


def test_duration_events_read_as_the_complete_events_they_make(tmp_path, tiny_pieces):
    """A hand-written tracer's begins and ends (B, E) on two threads, nested three deep, read in many pieces: the
    same trace as the complete (X) events they pair into, to the nanosecond, with the begin's args (shapes too)."""
    events = []
    for i in range(30):
        t, tid = 100.0 * i + 0.125, 1 + i % 2
        events += [x(f"step_{i}", t, 90.5, cat="user_annotation", tid=tid),
                   x("aten::mm", t + 1, 50.25, tid=tid, **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["f", "f"]}),
                   x("aten::addmm", t + 2, 3.0, tid=tid)]  # fmt: skip
    complete = load_trace(write_trace(tmp_path / "x.json", events))
    paired = load_trace(write_trace(tmp_path / "be.json", _begin_end(events)))

    def rows(t) -> list[tuple]:
        shape = [t.shapes[k].dims if k >= 0 else None for k in t.shape_id.tolist()]
        names = [t.name(i) for i in range(len(t))]
        return list(zip(names, t.ts_ns.tolist(), t.dur_ns.tolist(), t.tid.tolist(), shape, strict=True))

    assert rows(paired) == rows(complete) and len(paired) == 90
    assert (paired.skipped, paired.dropped, paired.warnings) == ({}, {}, ())


def test_a_duration_event_left_open_or_an_end_with_no_begin_is_dropped_and_said(tmp_path):
    """An end with no begin open on its thread, and a begin never ended (a tracer stopped mid-step), are dropped and
    counted; the begin and end of another thread pair by themselves; a piece of odd types (a name that is a
    number) is read untyped, its begins and ends alike."""
    events = _begin_end([x("a", 10.0, 5.0), x("b", 20.0, 5.0, tid=2)])
    events.insert(0, {"ph": "E", "pid": 1, "tid": 1, "ts": 1.0})
    events.append({"ph": "B", "name": "never", "pid": 1, "tid": 1, "ts": 30.0})
    events.append({"ph": "X", "name": 5, "pid": 1, "tid": 3, "ts": 40.0, "dur": 1.0})
    trace = load_trace(write_trace(tmp_path / "open.json", events))
    assert [trace.name(i) for i in range(len(trace))] == ["a", "b", "5"]
    assert trace.dur_ns.tolist() == [5000, 5000, 1000] and trace.tid.tolist() == [1, 2, 3]
    assert trace.dropped == {"begin (B) never ended": 1, "end (E) with no begin open on its thread": 1}
    assert "B" not in trace.skipped and "E" not in trace.skipped


# --- two processes read what one reads ------------------------------------------------------------------


def _exact(trace) -> tuple:
    """Everything a trace holds, its name table's order included (two processes must give the same ids)."""
    cols = tuple(getattr(trace, c).tolist() for c in COLUMNS)
    top = (trace.base_ns, trace.rank, trace.devices, trace.skipped, trace.dropped, trace.warnings)
    return trace.names, trace.shapes, cols, top


@pytest.fixture
def reads(monkeypatch):
    """How each two-process read ended: "two" (its table stood) or "one" (it diverged and one process read it)."""
    seen: list[str] = []
    real = pieces.split_in_two

    def counted(*args):
        try:
            out = real(*args)
        except pieces.Diverged:
            seen.append("one")
            raise
        seen.append("two")
        return out

    monkeypatch.setattr(pieces, "split_in_two", counted)
    monkeypatch.setattr(pieces, "_forks_safely", lambda: True)  # pytest-xdist's worker runs threads of its own
    return seen


def _one_and_two(path: Path, monkeypatch) -> tuple[tuple, tuple]:
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "1")
    one = _exact(load_trace(path))
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "2")
    return one, _exact(load_trace(path))


def _busy_trace(path: Path) -> Path:
    """Pieces of every kind the fast path keeps: shapes recorded (repeated and new), flows and instants skipped,
    dropped events (no ts, a ts past int64), a correlation past int64, names first seen in late pieces."""
    events = []
    for i in range(400):
        shapes = {"Input Dims": [[i % 3, 4], []], "Input type": ["float", ""]} if i % 5 == 0 else {}
        events.append(x(f"op{i % 37}" if i < 300 else f"late{i % 11}", 10.0 * i + 0.125, 2.5, **shapes))
        events.append(x(f"k{i % 13}", 10.0 * i + 3.0, 1.0, cat="kernel", pid=0, tid=7, correlation=i))
        events.append({"ph": "s" if i % 2 else "i", "name": "flow", "id": i, "pid": 1, "tid": 1, "ts": 10.0 * i})
    events[50]["ts"], events[51]["ts"] = None, 1e30
    events[52]["args"]["correlation"] = 2**70
    return write_trace(path, events, baseTimeNanoseconds=17)


def test_two_processes_read_what_one_reads(tmp_path, tiny_pieces, reads, monkeypatch):
    paths = [_busy_trace(tmp_path / "busy.json"), *sorted(DATA.glob("*.trace.json.gz"))]
    for path in paths:
        one, two = _one_and_two(path, monkeypatch)
        assert two == one, path.name
    assert reads == ["two"] * len(paths)  # each read by two processes, none diverged


@pytest.mark.parametrize(
    "odd",
    ["false cut", "odd types", "thread named in words", "not UTF-8", "exact ns in args", "a GPU process", "B/E"],
)
def test_what_two_processes_cannot_share_is_read_by_one_alike(tmp_path, tiny_pieces, reads, monkeypatch, odd):
    """A cut inside a string, a piece of odd types, a thread named in words (its id is the order of such names
    across the whole file), a byte that is not UTF-8, a process named as a GPU side (the read keeps flow arrows
    from there on), or duration events (a begin pairs with an end in any piece): the two-process read stops and one
    process reads the file, as it always has."""
    events = [x(f"op{i}", float(i), 0.5) for i in range(200)]
    if odd == "false cut":
        events[120]["name"] = 'a}, {"ph": "X", "ts": 1, "dur": 1}, {b' * 40
    elif odd == "odd types":
        events[120]["name"], events[121] = ["list"], 7
    elif odd == "thread named in words":
        events[120]["tid"] = "main"
    elif odd == "exact ns in args":  # rocprof v1's BeginNs / EndNs: only the untyped read takes them
        events[120]["args"] = {"BeginNs": "120000001", "EndNs": "120500002"}
    elif odd == "a GPU process":  # rocprof v1's metadata
        events[120] = {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPU0"}}
    elif odd == "B/E":  # a begin and its end may sit in different pieces
        events[120:121] = _begin_end(events[120:121])
    path = write_trace(tmp_path / "t.json", events)
    if odd == "not UTF-8":
        path.write_bytes(path.read_bytes().replace(b"op120", b"op\xff\xfe"))
    one, two = _one_and_two(path, monkeypatch)
    assert two == one and reads == ["one"]


def test_a_reading_process_lost_leaves_the_read_to_this_one(tmp_path, tiny_pieces, reads, monkeypatch):
    """The forked process dies mid-read (the OOM killer, a signal): this one reads the file alone, with the same
    table, and leaves no process behind."""
    import multiprocessing
    import os

    from probe.analysis.trace import chrome

    here, real = os.getpid(), chrome._Table.piece_part

    def dies_there(self, array):
        if os.getpid() != here:
            os._exit(9)
        return real(self, array)

    path = _busy_trace(tmp_path / "busy.json")
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "1")
    one = _exact(load_trace(path))
    monkeypatch.setattr(chrome._Table, "piece_part", dies_there)
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "2")
    assert _exact(load_trace(path)) == one and reads == ["one"]
    assert multiprocessing.active_children() == []


def test_when_a_second_process_reads(monkeypatch):
    big = pieces.TWO_PROCESS_PIECES * pieces.PIECE_BYTES
    monkeypatch.delenv(pieces.READ_PROCESSES_ENV, raising=False)
    monkeypatch.setattr(pieces, "_forks_safely", lambda: True)
    monkeypatch.setattr(pieces, "_cores", lambda: 2)
    assert pieces.two_processes(big) and not pieces.two_processes(big - 1)
    monkeypatch.setattr(pieces, "_cores", lambda: 1)
    assert not pieces.two_processes(big)  # no second core to run it
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "2")
    assert pieces.two_processes(1)
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "1")
    assert not pieces.two_processes(10 * big)
    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "3")
    with pytest.raises(ProbeError, match="PROBE_READ_PROCESSES='3'"):
        pieces.two_processes(big)


def test_no_second_process_beside_another_thread(monkeypatch):
    """A fork copies only the thread that forks: a lock another thread held would stay held in the copy."""
    import threading

    monkeypatch.setenv(pieces.READ_PROCESSES_ENV, "2")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not pieces.two_processes(1)
    finally:
        stop.set()
        thread.join()


# --- top-level facts --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "info, rank", [({"rank": 3}, 3), ({"rank": "3"}, None), ({"rank": True}, None), ({}, None), (None, None)]
)
def test_rank_from_distributed_info(tmp_path, info, rank):
    top = {} if info is None else {"distributedInfo": info}
    assert load_trace(write_trace(tmp_path / "t.json", [x("a", 1.0, 1.0)], **top)).rank == rank


def test_rank_of_the_recorded_traces():
    assert load_trace(shared_trace("public/cuda_train_ns_resolution_5steps.trace.json.gz")).rank == 0
    assert load_trace(HAND).rank is None


def test_nsys_has_no_rank(hand_nsys):
    assert load_trace(hand_nsys).rank is None


# --- lenient: one bad byte is not a bad trace -------------------------------------------------------------


def test_a_byte_that_is_not_utf8_in_one_name_is_replaced_not_fatal(tmp_path):
    text = json.dumps({"traceEvents": [x("good", 1.0, 1.0), x("bad-NAME", 2.0, 1.0), x("also good", 3.0, 1.0)]})
    path = tmp_path / "t.json"
    path.write_bytes(text.encode().replace(b"NAME", b"\xff\xfe"))
    trace = load_trace(path)
    assert [trace.name(i) for i in range(3)] == ["good", "bad-\ufffd\ufffd", "also good"]
    assert trace.warnings == ("replaced 2 character(s) that were not UTF-8 with U+FFFD",)


def test_a_byte_that_is_not_utf8_in_an_nsys_name_is_replaced(hand_nsys, tmp_path):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(hand_nsys.read_bytes())
    con = sqlite3.connect(str(path))
    con.execute("UPDATE StringIds SET value = CAST(X'676f6f64ff' AS TEXT) WHERE value = 'gemv_kernel'")
    con.commit()
    con.close()
    assert "good\ufffd" in load_trace(path).names


def test_end_ns_is_added_once_and_read_only():
    """step_events reads trace.end_ns[row] a row at a time: a property adding two whole columns on every read
    made 60k runtime calls take seconds (quadratic), where 15k took 0.05 s."""
    trace = load_trace(HAND)
    assert trace.end_ns is trace.end_ns
    assert trace.end_ns.tolist() == (trace.ts_ns + trace.dur_ns).tolist()
    with pytest.raises(ValueError):
        trace.end_ns[0] = 0


# --- copies, shapes and devices ---------------------------------------------------------------------------


def _json_events(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def _is_copy_call(event: dict) -> bool:
    return event.get("cat") in ("cuda_runtime", "cuda_driver") and event["name"].startswith(("cudaMemcpy", "hipMemcpy"))


@pytest.mark.parametrize(
    "name",
    [
        "public/rocm_sglang_qwen3_8b_extend_step",
        "public/mi300x_hf_qwen1.5-0.5b_prefill_b16",
        "public/rocm_vllm_decode_cudagraph",
        "public/h100_hf_qwen1.5-0.5b_prefill_b16",
        "public/b200_eager",
        "public/cuda_train_ns_resolution_5steps",
    ],
)
def test_copy_bytes_and_directions_are_the_files_own(name):
    """Every copy and memset of a real trace, read straight from its JSON: its bytes (an int on GPU rows, text on
    ROCm's runtime calls) and direction (a runtime call's cudaMemcpyKind number, a GPU copy's kind text or name)."""
    path = shared_trace(f"{name}.trace.json.gz")
    texts = {"HtoH": 0, "HtoD": 1, "DtoH": 2, "DtoD": 3}
    want = []
    for e in _json_events(path):
        args = e.get("args", {})
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            said = args.get("kind", e["name"].split()[1] if e["cat"] == "gpu_memcpy" else None)
            want.append((e["name"], int(args.get("bytes", -1)), texts.get(said, -1)))
        elif _is_copy_call(e):
            want.append((e["name"], int(args.get("bytes", -1)), int(args.get("kind", -1))))
    trace = load_trace(path)
    rows = np.flatnonzero((trace.bytes >= 0) | (trace.copy_kind >= 0) | np.isin(trace.kind, [5, 6]))
    rows = np.union1d(
        rows, [i for i in trace.rows(Kind.RUNTIME) if trace.name(i).startswith(("cudaMemcpy", "hipMemcpy"))]
    )
    got = [(trace.name(i), int(trace.bytes[i]), int(trace.copy_kind[i])) for i in rows.tolist()]
    assert sorted(got) == sorted(want) and want


def test_the_60_byte_host_to_device_copy_of_the_sglang_step():
    """The first copy of the SGLang step: hipMemcpyWithStream, args {"bytes": "60", "kind": "1"} (text), and its GPU
    side "Memcpy HtoD (Host -> Device)", args {"kind": "HtoD", "bytes": 60}, both joined on correlation 91058."""
    trace = load_trace(shared_trace("public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz"))
    (call,) = np.flatnonzero((trace.correlation == 91058) & (trace.kind == Kind.RUNTIME))
    (copy,) = np.flatnonzero((trace.correlation == 91058) & (trace.kind == Kind.GPU_MEMCPY))
    assert (trace.name(call), int(trace.bytes[call]), COPY_KINDS[trace.copy_kind[call]]) == (
        "hipMemcpyWithStream",
        60,
        "HtoD",
    )
    assert (trace.name(copy), int(trace.bytes[copy]), COPY_KINDS[trace.copy_kind[copy]]) == (
        "Memcpy HtoD (Host -> Device)",
        60,
        "HtoD",
    )
    not_copies = ~np.isin(trace.kind, [Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.RUNTIME])
    assert set(trace.bytes[not_copies].tolist()) == {-1}  # kernels carry args.kind "Dispatch Kernel": not a copy
    assert set(trace.copy_kind[trace.kind == Kind.KERNEL].tolist()) == {-1}


def test_the_gemm_shapes_of_the_h100_prefill():
    """aten::mm of the MLP's up projection: [8944, 1024] x [1024, 2816] (16 x 559 tokens, hidden 1024, intermediate
    2816) in bf16, so M = 8944, N = 2816, K = 1024; and every cpu_op's recording is its JSON args exactly."""
    path = shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")
    trace = load_trace(path)
    mm = {trace.shapes[trace.shape_id[i]] for i in range(len(trace)) if trace.name(i) == "aten::mm"}
    up = Shapes(((8944, 1024), (1024, 2816)), ("c10::BFloat16", "c10::BFloat16"), ("", ""))
    assert up in mm
    (m, k), (k2, n) = up.dims
    assert (m, n, k) == (8944, 2816, 1024) and k == k2

    def frozen(v):
        return tuple(map(frozen, v)) if isinstance(v, list) else v

    ops = [e for e in _json_events(path) if e["cat"] == "cpu_op"]
    want = sorted(
        (
            e["name"],
            repr(
                Shapes(
                    frozen(e["args"]["Input Dims"]), tuple(e["args"]["Input type"]), tuple(e["args"]["Concrete Inputs"])
                )
            ),
        )
        for e in ops
    )
    rows = trace.rows(Kind.CPU_OP)
    assert sorted((trace.name(i), repr(trace.shapes[trace.shape_id[i]])) for i in rows.tolist()) == want
    assert len(trace.shapes) == len({w for _, w in want}) == 126  # one per distinct recording
    assert set(trace.shape_id[trace.kind != Kind.CPU_OP].tolist()) == {-1}


def test_shapes_as_recorded_and_what_is_not_a_shape(tmp_path):
    tensor_list = [[1, 559, 32], [1, 559, 32]]
    events = [
        x("aten::cat", 1.0, 1.0, **{"Input Dims": [tensor_list, []], "Input type": ["TensorList", "Scalar"]}),
        x(
            "aten::add",
            2.0,
            1.0,
            **{"Input Dims": [[4], [], []], "Input type": ["float", "Scalar", ""], "Concrete Inputs": ["", "1", ""]},
        ),
        x("aten::bad", 3.0, 1.0, **{"Input Dims": [[True, 2]], "Input type": ["float"]}),  # a bool is no size
        x("aten::deep", 4.0, 1.0, **{"Input Dims": [[[[[[[[[[1]]]]]]]]]], "Input type": ["float"]}),
        x("aten::cat", 5.0, 1.0, **{"Input Dims": [tensor_list, []], "Input type": ["TensorList", "Scalar"]}),
        x("cudaLaunchKernel", 6.0, 1.0, cat="cuda_runtime", **{"Input Dims": [[1]], "Input type": ["float"]}),
        x("aten::empty", 7.0, 1.0),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    shapes = [trace.shapes[i] if i >= 0 else None for i in trace.shape_id.tolist()]
    cat = Shapes((((1, 559, 32), (1, 559, 32)), ()), ("TensorList", "Scalar"), None)
    add = Shapes(((4,), (), ()), ("float", "Scalar", ""), ("", "1", ""))
    assert shapes == [cat, add, None, None, cat, None, None]
    assert trace.shapes == (cat, add)
    assert "2 recorded input shape(s) not lists of ints and strings: left out (shape_id -1)" in trace.warnings


def test_copy_fields_of_other_types_and_on_other_rows(tmp_path):
    events = [
        x("hipMemcpyAsync", 1.0, 1.0, cat="cuda_runtime", bytes="9216", kind="1"),
        x("cudaMemcpyAsync", 2.0, 1.0, cat="cuda_runtime", bytes=16, kind=2),
        x("Memcpy DtoH (Device -> Pinned)", 3.0, 1.0, cat="gpu_memcpy", pid=0, tid=7, bytes=1),
        x("Memcpy PtoP (Device -> Device)", 4.0, 1.0, cat="gpu_memcpy", pid=0, tid=7, bytes=8, kind="PtoP"),
        x("Memset (Device)", 5.0, 1.0, cat="gpu_memset", pid=0, tid=7, bytes=4),
        x("a_kernel", 6.0, 1.0, cat="kernel", pid=0, tid=7, bytes=4, kind="Dispatch Kernel"),
        x("cudaLaunchKernel", 7.0, 1.0, cat="cuda_runtime", bytes=4, kind=1),
        x("hipMemcpyAsync", 8.0, 1.0, cat="cuda_runtime", bytes="60 bytes", kind="sideways"),
        x("cudaMemcpy", 9.0, 1.0, cat="cuda_runtime", bytes=-3, kind=True),  # a count is never negative
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert trace.bytes.tolist() == [9216, 16, 1, 8, 4, -1, -1, -1, -1]
    assert trace.copy_kind.tolist() == [1, 2, 2, 3, -1, -1, -1, -1, -1]


def test_device_properties_typed():
    h100 = load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")).devices
    assert h100 == (
        DeviceInfo(
            id=0,
            name="NVIDIA H100 80GB HBM3",
            total_memory_bytes=85018279936,
            sm_count=132,
            compute_major=9,
            compute_minor=0,
            warp_size=32,
            max_threads_per_block=1024,
            max_threads_per_sm=2048,
            regs_per_block=65536,
            regs_per_sm=65536,
            shared_memory_per_block_bytes=49152,
            shared_memory_per_block_optin_bytes=232448,
            shared_memory_per_sm_bytes=233472,
        ),
    )
    (mi300x,) = load_trace(shared_trace("public/mi300x_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")).devices
    assert (mi300x.name, mi300x.sm_count, mi300x.warp_size, mi300x.shared_memory_per_sm_bytes) == (
        "AMD Instinct MI300X VF",
        304,
        64,
        65536,  # ROCm's maxSharedMemoryPerMultiProcessor
    )
    assert (mi300x.compute_major, mi300x.compute_minor, mi300x.regs_per_sm) == (9, 4, None)
    names = {d.name for d in load_trace(shared_trace("public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz")).devices}
    assert names == {"AMD Instinct MI300X"}
    b200 = load_trace(shared_trace("public/b200_eager.trace.json.gz")).devices
    assert [d.id for d in b200] == list(range(len(b200))) and {d.name for d in b200} == {"NVIDIA B200"}
    (mtia,) = load_trace(shared_trace("peer/hta_mtia_inference.trace.json.gz")).devices
    assert (mtia.id, mtia.name, mtia.sm_count) == (17, "ARTEMIS", None)
    assert dict(mtia.other) == {
        "runtimeMajorVersion": 1,
        "runtimeMinorVersion": 30,
        "maxGridHeight": 8,
        "maxGridWidth": 8,
    }
    assert load_trace(HAND).devices == ()


def test_odd_device_properties(tmp_path):
    props = [{"id": "0", "name": 7, "numSms": 2**70, "totalGlobalMem": 1.5, "note": [1]}, "gpu", {"id": 3}]
    (a, b) = load_trace(write_trace(tmp_path / "t.json", [x("a", 1.0, 1.0)], deviceProperties=props)).devices
    assert (a.id, a.name, a.sm_count, a.total_memory_bytes, a.other) == (None, "", None, None, ())
    assert (b.id, b.name) == (3, "")
    assert load_trace(write_trace(tmp_path / "u.json", [x("a", 1.0, 1.0)], deviceProperties={"0": {}})).devices == ()


def test_nsys_names_its_gpus_as_chrome_does(hand_nsys, tmp_path):
    """TARGET_INFO_GPU (one row a GPU: 'NVIDIA H200', its memory, SMs, compute capability) is the export's
    deviceProperties: the roofline found no device in an export that named it ('give --device NAME')."""
    from probe.analysis.diagnosis.answer import trace_device
    from probe.analysis.roofline.devices import device

    path = tmp_path / "gpus.sqlite"
    path.write_bytes(hand_nsys.read_bytes())
    make_nsys_fixture.add_gpus(path, make_nsys_fixture.H200, (1, None, "lots", 2.5, 9, 0))  # odd types read as None
    trace = load_trace(path)
    h200, odd = trace.devices
    assert h200 == DeviceInfo(
        id=0,
        name="NVIDIA H200",
        total_memory_bytes=150137864192,
        sm_count=132,
        compute_major=9,
        compute_minor=0,
        warp_size=32,
        max_threads_per_block=1024,
        max_threads_per_sm=None,  # nsys records warps per SM, kept with the other columns as written
        regs_per_block=None,
        regs_per_sm=None,
        shared_memory_per_block_bytes=None,
        shared_memory_per_block_optin_bytes=None,
        shared_memory_per_sm_bytes=233472,
        other=(("vmId", 281474976710656), ("chipName", "GH100"), ("maxWarpsPerSm", 64)),
    )
    assert (odd.id, odd.name, odd.total_memory_bytes, odd.sm_count) == (1, "", None, None)
    assert trace_device(trace, None) == (device("H200"), None)
    assert load_trace(hand_nsys).devices == ()  # an export without the table names none


def test_nsys_copies_and_memsets(hand_nsys):
    """make_nsys_fixture: one HtoD copy (copyKind 1) of 4096 bytes, one memset of 1024; nsys keeps no bytes on the
    runtime call itself."""
    trace = load_trace(hand_nsys)
    rows = np.flatnonzero(trace.bytes >= 0)
    assert [(trace.name(i), int(trace.bytes[i]), int(trace.copy_kind[i])) for i in rows] == [
        ("Memcpy HtoD", 4096, 1),
        ("Memset", 1024, -1),
    ]
    assert (trace.shapes, trace.devices) == ((), ())


# --- device sides beyond CUDA and ROCm kernels ------------------------------------------------------------


def test_cupti_range_profiler_kernels_are_kernels_paired_with_their_launches():
    """HTA's cupti_profiler trace: 77 kernels recorded as `cuda_profiler_range` (one range a kernel, its SASS
    counters in args) and 77 cudaLaunchKernel calls. HTA pairs them in order and asserts, of the kernel at index 5
    by start: fft2d_r2c_32x32, top-level op aten::conv2d, bottom-level op aten::_convolution. Read as kernels, the
    ledger no longer warns that kernel collection was off."""
    from probe.analysis.ledger.build import analyze

    trace = load_trace(shared_trace("peer/hta_cuda_cupti_profiler_ranges.trace.json.gz"))
    kernels = trace.rows(Kind.KERNEL)
    assert len(kernels) == 77
    launches = {int(trace.correlation[i]): i for i in trace.rows(Kind.RUNTIME) if trace.name(i) == "cudaLaunchKernel"}
    assert len(launches) == 77 and sorted(trace.correlation[kernels].tolist()) == sorted(launches)
    fifth = kernels[5]
    assert "fft2d_r2c_32x32" in trace.name(fifth)
    launch = launches[int(trace.correlation[fifth])]
    ops = [
        i
        for i in trace.rows(Kind.CPU_OP)
        if (trace.pid[i], trace.tid[i]) == (trace.pid[launch], trace.tid[launch])
        and trace.ts_ns[i] <= trace.ts_ns[launch]
        and trace.end_ns[i] >= trace.end_ns[launch]
    ]
    # HTA's call graph ends the stack at aten::_convolution; the trace has cudnn_convolution inside it
    assert [trace.name(i) for i in ops][:1] + [trace.name(i) for i in ops][-2:] == [
        "aten::conv2d",
        "aten::_convolution",
        "aten::cudnn_convolution",
    ]
    (said,) = [w for w in trace.warnings if "range-profiler" in w]
    assert "paired with a launch call in order" in said and "times are the profiler's" in said
    analysis = analyze(trace)
    assert analysis.totals.kernels == 77
    assert not any("kernel collection was off" in w for w in analysis.warnings)


def test_range_profiler_kernels_that_do_not_pair_are_left_unjoined_and_said(tmp_path):
    events = [
        x("cudaLaunchKernel", 1.0, 1.0, cat="cuda_runtime", correlation=7),
        x("k1", 5.0, 10.0, cat="cuda_profiler_range", pid=0, tid=0),
        x("k2", 15.0, 10.0, cat="cuda_profiler_range", pid=0, tid=0),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert trace.kind.tolist() == [Kind.RUNTIME, Kind.KERNEL, Kind.KERNEL]
    assert trace.correlation.tolist() == [7, -1, -1]
    assert any("not paired with the 1 launch calls" in w for w in trace.warnings)


def test_mtia_device_side_is_read_in_the_kernel_and_launch_shape():
    """HTA's MTIA inference trace: mtia_runtime calls (correlation ids) and mtia_ccp_events on the device (pid 17),
    which kineto aliases to RUNTIME and CONCURRENT_KERNEL. From its JSON: pe_exe 24 + merge 36 + remote 37 = 97
    executions (kernels), 877 dma_request copies, event_record 291 + event_wait 48 (syncs, other)."""
    trace = load_trace(shared_trace("peer/hta_mtia_inference.trace.json.gz"))
    named = {(Kind(k).label, trace.names[n]) for k, n in zip(trace.kind.tolist(), trace.name_id.tolist(), strict=True)}
    counts = {k.label: int(np.sum(trace.kind == k)) for k in (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.RUNTIME)}
    assert counts == {"kernel": 97, "gpu_memcpy": 877, "runtime": 823}
    assert {("other", "event_record"), ("other", "event_wait"), ("gpu_memcpy", "dma_request")} <= named
    device = np.isin(trace.kind, [Kind.KERNEL, Kind.GPU_MEMCPY])
    assert set(trace.device[device].tolist()) == {17} and trace.warnings == ()
    # every device op that carries a correlation id finds its runtime call
    runtime = set(trace.correlation[trace.kind == Kind.RUNTIME].tolist())
    joined = trace.correlation[device]
    assert set(joined[joined >= 0].tolist()) <= runtime


def test_a_device_side_this_reader_does_not_know_is_said_in_one_line(tmp_path):
    events = [
        x("aten::mm", 1.0, 5.0),
        x("gcuLaunchKernel", 2.0, 1.0, cat="gcu_runtime", correlation=1),
        x("gemm_kernel", 3.0, 2.0, cat="gcu_kernel", pid=0, tid=3, correlation=1),
        x("sync", 6.0, 1.0, cat="cuda_sync"),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert set(trace.kind.tolist()) == {Kind.CPU_OP, Kind.OTHER}
    (said,) = trace.warnings
    assert said.endswith("gcu_runtime (1), gcu_kernel (1)") and "does not know" in said and "\n" not in said


# --- torch.autograd.profiler's legacy export (before kineto): no categories ---------------------------------


def test_the_legacy_exports_sides_are_read_by_their_process(tmp_path):
    """torch < 1.8 wrote no `cat`: CPU events in process "CPU functions", kernels in "CUDA functions" with the
    device as tid, joined to their op by a cpu_to_cuda flow only. They are ops and kernels, said in a warning, not
    events of no kind."""
    cpu, gpu = "CPU functions", "CUDA functions"
    events = [
        {"name": "aten::conv2d", "ph": "X", "ts": 10.0, "dur": 50.0, "tid": 1, "pid": cpu, "args": {}},
        {"name": "aten::relu", "ph": "X", "ts": 70.0, "dur": 5.0, "tid": 1, "pid": cpu, "args": {}},
        {"name": "aten::conv2d", "ph": "s", "ts": 10.0, "tid": 1, "pid": cpu, "id": 1, "cat": "cpu_to_cuda"},
        {"name": "implicit_gemm", "ph": "f", "ts": 20.0, "tid": 0, "pid": gpu, "id": 1, "cat": "cpu_to_cuda"},
        {"name": "implicit_gemm", "ph": "X", "ts": 20.0, "dur": 40.0, "tid": 0, "pid": gpu, "args": {}},
        {"name": "unrelated", "ph": "X", "ts": 80.0, "dur": 1.0, "tid": 1, "pid": "Other process", "args": {}},
    ]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(events))
    trace = load_trace(path)
    read = {trace.name(i): (trace.kind[i], trace.device[i], trace.stream[i]) for i in range(len(trace))}
    assert read == {
        "aten::conv2d": (Kind.CPU_OP, -1, -1),
        "aten::relu": (Kind.CPU_OP, -1, -1),
        "implicit_gemm": (Kind.KERNEL, 0, 0),
        "unrelated": (Kind.OTHER, -1, -1),
    }
    (said,) = [w for w in trace.warnings if "legacy export" in w]
    assert "2 in 'CPU functions' as CPU ops, 1 in 'CUDA functions' as kernels" in said
    kineto = write_trace(tmp_path / "kineto.json", [x("aten::mm", 1.0, 1.0, pid=cpu)])
    assert not any("legacy" in w for w in load_trace(kineto).warnings)  # a category says the side: no guess


# --- times as text, and rocprof v1's exact ns ---------------------------------------------------------------


def test_a_time_written_as_a_json_string_of_a_number_is_that_number():
    """rocprof v1 writes `"ts": "852321267783"`; chrome://tracing and Perfetto read it as the number. Only a string
    whose own text is a JSON number: no spaces, escapes or words."""
    from probe.analysis.trace.timetext import times_ns

    texts = [b'"852321267783"', b'"1.5"', b'"-2"', b'"1e3"', b"7", b'" 5"', b'"5 "', b'"x"', b'""', b'"\\u0035"']
    ns, status = times_ns(texts)
    assert ns.tolist()[:5] == [852321267783000, 1500, -2000, 1_000_000, 7000]
    assert status.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]  # NUMBER for the first five, NOT_A_NUMBER after
    assert times_ns([b'"99999999999999999999"'])[1].tolist() == [2]  # a number past int64 is said so, quoted or not


def _rocprof_v1(ts_us: int, dur_us: int, begin_ns: int, end_ns: int, name: str, pid: str, tid: str) -> dict:
    """An event as rocprof v1 (tblextr.py) writes it: no category, every number as text, exact ns in args."""
    args = {"BeginNs": str(begin_ns), "EndNs": str(end_ns), "Name": name, "DurationNs": str(end_ns - begin_ns)}
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": str(ts_us), "dur": str(dur_us), "args": args}


ROCPROF_V1 = [
    {"args": {"name": "CPU HIP API"}, "ph": "M", "pid": 2, "name": "process_name"},
    # ts is BeginNs cut to whole us, dur (EndNs - BeginNs) cut likewise: the args keep the exact ns
    _rocprof_v1(773900799393, 1, 773900799393845, 773900799395095, "hipGetDeviceCount", "2", "517"),
    _rocprof_v1(773902406290, 9, 773902406290100, 773902406299500, "hipLaunchKernel", "2", "517"),
    _rocprof_v1(773902406300, 5, 773902406300661, 773902406305941, "elementwise_kernel", "8", "1"),
]


def test_rocprof_v1_times_are_its_exact_ns_and_its_numbers_text(tmp_path, tiny_pieces):
    """A rocprof v1 `--hip-trace` JSON: `ts`, `dur`, `pid`, `tid` as decimal text (all its events were dropped as
    non-numeric, and probe exited 2). Where args hold BeginNs and EndNs (the same clock as ts, in ns) they are the
    times; elsewhere the text of ts and dur. Read in tiny pieces, so typed and untyped pieces meet."""
    text_only = {"ph": "X", "cat": "cpu_op", "name": "text", "pid": "2", "tid": "517", "ts": "773902406400", "dur": "2"}
    bad = [
        _rocprof_v1(773902406500, 1, -5, 10, "hipSetDevice", "2", "517"),  # BeginNs not a time: ts and dur it is
        {**text_only, "ts": "soon"},
    ]
    events = ROCPROF_V1 + [x(f"op{i}", 773902407000.0 + i, 0.5) for i in range(20)] + [text_only, *bad]
    trace = load_trace(write_trace(tmp_path / "rocprof.json", events))
    rows = {trace.name(i): i for i in range(len(trace)) if not trace.name(i).startswith("op")}
    assert set(rows) == {"hipGetDeviceCount", "hipLaunchKernel", "elementwise_kernel", "text", "hipSetDevice"}
    read = {n: (trace.ts_ns[i], trace.dur_ns[i], trace.pid[i], trace.tid[i]) for n, i in rows.items()}
    assert read["hipGetDeviceCount"] == (773900799393845, 1250, 2, 517)
    assert read["elementwise_kernel"] == (773902406300661, 5280, 8, 1)
    assert read["text"] == (773902406400000, 2000, 2, 517)  # numbers as text, no args: exact from the text
    assert read["hipSetDevice"] == (773902406500000, 1000, 2, 517)
    assert trace.dropped == {"missing or non-numeric ts": 1}
    assert len(trace) == 5 + 20


def test_events_without_a_category_are_said_and_api_calls_read_by_name(tmp_path):
    """A driver tracer (eBPF on libcuda) writes its calls with no `cat`: they were dropped into 'other' without a
    word, and the trace read as CPU only. A CUDA or HIP API name makes such an event a runtime call; what is left
    is named, with counts, in one line. An event with a category is never read by its name."""

    def bare(name: str, ts: float) -> dict:
        return {"ph": "X", "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": 1.0}

    events = [bare("cuStreamSynchronize", 10.0 * i) for i in range(3)] + [
        bare("cuLaunchKernel", 40.0),
        bare("__hipPushCallConfiguration", 45.0),
        bare("cudnn_conv_kernel", 50.0),  # a kernel-like name: not a call
        bare("my_step", 60.0),
        bare("my_step", 70.0),
        x("cudaMalloc", 80.0, 1.0, cat="cpu_op"),  # a category: its kind, whatever its name
        x("cuLaunchKernel", 90.0, 1.0, cat="gcu_runtime"),  # an unknown category stays other
    ]
    trace = load_trace(write_trace(tmp_path / "ebpf.json", events))
    kinds = {(trace.name(i), Kind(trace.kind[i]).label) for i in range(len(trace))}
    assert kinds == {
        ("cuStreamSynchronize", "runtime"),
        ("cuLaunchKernel", "runtime"),
        ("__hipPushCallConfiguration", "runtime"),
        ("cudnn_conv_kernel", "other"),
        ("my_step", "other"),
        ("cudaMalloc", "cpu_op"),
        ("cuLaunchKernel", "other"),
    }
    calls, rest = (w for w in trace.warnings if "no category" in w)
    assert calls == (
        "5 event(s) with no category read as CUDA/HIP API calls by their names: cuStreamSynchronize (3), "
        "cuLaunchKernel (1), __hipPushCallConfiguration (1)"
    )
    assert rest.startswith("3 event(s) with no category, kept as 'other'") and rest.endswith(
        ": my_step (2), cudnn_conv_kernel (1)"
    )
    from probe.analysis.ledger.build import analyze

    assert analyze(trace).totals.launches == 1  # the launch counts, so the trace is no longer CPU only
    categorized = load_trace(write_trace(tmp_path / "t.json", [x("a", 1.0, 1.0), x("cuLaunchKernel", 2.0, 1.0)]))
    assert not any("no category" in w for w in categorized.warnings)


# --- rocprof v1's GPU side: processes named by metadata, launches joined by flow arrows ------------------------

T_US = 773902000000  # rocprof v1's clock, in us


def _rocprof_op(begin_ns: int, end_ns: int, name: str, pid: str, tid: str, exact: bool) -> dict:
    """An event as `_rocprof_v1` writes it; without `exact`, no BeginNs / EndNs (so its piece is read typed)."""
    event = _rocprof_v1(begin_ns // 1000, (end_ns - begin_ns) // 1000, begin_ns, end_ns, name, pid, tid)
    if not exact:
        event["args"] = {"Name": name}
    return event


def _flow(ph: str, ident: int, pid: int, tid: int, ts_us: int) -> dict:
    return {"ts": ts_us, "ph": ph, "cat": "DataFlow", "id": ident, "pid": pid, "tid": tid, "name": "dep"}


def _rocprof_hip_trace(exact: bool, names_last: bool = False) -> list[dict]:
    """A rocprof v1 `--hip-trace` of a copy in, a kernel and a copy out, as tblextr.py writes it: process_name
    metadata names its sides (the HIP calls' process, the copy engine, one process an HSA agent), no event has a
    category, and only flow arrows say which HIP call made which GPU op: an `s` at the call, a `t` on the op's
    process and stream, both at whole us (the ops' exact starts, in BeginNs, lie up to 1 us after)."""
    t = T_US * 1000
    names = [
        {"args": {"name": side}, "ph": "M", "pid": pid, "name": "process_name", "sort_index": i}
        for i, (pid, side) in enumerate([(2, "CPU HIP API"), (1, "COPY"), (6, "GPU0"), (8, "GPU2")])
    ]
    events = [
        _rocprof_op(t + 1_100, t + 1_900, "hipGetDevice", "2", "517", exact),  # no flow: no GPU op
        _rocprof_op(t + 10_250, t + 40_500, "hipMemcpyWithStream", "2", "517", exact),
        _rocprof_op(t + 20_126, t + 28_606, "CopyHostToDevice", "1", "1", exact),
        _rocprof_op(t + 50_930, t + 60_136, "hipLaunchKernel", "2", "517", exact),
        _rocprof_op(t + 70_661, t + 75_941, "elementwise_kernel", "8", "1", exact),
        _rocprof_op(t + 80_739, t + 90_139, "hipMemcpyWithStream", "2", "517", exact),
        _rocprof_op(t + 81_142, t + 85_423, "CopyDeviceToHost", "1", "1", exact),
        {**_rocprof_op(t + 95_000, t + 96_000, "gpu_marker", "8", "1", exact), "cat": "marker"},  # a category
        _rocprof_op(t + 97_000, t + 98_000, "my_range", "2", "517", exact),  # no category, no GPU side
        _flow("s", 0, 2, 517, T_US + 15),
        _flow("t", 0, 1, 1, T_US + 20),
        _flow("s", 7, 2, 517, T_US + 51),
        _flow("t", 7, 8, 1, T_US + 70),
        _flow("s", 2, 2, 517, T_US + 81),
        _flow("t", 2, 1, 1, T_US + 81),
        _flow("s", 3, 2, 517, T_US + 1),  # its end lies on no GPU op: joins nothing
        _flow("t", 3, 8, 1, T_US + 200),
        _flow("t", 4, 8, 1, T_US + 95),  # an end with no start
    ]
    return events + names if names_last else names + events


@pytest.fixture
def reads_kept_flows(monkeypatch) -> list[bool]:
    """Each chrome read of a test, by whether its typed decode kept flow arrows."""
    from probe.analysis.trace import chrome

    seen: list[bool] = []
    real = chrome._read

    def counted(source, typed):
        seen.append(typed.keeps_flows)
        return real(source, typed)

    monkeypatch.setattr(chrome, "_read", counted)
    return seen


@pytest.mark.parametrize(
    "layout, reads",
    [
        ("exact ns", [False]),  # its pieces hold BeginNs: read untyped, which reads every arrow
        ("typed, names first", [False]),  # a process named as a GPU side keeps the arrows of the pieces after it
        ("typed, names last", [False, True]),  # the fast decode skipped arrows the joins need: read again
    ],
)
def test_rocprof_v1_gpu_ops_are_read_by_their_process_and_joined_by_flows(
    tmp_path, tiny_pieces, reads_kept_flows, layout, reads
):
    """rocprof v1's kernels and copies have no category: they were kept as 'other', and its one launch read as
    'none of its launch calls has a GPU op ... torch.profiler without ProfilerActivity.CUDA'. An event with no
    category on a process named `GPU<n>` is a kernel, on one named `COPY` a copy (its direction its name's); an
    event with a category is never read by its process. A flow arrow's `s` binds to the HIP call enclosing it, its
    `t` to the GPU op on its stream enclosing it or starting within the microsecond after it, and both take one
    new correlation id."""
    exact = layout == "exact ns"
    path = write_trace(tmp_path / "rocprof.json", _rocprof_hip_trace(exact, names_last=layout.endswith("last")))
    trace = load_trace(path)
    assert reads_kept_flows == reads
    row = {}
    for i in range(len(trace)):
        row.setdefault(trace.name(i), []).append(i)
    kind = {name: {Kind(trace.kind[i]).label for i in rows} for name, rows in row.items()}
    assert kind == {
        "hipGetDevice": {"runtime"},
        "hipMemcpyWithStream": {"runtime"},
        "hipLaunchKernel": {"runtime"},
        "CopyHostToDevice": {"gpu_memcpy"},
        "CopyDeviceToHost": {"gpu_memcpy"},
        "elementwise_kernel": {"kernel"},
        "gpu_marker": {"other"},  # a category: its own kind, whatever process it sits in
        "my_range": {"other"},
    }
    (h2d,), (kernel,), (d2h,) = row["CopyHostToDevice"], row["elementwise_kernel"], row["CopyDeviceToHost"]
    copy_in, copy_out = row["hipMemcpyWithStream"]
    (launch,) = row["hipLaunchKernel"]
    assert [COPY_KINDS[trace.copy_kind[i]] for i in (h2d, d2h)] == ["HtoD", "DtoH"]
    assert trace.bytes[h2d] == -1  # rocprof v1 does not say
    assert trace.stream[[h2d, kernel, d2h]].tolist() == [1, 1, 1]  # the op's tid, where its arrow ends
    pairs = [(copy_in, h2d), (launch, kernel), (copy_out, d2h)]
    assert all(trace.correlation[a] == trace.correlation[b] >= 0 for a, b in pairs)
    assert len({trace.correlation[a] for a, _ in pairs}) == 3
    assert trace.correlation[row["hipGetDevice"] + row["gpu_marker"] + row["my_range"]].tolist() == [-1, -1, -1]
    assert trace.launch_kind[launch] == LAUNCH and trace.format == "chrome"
    assert "3 GPU op(s) with no correlation id joined to 3 runtime call(s) by flow events" in trace.warnings
    assert any("1 in 'GPU2' as kernels" in w and "2 in 'COPY' as GPU copies" in w for w in trace.warnings)
    from probe.analysis.ledger.build import analyze

    analysis = analyze(trace)
    (step,) = analysis.steps
    assert (analysis.totals.kernels, analysis.totals.gpu_ops, analysis.totals.launches) == (1, 3, 1)
    assert step.launches_unmatched == 0 and analysis.totals.unattributed_gpu_ops == 0
    assert not any("ProfilerActivity" in w for w in analysis.warnings)


@pytest.mark.parametrize("exact", [True, False])
def test_rocprof_v1_gpu_ops_are_on_the_device_their_args_name(tmp_path, tiny_pieces, exact):
    """rocprof v1 puts a kernel on its HSA agent's process (pid 8 for `GPU2`) and a copy on the copy engine's (pid
    1), and names the device in args `dev-id`: the device column was the pid, so one device's work read as on
    devices 8 and 1. A GPU op whose args name its device is on it; one whose args do not (the typed read: no
    BeginNs) on its pid, as before. The stream stays the tid, where its flow arrow ends (rocprof's stream-id)."""
    events = _rocprof_hip_trace(exact)
    for e in events:
        if e.get("ph") == "X" and e["pid"] in ("1", "8") and exact:
            e["args"].update({"dev-id": "2", "queue-id": "0", "stream-id": "1"})
    dropped = {**_rocprof_op(T_US * 1000 + 70_000, T_US * 1000 + 70_500, "dropped", "8", "1", exact), "ts": "x"}
    dropped["args"].update({"dev-id": "5", "BeginNs": "x"})  # no time: its row is dropped, and its device with it
    at = next(i for i, e in enumerate(events) if e.get("name") == "elementwise_kernel")
    events.insert(at, dropped)
    trace = load_trace(write_trace(tmp_path / "rocprof.json", events))
    on = {trace.name(i): (int(trace.device[i]), int(trace.stream[i])) for i in range(len(trace))}
    kernel, h2d, d2h = (on[n] for n in ("elementwise_kernel", "CopyHostToDevice", "CopyDeviceToHost"))
    assert [kernel, h2d, d2h] == ([(2, 1)] * 3 if exact else [(8, 1), (1, 1), (1, 1)])
    assert on["hipLaunchKernel"] == (-1, -1) and on["gpu_marker"] == (-1, -1)  # not on a stream: no device


def test_flow_arrows_bind_as_the_trace_event_format_says():
    """Each end binds on its own pid and tid: an `s`, a `t` and an `f` with bp "e" to the slice enclosing its ts,
    else one starting within the microsecond after it; an `f` without bp to the next slice, however far. Arrows pair
    by (cat, id), a reused id's end with the last start before it. Only rows with no correlation id are joined; a
    call that launched two ops gives both its one id."""
    from probe.analysis.trace.flows import Flows, link

    rt, k = Kind.RUNTIME, Kind.KERNEL
    rows = [  # (kind, pid, tid, start, end, correlation)
        (rt, 1, 1, 100, 200, -1),  # 0: s at 150
        (k, 0, 7, 150, 160, -1),  # 1: its f (bp e) at 155 lies in it
        (rt, 1, 1, 300, 400, -1),  # 2: s at 350
        (k, 0, 7, 5_000, 5_010, -1),  # 3: its f without bp at 450: the next slice, 4.55 us on
        (rt, 1, 1, 600, 700, -1),  # 4: s of ids 5, 6 and 7
        (k, 0, 8, 2_600, 2_700, -1),  # 5: id 5's t at 2000: it starts 600 ns after, within the us
        (k, 0, 8, 4_100, 4_200, -1),  # 6: id 6's t at 3000: it starts 1.1 us after, and row 5 has ended
        (k, 0, 8, 6_000, 6_100, -1),  # 7: id 5's second t, at 6050: paired with id 5's second s, in no call
        (rt, 1, 1, 800, 900, 5),  # 8: has an id already: its arrow (id 8) joins nothing
        (k, 0, 9, 850, 860, -1),  # 9: that arrow's end
        (k, 0, 9, 950, 960, -1),  # 10: an end (id 9) with no start
        (k, 0, 10, 7_000, 7_100, -1),  # 11: id 7's t: row 4's second op
    ]
    kind = np.array([r[0] for r in rows], np.int8)
    cols = {c: np.array([r[i] for r in rows], np.int64) for i, c in [(1, "pid"), (2, "tid"), (3, "ts_ns")]}
    cols["dur_ns"] = np.array([r[4] - r[3] for r in rows], np.int64)
    cols["correlation"] = np.array([r[5] for r in rows], np.int64)
    arrows = [  # (id, start, next_slice, pid, tid, ts)
        (1, True, False, 1, 1, 150),
        (1, False, False, 0, 7, 155),
        (2, True, False, 1, 1, 350),
        (2, False, True, 0, 7, 450),
        (5, True, False, 1, 1, 650),
        (5, False, False, 0, 8, 2_000),
        (6, True, False, 1, 1, 660),
        (6, False, False, 0, 8, 3_000),
        (5, True, False, 1, 1, 5_500),
        (5, False, False, 0, 8, 6_050),
        (8, True, False, 1, 1, 850),
        (8, False, False, 0, 9, 855),
        (9, False, False, 0, 9, 955),
        (7, True, False, 1, 1, 690),
        (7, False, False, 0, 10, 7_050),
        (7, False, False, 0, 10, 7_060),  # of another category: pairs with nothing
    ]
    types = [np.int64, bool, bool, np.int64, np.int64, np.int64]
    cat = np.array([0] * (len(arrows) - 1) + [1])  # the last one's category is another: it pairs with no start
    flows = Flows(cat, *(np.array([a[i] for a in arrows], t) for i, t in enumerate(types)))
    assert link(kind, cols, flows) == ("4 GPU op(s) with no correlation id joined to 3 runtime call(s) by flow events",)
    # new ids from past the file's largest (5), one a call, in row order
    assert cols["correlation"].tolist() == [6, 6, 7, 7, 8, 8, -1, -1, 5, -1, -1, 8]


def test_a_kineto_trace_reads_once_and_never_binds_its_arrows(tmp_path, reads_kept_flows, monkeypatch):
    """kineto writes each `ac2g` arrow from the args.correlation it writes beside it: the read skips the arrows,
    and never reads them again nor binds them, even where a kernel and a launch lack the id (HTA's MTIA trace has
    such): a torch trace's arrows join nothing its ids do not."""
    from probe.analysis.trace import flows

    monkeypatch.setattr(flows, "_bind", lambda *a: pytest.fail("bound a kineto trace's arrows"))
    trace = load_trace(HAND)
    assert reads_kept_flows == [False] and trace.format == "torch_chrome"
    assert trace.skipped.get("f", 0) > 0  # it has arrows
    unjoined = [
        x("cudaLaunchKernel", 10.0, 5.0, cat="cuda_runtime"),
        x("gemm", 20.0, 5.0, cat="kernel", pid=0, tid=7),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 10.0, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 20.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ]
    reads_kept_flows.clear()
    trace = load_trace(write_trace(tmp_path / "unjoined.json", unjoined))
    assert reads_kept_flows == [False] and trace.correlation.tolist() == [-1, -1]
