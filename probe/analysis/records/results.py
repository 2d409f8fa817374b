"""Typed bench results and their files: `results.json` (everything), `cells.parquet` and `cells.csv` (one row a
cell, the same columns).

A cell either finished (`Cell`, `status: "ok"`) or raised (`FailedCell`, `status: "failed"` and its `error`): an
OOM, a bad config, a dead worker. results.json lists both under "cells"; `BenchResults.cells` holds the finished
ones (what every analysis reads) and `BenchResults.failed` the others.

The serving figures follow vLLM's `benchmark_serving` definitions (docs/sweeps.md, "Metrics"): a run is one
request, TTFT its time to first token, ITL the gap between consecutive tokens pooled over every run, TPOT a run's
decode time over its N-1 tokens after the first, E2E a run's whole latency.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pandas as pd

from probe.analysis.records.environment import Clock, Environment
from probe.analysis.records.files import atomic_set, read_json
from probe.analysis.records.telemetry import TelemetrySummary
from probe.errors import ProbeError
from probe.settings import BenchConfig

RESULTS_FILE, CELLS_FILE, CELLS_CSV = "results.json", "cells.parquet", "cells.csv"
# The files `BenchResults.save` writes, as one set (probe.analysis.records.files.atomic_set): results.json, what
# readers and
# --resume trust, last.
SAVED_FILES = (CELLS_FILE, CELLS_CSV, RESULTS_FILE)
# 5: the environment's commit and dirty flag apart (`git_commit` with a "-dirty" suffix before); 4: failed cells,
# each cell's host and device, contention; 3: the parity verdict and the serving figures; 2: telemetry typed on the
# cell, the clock anchor
SCHEMA_VERSION = 5
OK: Literal["ok"] = "ok"  # a finished cell's status
FAILED: Literal["failed"] = "failed"  # a cell that raised
ParityMode = Literal["exact", "teacher-forced"]
PeakMemKind = Literal["cuda_allocated", "cpu_rss", "not measured"]
# Integer ranges a cell's counts can have: the run history stores them as 32-bit INTEGER columns (peak memory as
# BIGINT), and no sweep comes near either bound.
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


@dataclass(frozen=True, order=True)
class CellKey:
    """A cell's identity: one engine at one prompt length, token count and batch. The one spelling of it: `str`
    is "cached p16 n32 b4" (what probe compare and the run history key a cell by; " b1" is left out), `label` is
    "cached p16 b4" (how messages name a cell within one sweep), `shape` is "p16 n32 b4" (two engines' cells held
    to each other, probe ab)."""

    engine: str
    prompt_tokens: int
    new_tokens: int
    batch: int = 1

    @property
    def shape(self) -> str:
        return f"p{self.prompt_tokens} n{self.new_tokens}" + (f" b{self.batch}" if self.batch > 1 else "")

    @property
    def label(self) -> str:
        return f"{self.engine} p{self.prompt_tokens}" + (f" b{self.batch}" if self.batch > 1 else "")

    def __str__(self) -> str:
        return f"{self.engine} {self.shape}"


def decode_tok_s(batch: int, steps_ms: Sequence[float]) -> float | None:
    """One run's decode tokens/s: batch x decode steps / decode time (prefill excluded); None for no time."""
    total = sum(steps_ms)
    return batch * len(steps_ms) / (total / 1e3) if total > 0 else None


@dataclass(frozen=True)
class Parity:
    """A cell's tokens against naive's (probe.capture.parity says how each mode judges)."""

    mode: ParityMode  # exact (float32: free-running tokens identical); teacher-forced (half precision)
    match: bool
    first_divergence_step: int | None  # first token (0 = the prefill's) whose argmax is not naive's; None: none
    differing_steps: int  # steps whose argmax is not naive's token (teacher-forced: near-ties when it matches)
    worst_gap_ulps: float | None  # teacher-forced: the largest logit gap at those steps, in units in the last place
    nonfinite_steps: int  # steps with a NaN or inf logit, in this engine's pass or naive's reference


@dataclass(frozen=True)
class Cell:
    """One engine at one prompt length. Times in ms; medians unless the name says otherwise."""

    engine: str
    prompt_tokens: int
    new_tokens: int
    batch: int
    runs: int
    ttft_ms: float  # median over runs of prefill + first token
    itl_p50_ms: float  # median over every decode step of every run
    itl_p90_ms: float
    decode_tok_s: float  # median over runs of batch * (N-1) / decode time; prefill excluded
    total_ms: float  # mean wall time of a run
    peak_mem_bytes: int  # CUDA: max_memory_allocated; CPU: process peak RSS during the recorded runs
    peak_mem_kind: PeakMemKind  # probe ab measures none
    spread_pct: float  # run-to-run spread: (max - min) / median of the per-run decode tok/s, in %
    tokens_match_naive: bool | None  # the parity verdict (Parity.match); None when no naive reference exists
    deterministic: bool  # every recorded run produced the same tokens
    sync_overhead_ms: float | None  # CUDA: cost per step of the per-step sync (Part 1's 0.23 ms); ABBA pairs, median
    recomputes: bool = False  # the engine runs the whole sequence every step (no cache): naive
    # Parity with naive, typed (Parity's fields); None where no reference exists (old files: None too).
    parity_mode: ParityMode | None = None
    first_divergence_step: int | None = None
    differing_steps: int = 0
    worst_gap_ulps: float | None = None
    nonfinite_steps: int = 0
    # Serving figures, vLLM's benchmark_serving definitions (docs/sweeps.md, "Metrics"); None in older files.
    ttft_p50_ms: float | None = None  # over runs (= ttft_ms)
    ttft_p99_ms: float | None = None
    itl_mean_ms: float | None = None  # over every decode step of every run
    itl_std_ms: float | None = None  # population standard deviation, as numpy and vLLM take it
    itl_p95_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_ms: float | None = None  # mean over runs of (e2e - TTFT) / (N - 1): time per output token after the first
    e2e_ms: float | None = None  # mean over runs of a run's whole latency (= total_ms)
    decode_ops: int | None = None  # aten ops dispatched by one decode forward (None: compiled/captured step)
    prefill_ops: int | None = None
    decode_ops_by_op: dict[str, int] = field(default_factory=dict)
    prefill_ops_by_op: dict[str, int] = field(default_factory=dict)
    ttft_runs_ms: list[float] = field(default_factory=list)
    itl_runs_ms: list[list[float]] = field(default_factory=list)  # raw per-step latencies, one list a run
    total_runs_ms: list[float] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)  # first recorded run, one list a sequence
    telemetry: TelemetrySummary | None = None  # over the recorded runs' decode phases
    decode_windows_ns: list[list[int]] = field(default_factory=list)  # each recorded run's decode phase
    # Where it ran (None in files written before schema 4): the host's name and the device ("cpu", "cuda:3": on a
    # Ray cluster, the GPU's index on that host); on a Ray cluster the node's id too (None on a local run).
    host: str | None = None
    device: str | None = None
    node: str | None = None
    attn: str | None = None  # the attention implementation the model ran (--attn, resolved); None in older files
    # Contention (probe.analysis.records.telemetry.contention): the CPU other processes used beside this one over the
    # decode phases, in cores; and whether that passes the rule (None: not judged, telemetry off or too short).
    other_cpu_cores: float | None = None
    contended: bool | None = None
    status: Literal["ok"] = OK  # a finished cell; FailedCell is the other kind

    @property
    def key(self) -> CellKey:
        return CellKey(self.engine, self.prompt_tokens, self.new_tokens, self.batch)

    @property
    def label(self) -> str:
        return self.key.label

    @classmethod
    def from_runs(
        cls,
        engine: str,
        prompt_tokens: int,
        batch: int,
        ttft_ms: list[float],
        itl_ms: list[list[float]],
        total_ms: list[float],
        tokens: list[list[list[int]]],
        peak_mem_bytes: int,
        peak_mem_kind: PeakMemKind,
        sync_overhead_ms: float | None = None,
        parity: Parity | None = None,
    ) -> Cell:
        """A cell from its runs; `parity` is the verdict of probe.capture.parity (None: no naive reference)."""
        new_tokens = len(itl_ms[0]) + 1
        # a run with no decode time has no rate: none can (its steps are timed), so none is left out in practice
        tok_s = [t for steps in itl_ms if (t := decode_tok_s(batch, steps)) is not None]
        flat = np.asarray([x for steps in itl_ms for x in steps], dtype=np.float64)
        mid = statistics.median(tok_s)
        tpot = [(total - ttft) / (new_tokens - 1) for total, ttft in zip(total_ms, ttft_ms, strict=True)]
        return cls(
            engine=engine,
            prompt_tokens=prompt_tokens,
            new_tokens=new_tokens,
            batch=batch,
            runs=len(ttft_ms),
            ttft_ms=statistics.median(ttft_ms),
            itl_p50_ms=float(np.percentile(flat, 50)),
            itl_p90_ms=float(np.percentile(flat, 90)),
            decode_tok_s=mid,
            total_ms=statistics.fmean(total_ms),
            peak_mem_bytes=peak_mem_bytes,
            peak_mem_kind=peak_mem_kind,
            spread_pct=100 * (max(tok_s) - min(tok_s)) / mid,
            tokens_match_naive=None if parity is None else parity.match,
            deterministic=all(t == tokens[0] for t in tokens),
            sync_overhead_ms=sync_overhead_ms,
            parity_mode=None if parity is None else parity.mode,
            first_divergence_step=None if parity is None else parity.first_divergence_step,
            differing_steps=0 if parity is None else parity.differing_steps,
            worst_gap_ulps=None if parity is None else parity.worst_gap_ulps,
            nonfinite_steps=0 if parity is None else parity.nonfinite_steps,
            ttft_p50_ms=float(np.percentile(ttft_ms, 50)),
            ttft_p99_ms=float(np.percentile(ttft_ms, 99)),
            itl_mean_ms=float(flat.mean()),
            itl_std_ms=float(flat.std()),
            itl_p95_ms=float(np.percentile(flat, 95)),
            itl_p99_ms=float(np.percentile(flat, 99)),
            tpot_ms=statistics.fmean(tpot),
            e2e_ms=statistics.fmean(total_ms),
            ttft_runs_ms=ttft_ms,
            itl_runs_ms=itl_ms,
            total_runs_ms=total_ms,
            tokens=tokens[0],
        )

    @property
    def parity(self) -> Parity | None:
        if self.parity_mode is None or self.tokens_match_naive is None:
            return None
        return Parity(
            self.parity_mode,
            self.tokens_match_naive,
            self.first_divergence_step,
            self.differing_steps,
            self.worst_gap_ulps,
            self.nonfinite_steps,
        )

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["telemetry"] = self.telemetry.to_json() if self.telemetry else None
        return out

    @classmethod
    def from_json(cls, doc) -> Cell:
        """A cell as results.json holds it, its types checked field by field; fields it does not know are
        ignored. ValueError, naming the field, for anything malformed or impossible (a NaN or negative time)."""
        if not isinstance(doc, dict):
            raise ValueError(f"a cell is a JSON object, not {type(doc).__name__}")
        known = {k: v for k, v in doc.items() if k in _CELL_FIELDS}
        extra = doc.get("extra")
        if isinstance(extra, dict):  # schema 1 kept these two in a loose dict
            known.setdefault("telemetry", extra.get("telemetry"))
            known.setdefault("decode_windows_ns", extra.get("decode_windows_ns") or [])
        try:
            cell = msgspec.convert(known, cls)
        except msgspec.ValidationError as e:
            raise ValueError(str(e)) from None
        cell.check()
        return cell

    def check(self) -> None:
        """Values a measurement can have: times finite and not negative, counts and sizes within their ranges
        (_RANGES). ValueError naming the field."""
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            values = value if isinstance(value, list) else [value]
            flat = [x for v in values for x in (v if isinstance(v, list) else [v])]
            if any(not math.isfinite(x) or x < 0 for x in flat if x is not None):
                raise ValueError(f"impossible value in `{name}`: {value!r} (times are finite and >= 0)")
        _check_ranges(self)
        for name in ("decode_ops_by_op", "prefill_ops_by_op"):
            if any(not 0 <= n <= INT32_MAX for n in getattr(self, name).values()):
                raise ValueError(f"impossible value in `{name}`: op counts are 0..{INT32_MAX}")


# What each integer of a cell can be; the first four are a cell's key (FailedCell's too).
_RANGES = {
    "prompt_tokens": (1, INT32_MAX),
    "new_tokens": (2, INT32_MAX),
    "batch": (1, INT32_MAX),
    "runs": (1, INT32_MAX),
    "peak_mem_bytes": (0, INT64_MAX),
    "decode_ops": (0, INT32_MAX),
    "prefill_ops": (0, INT32_MAX),
    "first_divergence_step": (0, INT32_MAX),
    "differing_steps": (0, INT32_MAX),
    "nonfinite_steps": (0, INT32_MAX),
}


def _check_ranges(cell: Cell | FailedCell) -> None:
    for name, (low, high) in _RANGES.items():
        value = getattr(cell, name, None)
        if value is not None and not low <= value <= high:
            raise ValueError(f"impossible value in `{name}`: {value!r} (it is {low}..{high})")


@dataclass(frozen=True)
class FailedCell:
    """A cell that raised instead of finishing: which one, where, and the error in one line."""

    engine: str
    prompt_tokens: int
    new_tokens: int
    batch: int
    error: str  # "OutOfMemoryError: CUDA out of memory ...", "the node died under this cell (Ray: ...)"
    host: str | None = None
    device: str | None = None
    node: str | None = None  # the Ray node's id, on a cluster
    attn: str | None = None
    status: Literal["failed"] = FAILED

    @classmethod
    def of(cls, key: CellKey, error: str, *, host: str | None = None, device: str | None = None,
           node: str | None = None, attn: str | None = None) -> FailedCell:  # fmt: skip
        return cls(key.engine, key.prompt_tokens, key.new_tokens, key.batch, error, host, device, node, attn)

    @property
    def key(self) -> CellKey:
        return CellKey(self.engine, self.prompt_tokens, self.new_tokens, self.batch)

    @property
    def label(self) -> str:
        return self.key.label

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> FailedCell:
        known = {k: v for k, v in doc.items() if k in _FAILED_FIELDS}
        try:
            failed = msgspec.convert(known, cls)
        except msgspec.ValidationError as e:
            raise ValueError(str(e)) from None
        _check_ranges(failed)
        return failed


_FAILED_FIELDS = frozenset(f.name for f in dataclasses.fields(FailedCell))


# The times a cell holds, each finite and not negative (its integers: _RANGES).
_NON_NEGATIVE = (
    "ttft_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "decode_tok_s",
    "total_ms",
    "spread_pct",
    "ttft_runs_ms",
    "itl_runs_ms",
    "total_runs_ms",
)


_CELL_FIELDS = frozenset(f.name for f in dataclasses.fields(Cell))
RAW_FIELDS = (
    "ttft_runs_ms",
    "itl_runs_ms",
    "total_runs_ms",
    "tokens",
    "decode_ops_by_op",
    "prefill_ops_by_op",
    "telemetry",
    "decode_windows_ns",
)


@dataclass
class BenchResults:
    cells: list[Cell]
    env: Environment
    config: BenchConfig  # settled: its model and dtype are the ones the sweep ran
    complete: bool = False
    clock: Clock | None = None  # lines telemetry rows (perf_counter_ns) up with traces (epoch ns)
    failed: list[FailedCell] = field(default_factory=list)  # cells that raised; results.json lists them after `cells`

    @property
    def dtype(self) -> str:
        """The run's dtype, one answer for every reader: the one the environment recorded where the model was built
        (the settled config's, written by the same process), else the config's."""
        return self.env.dtype or self.config.dtype

    @property
    def contention(self) -> str | None:
        """One line naming the cells measured while other processes took the CPU (Cell.contended,
        probe.analysis.records.telemetry's rule), as `probe run`, report.md and the explorer say it; None if none."""
        contended = [c for c in self.cells if c.contended]
        if not contended:
            return None
        names = ", ".join(f"{c.label} ({c.other_cpu_cores or 0:.2f})" for c in contended)
        return (
            f"{len(contended)} of {len(self.cells)} cells ran while other processes used the CPU "
            f"(cores beside this one: {names}); their timings are unreliable (docs/sweeps.md, Contention)"
        )

    def to_json(self) -> dict:
        return {
            "version": SCHEMA_VERSION,
            "complete": self.complete,
            "config": self.config.to_json(),
            "env": self.env.to_json(),
            "clock": dataclasses.asdict(self.clock) if self.clock else None,
            "cells": [c.to_json() for c in self.cells] + [f.to_json() for f in self.failed],
        }

    def combined(self, others: list[BenchResults]) -> BenchResults:
        """These results with the cells (and failed cells) of `others` after them, as one run: this one's env,
        config and clock; complete when every part is."""
        return BenchResults(
            self.cells + [c for r in others for c in r.cells],
            self.env,
            self.config,
            self.complete and all(r.complete for r in others),
            self.clock,
            self.failed + [f for r in others for f in r.failed],
        )

    def save(self, folder: Path) -> None:
        """Write results.json, cells.parquet and cells.csv as one set (probe.analysis.records.files.atomic_set): a
        Ctrl-C
        never leaves half a file, and a failed write (a full disk) leaves the folder's previous set whole."""
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_set(folder, SAVED_FILES) as paths:
            self.write(paths)

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the saved files to `paths` (SAVED_FILES' names -> where): what `save` and a sweep's save, which
        adds its telemetry to the same set, fill their temp files with."""
        with open(paths[RESULTS_FILE], "w", encoding="utf-8") as f:
            f.write(json.dumps(self.to_json(), indent=1))
        frame = self.cells_frame(failed=True)
        with open(paths[CELLS_FILE], "wb") as f:
            frame.to_parquet(f, index=False)
        with open(paths[CELLS_CSV], "w", encoding="utf-8", newline="") as f:
            frame.to_csv(f, index=False)

    def cells_frame(self, failed: bool = False) -> pd.DataFrame:
        """One row a finished cell; with `failed`, then one a failed cell (its figures empty) and an `error`
        column: what cells.parquet and cells.csv hold."""
        columns = [f.name for f in dataclasses.fields(Cell) if f.name not in RAW_FIELDS]
        rows = [{k: getattr(c, k) for k in columns} for c in self.cells]
        if not failed:
            return pd.DataFrame(rows, columns=columns)
        rows += [{k: getattr(f, k, None) for k in columns} for f in self.failed]
        errors = [None] * len(self.cells) + [f.error for f in self.failed]
        return pd.DataFrame(rows, columns=columns).assign(error=pd.Series(errors, dtype=object))


def load_results(path: str | Path) -> BenchResults:
    """Read a results.json (or the folder holding one): its schema version, and every field's type and range,
    checked. Raises ProbeError with a one-line reason."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    if not p.exists() and not p.is_symlink():
        raise ProbeError(f"no results file at {p}")
    data = read_json(p, "results file")
    _check_outline(p, data)
    try:
        env = Environment.from_json(data["env"])
        config = BenchConfig.from_json(data.get("config", {}))
    except ValueError as e:
        raise ProbeError(f"{p}: malformed results file: {e}") from None
    cells, failed = _read_cells(p, data["cells"])
    return BenchResults(cells, env, config, data.get("complete") is True, _read_clock(p, data), failed)


def _check_outline(p: Path, data: object) -> None:
    """A results file's outline: an object with cells and env, a schema version this probe reads, `complete` a
    boolean; ProbeError naming what is wrong otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or "env" not in data:
        raise ProbeError(f"{p} is not a probe results file (expected an object with cells and env)")
    for key in ("env", "config"):
        if not isinstance(data.get(key, {}), dict):
            raise ProbeError(f"{p}: malformed results file: {key} is a {type(data[key]).__name__}, not an object")
    version = data.get("version")
    if type(version) is not int or version < 1:
        raise ProbeError(f"{p}: malformed results file: version {version!r} is not a schema version (1, 2, ...)")
    if version > SCHEMA_VERSION:
        raise ProbeError(f"{p}: written by a newer probe (schema {version}; this probe reads up to {SCHEMA_VERSION})")
    if not isinstance(data.get("complete", False), bool):
        raise ProbeError(f"{p}: malformed results file: complete is {data['complete']!r}, not true or false")


def _read_cells(p: Path, docs: list) -> tuple[list[Cell], list[FailedCell]]:
    """The measured cells and the failed ones, in file order; ProbeError naming the first malformed one."""
    cells, failed = [], []
    for i, c in enumerate(docs):
        try:
            if isinstance(c, dict) and c.get("status") == FAILED:
                failed.append(FailedCell.from_json(c))
            else:
                cells.append(Cell.from_json(c))
        except ValueError as e:
            raise ProbeError(f"{p}: malformed cell {i}: {e}") from None
    return cells, failed


def _read_clock(p: Path, data: dict) -> Clock | None:
    """The run's clock (older files kept it under `extra`); None when it recorded none."""
    extra = data.get("extra")
    clock = data.get("clock") or (extra.get("clock") if isinstance(extra, dict) else None)
    try:
        return msgspec.convert(clock, Clock) if clock is not None else None
    except msgspec.ValidationError as e:
        raise ProbeError(f"{p}: malformed clock: {e}") from None
