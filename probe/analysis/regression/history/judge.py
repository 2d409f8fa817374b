"""Judging a run against the runs before it, by probe compare's rules (`judge`, `check`, `show`), and the trend of
one configuration (`configs`, `trend`: the explorer's History view)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd

from probe.analysis.regression.compare import Comparison, compare
from probe.analysis.regression.history.store import RunInfo, find_run, has_table, list_runs, runs_of, sample_set
from probe.analysis.regression.identity import ConfigIdentity
from probe.analysis.regression.rules import DEFAULTS, ONE_RUN, CompareRules
from probe.analysis.regression.samples import METRICS, SampleSet, Unit
from probe.errors import ProbeError

SESSIONS_NOTE = (
    "timings span sessions: each run in the window ran in its own process, and a machine's speed drifts "
    "between processes (by a third on a shared 2-core VM), so a timing alert here is a lead, not a verdict; "
    "settle it in one process with `probe ab BASE_ENGINE CURRENT_ENGINE`, which decodes both in lockstep"
)


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
    """The baseline a run is judged against: the previous run's exact counts, every window run's timing samples
    (contended when any window run's were: a contended sample is never a verdict)."""
    units = {}
    for key, unit in previous.units.items():
        mine = [w.units[key] for w in window if key in w.units]
        samples = {metric: tuple(x for u in mine for x in u.samples.get(metric, ())) for metric in unit.samples}
        flags = [u.contended for u in mine]
        contended = True if True in flags else (False if False in flags else None)
        units[key] = Unit(key, unit.counts, unit.ops, samples, contended)
    return SampleSet(source, previous.kind, previous.env, ConfigIdentity(), units)


def cached_sample_set(con: duckdb.DuckDBPyConnection, run: RunInfo, unit: str | None, cache: dict) -> SampleSet:
    """sample_set, read once per (run, unit) for a caller that judges many runs against overlapping windows."""
    if (run.run_id, unit) not in cache:
        cache[(run.run_id, unit)] = sample_set(con, run, unit)
    return cache[(run.run_id, unit)]


def judge(
    con: duckdb.DuckDBPyConnection,
    run: RunInfo,
    earlier: Sequence[RunInfo],
    rules: CompareRules = DEFAULTS,
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
        result = compare(base, samples(run), rules)
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
    rules: CompareRules
    judgements: tuple[Judgement, ...]  # one a configuration, the most recently run first

    @property
    def regressed(self) -> bool:
        return any(j.regressed for j in self.judgements)

    def to_json(self) -> dict:
        return {
            "history": self.path,
            "regression": self.regressed,
            **self.rules.to_json(),
            "configs": [j.to_json() for j in self.judgements],
        }


def check(
    con: duckdb.DuckDBPyConnection, path: str, rules: CompareRules = DEFAULTS, config: str | None = None
) -> HistoryCheck:
    """The latest run of every configuration (those matching `config`), each judged by `judge`."""
    latest = list_runs(con, config)
    if not latest:
        raise ProbeError(f"no run matches --config {config!r}" if config else f"{path}: the history holds no runs")
    judgements = []
    for config_id in dict.fromkeys(r.config_id for r in latest):
        runs = runs_of(con, config_id)
        judgements.append(judge(con, runs[-1], runs[:-1], rules))
    return HistoryCheck(path, rules, tuple(judgements))


def show(con: duckdb.DuckDBPyConnection, text: str, rules: CompareRules = ONE_RUN) -> Judgement:
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
    con: duckdb.DuckDBPyConnection, config_id: str, unit: str, rules: CompareRules = DEFAULTS, cache: dict | None = None
) -> pd.DataFrame:
    """One row a run of the configuration, oldest first: its commit and time, host time per step (the median
    sample, µs) and, for a profiled unit, its mean by part (`part:<name>` columns, µs, adding up to the mean
    wall), launches per step, decode tokens/s, and the verdict `probe history check` gave it then, with its
    alerts on the exact counts and on the timings apart (those compare sessions: a lead, not a verdict)."""
    runs = runs_of(con, config_id)
    parts, order = pd.DataFrame(columns=["run_id", "part", "us"]), []
    if has_table(con, "step_parts"):  # schema 2 on (a reader reads an older file as it is)
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
    """What the History view shows for a run: a regression (the counts are exact even under contention), else
    "contended: not judged" when its timings ran contended, else ok."""
    if j.comparison is None:
        return "not enough history"
    if j.regressed:
        return "regression"
    return "contended: not judged" if any(r.verdict == "contended: not judged" for r in j.comparison.rows) else "ok"
