"""The history file: where it is, opening it (waiting out another process), its schema, appending a run, reading
runs back, and the append policy the measuring commands share (`record`).

Every connection has DuckDB's external access off, so no table, view or macro in a file can make probe read
another file; a reader opens the file read-only and never writes it (an older schema is read as it is, and migrated
only by the next append); and probe reads only its own schema's tables (a file holding a view or a macro of its own
is refused). (The tables and the locking: probe.analysis.regression.history.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import random
import re
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from probe.analysis.records.environment import Environment, git_state
from probe.analysis.records.files import open_regular, parse_json
from probe.analysis.records.results import BenchResults
from probe.analysis.regression.history.records import (
    RunCommand,
    RunRecord,
    folder_record,
    now_utc,
    read_ledger,
    run_record,
)
from probe.analysis.regression.identity import ConfigIdentity, IdentityKind
from probe.analysis.regression.samples import METRICS, SampleSet, Unit
from probe.errors import ProbeError, first_line

DEFAULT_FILE = "probe-history.duckdb"
HISTORY_ENV = "PROBE_HISTORY"
WAIT_ENV = "PROBE_HISTORY_WAIT_S"
# Why a minute: one run's write takes well under a second, so a minute covers a queue of CI jobs on one runner;
# a lock held longer than that is a stuck process, and saying so beats hanging the job.
WAIT_S = 60.0
SCHEMA_VERSION = 3
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file
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
# 3: whether each unit's timings ran contended (probe.analysis.records.telemetry.contention), so no later check judges
# them.
_SCHEMA_3 = ("CREATE TABLE units (run_id VARCHAR NOT NULL, unit VARCHAR NOT NULL, contended BOOLEAN)",)
MIGRATIONS = (_SCHEMA_1, _SCHEMA_2, _SCHEMA_3)  # MIGRATIONS[v] takes a file from schema v to v + 1


# ---------------------------------------------------------------------------------------------------------
# the file: where it is, opening it (waiting out another process), its schema


# Names DuckDB does not read as a file: ":memory:" (and ":memory:NAME"), and "md:" / "motherduck:" or any other
# "scheme:" it hands to an extension. A history stored there is lost when the command ends, or is not local.
_NOT_A_FILE = re.compile(r"^(:|[A-Za-z][A-Za-z0-9+.-]+:)")
TABLES = ("meta", "runs", "cells", "counts", "op_counts", "samples", "steps", "step_parts", "units")
TABLES_BY_VERSION = {1: TABLES[:6], 2: TABLES[:8], 3: TABLES}  # what each schema version holds


def history_path(flag: str | Path | None, environ=os.environ) -> tuple[Path, bool]:
    """The history file, and whether the user named it (--history or $PROBE_HISTORY) rather than took the default.
    ProbeError for a name DuckDB would not read as a file on this machine (`:memory:`, `md:...`, `s3://...`)."""
    if flag:
        path, named = Path(flag), True
    elif environ.get(HISTORY_ENV):
        path, named = Path(environ[HISTORY_ENV]), True
    else:
        path, named = Path(DEFAULT_FILE), False
    if _NOT_A_FILE.match(str(path)) or not str(path).strip():
        raise ProbeError(
            f"history {str(path)!r}: DuckDB reads that name as an in-memory or remote database, not a file here, so "
            "the runs would be lost; name a file (./NAME for a file whose name has a colon)"
        )
    return path, named


def wait_s(environ=os.environ) -> float:
    try:
        return max(0.0, float(environ.get(WAIT_ENV, WAIT_S)))
    except ValueError:
        raise ProbeError(f"${WAIT_ENV} must be a number of seconds, got {environ[WAIT_ENV]!r}") from None


def _check_file(path: Path) -> None:
    """A file that is there must be a regular file (never a FIFO, which would hang DuckDB) holding a DuckDB
    database, and so must its write-ahead log: say so in one line before DuckDB does in three."""
    if path.is_dir():
        raise ProbeError(f"{path}: a folder, not a history file")
    with open_regular(path, "a history file") as f:
        head = f.read(12)
    # Shorter than a header: maybe another process is creating it this instant; DuckDB (under its lock) decides.
    if len(head) == 12 and head[8:12] != DUCKDB_MAGIC:
        raise ProbeError(f"{path}: not a DuckDB database, so not a probe history")
    wal = path.with_name(path.name + ".wal")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.stat(wal).st_mode):
            raise ProbeError(f"{wal}: not a regular file, so not the history's write-ahead log")


def _open(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    """A connection with external access off (no file but this one is read), waiting out another writer's lock."""
    deadline, delay = time.monotonic() + wait, 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config={"enable_external_access": False})
        except duckdb.Error as e:  # a corrupt file raises duckdb.Error itself, a lock an IOException
            message = str(e)
            if not isinstance(e, duckdb.IOException) or "lock" not in message.lower():
                raise ProbeError(f"cannot open {path}: {first_line(e)}") from None
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", message)
                who = f" (PID {holder.group(1)})" if holder else ""
                raise ProbeError(
                    f"{path}: locked by another process{who} for more than {wait:g} s; "
                    f"${WAIT_ENV} sets how long to wait"
                ) from None
        time.sleep(delay * random.uniform(0.5, 1.5))  # jittered, so two waiters do not retry in step
        delay = min(delay * 2, 0.5)


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """0 for an empty database; ProbeError, in one line, for a DuckDB file that is not a probe history: no meta
    table, a schema_version that is not a whole number from 1 to SCHEMA_VERSION, a table of probe's schema missing
    or replaced by a view, or a view or macro probe never writes."""
    objects = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    kinds = dict(objects)
    if not kinds:
        return 0
    if "meta" not in kinds:
        raise ProbeError("a DuckDB database without probe's tables, not a probe history")
    if kinds["meta"] != "BASE TABLE":
        raise ProbeError(f"its meta is a {kinds['meta']}, not probe's table: not a probe history")
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise ProbeError("a DuckDB database without a schema_version, not a probe history")
    text = str(row[0]).strip()
    if not text.isdigit() or not 1 <= int(text) <= 10**6:
        raise ProbeError(f"schema_version {row[0]!r} is not a schema probe writes: not a probe history")
    found = int(text)
    if found > SCHEMA_VERSION:
        raise ProbeError(f"written by a newer probe (schema {found}; this probe knows up to {SCHEMA_VERSION})")
    for table in TABLES_BY_VERSION[found]:
        if kinds.get(table) != "BASE TABLE":
            what = "missing" if table not in kinds else f"a {kinds[table]}"
            raise ProbeError(f"its {table} table is {what}, not probe's table: not a probe history")
    views = sorted(name for name, kind in objects if kind != "BASE TABLE")
    macros = con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE NOT internal").fetchall()
    if views or macros:
        names = ", ".join(views + sorted(m[0] for m in macros))
        raise ProbeError(f"it holds views or macros probe never writes ({names}): not a probe history")
    return found


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the file to SCHEMA_VERSION, one transaction a step; returns the version it had."""
    found = schema_version(con)
    for version in range(found, SCHEMA_VERSION):
        con.begin()
        for statement in MIGRATIONS[version]:
            con.execute(statement)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(version + 1)])
        con.commit()
    return found


def has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether the file's schema has `table` (a reader reads an older schema as it is)."""
    found = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' AND table_name = ?", [table]
    ).fetchone()
    return bool(found and found[0])


@contextlib.contextmanager
def connect(path: str | Path, write: bool = False, wait: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the history at `path`, closed when the block ends. Writing creates the file (and its
    folder) and migrates an older schema to SCHEMA_VERSION; reading needs the file, opens it read-only and reads
    its schema as it is. ProbeError, in one line, for a missing file, one that is not a regular file or not a probe
    history, a newer schema, or a lock held past `wait` seconds."""
    path = Path(path)
    wait = wait_s() if wait is None else wait
    if os.path.lexists(path):
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
            if write and version != SCHEMA_VERSION:
                migrate(con)
        except ProbeError as e:
            raise ProbeError(f"{path}: {e}") from None
        yield con
    except duckdb.Error as e:
        raise ProbeError(f"{path}: {first_line(e)}") from None
    finally:
        con.close()


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
        "config_json": json.dumps(record.config.to_json(), sort_keys=True),
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
    frames["units"] = pd.DataFrame(
        [(run_id, key, unit.contended) for key, unit in samples.units.items()], columns=["run_id", "unit", "contended"]
    )
    steps, parts = [], []
    for ledger in record.ledgers:
        for s in ledger.analysis.steps:
            name = f"{ledger.prefix} {s.kind}"
            steps.append({"run_id": run_id, "unit": name} | {k: getattr(s, k) for k in STEP_COLUMNS})
            parts += [(run_id, name, s.position, part, ns) for part, ns in s.purpose_ns.items()]
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
# reading


@dataclass(frozen=True)
class RunInfo:
    """One row of `runs`, the columns the commands show."""

    run_id: str
    recorded_at: dt.datetime  # UTC
    command: RunCommand
    source: str
    kind: IdentityKind
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


def _checked(run: RunInfo, table: str, metric: str, kind: str, value) -> float:
    """A stored count or sample as compare reads it: a metric probe knows, of the table's kind, and a finite value
    that is not negative (a count or a time). ProbeError, in one line, for anything else."""
    known = METRICS.get(metric)
    if known is None or known.kind != kind:
        raise ProbeError(f"run {run.run_id}: {table} holds metric {metric!r}, not a {kind} probe records")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ProbeError(f"run {run.run_id}: {table} holds {metric} = {value!r}, not a finite figure >= 0")
    return float(value)


def sample_set(con: duckdb.DuckDBPyConnection, run: RunInfo, unit: str | None = None) -> SampleSet:
    """A stored run in probe compare's shape (optionally one unit of it), every figure checked as it is read."""
    only = "AND unit = ?" if unit else ""
    args = [run.run_id] + ([unit] if unit else [])
    units: dict[str, dict] = {}

    def of(key: str) -> dict:
        return units.setdefault(key, {"counts": {}, "ops": {}, "samples": {}, "contended": None})

    for key, metric, value in con.execute(
        f"SELECT unit, metric, value FROM counts WHERE run_id = ? {only} ORDER BY rowid", args
    ).fetchall():
        of(key)["counts"][metric] = _checked(run, "counts", metric, "count", value)
    for key, metric, op, n in con.execute(
        f"SELECT unit, metric, op, count FROM op_counts WHERE run_id = ? {only} ORDER BY rowid", args
    ).fetchall():
        of(key)["ops"].setdefault(metric, {})[op] = _checked(run, "op_counts", metric, "count", n)
    for key, metric, value in con.execute(
        f"SELECT unit, metric, value FROM samples WHERE run_id = ? {only} ORDER BY unit, metric, i", args
    ).fetchall():
        found = of(key)["samples"]
        found[metric] = (*found.get(metric, ()), _checked(run, "samples", metric, "timing", value))
    if has_table(con, "units"):  # schema 3 on: whether the unit's timings ran contended
        for key, contended in con.execute(
            f"SELECT unit, contended FROM units WHERE run_id = ? {only}", args
        ).fetchall():
            if key in units:
                of(key)["contended"] = contended if isinstance(contended, bool) else None
    row = con.execute("SELECT env_json FROM runs WHERE run_id = ?", [run.run_id]).fetchone()
    if row is None:  # the run was listed, so only a file changed under the reader lacks it
        raise ProbeError(f"run {run.run_id}: not in the runs table")
    text = row[0] or "{}"
    try:
        env = Environment.from_json(parse_json(text, f"run {run.run_id}'s env_json"))
    except ValueError as e:
        raise ProbeError(f"run {run.run_id}: {e}") from None
    source = f"{run.run_id} @ {run.short_commit}"
    found = {k: Unit(k, u["counts"], u["ops"], u["samples"], u["contended"]) for k, u in units.items()}
    return SampleSet(source, run.kind, env, ConfigIdentity(), found)


# ---------------------------------------------------------------------------------------------------------
# recording: the append policy the measuring commands share (probe run, bench, baseline, profile)


@dataclass(frozen=True)
class Recorded:
    """What recording a run did: the command's exit code after it, and the one line to print on stderr."""

    code: int
    message: str


NOT_RECORDED = "history: this run is not recorded (name a history file with --history PATH or $PROBE_HISTORY)"


def record(
    flag: str | Path | None,
    command: RunCommand,
    code: int = 0,
    results: BenchResults | None = None,
    traces: Sequence[Path] = (),
    source: Path | None = None,
    folder: Path | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
    environ=os.environ,
) -> Recorded:
    """Append this run (bench `results`, profiled `traces`, or a run `folder` read back) to the history `flag`
    names, else $PROBE_HISTORY, else DEFAULT_FILE in `home` (the folder the command writes its own files to);
    with none of them nothing is written (a history appears only where the user asked for files). After the run's
    own files are written, with the commit of the current folder's repository. A failed write never costs the run
    its files: the exit code is unchanged, unless the user named the history file (then 2, or the code the command
    already had), so that CI notices. The message says where the run went, or that it went nowhere."""
    named = bool(flag or environ.get(HISTORY_ENV))
    if not named and home is None:
        return Recorded(code, NOT_RECORDED)
    try:
        path, _ = history_path(flag if named or home is None else home / DEFAULT_FILE, environ)
    except ProbeError as e:
        return Recorded(code or 2, f"probe: history not updated: {e}")
    try:
        commit, dirty = git_state(cwd or Path.cwd())
        at = now_utc()
        if folder is not None:
            rec = folder_record(folder, command, commit=commit, dirty=dirty, recorded_at=at)
        else:
            ledgers = [read_ledger(t) for t in traces]
            rec = run_record(command, source, results, ledgers, commit=commit, dirty=dirty, recorded_at=at)
        run_id = append(path, rec)
    except (ProbeError, OSError) as e:
        return Recorded((code or 2) if named else code, f"probe: history not updated: {e}")
    done = f"recorded run {run_id}" if run_id else "this run was already recorded"
    return Recorded(code, f"history: {done} in {path}")
