"""What the explorer's views read, loaded and cached: Streamlit caches each on the path (as bytes: a file name
need not be UTF-8), its stamp (size and mtime) and the sidebar's inputs. Also the typed sources the views take
(Run, TraceSource, History, RanksSource) and the ViewContext every view is handed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import streamlit as st

from probe.analysis.diagnosis.answer import Answer, answer
from probe.analysis.diagnosis.report import Report, load_report
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.ranks import Ranks, TraceFailure, ranks
from probe.analysis.ledger.types import AnalyzeOptions, TraceAnalysis
from probe.analysis.records.results import BenchResults, load_results
from probe.analysis.regression import history
from probe.analysis.regression.compare import compare
from probe.analysis.regression.history import ConfigInfo
from probe.analysis.roofline.step import TokenFlags
from probe.analysis.trace import Trace, load_trace
from probe.errors import ProbeError
from probe.explorer import figures, sources
from probe.explorer.cache import sized_cache
from probe.explorer.sources import Source
from probe.explorer.step_clock import StepClock, step_clock

LOAD_ERRORS = (ProbeError, OSError)  # probe's loaders turn bad input into a one-line ProbeError
HISTORY_WAIT_S = 5.0  # how long the app waits on a history a recording job holds, before saying so
# The caches that hold a value per event, bounded by bytes (probe.explorer.cache), not by count: a trace's table is
# ~70 bytes an event (a few traces of millions of events), one window of a step on one clock ~150 bytes an event
# drawn (a million-event step's windows, ~150 MB each, one after another).
TRACE_CACHE_BYTES = 1 << 30
TIMELINE_CACHE_BYTES = 512 << 20


class Reading(NamedTuple):
    """How traces are read: `probe analyze`'s --steps, --part and --kernel-category, as the sidebar's text."""

    steps: str | None = None
    parts: tuple[str, ...] = ()
    kernel_categories: tuple[str, ...] = ()


class RooflineInputs(NamedTuple):
    """What the sidebar says the roofline needs: a model (a preset, or a config.json or model folder under the
    root, resolved by sources.model_spec) and a device for traces that do not name theirs."""

    model: str | None = None
    device: str | None = None
    tokens: int | None = None  # --tokens, --batch, --context: what a step processed, when the trace does not say
    batch: int | None = None
    context: int | None = None


@dataclass(frozen=True)
class Run:
    results: BenchResults
    report: Report | None
    path: Path


@dataclass(frozen=True)
class TraceSource:
    """A trace's analysis and its file (not the event table, probe.analysis.trace.Trace, which load_events reads)."""

    analysis: TraceAnalysis
    path: Path


@dataclass(frozen=True)
class History:
    configs: list[ConfigInfo]
    path: Path


@dataclass(frozen=True)
class RanksSource:
    ranks: Ranks
    path: Path


Loaded = Run | TraceSource | History | RanksSource


@dataclass(frozen=True)
class ViewContext:
    """What every view is handed besides its source: the root, how traces are read, what the sidebar picked,
    and every label the sidebar lists (a link is offered only to those)."""

    root: Path
    reading: Reading
    source: Source
    baseline: Source | None
    listed: frozenset[str]
    roofline: RooflineInputs = RooflineInputs()


def key(path: Path) -> bytes:
    return os.fsencode(path)


def unkey(path: bytes) -> Path:
    return Path(os.fsdecode(path))


@st.cache_data(max_entries=16, show_spinner="Reading the run")
def load_run(path: bytes, stamp: tuple) -> tuple[BenchResults, Report | None]:
    return load_results(unkey(path)), load_report(unkey(path))


@sized_cache(TRACE_CACHE_BYTES, lambda: st.spinner("Parsing the trace"))
def load_events(path: bytes, stamp: tuple) -> Trace:
    """The trace's event table (probe.analysis.trace), parsed once and shared (sized_cache, like st.cache_resource):
    every later read of it derives."""
    return load_trace(unkey(path))


def analyze_options(root: bytes, path: bytes, reading: Reading) -> AnalyzeOptions:
    """`probe analyze`'s options as the sidebar gives them, with the profiler's cost per event from the sidecar."""
    meta = sources.sidecar(unkey(root), unkey(path))
    cost = meta.event_cost if meta is not None else None
    return AnalyzeOptions.parse(reading.steps, reading.parts, reading.kernel_categories, cost)


@st.cache_resource(max_entries=16, show_spinner="Building the ledger")
def load_analysis(root: bytes, path: bytes, stamp: tuple, reading: Reading) -> TraceAnalysis:
    """Shared, not copied, between sessions and reruns (cache_resource): an analysis is never changed."""
    return analyze(load_events(path, stamp), analyze_options(root, path, reading))


@st.cache_resource(max_entries=16, show_spinner="Diagnosing every step")
def load_answer(root: bytes, path: bytes, stamp: tuple, reading: Reading, roofline: RooflineInputs) -> Answer:
    """The answer for a trace (probe.analysis.diagnosis.answer): never changed once made, so shared like the
    analysis."""
    trace = load_events(path, stamp)
    analysis = load_analysis(root, path, stamp, reading)
    flags = TokenFlags(roofline.tokens, roofline.batch, roofline.context)
    meta = sources.sidecar(unkey(root), unkey(path))
    contended = meta.contended_caveat if meta else None  # said first, as probe analyze says it
    return answer(trace, analysis, model=roofline.model, device_name=roofline.device, flags=flags, contended=contended)


@sized_cache(TIMELINE_CACHE_BYTES, lambda: st.spinner("Laying the step out on one clock"))
def load_timeline(
    root: bytes, path: bytes, stamp: tuple, position: int, reading: Reading, window: tuple[int, int] | None
) -> StepClock:
    analysis = load_analysis(root, path, stamp, reading)
    options = analyze_options(root, path, reading)
    return step_clock(load_events(path, stamp), analysis, position, options, window)


def _source_key(source: Source) -> tuple[bytes, str]:
    return os.fsencode(source.rel), source.kind


@st.cache_data(max_entries=16, show_spinner="Comparing", hash_funcs={Source: _source_key})
def load_comparison(root: bytes, base: Source, base_stamp: tuple, cur: Source, cur_stamp: tuple, reading: Reading):
    sides = [(s, load_source(unkey(root), s, reading)) for s in (base, cur)]
    return compare(*(_samples(unkey(root), s, x) for s, x in sides))


def _samples(root: Path, source: Source, loaded: Loaded):
    """What probe compare reads of a run or a trace; a trace's deviceProperties name its device without a sidecar."""
    if isinstance(loaded, Run):
        return sources.samples_for(root, source, loaded.results)
    if isinstance(loaded, TraceSource):
        devices = load_events(key(loaded.path), sources.stamp(loaded.path)).devices
        return sources.samples_for(root, source, loaded.analysis, devices)
    raise ProbeError(f"{source.rel} is not a run or a trace: nothing to compare")


@st.cache_data(max_entries=8, show_spinner="Reading the history")
def load_history(path: bytes, stamp: tuple) -> list[ConfigInfo]:
    # Opened read-only and closed at once: while the app holds the file, no CI job can record.
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.configs(con)


@st.cache_data(max_entries=16, show_spinner="Judging each run against the runs before it")
def load_trend(path: bytes, stamp: tuple, config_id: str, unit: str) -> pd.DataFrame:
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.trend(con, config_id, unit)


@st.cache_data(max_entries=32, show_spinner=False)
def load_run_judgement(path: bytes, stamp: tuple, run_id: str):
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.show(con, run_id)


@st.cache_data(max_entries=16, show_spinner="Reading the telemetry")
def load_telemetry(path: bytes, stamp: tuple, offset_ns: int | None = None) -> figures.telemetry.TelemetryFrames:
    return figures.telemetry.read_telemetry(unkey(path), offset_ns)


def load_ranks(root: Path, folder: Path, reading: Reading) -> Ranks:
    """The traces of a job folder, each analyzed (and cached) on its own, lined up as ranks
    (probe.analysis.ledger.ranks);
    a trace that cannot be read is named with its error."""
    analyses: list[TraceAnalysis | TraceFailure] = []
    for trace in sources.job_traces(root, folder):
        try:
            analyses.append(load_analysis(key(root), key(trace), sources.stamp(trace), reading))
        except LOAD_ERRORS as e:
            analyses.append(TraceFailure(trace.relative_to(root).as_posix(), str(e)))
    return ranks(analyses)


def load_source(root: Path, source: Source, reading: Reading) -> Loaded:
    """The typed result for a source of any kind; ProbeError for anything unusable."""
    path = sources.source_path(root, source)
    stamp = sources.stamp(path)
    if source.kind == "run":
        return Run(*load_run(key(path), stamp), path)
    if source.kind == "history":
        return History(load_history(key(path), stamp), path)
    if source.kind == "job":
        return RanksSource(load_ranks(root, path, reading), path)
    return TraceSource(load_analysis(key(root), key(path), stamp, reading), path)
