"""Run history: every run probe records, in one embedded DuckDB file, and the trend check over it.

One file (`probe-history.duckdb` in the current folder by default, `--history PATH` or $PROBE_HISTORY) holds a
row per run and, keyed by its `run_id`, everything `probe compare` needs to judge it again later. The tables are
plain SQL (the DuckDB CLI, `duckdb.connect(PATH, read_only=True)` from Python); README.md shows two queries.

    meta        key, value: schema_version
    runs        one row a run: run_id, recorded_at (UTC), command, source, fingerprint, kind (results | trace),
                config_id / config (the configuration: a hash and its label) / config_json, env_id (the
                environment: Environment.identity()), git_commit, git_dirty, torch, transformers, python, device,
                device_name, driver, cuda, cpu_model, cpu_count, torch_threads, dtype, env_json, complete, units
    cells       one row a bench cell: run_id, unit ("cached p16 n32"), engine, prompt_tokens, new_tokens, batch,
                runs, ttft_ms, itl_p50_ms, itl_p90_ms, decode_tok_s, total_ms, peak_mem_bytes, peak_mem_kind,
                spread_pct, tokens_match_naive, deterministic, decode_ops, prefill_ops
    counts      run_id, unit, metric, value: launches per step (decode_launches, prefill_launches for a cell;
                launches, kernels for a profiled step kind), exact
    op_counts   run_id, unit, metric, op, count: the same counts by op (or kernel) name
    samples     run_id, unit, metric, i, value: the raw samples the timing statistics rank (host_us_per_step,
                cache_us_per_step, ttft_ms, decode_tok_s), i in the order they were measured
    steps       one row a profiled step: run_id, unit ("cached p64 n8 decode"), position, name, kind, wall_ns,
                dispatched, launches, graph_launches, kernels, gpu_window_ns, gpu_busy_ns, gpu_idle_ns, cache_ns
    step_parts  run_id, unit, position, part, ns: the step's host time by part (they add up to wall_ns)

A unit is what `probe compare` calls a key: a bench cell, or a profiled trace's step kind prefixed with the
engine and shape it was profiled at. A configuration is what must be equal for two runs to be compared (model,
dtype, seed, warmup, threads, the cells or the profiled shape; not the number of runs); an environment is
what `Environment.identity()` hashes (torch, transformers, device, driver, CPU).

Concurrency. DuckDB lets one process at a time open a file for writing (and none for reading meanwhile), with an
OS lock. A writer opens, appends one run in one transaction and closes; a reader opens read-only, reads, closes.
Whoever finds the file locked retries with a growing, jittered sleep for up to $PROBE_HISTORY_WAIT_S (WAIT_S), so
two CI jobs that record at once both land, and a reader sees whole runs only (a killed writer's transaction is
rolled back when the file is next opened). A file locked for longer is a one-line error naming the holder's PID.

Versions. `meta.schema_version` says which MIGRATIONS a file has had; opening an older file applies the rest
in place, each in its own transaction. A file from a newer probe is refused with a one-line error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import random
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from probe.analysis.compare import (
    ALPHA,
    METRICS,
    MIN_SAMPLES,
    THRESHOLD,
    Comparison,
    SampleSet,
    Unit,
    compare,
    from_analysis,
    from_results,
    markdown,
)
from probe.analysis.environment import Environment
from probe.analysis.files import is_trace_name, parse_json, parse_stem, read_json
from probe.analysis.ledger import TraceAnalysis, analyze
from probe.analysis.results import RESULTS_FILE, BenchResults, CellKey, load_results
from probe.analysis.sidecar import Sidecar, trace_meta
from probe.analysis.trace import load_trace
from probe.errors import ProbeError

DEFAULT_FILE = "probe-history.duckdb"
HISTORY_ENV = "PROBE_HISTORY"
WAIT_ENV = "PROBE_HISTORY_WAIT_S"
# Why a minute: one run's write takes well under a second, so a minute covers a queue of CI jobs on one runner;
# a lock held longer than that is a stuck process, and saying so beats hanging the job.
WAIT_S = 60.0
WINDOW = 5  # earlier runs whose timings the latest run is held against (the counts: against the previous one)
SCHEMA_VERSION = 2
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file
SESSIONS_NOTE = (
    "timings span sessions: each run in the window ran in its own process, and a machine's speed drifts "
    "between processes (by a third on a shared 2-core VM), so a timing alert here is a lead, not a verdict; "
    "settle it in one process with `probe ab BASE_ENGINE CURRENT_ENGINE`, which decodes both in lockstep"
)

_SCHEMA_1 = (
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY, recorded_at TIMESTAMP NOT NULL, command VARCHAR NOT NULL, source VARCHAR,
        fingerprint VARCHAR NOT NULL, kind VARCHAR NOT NULL, config_id VARCHAR NOT NULL, config VARCHAR NOT NULL,
        config_json JSON, env_id VARCHAR NOT NULL, git_commit VARCHAR, git_dirty BOOLEAN, torch VARCHAR,
        transformers VARCHAR, python VARCHAR, device VARCHAR, device_name VARCHAR, cuda VARCHAR, cpu_model VARCHAR,
        cpu_count INTEGER, torch_threads INTEGER, dtype VARCHAR, env_json JSON, complete BOOLEAN, units INTEGER)""",
    """CREATE TABLE cells (
        run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, engine VARCHAR, prompt_tokens INTEGER, new_tokens INTEGER,
        batch INTEGER, runs INTEGER, ttft_ms DOUBLE, itl_p50_ms DOUBLE, itl_p90_ms DOUBLE, decode_tok_s DOUBLE,
        total_ms DOUBLE, peak_mem_bytes BIGINT, peak_mem_kind VARCHAR, spread_pct DOUBLE,
        tokens_match_naive BOOLEAN, deterministic BOOLEAN, decode_ops INTEGER, prefill_ops INTEGER)""",
    "CREATE TABLE counts (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL, value DOUBLE)",
    """CREATE TABLE op_counts (
        run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL, op VARCHAR NOT NULL, count DOUBLE)""",
    """CREATE TABLE samples (
        run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, metric VARCHAR NOT NULL, i INTEGER NOT NULL, value DOUBLE)""",
)
# 2: the per-step ledger of profiled runs, and the GPU driver in the environment.
_SCHEMA_2 = (
    "ALTER TABLE runs ADD COLUMN driver VARCHAR",
    """CREATE TABLE steps (
        run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, position INTEGER NOT NULL, name VARCHAR, kind VARCHAR,
        wall_ns BIGINT, dispatched INTEGER, launches INTEGER, graph_launches INTEGER, kernels INTEGER,
        gpu_window_ns BIGINT, gpu_busy_ns BIGINT, gpu_idle_ns BIGINT, cache_ns BIGINT)""",
    """CREATE TABLE step_parts (
        run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, position INTEGER NOT NULL, part VARCHAR NOT NULL,
        ns BIGINT)""",
)
MIGRATIONS = (_SCHEMA_1, _SCHEMA_2)  # MIGRATIONS[v] takes a file from schema v to v + 1


# ---------------------------------------------------------------------------------------------------------
# the file: where it is, opening it (waiting out another process), its schema


def history_path(flag: str | Path | None, environ=os.environ) -> tuple[Path, bool]:
    """The history file, and whether the user named it (--history or $PROBE_HISTORY) rather than took the default."""
    if flag:
        return Path(flag), True
    if environ.get(HISTORY_ENV):
        return Path(environ[HISTORY_ENV]), True
    return Path(DEFAULT_FILE), False


def wait_s(environ=os.environ) -> float:
    try:
        return max(0.0, float(environ.get(WAIT_ENV, WAIT_S)))
    except ValueError:
        raise ProbeError(f"${WAIT_ENV} must be a number of seconds, got {environ[WAIT_ENV]!r}") from None


def _check_file(path: Path) -> None:
    """A file that is there must be a DuckDB database: say so in one line before DuckDB does in three."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except IsADirectoryError:
        raise ProbeError(f"{path}: a folder, not a history file") from None
    except OSError as e:
        raise ProbeError(f"cannot read {path}: {e.strerror or e}") from None
    # Shorter than a header: maybe another process is creating it this instant; DuckDB (under its lock) decides.
    if len(head) == 12 and head[8:12] != DUCKDB_MAGIC:
        raise ProbeError(f"{path}: not a DuckDB database, so not a probe history")


def _open(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    deadline, delay = time.monotonic() + wait, 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as e:  # a corrupt file raises duckdb.Error itself, a lock an IOException
            message = str(e)
            if not isinstance(e, duckdb.IOException) or "lock" not in message.lower():
                raise ProbeError(f"cannot open {path}: {_first_line(message)}") from None
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", message)
                who = f" (PID {holder.group(1)})" if holder else ""
                raise ProbeError(
                    f"{path}: locked by another process{who} for more than {wait:g} s; "
                    f"${WAIT_ENV} sets how long to wait"
                ) from None
        time.sleep(delay * random.uniform(0.5, 1.5))  # jittered, so two waiters do not retry in step
        delay = min(delay * 2, 0.5)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """0 for an empty database; ProbeError for a DuckDB file that is not a probe history."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not tables:
        return 0
    if "meta" not in tables:
        raise ProbeError("a DuckDB database without probe's tables, not a probe history")
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise ProbeError("a DuckDB database without a schema_version, not a probe history")
    return int(row[0])


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the file to SCHEMA_VERSION, one transaction a step; returns the version it had."""
    found = schema_version(con)
    if found > SCHEMA_VERSION:
        raise ProbeError(f"written by a newer probe (schema {found}; this probe knows up to {SCHEMA_VERSION})")
    for version in range(found, SCHEMA_VERSION):
        con.begin()
        for statement in MIGRATIONS[version]:
            con.execute(statement)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(version + 1)])
        con.commit()
    return found


@contextlib.contextmanager
def connect(path: str | Path, write: bool = False, wait: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the history at `path`, closed when the block ends. Writing creates the file (and its
    folder); reading needs it. Either way the file is migrated to SCHEMA_VERSION first. ProbeError, in one line,
    for a missing file, one that is not a DuckDB database, a newer schema, or a lock held past `wait` seconds."""
    path = Path(path)
    wait = wait_s() if wait is None else wait
    if path.exists():
        _check_file(path)
    elif not write:
        raise ProbeError(f"no history at {path}: record runs first (probe bench, run, baseline or profile)")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ProbeError(f"cannot create {path.parent}: {e.strerror or e}") from None
    con = _open(path, read_only=not write, wait=wait)
    try:
        try:
            version = schema_version(con)
        except ProbeError as e:
            raise ProbeError(f"{path}: {e}") from None
        if version < SCHEMA_VERSION and not write:  # an older file: migrate it in place, then read
            con.close()
            con = _open(path, read_only=False, wait=wait)
        if version != SCHEMA_VERSION:
            try:
                migrate(con)
            except ProbeError as e:
                raise ProbeError(f"{path}: {e}") from None
        yield con
    except duckdb.Error as e:
        raise ProbeError(f"{path}: {_first_line(str(e))}") from None
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------------------
# what one run adds


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

    command: str  # run | bench | baseline | profile
    source: str  # the results folder or file, or the trace, as a path ("" when the results were never written)
    recorded_at: dt.datetime  # UTC, without tzinfo
    commit: str | None  # the code under test's commit (the current folder's repository), None outside one
    dirty: bool | None  # tracked files modified at the time
    env: Environment
    config: dict  # what must be equal for two runs to be compared (config_id is its hash)
    results: BenchResults | None
    ledgers: tuple[Ledger, ...]
    fingerprint: str  # of the measurements themselves: importing the same files twice adds nothing

    @property
    def kind(self) -> str:
        return "results" if self.results is not None else "trace"

    @property
    def config_id(self) -> str:
        return _digest(self.config)

    @property
    def env_id(self) -> str:
        return self.env.identity()

    @property
    def label(self) -> str:
        return config_label(self.config, [c.key for c in self.results.cells] if self.results is not None else [])

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
        return SampleSet(self.source, self.kind, self.env, {}, units)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def read_ledger(path: str | Path) -> Ledger:
    """A trace `probe profile` wrote, with its .meta.json: ProbeError when the sidecar is missing or malformed."""
    path = Path(path)
    meta = trace_meta(path)
    if meta is None:
        raise ProbeError(f"{path}: no .meta.json beside it, so not a trace probe profile recorded")
    cfg = meta.config
    # The file name holds the engine's own name (a module:Class spec reports the engine it modifies).
    stem = parse_stem(path.name)
    engine = stem.engine if stem else cfg.engine.rpartition(":")[2]
    return Ledger(path, CellKey(engine, cfg.prompt, cfg.new_tokens, cfg.batch), analyze(load_trace(path)), meta)


def results_config(results: BenchResults, ledgers: Sequence[Ledger] = ()) -> dict:
    """A bench-like run's configuration: its settings and its cells (so a sweep of other prompts, engines or
    token counts is another configuration), not its number of runs; the profiled traces of a `probe run`."""
    out = {k: getattr(results.config, k) for k in ("model", "seed", "warmup", "threads", "annotate", "telemetry_ms")}
    out["dtype"] = results.dtype
    return out | {"kind": "results", "cells": sorted(str(c.key) for c in results.cells)} | _traces(ledgers)


def _traces(ledgers: Sequence[Ledger]) -> dict:
    return {"traces": sorted(ledger.prefix for ledger in ledgers)} if ledgers else {}


def trace_config(ledger: Ledger) -> dict:
    cfg = ledger.meta.config
    out = {k: getattr(cfg, k) for k in ("model", "dtype", "seed", "warmup", "prompt", "new_tokens", "batch")}
    return out | {"kind": "trace", "tool": ledger.meta.tool, "engine": ledger.key.engine}


def config_label(config: dict, cells: Sequence[CellKey] = ()) -> str:
    """What a person reads for a configuration: `tiny float32 cached,naive p16,64 n32`, from its settings and
    the keys of its cells (a bench-like run's)."""
    head = f"{config.get('model')} {config.get('dtype')}"
    if config.get("kind") == "trace":
        batch = f" b{config['batch']}" if (config.get("batch") or 1) > 1 else ""
        return f"profile {head} {config.get('engine')} p{config.get('prompt')} n{config.get('new_tokens')}{batch}"
    keys = sorted(cells, key=str)  # the order config["cells"] holds them in
    engines = list(dict.fromkeys(k.engine for k in keys))
    prompts = sorted({k.prompt_tokens for k in keys})
    news = sorted({k.new_tokens for k in keys})
    batches = sorted({k.batch for k in keys if k.batch > 1})
    text = f"{head} {','.join(engines)} p{','.join(map(str, prompts))} n{','.join(map(str, news))}"
    if batches:
        text += f" b{','.join(map(str, batches))}"
    if config.get("threads"):
        text += f" threads={config['threads']}"
    return text + (" +traces" if config.get("traces") else "")


def _fingerprint(results: Sequence[BenchResults], traces: Sequence[Path]) -> str:
    """Of the measurements: the results as canonical JSON (the same whether in memory or read back from a file)
    and the traces' bytes."""
    canonical = (json.dumps(r.to_json(), sort_keys=True, default=str).encode() for r in results)
    parts = [hashlib.sha256(text).hexdigest() for text in canonical]
    for path in traces:
        h = hashlib.sha256()
        with open(path, "rb") as f:
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
    command: str,
    source: str | Path | None,
    results: BenchResults | None = None,
    ledgers: Sequence[Ledger] = (),
    parts: Sequence[BenchResults] = (),
    commit: str | None = None,
    dirty: bool | None = None,
    recorded_at: dt.datetime | None = None,
    env_extra: dict | None = None,
) -> RunRecord:
    """A run to append: bench results (`parts`: the result files they were combined from, for the
    fingerprint), and/or profiled traces. Without `recorded_at`, the time the results say they were measured."""
    if results is None and not ledgers:
        raise ProbeError("nothing to record: no results and no trace")
    if results is not None and not results.cells:
        raise ProbeError(f"{source}: has no cells")
    env = results.env if results is not None else ledgers[0].meta.env
    env = dataclasses.replace(env, **{k: v for k, v in (env_extra or {}).items() if v is not None})
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
# appending


def new_run_id(when: dt.datetime) -> str:
    return f"{when:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def _frames(record: RunRecord, run_id: str) -> dict[str, pd.DataFrame]:
    env, samples = record.env, record.sample_set()
    run = {
        "run_id": run_id,
        "recorded_at": record.recorded_at,
        "command": record.command,
        "source": record.source,
        "fingerprint": record.fingerprint,
        "kind": record.kind,
        "config_id": record.config_id,
        "config": record.label,
        "config_json": json.dumps(record.config, sort_keys=True),
        "env_id": record.env_id,
        "git_commit": record.commit,
        "git_dirty": record.dirty,
        **{k: _text(getattr(env, k)) for k in ("torch", "transformers", "python", "device", "device_name", "driver")},
        **{k: _text(getattr(env, k)) for k in ("cuda", "cpu_model", "dtype")},
        "cpu_count": env.cpu_count,
        "torch_threads": env.torch_threads,
        "env_json": json.dumps(env.to_json(), sort_keys=True, default=str),
        "complete": record.results.complete if record.results is not None else True,
        "units": len(samples.units),
    }
    frames = {"runs": pd.DataFrame([run])}
    cells = record.results.cells if record.results is not None else []
    frames["cells"] = pd.DataFrame(
        [{"run_id": run_id, "unit": str(c.key)} | {k: getattr(c, k) for k in CELL_COLUMNS} for c in cells]
    )
    counts, ops, values = [], [], []
    for key, unit in samples.units.items():
        counts += [(run_id, key, metric, value) for metric, value in unit.counts.items()]
        ops += [(run_id, key, m, op, n) for m, by_op in unit.ops.items() for op, n in by_op.items()]
        values += [(run_id, key, m, i, x) for m, xs in unit.samples.items() for i, x in enumerate(xs)]
    frames["counts"] = pd.DataFrame(counts, columns=["run_id", "unit", "metric", "value"])
    frames["op_counts"] = pd.DataFrame(ops, columns=["run_id", "unit", "metric", "op", "count"])
    frames["samples"] = pd.DataFrame(values, columns=["run_id", "unit", "metric", "i", "value"])
    steps, parts = [], []
    for ledger in record.ledgers:
        for s in ledger.analysis.steps:
            unit = f"{ledger.prefix} {s.kind}"
            steps.append({"run_id": run_id, "unit": unit} | {k: getattr(s, k) for k in STEP_COLUMNS})
            parts += [(run_id, unit, s.position, part, ns) for part, ns in s.purpose_ns.items()]
    frames["steps"] = pd.DataFrame(steps)
    frames["step_parts"] = pd.DataFrame(parts, columns=["run_id", "unit", "position", "part", "ns"])
    return frames


CELL_COLUMNS = (
    "engine",
    "prompt_tokens",
    "new_tokens",
    "batch",
    "runs",
    "ttft_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "decode_tok_s",
    "total_ms",
    "peak_mem_bytes",
    "peak_mem_kind",
    "spread_pct",
    "tokens_match_naive",
    "deterministic",
    "decode_ops",
    "prefill_ops",
)
STEP_COLUMNS = (
    "position",
    "name",
    "kind",
    "wall_ns",
    "dispatched",
    "launches",
    "graph_launches",
    "kernels",
    "gpu_window_ns",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "cache_ns",
)


def _text(value) -> str | None:
    return None if value is None else str(value)


def append(path: str | Path, record: RunRecord, wait: float | None = None) -> str | None:
    """Add one run in one transaction (a reader sees all of it or none of it). Returns its run_id, or None when
    a run with the same fingerprint is already there."""
    run_id = new_run_id(record.recorded_at)
    frames = _frames(record, run_id)
    with connect(path, write=True, wait=wait) as con:
        if con.execute("SELECT 1 FROM runs WHERE fingerprint = ?", [record.fingerprint]).fetchone():
            return None
        con.begin()
        try:
            for table, frame in frames.items():
                if len(frame):
                    con.register("_rows", frame)
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _rows")
                    con.unregister("_rows")
            con.commit()
        except BaseException:
            con.rollback()
            raise
    return run_id


# ---------------------------------------------------------------------------------------------------------
# importing run folders, results files and traces


SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})  # and every .hidden folder


def folder_record(folder: Path, command: str | None = None, **overrides) -> RunRecord:
    """A results folder as one run: its results.json, and for a `probe run` folder (one with report.json) the
    next-* sweeps' cells and the profiled traces in traces/. `overrides` go to run_record (commit, time...)."""
    main = load_results(folder)
    nxt = [load_results(d) for d in sorted(folder.glob("next-*")) if (d / RESULTS_FILE).is_file()]
    ledgers = []
    if (folder / "report.json").is_file() and (folder / "traces").is_dir():
        traces = sorted(p for p in (folder / "traces").iterdir() if is_trace_name(p.name))
        ledgers = [read_ledger(p) for p in traces if trace_meta(p) is not None]
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
    doc = read_json(path)
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
        doc = read_json(path)
    except ProbeError:
        return False
    return isinstance(doc, dict) and "baseline" in doc and isinstance(doc.get("cells"), list)


# ---------------------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class RunInfo:
    """One row of `runs`, the columns the commands show."""

    run_id: str
    recorded_at: dt.datetime  # UTC
    command: str
    source: str
    kind: str
    config_id: str
    config: str
    env_id: str
    commit: str | None
    dirty: bool | None
    torch: str | None
    transformers: str | None
    device_name: str | None
    units: int
    complete: bool

    @property
    def short_commit(self) -> str:
        return (self.commit or "no commit")[:10] + ("+dirty" if self.dirty else "")

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"recorded_at": self.recorded_at.isoformat() + "Z"}


_RUN_COLUMNS = ", ".join(
    ("run_id", "recorded_at", "command", "source", "kind", "config_id", "config", "env_id", "git_commit")
    + ("git_dirty", "torch", "transformers", "device_name", "units", "complete")
)
_NEWEST_FIRST = "ORDER BY recorded_at DESC, run_id DESC"


def list_runs(con: duckdb.DuckDBPyConnection, config: str | None = None, last: int | None = None) -> list[RunInfo]:
    """Runs newest first; `config` keeps those whose config_id starts with it or whose label contains it."""
    where, args = "", []
    if config:
        where, args = "WHERE starts_with(config_id, ?) OR contains(config, ?)", [config, config]
    limit = f"LIMIT {int(last)}" if last is not None else ""
    rows = con.execute(f"SELECT {_RUN_COLUMNS} FROM runs {where} {_NEWEST_FIRST} {limit}", args).fetchall()
    return [RunInfo(*r) for r in rows]


def find_run(con: duckdb.DuckDBPyConnection, text: str) -> RunInfo:
    """A run by its id, a prefix of it, or `latest`."""
    if text == "latest":
        rows = list_runs(con, last=1)
    else:
        rows = [
            RunInfo(*r)
            for r in con.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE starts_with(run_id, ?) {_NEWEST_FIRST}", [text]
            ).fetchall()
        ]
    if not rows:
        raise ProbeError(f"no run {text!r} in the history (probe history list shows them)")
    if len(rows) > 1 and not any(r.run_id == text for r in rows):
        raise ProbeError(f"{text!r} matches {len(rows)} runs: give more of the run id")
    return next((r for r in rows if r.run_id == text), rows[0])


def runs_of(con: duckdb.DuckDBPyConnection, config_id: str) -> list[RunInfo]:
    """Every run of one configuration, oldest first."""
    rows = con.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE config_id = ? {_NEWEST_FIRST}", [config_id])
    return [RunInfo(*r) for r in reversed(rows.fetchall())]


def sample_set(con: duckdb.DuckDBPyConnection, run: RunInfo, unit: str | None = None) -> SampleSet:
    """A stored run in probe compare's shape (optionally one unit of it)."""
    only = "AND unit = ?" if unit else ""
    args = [run.run_id] + ([unit] if unit else [])
    units: dict[str, dict] = {}

    def of(key: str) -> dict:
        return units.setdefault(key, {"counts": {}, "ops": {}, "samples": {}})

    for key, metric, value in con.execute(
        f"SELECT unit, metric, value FROM counts WHERE run_id = ? {only} ORDER BY rowid", args
    ).fetchall():
        of(key)["counts"][metric] = value
    for key, metric, op, n in con.execute(
        f"SELECT unit, metric, op, count FROM op_counts WHERE run_id = ? {only} ORDER BY rowid", args
    ).fetchall():
        of(key)["ops"].setdefault(metric, {})[op] = n
    frame = con.execute(
        f"SELECT unit, metric, value FROM samples WHERE run_id = ? {only} ORDER BY unit, metric, i", args
    ).df()
    for (key, metric), rows in frame.groupby(["unit", "metric"], sort=False):
        of(key)["samples"][metric] = tuple(float(x) for x in rows["value"])
    text = con.execute("SELECT env_json FROM runs WHERE run_id = ?", [run.run_id]).fetchone()[0] or "{}"
    try:
        env = Environment.from_json(parse_json(text, f"run {run.run_id}'s env_json"))
    except ValueError as e:
        raise ProbeError(f"run {run.run_id}: {e}") from None
    source = f"{run.run_id} @ {run.short_commit}"
    return SampleSet(
        source, run.kind, env, {}, {k: Unit(k, u["counts"], u["ops"], u["samples"]) for k, u in units.items()}
    )


# ---------------------------------------------------------------------------------------------------------
# judging a run against the runs before it: probe compare's rules


@dataclass(frozen=True)
class Rules:
    """probe compare's knobs, and how many earlier runs the timings are pooled from."""

    window: int = WINDOW
    threshold: float = THRESHOLD
    alpha: float = ALPHA
    min_samples: int = MIN_SAMPLES
    counts_only: bool = False

    def __post_init__(self):
        if self.window < 1:
            raise ProbeError(f"--window must be at least 1, got {self.window}")


@dataclass(frozen=True)
class Judgement:
    """One run held against the earlier runs of its configuration in the same environment."""

    run: RunInfo
    previous: RunInfo | None  # the counts' baseline
    window: tuple[RunInfo, ...]  # the timings' baseline, oldest first (previous is the last)
    comparison: Comparison | None
    reason: str | None  # why there is no comparison: not enough history
    other_environment: int = 0  # earlier runs of this configuration under another environment, not used

    @property
    def regressed(self) -> bool:
        return self.comparison is not None and self.comparison.regressed

    def to_json(self) -> dict:
        return {
            "config_id": self.run.config_id,
            "config": self.run.config,
            "env_id": self.run.env_id,
            "run": self.run.to_json(),
            "previous": self.previous.run_id if self.previous else None,
            "window": [r.run_id for r in self.window],
            "other_environment": self.other_environment,
            "status": "not enough history" if self.comparison is None else "checked",
            "reason": self.reason,
            "regression": self.regressed,
            "comparison": self.comparison.to_json() if self.comparison else None,
        }


def pooled(previous: SampleSet, window: Sequence[SampleSet], source: str) -> SampleSet:
    """The baseline a run is judged against: the previous run's exact counts, every window run's timing samples."""
    units = {}
    for key, unit in previous.units.items():
        samples = {
            metric: tuple(x for w in window if key in w.units for x in w.units[key].samples.get(metric, ()))
            for metric in unit.samples
        }
        units[key] = Unit(key, unit.counts, unit.ops, samples)
    return SampleSet(source, previous.kind, previous.env, {}, units)


def cached_sample_set(con: duckdb.DuckDBPyConnection, run: RunInfo, unit: str | None, cache: dict) -> SampleSet:
    """sample_set, read once per (run, unit) for a caller that judges many runs against overlapping windows."""
    if (run.run_id, unit) not in cache:
        cache[(run.run_id, unit)] = sample_set(con, run, unit)
    return cache[(run.run_id, unit)]


def judge(
    con: duckdb.DuckDBPyConnection,
    run: RunInfo,
    earlier: Sequence[RunInfo],
    rules: Rules = Rules(),
    unit: str | None = None,
    cache: dict | None = None,
) -> Judgement:
    """`run` against `earlier` (its configuration's runs before it, oldest first): counts against the previous
    run of the same environment, timings against the samples of the last `rules.window` of them."""
    cache = {} if cache is None else cache

    def samples(r: RunInfo) -> SampleSet:
        return cached_sample_set(con, r, unit, cache)

    same = [r for r in earlier if r.env_id == run.env_id]
    other = len(earlier) - len(same)
    if not same:
        elsewhere = f"; {other} earlier run(s) of it ran in another environment" if other else ""
        reason = f"not enough history: {run.run_id} is the first run of this configuration in its environment"
        return Judgement(run, None, (), None, reason + elsewhere, other)
    window = tuple(same[-rules.window :])
    previous = window[-1]
    span = f"{window[0].run_id}..{previous.run_id}" if len(window) > 1 else previous.run_id
    pooled_window = len(window) > 1 and not rules.counts_only  # with counts only, the previous run is the baseline
    label = f"{len(window)} earlier runs {span}" if pooled_window else f"{previous.run_id} @ {previous.short_commit}"
    base = pooled(samples(previous), [samples(r) for r in window], label)
    try:
        result = compare(base, samples(run), rules.threshold, rules.alpha, rules.min_samples, rules.counts_only)
    except ProbeError as e:
        return Judgement(run, previous, window, None, f"not comparable: {e}", other)
    notes = [f"launch counts against the previous run, {previous.run_id} @ {previous.short_commit}"]
    if not rules.counts_only and any(r.kind == "timing" for r in result.rows):
        notes.append(f"timings against the samples of the last {len(window)} run(s) pooled ({span})")
        notes.append(SESSIONS_NOTE)
    if other:
        notes.append(f"{other} earlier run(s) of this configuration ran in another environment: not used")
    result = dataclasses.replace(result, notes=tuple(notes) + result.notes)
    return Judgement(run, previous, window, result, None, other)


@dataclass(frozen=True)
class HistoryCheck:
    path: str
    rules: Rules
    judgements: tuple[Judgement, ...]  # one a configuration, the most recently run first

    @property
    def regressed(self) -> bool:
        return any(j.regressed for j in self.judgements)

    def to_json(self) -> dict:
        return {
            "history": self.path,
            "regression": self.regressed,
            **dataclasses.asdict(self.rules),
            "configs": [j.to_json() for j in self.judgements],
        }

    def to_markdown(self) -> str:
        head = "REGRESSION" if self.regressed else "no regression"
        lines = [f"## probe history check: {head}", ""]
        for j in self.judgements:
            lines += [
                f"**{_md(j.run.config)}** (`{j.run.config_id}`): run `{j.run.run_id}` @ `{j.run.short_commit}`",
                "",
            ]
            if j.comparison is None:
                lines += [f"_{_md(j.reason or '')}_", ""]
            else:
                lines += [markdown(j.comparison).replace("### probe compare", "#### probe compare"), ""]
        return "\n".join(lines).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def check(con: duckdb.DuckDBPyConnection, path: str, rules: Rules = Rules(), config: str | None = None) -> HistoryCheck:
    """The latest run of every configuration (those matching `config`), each judged by `judge`."""
    latest = list_runs(con, config)
    if not latest:
        raise ProbeError(f"no run matches --config {config!r}" if config else f"{path}: the history holds no runs")
    judgements = []
    for config_id in dict.fromkeys(r.config_id for r in latest):
        runs = runs_of(con, config_id)
        judgements.append(judge(con, runs[-1], runs[:-1], rules))
    return HistoryCheck(path, rules, tuple(judgements))


def show(con: duckdb.DuckDBPyConnection, text: str, rules: Rules = Rules(window=1)) -> Judgement:
    """One run against its predecessor (the previous run of its configuration and environment)."""
    run = find_run(con, text)
    runs = runs_of(con, run.config_id)
    return judge(con, run, runs[: [r.run_id for r in runs].index(run.run_id)], rules)


# ---------------------------------------------------------------------------------------------------------
# the trend of one configuration (the explorer's History view)


@dataclass(frozen=True)
class ConfigInfo:
    config_id: str
    config: str
    runs: int
    last: dt.datetime
    units: tuple[str, ...]  # of its latest run, in the order they were recorded

    @property
    def label(self) -> str:
        return f"{self.config} ({self.config_id}, {self.runs} run{'s' if self.runs != 1 else ''})"


def configs(con: duckdb.DuckDBPyConnection) -> list[ConfigInfo]:
    """Every configuration, the most recently run first."""
    rows = con.execute(
        "SELECT config_id, any_value(config), count(*), max(recorded_at), arg_max(run_id, recorded_at) "
        "FROM runs GROUP BY config_id ORDER BY max(recorded_at) DESC"
    ).fetchall()
    out = []
    for config_id, label, n, last, latest in rows:
        units = con.execute(
            "SELECT unit FROM (SELECT unit, min(rowid) AS first FROM counts WHERE run_id = ? GROUP BY unit) "
            "ORDER BY first",
            [latest],
        ).fetchall()
        out.append(ConfigInfo(config_id, label, n, last, tuple(u[0] for u in units)))
    return out


def trend(
    con: duckdb.DuckDBPyConnection, config_id: str, unit: str, rules: Rules = Rules(), cache: dict | None = None
) -> pd.DataFrame:
    """One row a run of the configuration, oldest first: its commit and time, host time per step (the median
    sample, µs) and, for a profiled unit, its mean by part (`part:<name>` columns, µs, adding up to the mean
    wall), launches per step, decode tokens/s, and the verdict `probe history check` gave it then, with its
    alerts on the exact counts and on the timings apart (those compare sessions: a lead, not a verdict)."""
    runs = runs_of(con, config_id)
    parts = con.execute(
        "SELECT p.run_id, p.part, avg(p.ns) / 1e3 AS us FROM step_parts p JOIN runs r USING (run_id) "
        "WHERE r.config_id = ? AND p.unit = ? GROUP BY p.run_id, p.part",
        [config_id, unit],
    ).df()
    order = con.execute(
        "SELECT part FROM step_parts p JOIN runs r USING (run_id) WHERE r.config_id = ? AND p.unit = ? "
        "GROUP BY part ORDER BY min(p.rowid)",
        [config_id, unit],
    ).fetchall()
    tok_s = dict(
        con.execute(
            "SELECT c.run_id, c.decode_tok_s FROM cells c JOIN runs r USING (run_id) WHERE r.config_id = ? "
            "AND c.unit = ?",
            [config_id, unit],
        ).fetchall()
    )
    cache = {} if cache is None else cache
    rows = []
    for i, run in enumerate(runs):
        judgement = judge(con, run, runs[:i], rules, unit, cache)
        alerts = judgement.comparison.alerts if judgement.comparison else ()
        u = cached_sample_set(con, run, unit, cache).units.get(unit)
        host = u.samples.get("host_us_per_step", ()) if u else ()
        launches = next((u.counts[m] for m in ("decode_launches", "launches") if u and m in u.counts), None)
        row = {
            "position": i,
            "run_id": run.run_id,
            "recorded_at": run.recorded_at,
            "commit": run.short_commit,
            "dirty": bool(run.dirty),
            "env_id": run.env_id,
            "device_name": run.device_name,
            "torch": run.torch,
            "source": run.source,
            "host_us": float(pd.Series(host).median()) if host else None,
            "launches": launches,
            "decode_tok_s": tok_s.get(run.run_id),
            "verdict": _verdict(judgement),
            "count_alerts": "\n".join(a.message for a in alerts if METRICS[a.metric].kind == "count"),
            "timing_alerts": "\n".join(a.message for a in alerts if METRICS[a.metric].kind == "timing"),
        }
        mine = parts[parts["run_id"] == run.run_id].set_index("part")["us"]
        row |= {f"part:{p}": float(mine[p]) if p in mine.index else None for (p,) in order}
        rows.append(row)
    return pd.DataFrame(rows)


def _verdict(j: Judgement) -> str:
    if j.comparison is None:
        return "not enough history"
    return "regression" if j.regressed else "ok"
