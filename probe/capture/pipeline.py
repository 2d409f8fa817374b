"""`probe run` as a library call: `run_job(cfg, out, options) -> RunOutcome`.

The job, in order, each part written to the run folder as it finishes (results by the sweep, report.json and
report.md after every later part), so an exception in one part leaves everything measured before it:

1. the profiler self-check (`profile.self_check`): kernels counted before and after as many sessions as the run opens;
2. the sweep (`sweep`), then the next sweeps that test the write-ups' closing predictions (a static step and B
   sequences per forward at the shortest prompt), each in its own `next-<engine>/` folder;
3. the machine: the floor, a cached step piece by piece, the copy bandwidth (`machine.measure_machine`);
4. one profiled trace per engine (the batched one at B = PROFILE_BATCH, its name and column saying so), reduced to
   its median step, with what its ledger warned; an Nsight Systems trace too where nsys is installed;
5. the predictions (a captured engine from its own host cost), the verdicts and the write-ups' hand figures.

A part that raises is named in the report with its error and the rest goes on; it, and a GPU trace whose launches
hold no kernel, make the outcome's exit code 1. `watch` is how a caller follows along (a line a phase, a bar or a
line a cell); the command prints the tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engines import engine_class
from engines.models import load_model, resolve_device
from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.predictions import (
    HostCost,
    batching_verdict,
    captured_host_cost,
    check_sides,
    host_overhead_verdict,
    predictions,
    what_if_checks,
)
from probe.analysis.diagnosis.report import Figure, Report, engine_label, hand_figures, step_counts
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.median import median_step
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.records.files import atomic_write
from probe.analysis.records.results import RESULTS_FILE, BenchResults, load_results
from probe.analysis.records.runfolder import REPORT_FILE, REPORT_MD, claim
from probe.analysis.records.sidecar import read_sidecar
from probe.analysis.roofline.formulas import arch_for
from probe.analysis.trace import load_trace
from probe.capture.ab import interleaved_steps
from probe.capture.calibrate import CALIBRATION_REPS
from probe.capture.config import BenchConfig, ProfileConfig, settle, validate
from probe.capture.machine import choose_threads, compiled_entry_ms, measure_machine
from probe.capture.profile import find_nsys, prepare_graph_profiling, profile_nsys, profile_torch, self_check
from probe.capture.sweep import (
    bench,
    cell_count,
    check_writable,
    mismatches,
    precheck_resume,
    runs_per_cell,
    settle_here,
)
from probe.errors import ProbeError, first_line
from probe.render.markdown import report_markdown

NEXT_BATCHES = (1, 2, 4, 8)  # Part 2's prediction: B sequences per forward
PROFILE_BATCH = 4  # the batched engine's profiled trace
PROFILE_NEW_TOKENS = 9  # the full run's profiled traces: 8 decode steps (--quick profiles at the sweep's own length)
# --quick's Nsight Systems traces. On a GPU only the static engine's: nsys sees each replayed kernel of a graph
# whether or not torch.profiler does, which is the check that matters there, and each nsys trace is a fresh
# process (and for static a fresh compile), the most expensive part of the GPU budget (docs/gpu/README.md).
QUICK_NSYS_GPU = ("static",)

ProgressFn = Callable[[str, int], None]


def _no_bar(total: int, cells: bool) -> AbstractContextManager:
    return contextlib.nullcontext(lambda *a: None)


@dataclass
class Watch:
    """How a caller follows a run. `phase(text)` as each part begins; `cells(total)` as a sweep of `total` cells
    starts; `bar(total, cells)` a context manager giving the sweep's progress callback (runs: `(description,
    advance)`; cells, on Ray: `(done, running, failed)`); `cell(results, total)` after every finished cell; `note(text)`
    what the run decided, which a terminal shows too."""

    phase: Callable[[str], None] = lambda text: None
    cells: Callable[[int], None] = lambda total: None
    bar: Callable[[int, bool], AbstractContextManager] = _no_bar
    cell: Callable[[BenchResults, int], None] = lambda results, total: None
    note: Callable[[str], None] = lambda text: None  # what the run decided for the user (its threads): always said


@dataclass(frozen=True)
class RunOptions:
    quick: bool = False
    next_sweeps: bool = True  # the static and batched sweeps of the write-ups' closing predictions
    nsys: bool = True  # --quick: Nsight Systems traces where nsys is installed
    resume: bool = False
    force: bool = False
    executor: str = "local"
    address: str | None = None
    resume_command: str | None = None  # the command line that finishes this run (--out of its folder, --resume)


@dataclass
class RunOutcome:
    """What `run_job` measured and wrote. `code`: 0, or 1 when a cell failed or mismatched, a part failed, or a GPU
    trace lost its kernels. `errors` and `warnings`: one line each, for stderr."""

    out: Path
    results: BenchResults  # the main sweep
    next_results: dict[str, BenchResults]  # engine -> its next sweep
    combined: BenchResults
    report: Report
    figures: list[Figure]
    code: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def sweep_problems(cfg: BenchConfig, results: BenchResults) -> tuple[list[str], list[str]]:
    """(warnings, errors) of a finished sweep, one line each: contended cells; failed cells; token mismatches
    (unless allowed). Errors make the exit code 1."""
    warnings, errors = [], []
    if results.contention:
        warnings.append(results.contention)
    if results.failed:
        names = "; ".join(f"{f.label} on {f.host}: {f.error}" for f in results.failed[:3])
        names += "; ..." if len(results.failed) > 3 else ""
        errors.append(f"{len(results.failed)} of {cell_count(cfg)} cells failed: {names}")
    bad = mismatches(results)
    if bad and not cfg.allow_mismatch:
        names = ", ".join(c.label for c in bad)
        errors.append(f"tokens differ from naive for {names} (use --allow-mismatch to accept)")
    return warnings, errors


def sweep(
    cfg: BenchConfig,
    out: Path | None,
    watch: Watch | None = None,
    model=None,
    resume: bool = False,
    executor: str = "local",
    address: str | None = None,
) -> BenchResults:
    """Run a sweep (on `model` when given, built from cfg's model and dtype; here or on Ray), saving each finished
    cell into `out`. Bad input fails before Ray starts or a model loads."""
    watch = watch or Watch()
    if executor == "local":
        cfg = settle_here(cfg)
    validate(settle_here(cfg))
    if out is not None:
        check_writable(out)
        if resume and executor == "local":  # on Ray, "auto" is settled by the cluster's devices: checked there
            precheck_resume(cfg, out)
    total = cell_count(cfg)
    watch.cells(total)

    def on_cell(results: BenchResults) -> None:
        watch.cell(results, total)

    if executor == "ray":
        from probe.capture.raysweep import bench_on_ray  # Ray: an optional dependency, imported where it is used

        with watch.bar(total, True) as bar:
            return bench_on_ray(cfg, out, address, bar, on_cell=on_cell, resume=resume)
    runs = total * runs_per_cell(cfg, resolve_device(cfg.device))
    with watch.bar(runs, False) as bar:
        return bench(cfg, out, progress=bar, on_cell=on_cell, model=model, resume=resume)


def next_configs(cfg: BenchConfig) -> list[BenchConfig]:
    """The write-ups' closing predictions: a static (captured) step at the shortest prompt unless the sweep has
    one, and B sequences per forward there."""
    short = min(cfg.prompts)
    nxt = [] if "static" in cfg.engines else [dataclasses.replace(cfg, engines=("static",), prompts=(short,))]
    nxt.append(dataclasses.replace(cfg, engines=("batched",), prompts=(short,), batch=NEXT_BATCHES, naive_prompts=()))
    return nxt


def profiled_engines(cfg: BenchConfig, options: RunOptions) -> list[str]:
    return list(cfg.engines) + (["batched"] if options.quick and options.next_sweeps else [])


def sessions_in_run(traces: int) -> int:
    """The torch.profiler sessions a run opens after the self-check: the graph initialiser's, the calibration's (two
    kinds of event, each a counting session and CALIBRATION_REPS timed ones), the machine's two (the floor's launches
    on a GPU, the profiled cached step), and one a trace."""
    return 1 + 2 * (1 + CALIBRATION_REPS) + 2 + traces


def write_report(out: Path, combined: BenchResults, report: Report, prompt: int) -> list[Figure]:
    """report.json and report.md as the run stands; returns the hand figures report.md shows."""
    figures = hand_figures(combined, report, prompt)
    atomic_write(out / REPORT_FILE, json.dumps(report.to_json(), indent=1))
    atomic_write(out / REPORT_MD, report_markdown(combined, report, figures))
    return figures


@contextlib.contextmanager
def _part(report: Report, name: str) -> Iterator[None]:
    """A part of the run: an exception in it is named in the report with its error, and the run goes on."""
    try:
        yield
    except Exception as e:  # any failure of one part must leave the others' measurements
        report.failed[name] = first_line(e, with_type=True)


def _profile_one(cfg: BenchConfig, folder: Path, model, engine: str, new_tokens: int, nsys: bool, report: Report):
    """One engine's profiled trace into the report: its median step, its counts, what its ledger warned; and its
    Nsight Systems trace when asked (a second opinion: a missing or failing nsys is a note, never fatal)."""
    batch = PROFILE_BATCH if engine == "batched" else 1
    label = engine_label(engine, batch)
    pcfg = ProfileConfig(
        engine=engine,
        prompt=min(cfg.prompts),
        new_tokens=new_tokens,
        model=cfg.model,
        dtype=cfg.dtype,
        device=cfg.device,
        batch=batch,
        seed=cfg.seed,
    )
    trace = profile_torch(pcfg, folder, model, force=True).trace  # the run's folder, claimed: its own traces
    if trace is None:
        raise ProbeError(f"torch.profiler wrote no trace of {label}")
    events, meta = load_trace(trace), read_sidecar(trace)
    # with the profiler's cost per event, so the diagnosis and its what-ifs price the unprofiled step (issue 32)
    analysis = analyze(events, AnalyzeOptions(event_cost=meta.event_cost if meta else None))
    report.ledgers[label] = median_step(analysis)
    contended = meta.contended_caveat if meta else None
    entry = report.overhead.compiled_entry_ms if report.overhead else None
    context = dataclasses.replace(
        Context.of(events, contended=contended, analysis=analysis),
        threads=meta.threads if meta else None,
        compiled_entry_ns=entry * 1e6 if entry is not None else None,
    )
    if (median := diagnose_trace(analysis, context).median) is not None:
        report.diagnoses[label] = median
    report.steps[label] = step_counts(engine, analysis, trace.name, batch=batch)
    report.warnings += [f"{trace.name}: {w}" for w in analysis.warnings]
    if not nsys:
        return
    try:
        sqlite = profile_nsys(pcfg, folder, force=True).sqlite
        if sqlite is None:
            raise ProbeError("nsys wrote no SQLite export")
    except ProbeError as e:
        report.notes.append(f"nsys trace of {label} not taken: {e}")
        return
    nsys_analysis = analyze(load_trace(sqlite))
    report.steps[f"{label} (nsys)"] = step_counts(engine, nsys_analysis, sqlite.name, "nsys", batch)
    report.warnings += [f"{sqlite.name}: {w}" for w in nsys_analysis.warnings]


def _nsys_plan(options: RunOptions, device: torch.device, engines: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """(the engines to trace under Nsight Systems, notes): --quick's, where nsys is installed."""
    if not (options.quick and options.nsys):
        return (), []
    try:
        find_nsys()
    except ProbeError as e:
        return (), [f"no Nsight Systems traces: {e}"]
    return (QUICK_NSYS_GPU if device.type == "cuda" else tuple(engines)), []


class _Job:
    """The run as it stands: the cells measured so far, the parts done, and report.json / report.md written from them
    after every cell and every part, each time with every answer those allow and what is still missing."""

    def __init__(self, cfg: BenchConfig, out: Path, options: RunOptions, device: torch.device, report: Report):
        self.cfg, self.out, self.options, self.device, self.report = cfg, out, options, device, report
        self.results: BenchResults | None = None  # the main sweep, as far as it went
        self.nxt: dict[str, BenchResults] = {}  # engine -> its next sweep, as far as it went
        self.profiles: list[str] = []  # the engines whose profiled trace was taken (or failed)
        self.engines = profiled_engines(cfg, options)
        self.machine_done = False
        self.figures: list[Figure] = []

    @property
    def next_cfgs(self) -> dict[str, BenchConfig]:
        """engine -> the configuration of its next sweep (the write-ups' closing predictions), when run."""
        return {c.engines[0]: c for c in next_configs(self.cfg)} if self.options.next_sweeps else {}

    @property
    def combined(self) -> BenchResults | None:
        return None if self.results is None else self.results.combined(list(self.nxt.values()))

    def on_cell(self, engine: str | None, results: BenchResults) -> None:
        """After each cell of the main sweep (`engine` None) or of `engine`'s next sweep."""
        if engine is None:
            self.results = results
        else:
            self.nxt[engine] = results
        self.write()

    def write(self, status: str = "running") -> None:
        """report.json and report.md from what has been measured; nothing before the first cell."""
        combined = self.combined
        if combined is None:
            return
        self.report.status, self.report.missing = status, self.missing()
        self.report.resume = self.options.resume_command if status != "complete" else None
        with _part(self.report, "predictions"):
            self._answers(combined)
            self.report.failed.pop("predictions", None)
        self.figures = write_report(self.out, combined, self.report, min(self.cfg.prompts))

    def _answers(self, combined: BenchResults) -> None:
        """Every answer the cells and parts so far allow: the predictions (with the machine), the write-ups' two
        verdicts, the diagnosis's what-ifs against the cells."""
        report, arch = self.report, arch_for(self.cfg.model)
        if report.machine is not None and self.results is not None:
            costs = _captured_costs(combined, self.device, report)
            report.predictions = predictions(self.results, arch, report.machine, costs)
        report.verdicts = [host_overhead_verdict(combined), batching_verdict(combined, arch, report.machine)]

    def missing(self) -> list[str]:
        """What this run has not measured yet, one line each, with what it leaves unanswered."""
        out = []
        sweeps = [(f"the sweep ({', '.join(self.cfg.engines)})", self.cfg, self.results)]
        sweeps += [(f"the next sweep of {name}", c, self.nxt.get(name)) for name, c in self.next_cfgs.items()]
        for name, c, results in sweeps:
            if (left := _cells_left(c, results)) and len(left) == cell_count(c):
                out.append(f"{name}: not run")
            elif left:
                out.append(f"{name}: {len(left)} of {cell_count(c)} cells not measured ({', '.join(left)})")
        if not self.machine_done:
            out.append("the machine (floor, bandwidth): not measured, so no step is predicted")
        if todo := [e for e in self.engines if e not in self.profiles]:
            out.append(f"the profiled traces of {', '.join(todo)}: not taken, so no step diagnosis for them")
        return out


def _cells_left(cfg: BenchConfig, results: BenchResults | None) -> list[str]:
    """The cells of `cfg`'s sweep that `results` does not hold (a failed cell counts as measured)."""
    done = {
        (c.engine, c.prompt_tokens, c.batch)
        for c in [*(results.cells if results else ()), *(results.failed if results else ())]
    }
    return [
        f"{e} p{p}" + (f" B={b}" if len(cfg.batch) > 1 else "")
        for p in sorted(cfg.prompts)
        for b in sorted(cfg.batch)
        for e in cfg.engines
        if cfg.times(e, p) and (e, p, b) not in done
    ]


def _sweeps(job: _Job, watch: Watch, model) -> tuple[list[str], list[str]]:
    """The main sweep and the next sweeps, in one Ray session when on Ray, into `job` cell by cell: (warnings,
    errors)."""
    cfg, options, out = job.cfg, job.options, job.out
    on = dict(model=model, resume=options.resume, executor=options.executor, address=options.address)
    ray: AbstractContextManager = contextlib.nullcontext()
    if options.executor != "local":  # one Ray session for every sweep of the run, not one each
        from probe.cluster import session  # Ray: an optional dependency, imported where it is used

        ray = session(options.address)

    def following(engine: str | None) -> Watch:
        def cell(results: BenchResults, total: int) -> None:
            watch.cell(results, total)
            job.on_cell(engine, results)

        return dataclasses.replace(watch, cell=cell)

    with ray:
        watch.phase(f"sweep: {cell_count(cfg)} cells of {', '.join(cfg.engines)}")
        job.results = sweep(cfg, out, following(None), **on)
        warnings, errors = sweep_problems(cfg, job.results)
        for name, c in job.next_cfgs.items():
            watch.phase(f"next sweep: {name}, {cell_count(c)} cells")
            job.nxt[name] = sweep(c, out / f"next-{name}", following(name), **on)
            more = sweep_problems(c, job.nxt[name])
            warnings, errors = warnings + more[0], errors + more[1]
    return warnings, errors


def _chooses_threads(job: _Job) -> bool:
    """A local CPU run whose threads the user left to probe (--threads 0)."""
    return job.device.type == "cpu" and not job.cfg.threads and job.options.executor == "local"


def _threads(job: _Job, model, watch: Watch) -> BenchConfig:
    """`job`'s configuration with the intra-op threads it runs at, when it chooses them: those the folder's cells ran
    with when resuming, else the count the floor runs fastest at (probe.capture.machine.choose_threads), said as the
    run starts and recorded in the report."""
    if not _chooses_threads(job):
        return job.cfg
    if job.options.resume and (held := _held_threads(job.out)) is not None:
        watch.note(f"threads: {held}, as the cells already in the folder ran")
        return dataclasses.replace(job.cfg, threads=held)
    watch.phase("threads: timing the floor at each thread count")
    job.report.threads = choose_threads(model)
    watch.note(f"threads: {job.report.threads.reason}")
    return dataclasses.replace(job.cfg, threads=job.report.threads.threads)


def _held_threads(out: Path) -> int | None:
    """The threads the cells `out` already holds ran with (None: no results there yet)."""
    if not (out / RESULTS_FILE).is_file():
        return None
    return load_results(out).config.threads or None


def run_job(cfg: BenchConfig, out: Path, options: RunOptions = RunOptions(), watch: Watch | None = None) -> RunOutcome:
    """The whole `probe run` (the module's docstring). `cfg` holds the defaults and the user's flags, unsettled. An
    interrupt or a failure anywhere leaves report.json and report.md holding what the finished cells allow, the
    parts still missing and the command that finishes the run, and is raised again."""
    watch = watch or Watch()
    start = time.perf_counter()
    device = resolve_device(cfg.device)
    cfg = settle(cfg, device.type)
    prepare_graph_profiling(device)  # before the first CUDA graph is captured in this process
    claim(out, resume=options.resume, force=options.force)
    report = Report(None, [], [])
    job = _Job(cfg, out, options, device, report)
    try:
        warnings, errors = _measure(job, watch)
    except BaseException as e:  # an interrupt, a failure: what was measured still answers
        job.write("interrupted" if isinstance(e, KeyboardInterrupt | SystemExit) else f"failed: {first_line(e)}")
        raise
    job.write("complete")
    errors += [f"{part} failed: {error}" for part, error in report.failed.items()]
    if lost := report.lost_kernels:
        errors.append(
            f"kernels lost in {', '.join(lost)}: the GPU trace holds launches and no kernels, so its GPU figures "
            "would read as zeros (report.md, Warnings and the profiler self-check)"
        )
    code = 1 if errors else 0
    seconds = time.perf_counter() - start
    assert job.results is not None and (combined := job.combined) is not None  # set by the sweep
    return RunOutcome(
        out, job.results, job.nxt, combined, report, job.figures, code, errors, warnings + report.warnings, seconds
    )


def _measure(job: _Job, watch: Watch) -> tuple[list[str], list[str]]:
    """Every part of the run in order, `job` written after each: (warnings, errors) of the sweeps."""
    cfg, options, device, report, out = job.cfg, job.options, job.device, job.report, job.out
    nsys_engines, report.notes = _nsys_plan(options, device, job.engines)
    watch.phase(f"profiler self-check on {device}")
    with _part(report, "profiler self-check"):
        report.self_check = self_check(device, sessions_in_run(len(job.engines)))
    # One model for every part (--quick): a compiled step is guarded on the model it was compiled for.
    shared = options.quick and options.executor == "local"
    model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed) if shared or _chooses_threads(job) else None
    job.cfg = cfg = _threads(job, model, watch)
    warnings, errors = _sweeps(job, watch, model if shared else None)
    assert job.results is not None  # the main sweep ran
    device_name = job.results.env.device_name or str(device)
    job.write()
    model = model or load_model(cfg.model, cfg.dtype, str(device), cfg.seed)
    watch.phase("machine: the floor, a cached step piece by piece, the copy bandwidth")
    with _part(report, "machine"):
        report.machine, report.overhead = measure_machine(cfg.model, cfg.dtype, cfg.device, device_name, model)
    if device.type == "cpu" and report.overhead is not None:  # the compile what-if's guard check (a CPU's)
        watch.phase("machine: a compiled forward's guard check (the static engine's step, traced once)")
        with _part(report, "compiled entry"):
            entry = compiled_entry_ms(model, min(cfg.prompts), cfg.new_tokens, cfg.seed)
            report.overhead = dataclasses.replace(report.overhead, compiled_entry_ms=entry)
    job.machine_done = True
    job.write()
    for engine in job.engines:
        label = engine_label(engine, PROFILE_BATCH if engine == "batched" else 1)
        watch.phase(f"profile {label}" + (" (and nsys)" if engine in nsys_engines else ""))
        with _part(report, f"profile {label}"):
            new_tokens = cfg.new_tokens if options.quick else PROFILE_NEW_TOKENS
            _profile_one(cfg, out / "traces", model, engine, new_tokens, engine in nsys_engines, report)
        job.profiles.append(engine)
        job.write()
    watch.phase("what-if checks: each change made, measured in turn with its baseline")
    with _part(report, "what-if checks"):
        report.what_if_checks = _what_if_checks(cfg, model, report, min(cfg.prompts))
    job.write()
    watch.phase("report: predictions and verdicts")
    return warnings, errors


def _what_if_checks(cfg: BenchConfig, model, report: Report, prompt: int):
    """The cached engine's profiled what-ifs, each held against the change made (probe.capture.ab.interleaved_steps:
    the baseline and every changed engine in one process, a whole generation of each in turn)."""
    d = report.diagnoses.get(engine_label("cached", 1))
    measured = interleaved_steps(cfg, model, check_sides(d), prompt) if d is not None else {}
    return what_if_checks(d, measured)


def _captured_costs(results: BenchResults, device: torch.device, report: Report) -> dict[str, HostCost]:
    """Each captured engine's own host cost per step (report.captured_host_cost): on CUDA, where graphs are captured."""
    out = {}
    for engine in dict.fromkeys(c.engine for c in results.cells):
        captured = device.type == "cuda" and engine_class(engine).captures_decode
        if (cost := captured_host_cost(captured, report.overhead)) is not None:
            out[engine] = cost
    return out
