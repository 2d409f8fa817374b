"""What a run is to the history: `RunRecord` (its source, environment, configuration and measurements), the
configuration's identity and label, its fingerprint, and reading one from a run folder, a results or baseline file
or a profiled trace (`records_in` walks a folder for them, as `probe history import` does)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import TraceAnalysis
from probe.analysis.records.environment import Environment
from probe.analysis.records.files import is_trace_name, open_regular, parse_stem, read_json
from probe.analysis.records.results import RESULTS_FILE, BenchResults, CellKey, load_results
from probe.analysis.records.sidecar import Sidecar, read_sidecar
from probe.analysis.regression.identity import ConfigIdentity, IdentityKind
from probe.analysis.regression.samples import SampleSet, Unit, from_analysis, from_results
from probe.analysis.trace import load_trace
from probe.errors import ProbeError

# the command that measured a run (or that an import read it as)
RunCommand = Literal["run", "bench", "baseline", "profile"]


@dataclass(frozen=True)
class Ledger:
    """One profiled trace of a run: its per-step ledger, its sidecar, and the engine and shape it was profiled at."""

    path: Path
    key: CellKey  # the engine and the shape it was profiled at
    analysis: TraceAnalysis
    meta: Sidecar

    @property
    def prefix(self) -> str:
        """What its step kinds are prefixed with: "cached p64 n8 decode"."""
        return str(self.key)


@dataclass(frozen=True)
class RunRecord:
    """One run as the history stores it: where it came from, what it measured, and under what."""

    command: RunCommand
    source: str  # the results folder or file, or the trace, as a path ("" when the results were never written)
    recorded_at: dt.datetime  # UTC, without tzinfo
    commit: str | None  # the code under test's commit (the current folder's repository), None outside one
    dirty: bool | None  # tracked files modified at the time
    env: Environment
    config: ConfigIdentity  # what must be equal for two runs to be compared (config_id is its hash)
    results: BenchResults | None
    ledgers: tuple[Ledger, ...]
    fingerprint: str  # of the measurements themselves: importing the same files twice adds nothing

    @property
    def kind(self) -> IdentityKind:
        return "results" if self.results is not None else "trace"

    @property
    def config_id(self) -> str:
        return self.config.id

    @property
    def env_id(self) -> str:
        return self.env.identity()

    @property
    def label(self) -> str:
        return self.config.label

    def sample_set(self) -> SampleSet:
        """Every unit of the run in probe compare's shape: the bench cells, then each trace's step kinds."""
        units: dict[str, Unit] = {}
        if self.results is not None:
            units |= from_results(self.results, self.source).units
        for ledger in self.ledgers:
            found = from_analysis(ledger.analysis, str(ledger.path), ledger.meta).units
            units |= {
                f"{ledger.prefix} {k}": dataclasses.replace(u, key=f"{ledger.prefix} {k}") for k, u in found.items()
            }
        return SampleSet(self.source, self.kind, self.env, ConfigIdentity(), units)


def read_ledger(path: str | Path) -> Ledger:
    """A trace `probe profile` wrote, with its .meta.json: ProbeError when the sidecar is missing or malformed."""
    path = Path(path)
    meta = read_sidecar(path)
    if meta is None:
        raise ProbeError(f"{path}: no .meta.json beside it, so not a trace probe profile recorded")
    cfg = meta.config
    # The file name holds the engine's own name (a module:Class spec reports the engine it modifies).
    stem = parse_stem(path.name)
    engine = stem.engine if stem else cfg.engine.rpartition(":")[2]
    return Ledger(path, CellKey(engine, cfg.prompt, cfg.new_tokens, cfg.batch), analyze(load_trace(path)), meta)


def results_config(results: BenchResults, ledgers: Sequence[Ledger] = ()) -> ConfigIdentity:
    """A bench-like run's configuration: its settings and its cells (so a sweep of other prompts, engines or
    token counts is another configuration), not its number of runs; the profiled traces of a `probe run`."""
    cfg = results.config
    return ConfigIdentity(
        kind="results",
        model=cfg.model,
        dtype=results.dtype,
        seed=cfg.seed,
        warmup=cfg.warmup,
        threads=cfg.threads,
        annotate=cfg.annotate,
        telemetry_ms=cfg.telemetry_ms,
        cells=tuple(c.key for c in results.cells),
        traces=tuple(sorted(ledger.prefix for ledger in ledgers)),
    )


def trace_config(ledger: Ledger) -> ConfigIdentity:
    """A profiled trace's configuration: its settings and shape, the tool that recorded it and its engine."""
    cfg = ledger.meta.config
    return ConfigIdentity(
        kind="trace",
        model=cfg.model,
        dtype=cfg.dtype,
        seed=cfg.seed,
        warmup=cfg.warmup,
        prompt=cfg.prompt,
        new_tokens=cfg.new_tokens,
        batch=cfg.batch,
        tool=ledger.meta.tool,
        engine=ledger.key.engine,
    )


def _fingerprint(results: Sequence[BenchResults], traces: Sequence[Path]) -> str:
    """Of the measurements: the results as canonical JSON (the same whether in memory or read back from a file)
    and the traces' bytes."""
    canonical = (json.dumps(r.to_json(), sort_keys=True, default=str).encode() for r in results)
    parts = [hashlib.sha256(text).hexdigest() for text in canonical]
    for path in traces:
        h = hashlib.sha256()
        with open_regular(path) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        parts.append(h.hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _utc(epoch_ns: int | float | None) -> dt.datetime | None:
    if epoch_ns is None:
        return None
    return dt.datetime.fromtimestamp(epoch_ns / 1e9, dt.timezone.utc).replace(tzinfo=None)


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def run_record(
    command: RunCommand,
    source: str | Path | None,
    results: BenchResults | None = None,
    ledgers: Sequence[Ledger] = (),
    parts: Sequence[BenchResults] = (),
    commit: str | None = None,
    dirty: bool | None = None,
    recorded_at: dt.datetime | None = None,
) -> RunRecord:
    """A run to append: bench results (`parts`: the result files they were combined from, for the
    fingerprint), and/or profiled traces. Without `recorded_at`, the time the results say they were measured."""
    if results is None and not ledgers:
        raise ProbeError("nothing to record: no results and no trace")
    if results is not None and not results.cells:
        raise ProbeError(f"{source}: has no cells")
    env = results.env if results is not None else ledgers[0].meta.env
    if results is not None:
        config = results_config(results, ledgers)
        when = _utc(results.clock.epoch_ns if results.clock else None)
    else:
        config = trace_config(ledgers[0])
        clock = ledgers[0].meta.clock
        when = _utc(clock.epoch_ns if clock else None)
    if not source and results is None:
        source = ledgers[0].path  # a profiled run is its trace
    return RunRecord(
        command=command,
        source=str(Path(source).resolve()) if source else "",
        recorded_at=recorded_at or when or now_utc(),
        commit=commit,
        dirty=dirty,
        env=env,
        config=config,
        results=results,
        ledgers=tuple(ledgers),
        fingerprint=_fingerprint(parts or ([results] if results is not None else []), [g.path for g in ledgers]),
    )


# ---------------------------------------------------------------------------------------------------------
# importing run folders, results files and traces


SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})  # and every .hidden folder


def folder_record(folder: Path, command: RunCommand | None = None, **overrides) -> RunRecord:
    """A results folder as one run: its results.json, and for a `probe run` folder (one with report.json) the
    next-* sweeps' cells and the profiled traces in traces/. `overrides` go to run_record (commit, time...)."""
    main = load_results(folder)
    nxt = [load_results(d) for d in sorted(folder.glob("next-*")) if (d / RESULTS_FILE).is_file()]
    ledgers = []
    if (folder / "report.json").is_file() and (folder / "traces").is_dir():
        traces = sorted(p for p in (folder / "traces").iterdir() if is_trace_name(p.name))
        ledgers = [read_ledger(p) for p in traces if read_sidecar(p) is not None]
    combined = main.combined(nxt)
    kind = command or ("run" if (folder / "report.json").is_file() else "bench")
    record = run_record(kind, folder, combined, ledgers, parts=[main, *nxt], **overrides)
    return record if "commit" in overrides else _with_commit(record, combined.env)


def _with_commit(record: RunRecord, env: Environment) -> RunRecord:
    """Without the current folder's commit (an import), the commit the run recorded: probe's own checkout's."""
    if record.commit is not None:
        return record
    return dataclasses.replace(record, commit=env.commit, dirty=env.dirty if env.commit else None)


def file_record(path: Path) -> RunRecord:
    """A results or baseline file, or a trace with its sidecar, as one run."""
    if is_trace_name(path.name):
        ledger = read_ledger(path)
        return _with_commit(run_record("profile", path, ledgers=[ledger]), ledger.meta.env)
    results = load_results(path)
    doc = read_json(path, "results file")
    marker = doc.get("baseline") if isinstance(doc.get("baseline"), dict) else None
    when = None
    if marker and marker.get("created"):
        with contextlib.suppress(ValueError):
            when = dt.datetime.strptime(marker["created"], "%Y-%m-%dT%H:%M:%S%z").astimezone(dt.timezone.utc)
    record = run_record(
        "baseline" if marker is not None else "bench",
        path,
        results,
        recorded_at=when.replace(tzinfo=None) if when and not results.clock else None,
    )
    return _with_commit(record, results.env)


def records_in(path: str | Path) -> tuple[list[RunRecord], list[str]]:
    """Every run under `path` (a folder to walk, a run folder, a results / baseline file, a trace), oldest first,
    and one line for each file that looked like a run but could not be read."""
    path = Path(path)
    if not path.exists():
        raise ProbeError(f"{path}: no such file or folder")
    found: list[RunRecord] = []
    skipped: list[str] = []

    def take(make, where: Path) -> None:
        """One run, or one line saying why not: a name that is not UTF-8 (no history column can hold it) is
        refused before it is read."""
        try:
            str(where.absolute()).encode("utf-8")
        except UnicodeEncodeError:
            skipped.append(f"{os.fsencode(where)!r}: its name is not UTF-8, so the history cannot hold it")
            return
        try:
            found.append(make(where))
        except ProbeError as e:
            skipped.append(str(e))

    if path.is_file():
        take(file_record, path)
    elif (path / RESULTS_FILE).is_file():
        take(folder_record, path)
    else:
        for folder, dirs, files in os.walk(path):
            here = Path(folder)
            if RESULTS_FILE in files:
                take(folder_record, here)
                dirs[:] = []  # its next-* sweeps and traces belong to it
                continue
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            for name in sorted(files):
                if is_trace_name(name):  # without a sidecar, or with one that is malformed: a line of its own
                    take(file_record, here / name)
                elif name.endswith(".json") and not name.endswith(".meta.json") and _is_baseline(here / name):
                    take(file_record, here / name)
    return sorted(found, key=lambda r: r.recorded_at), skipped


def _is_baseline(path: Path) -> bool:
    try:
        doc = read_json(path, "results file")
    except ProbeError:
        return False
    return isinstance(doc, dict) and "baseline" in doc and isinstance(doc.get("cells"), list)
