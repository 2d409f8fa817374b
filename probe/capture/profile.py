"""Trace capture: one engine, one prompt length, a few decode steps, under torch.profiler or Nsight Systems.

Warmup is never recorded. Traces are written as `<model>_<engine>_<device>_p<P>_n<N>.trace.json.gz` (probe.analysis.
files.trace_stem; a config file's model is named by its model_type and a short hash) with a sidecar `<same
stem>.meta.json` holding the run config and the environment (probe.analysis.records.sidecar.Sidecar). A trace already
there is never replaced unless `force`. The chrome trace is torch's own export, gzipped: Perfetto and
chrome://tracing open it unchanged.

CUDA graphs: a graph captured before the profiler first ran in the process can replay with its kernels missing
from the trace (the GPU would then look idle). `prepare_graph_profiling` initialises the profiler for graphs
before anything is captured (and applies torch's own TEARDOWN_CUPTI rule for graphs, `cupti_teardown`); `probe
profile` and `probe run` call it ahead of every warmup. `self_check` counts the kernels of an eager forward and of a
graph replay before and after as many profiler sessions as a run opens, so a run whose profiler stopped collecting
kernels says so instead of reporting an idle GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.torch_version import TorchVersion

try:
    import nvtx
except ImportError:  # optional: ranges then go through torch.cuda.nvtx where CUDA exists
    nvtx = None


from engines import engine_class
from engines.models import load_model, prompt_ids, resolve_device
from probe.analysis.diagnosis.report import SelfCheck
from probe.analysis.records.environment import Clock
from probe.analysis.records.files import atomic_path, atomic_write, trace_stem
from probe.analysis.records.runfolder import check_writable
from probe.analysis.records.sidecar import EventCost, Sidecar, unpaired_traces
from probe.analysis.records.telemetry import cell_telemetry, contention, decode_windows, write_samples
from probe.analysis.trace import Kind, load_trace
from probe.capture import annotate
from probe.capture.calibrate import event_costs, workload_op_cost
from probe.capture.config import BenchConfig, ProfileConfig, model_name, validate
from probe.capture.env import environment
from probe.capture.loop import generate
from probe.capture.sweep import settle_here
from probe.capture.telemetry.samplers import make_sampler
from probe.errors import ProbeError

NSYS_HINT = (
    "nsys not found: run scripts/install-nsys.sh (Debian's nsight-systems 2022.4, non-free) "
    "and set PROBE_NSYS to the path it prints, or put nsys on PATH"
)


_graphs_ready: set[str] = set()
# Compressing a chrome trace: level 1 takes about 1 s where level 9 takes about 10 (a 165k-event GPU trace) for
# files a third larger; the run's archive (scripts/gpu-run.sh) packs them again anyway.
TRACE_GZIP_LEVEL = 1
# CUDA older than this, with CUDA graphs in the process, breaks under CUPTI's teardown: torch's own threshold
# (torch/__init__.py and torch/profiler/profiler.py: "CUDA Graph does not work well with CUPTI teardown").
CUPTI_TEARDOWN_SAFE_FROM = "12.6"


@functools.cache
def cupti_teardown(cuda_version: str | None) -> str:
    """torch's own rule, applied before the first profiler session: with CUDA graphs in the process and CUDA older
    than 12.6 (or lazy CUPTI re-init not allowed), torch sets TEARDOWN_CUPTI=0, because tearing CUPTI down after a
    session crashes the next re-init (CUDA 11) or the second (CUDA 12). torch applies it only when a compile with
    CUDA graphs is built or a profiler is told of one; a run captures graphs (the static engine) and opens ~38
    sessions, so it applies the same rule at once. Returns what was done and why, for the report."""
    if cuda_version is None:
        return "TEARDOWN_CUPTI: not applicable (no CUDA)"
    if "TEARDOWN_CUPTI" in os.environ:
        return f"TEARDOWN_CUPTI={os.environ['TEARDOWN_CUPTI']} as set before the run: kept"
    # torch's switch for lazy CUPTI re-init under CUDA graphs, the rest of its rule (a torch without it: version only)
    lazy_reinit = getattr(torch._utils_internal, "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12", lambda: True)()
    if TorchVersion(cuda_version) < CUPTI_TEARDOWN_SAFE_FROM or not lazy_reinit:
        os.environ["TEARDOWN_CUPTI"] = "0"
        return (
            f"TEARDOWN_CUPTI=0 set: CUDA {cuda_version} with CUDA graphs, torch's own rule (CUPTI's teardown "
            f"breaks its re-init below CUDA {CUPTI_TEARDOWN_SAFE_FROM})"
        )
    return (
        f"TEARDOWN_CUPTI left unset: CUDA {cuda_version} is at least {CUPTI_TEARDOWN_SAFE_FROM}, where torch keeps "
        "CUPTI's teardown with CUDA graphs; the self-check counts kernels after the run's sessions instead"
    )


def prepare_graph_profiling(device: torch.device) -> bool:
    """Initialise torch.profiler for CUDA graphs once per process, before any graph is captured on `device`:
    the profiler must have run once (`torch.profiler._utils._init_for_cuda_graphs`, in torch since 2.1, which
    torch.profiler leaves to the caller) or kernels replayed from a graph captured earlier can be missing from
    every later trace. Returns whether it acted (only on CUDA, the first time)."""
    if device.type != "cuda" or device.type in _graphs_ready:
        return False
    _graphs_ready.add(device.type)
    cupti_teardown(torch.version.cuda)  # before the first session, which the initialiser opens
    init = getattr(torch.profiler._utils, "_init_for_cuda_graphs", None)
    if init is not None:
        init()
    else:  # the same thing spelled out: start and stop the profiler once
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            pass
    return True


def stem(cfg: ProfileConfig, device: torch.device) -> str:
    """`<model>_<engine>_<device>_p<P>_n<N>`, and `_b<B>` when the run batched B sequences (files.trace_stem)."""
    return trace_stem(
        model_name(cfg.model), engine_class(cfg.engine).name, device.type, cfg.prompt, cfg.new_tokens, cfg.batch
    )


def refuse_existing(out: Path, name: str, suffixes: tuple[str, ...], force: bool) -> list[Path]:
    """The files a capture writes (`name` and each of `suffixes` in `out`), before any work: one already there is
    replaced only with `force`, else a one-line error; and, even with `force`, a trace of the same stem that this
    run does not write and that has no sidecar of its own is a one-line error, since it would take this run's
    sidecar (its costs, clock and contention) as its own."""
    paths = [out / f"{name}{suffix}" for suffix in suffixes]
    if not force and (there := [p for p in paths if p.exists()]):
        raise ProbeError(f"{there[0]} already exists: --force to replace it, or another --out")
    if foreign := unpaired_traces(out, name, paths):
        raise ProbeError(
            f"{foreign[0]}: a trace this run did not write, with no sidecar of its own, would read this run's "
            "sidecar as its own: move it, or choose another --out"
        )
    return paths


@dataclass(frozen=True)
class Capture:
    trace: Path | None  # torch.profiler chrome trace (.trace.json.gz)
    meta: Path
    nsys_rep: Path | None = None
    sqlite: Path | None = None


def _prepare(cfg: ProfileConfig, model=None):
    cfg = settle_here(cfg)
    bench_cfg = BenchConfig(
        engines=(cfg.engine,),
        prompts=(cfg.prompt,),
        new_tokens=cfg.new_tokens,
        runs=1,
        warmup=cfg.warmup,
        batch=(cfg.batch,),
        model=cfg.model,
        dtype=cfg.dtype,
        attn=cfg.attn,
        device=cfg.device,
        seed=cfg.seed,
    )
    classes, device = validate(bench_cfg), resolve_device(cfg.device)
    if cfg.threads:  # as the bench sets them, so the profiled step is the benched one (the sidecar records them)
        torch.set_num_threads(cfg.threads)
    if model is None:
        model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed, cfg.attn)
    engine = classes[cfg.engine](model)
    prompt = prompt_ids(cfg.prompt, cfg.batch, model.config.vocab_size, cfg.seed).to(device)
    return cfg, engine, prompt, device


def _write_meta(path: Path, sidecar: Sidecar) -> None:
    atomic_write(path, json.dumps(sidecar.to_json(), indent=1))


def profile_torch(cfg: ProfileConfig, out: Path, model=None, force: bool = False) -> Capture:
    """Record one generation under torch.profiler (CPU, plus CUDA when available) after `warmup` runs (at least
    one for an engine that compiles its step). `model`, when given, is used instead of loading `cfg.model` again;
    a trace already there is replaced only with `force`."""
    check_writable(out)
    cfg = settle_here(cfg)
    name = stem(cfg, resolve_device(cfg.device))
    refuse_existing(out, name, (".trace.json.gz", ".meta.json", ".telemetry.parquet"), force)  # before the model
    cfg, engine, prompt, device = _prepare(cfg, model)
    prepare_graph_profiling(device)  # before the warmup captures anything
    annotator = annotate.Annotator()
    for _ in range(max(cfg.warmup, 1 if engine.captures_decode else 0)):
        generate(engine, prompt, cfg.new_tokens, annotator)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    clock = Clock(time.perf_counter_ns(), time.time_ns())  # lines the telemetry samples up with the trace
    with make_sampler(10.0, device, torch.get_num_threads()) as sampler:
        with torch.profiler.profile(activities=activities) as prof:
            gen = generate(engine, prompt, cfg.new_tokens, annotator)
    tokens = gen.tokens.shape[0] * (gen.tokens.shape[1] - 1)
    write_samples(sampler.samples, out / f"{name}.telemetry.parquet")
    trace = out / f"{name}.trace.json.gz"
    with tempfile.TemporaryDirectory(dir=out, prefix=".probe-") as tmp, atomic_path(trace) as packed:
        raw = Path(tmp) / "trace.json"  # torch writes its export uncompressed; only the gzip is kept
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=TRACE_GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst)
    meta = out / f"{name}.meta.json"
    windows = decode_windows([gen])
    telemetry = cell_telemetry(sampler.samples, windows, tokens)
    busy = contention(telemetry, windows, os.cpu_count() or 1)  # the rule a bench cell is held to
    if busy.contended:
        print(
            f"probe: WARNING: other processes took {busy.other_cpu_cores:.2f} cores while this trace ran (contended): "
            "its timings are not judged by probe compare or probe history",
            file=sys.stderr,
        )
    details = dict(
        trace=trace.name,
        start_ns=gen.start_ns,
        ttft_ms=gen.ttft_ns / 1e6,
        itl_ms=[s / 1e6 for s in gen.step_ns],
        tokens=gen.tokens.tolist(),
        telemetry=telemetry.to_json(),
        contention=dataclasses.asdict(busy),
    )
    # the event cost after the recorded run, so calibrating cannot warm what the run measured; probe analyze reads it
    env = dataclasses.replace(
        environment(device, cfg.dtype), attn_implementation=engine.model.config._attn_implementation
    )
    _write_meta(
        meta,
        Sidecar(cfg, env, clock, _event_cost(engine, prompt, cfg, annotator, activities), "torch.profiler", details),
    )
    return Capture(trace, meta)


def _event_cost(engine, prompt, cfg: ProfileConfig, annotator, activities: list) -> EventCost:
    """The profiler's cost per range (probe.capture.calibrate's loop) and per op, the latter measured on this
    engine's own generation (`workload_op_cost`), at least the loop's: the loop's op cost misses a model step's
    cache misses."""
    loop = event_costs(prompt.device)

    def once() -> tuple[int, ...]:  # generate synchronizes every step and at its end
        return generate(engine, prompt, cfg.new_tokens, annotator).step_ns

    # at least the loop's: a run preempted while plain reads as a profiler that cost less than in a warm loop
    return EventCost(max(workload_op_cost(once, activities, loop.range_ns), loop.op_ns), loop.range_ns)


def run_annotated(cfg: ProfileConfig) -> None:
    """The process nsys watches: warmup, then one annotated generation (no torch.profiler attached)."""
    cfg, engine, prompt, _ = _prepare(cfg)
    annotator = annotate.Annotator(nvtx=True)  # nsys is attached: this process is the one it launched
    if annotator.push is None:
        raise ProbeError("no NVTX emitter: pip install 'nvtx<0.2.12'")
    for _ in range(max(cfg.warmup, 1 if engine.captures_decode else 0)):
        generate(engine, prompt, cfg.new_tokens, annotate.NULL)
    generate(engine, prompt, cfg.new_tokens, annotator)


def find_nsys() -> str:
    for candidate in (
        os.environ.get("PROBE_NSYS"),
        shutil.which("nsys"),
        str(Path.home() / ".cache/probe/nsys/usr/bin/nsys"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ProbeError(NSYS_HINT)


def _nsys_has(nsys: str, option: str) -> bool:
    out = subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True)
    return option in out.stdout + out.stderr


def check_nvtx_for(nsys: str) -> None:
    """nvtx >= 0.2.12 calls nvtxDomainIsEnabled, which nsys 2022.x lacks: every range would vanish silently."""
    if nvtx is None:
        return
    version = tuple(int(x) for x in re.findall(r"\d+", getattr(nvtx, "__version__", "0"))[:3])
    out = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout
    nsys_year = int(m.group(1)) if (m := re.search(r"version (\d{4})\.", out)) else 9999
    if version >= (0, 2, 12) and nsys_year < 2023:
        raise ProbeError(
            f"nvtx {'.'.join(map(str, version))} records no ranges under nsys {nsys_year}: pip install 'nvtx<0.2.12'"
        )


def profile_nsys(cfg: ProfileConfig, out: Path, force: bool = False) -> Capture:
    """Run the same generation under `nsys profile`; export the report to SQLite next to it. A report already
    there is replaced only with `force`."""
    nsys = find_nsys()
    check_nvtx_for(nsys)
    check_writable(out)
    cfg = settle_here(cfg)
    _validate_one_cell(cfg)
    device = resolve_device(cfg.device)
    base = out / stem(cfg, device)
    # Beside the stem, not in place of a suffix: a model name such as qwen2.5-1.5b holds dots.
    rep, sqlite, meta = refuse_existing(out, base.name, (".nsys-rep", ".sqlite", ".nsys.meta.json"), force)
    cmd = _nsys_command(nsys, cfg, device, base)
    _record_under_nsys(cmd, rep)
    _export_sqlite(nsys, rep, sqlite)
    details = dict(nsys=nsys, nsys_rep=rep.name, sqlite=sqlite.name, command=cmd)
    _write_meta(meta, Sidecar(cfg, environment(device, cfg.dtype), tool="nsys", details=details))
    return Capture(None, meta, rep, sqlite)


def _validate_one_cell(cfg: ProfileConfig) -> None:
    """The configuration checked as the one cell of a bench (its engine, model, dtype and device), before nsys runs."""
    validate(
        BenchConfig(
            engines=(cfg.engine,),
            prompts=(cfg.prompt,),
            new_tokens=cfg.new_tokens,
            model=cfg.model,
            dtype=cfg.dtype,
            device=cfg.device,
        )
    )


def _nsys_command(nsys: str, cfg: ProfileConfig, device: torch.device, base: Path) -> list[str]:
    """`nsys profile` of this configuration's annotated run, its report written to `base`: NVTX and OS runtime
    calls, and CUDA on a CUDA device."""
    traces = "nvtx,osrt" + (",cuda" if device.type == "cuda" else "")
    # Each kernel of a replayed graph as its own event, where this nsys can (2022.4 can): else one per graph.
    graph_nodes = ["--cuda-graph-trace=node"] if device.type == "cuda" and _nsys_has(nsys, "--cuda-graph-trace") else []
    return [
        nsys,
        "profile",
        f"--trace={traces}",
        "--sample=none",
        "--cpuctxsw=none",
        "--force-overwrite=true",
        *graph_nodes,
        "-o",
        str(base),
        *_annotated_run(cfg, device),
    ]


def _annotated_run(cfg: ProfileConfig, device: torch.device) -> list[str]:
    """The command nsys launches: `probe profile --annotated-run` (run_annotated) with this configuration's flags."""
    return [
        sys.executable,
        "-m",
        "probe",
        "profile",
        "--annotated-run",
        "--engine",
        cfg.engine,
        "--prompt",
        str(cfg.prompt),
        "--new-tokens",
        str(cfg.new_tokens),
        "--model",
        cfg.model,
        "--dtype",
        cfg.dtype,
        "--device",
        str(device),
        "--batch",
        str(cfg.batch),
        "--seed",
        str(cfg.seed),
        "--warmup",
        str(cfg.warmup),
    ]


def _record_under_nsys(cmd: list[str], rep: Path) -> None:
    """Run `nsys profile`; a one-line error, with the last line it printed, when it fails or leaves no report."""
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0 or not rep.exists():
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProbeError(f"nsys profile failed (exit {run.returncode}): {tail[0]}")


def _export_sqlite(nsys: str, rep: Path, sqlite: Path) -> None:
    """Export the report to SQLite (what probe analyze reads); a one-line error when the export fails."""
    export = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite), str(rep)],
        capture_output=True,
        text=True,
    )
    if export.returncode != 0 or not sqlite.exists():
        raise ProbeError(f"nsys export failed (exit {export.returncode}): {export.stderr.strip()[:200]}")


SELF_CHECK_DIM = 512  # two matrix products and a relu: three kernels an eager forward, a few milliseconds in all


def _profiled_counts(fn, activities) -> tuple[int, int]:
    """(host aten ops, kernels) one call of `fn` records, counted the way a run's traces are: torch's chrome export
    read by probe's own reader, so the check covers the whole path a trace takes."""
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    with tempfile.TemporaryDirectory(prefix="probe-self-check-") as tmp:
        path = Path(tmp) / "check.trace.json"
        prof.export_chrome_trace(str(path))
        trace = load_trace(path)
    cpu_op = np.asarray(trace.kind) == Kind.CPU_OP
    aten = np.array([trace.names[i].startswith("aten::") for i in trace.name_id], dtype=bool)
    return int(np.count_nonzero(cpu_op & aten)), int(np.count_nonzero(np.asarray(trace.kind) == Kind.KERNEL))


def _captured(x: torch.Tensor, w: torch.Tensor, sync) -> Callable[[], None]:
    """The self-check's forward captured as a CUDA graph (warmed on a side stream first, as capture wants); returns
    its replay."""
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.relu(x @ w) @ w
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        torch.relu(x @ w) @ w

    def replay() -> None:
        graph.replay()
        sync()

    return replay


def self_check(device: torch.device, sessions: int) -> SelfCheck:
    """Before the timed work: an eager forward (and on CUDA a CUDA-graph replay of it) profiled, its ops and kernels
    counted; `sessions` profiler sessions opened, as many as the run opens; then counted again. Kernel collection that
    CUPTI dropped for the process shows as fewer (or no) kernels after."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = device.type == "cuda"
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    x = torch.randn(8, SELF_CHECK_DIM, device=device)
    w = torch.randn(SELF_CHECK_DIM, SELF_CHECK_DIM, device=device)

    def eager() -> None:
        torch.relu(x @ w) @ w
        sync()

    with torch.inference_mode():
        eager()  # warm
        replay = _captured(x, w, sync) if cuda else None
        before = _profiled_counts(eager, activities)
        graph_before = _profiled_counts(replay, activities)[1] if replay else None
        for _ in range(sessions):
            with torch.profiler.profile(activities=activities):
                eager()
        after = _profiled_counts(eager, activities)
        graph_after = _profiled_counts(replay, activities)[1] if replay else None
    if cuda:
        note = (
            f"kernels of an eager forward {before[1]} -> {after[1]}, of a CUDA-graph replay {graph_before} -> "
            f"{graph_after}, after {sessions} profiler sessions"
        )
    else:
        skipped = f"CUDA part skipped: no CUDA device ({device})"
        note = f"{skipped}; host ops {before[0]} -> {after[0]} after {sessions} sessions"
    return SelfCheck(
        device=str(device),
        sessions=sessions,
        cpu_ops_before=before[0],
        cpu_ops_after=after[0],
        eager_kernels_before=before[1] if cuda else None,
        eager_kernels_after=after[1] if cuda else None,
        graph_kernels_before=graph_before,
        graph_kernels_after=graph_after,
        teardown_cupti=cupti_teardown(torch.version.cuda if cuda else None),
        note=note,
    )
