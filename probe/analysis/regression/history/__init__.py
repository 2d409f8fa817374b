"""Run history: every run probe records, in one embedded DuckDB file, and the trend check over it.

One file (`--history PATH`, else $PROBE_HISTORY, else `probe-history.duckdb` in the measuring command's own --out
folder; never the current folder unless named) holds a row per run and, keyed by its `run_id`, everything `probe
compare` needs to judge it again later. The readers (`probe history`) default to ./probe-history.duckdb. The tables are
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
    units       run_id, unit, contended: whether the unit's timings ran while other processes took the CPU
                (probe.analysis.records.telemetry's contention rule; None: not judged), so no check makes them a verdict

A unit is what `probe compare` calls a key: a bench cell, or a profiled trace's step kind prefixed with the
engine and shape it was profiled at. A configuration is what must be equal for two runs to be compared (model,
dtype, seed, warmup, threads, the cells or the profiled shape; not the number of runs); an environment is
what `Environment.identity()` hashes (torch, transformers, device, driver, CPU).

Concurrency. DuckDB lets one process at a time open a file for writing (and none for reading meanwhile), with an
OS lock. A writer opens, appends one run in one transaction and closes; a reader opens read-only, reads, closes.
Whoever finds the file locked retries with a growing, jittered sleep for up to $PROBE_HISTORY_WAIT_S (WAIT_S), so
two CI jobs that record at once both land, and a reader sees whole runs only (a killed writer's transaction is
rolled back when the file is next opened). A file locked for longer is a one-line error naming the holder's PID.

Versions. `meta.schema_version` says which MIGRATIONS a file has had; the next append applies the rest in place,
each in its own transaction, and a reader reads an older file as it is, never writing it. A schema_version that is
not a whole number, or is newer than this probe's, is a one-line error.

Hostile files. Every connection has DuckDB's external access off; a reader's is read-only; and a file whose tables
are views, or that holds macros probe never writes, is refused, so a history cannot make probe read another file.
The file and its write-ahead log must be regular files (a FIFO would hang DuckDB), and a name DuckDB reads as an
in-memory or remote database (`:memory:`, `md:...`) is refused: the runs would be lost.

The package: `store` (the file, its schema, appending, reading, `record`: the append policy of the measuring
commands), `records` (what a run is, importing one), `judge` (probe compare's rules over earlier runs, the trend).
"""

from probe.analysis.regression.history.judge import (
    SESSIONS_NOTE,
    ConfigInfo,
    HistoryCheck,
    Judgement,
    cached_sample_set,
    check,
    configs,
    judge,
    pooled,
    show,
    trend,
)
from probe.analysis.regression.history.records import (
    SKIP_DIRS,
    Ledger,
    RunRecord,
    file_record,
    folder_record,
    now_utc,
    read_ledger,
    records_in,
    results_config,
    run_record,
    trace_config,
)
from probe.analysis.regression.history.store import (
    CELL_COLUMNS,
    DEFAULT_FILE,
    HISTORY_ENV,
    MIGRATIONS,
    SCHEMA_VERSION,
    STEP_COLUMNS,
    TABLES,
    WAIT_ENV,
    WAIT_S,
    Recorded,
    RunInfo,
    append,
    connect,
    find_run,
    has_table,
    history_path,
    list_runs,
    migrate,
    record,
    runs_of,
    sample_set,
    schema_version,
    wait_s,
)
from probe.analysis.regression.identity import ConfigIdentity
from probe.analysis.regression.rules import WINDOW, CompareRules

__all__ = [
    "CELL_COLUMNS",
    "ConfigIdentity",
    "DEFAULT_FILE",
    "HISTORY_ENV",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SESSIONS_NOTE",
    "SKIP_DIRS",
    "STEP_COLUMNS",
    "TABLES",
    "WAIT_ENV",
    "WAIT_S",
    "WINDOW",
    "CompareRules",
    "ConfigInfo",
    "HistoryCheck",
    "Judgement",
    "Ledger",
    "Recorded",
    "RunInfo",
    "RunRecord",
    "append",
    "cached_sample_set",
    "check",
    "configs",
    "connect",
    "file_record",
    "find_run",
    "folder_record",
    "has_table",
    "history_path",
    "judge",
    "list_runs",
    "migrate",
    "now_utc",
    "pooled",
    "read_ledger",
    "record",
    "records_in",
    "results_config",
    "run_record",
    "runs_of",
    "sample_set",
    "schema_version",
    "show",
    "trace_config",
    "trend",
    "wait_s",
]
