"""Typed bench results and their files: `results.json` (everything), `cells.parquet` and `cells.csv` (one row a
cell, the same columns).

A cell either finished (`Cell`, `status: "ok"`) or raised (`FailedCell`, `status: "failed"` and its `error`): an
OOM, a bad config, a dead worker. results.json lists both under "cells"; `BenchResults.cells` holds the finished
ones (what every analysis reads) and `BenchResults.failed` the others.

The serving figures follow vLLM's `benchmark_serving` definitions (README, "Metrics"): a run is one request, TTFT
its time to first token, ITL the gap between consecutive tokens pooled over every run, TPOT a run's decode time
over its N-1 tokens after the first, E2E a run's whole latency.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from probe.analysis.files import atomic_path, atomic_write
from probe.analysis.telemetry import TelemetrySummary
from probe.errors import ProbeError

RESULTS_FILE, CELLS_FILE, CELLS_CSV = "results.json", "cells.parquet", "cells.csv"
# 4: failed cells, each cell's host and device, contention; 3: the parity verdict and the serving figures; 2: telemetry
# typed on the cell, the clock anchor
SCHEMA_VERSION = 4
OK, FAILED = "ok", "failed"  # a cell's status


def decode_tok_s(batch: int, steps_ms: Sequence[float]) -> float | None:
    """One run's decode tokens/s: batch x decode steps / decode time (prefill excluded); None for no time."""
    total = sum(steps_ms)
    return batch * len(steps_ms) / (total / 1e3) if total > 0 else None


@dataclass(frozen=True)
class Clock:
    """Both clocks read at one instant: steps and telemetry use perf_counter_ns, traces use the epoch."""

    perf_counter_ns: int
    epoch_ns: int


@dataclass(frozen=True)
class Parity:
    """A cell's tokens against naive's (probe.capture.parity says how each mode judges)."""

    mode: str  # "exact" (float32: free-running tokens identical) | "teacher-forced" (half precision)
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
    peak_mem_kind: str  # "cuda_allocated" | "cpu_rss"
    spread_pct: float  # run-to-run spread: (max - min) / median of the per-run decode tok/s, in %
    tokens_match_naive: bool | None  # the parity verdict (Parity.match); None when no naive reference exists
    deterministic: bool  # every recorded run produced the same tokens
    sync_overhead_ms: float | None  # CUDA: cost per step of the per-step sync (Part 1's 0.23 ms); ABBA pairs, median
    recomputes: bool = False  # the engine runs the whole sequence every step (no cache): naive
    # Parity with naive, typed (Parity's fields); None where no reference exists (old files: None too).
    parity_mode: str | None = None
    first_divergence_step: int | None = None
    differing_steps: int = 0
    worst_gap_ulps: float | None = None
    nonfinite_steps: int = 0
    # Serving figures, vLLM's benchmark_serving definitions (README, "Metrics"); None in files written before them.
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
    # Contention (probe.analysis.telemetry.contention): the CPU other processes used beside this one over the
    # decode phases, in cores; and whether that passes the rule (None: not judged, telemetry off or too short).
    other_cpu_cores: float | None = None
    contended: bool | None = None
    status: str = OK  # a finished cell; FailedCell is the other kind

    @property
    def key(self) -> tuple[str, int, int, int]:
        return self.engine, self.prompt_tokens, self.new_tokens, self.batch

    @property
    def label(self) -> str:
        return cell_label(self)

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
        peak_mem_kind: str,
        reference: list[list[int]] | None,
        sync_overhead_ms: float | None = None,
        parity: Parity | None = None,
    ) -> Cell:
        """A cell from its runs. `parity` is the verdict of probe.capture.parity; without one, `reference` (naive's
        tokens, one list a sequence) gives an exact verdict on the first run's tokens, and None gives none."""
        if parity is None and reference is not None:
            parity = exact_parity(tokens[0], reference)
        new_tokens = len(itl_ms[0]) + 1
        tok_s = [decode_tok_s(batch, steps) for steps in itl_ms]
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
            **_parity_fields(parity),
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
        """Times and sizes a measurement can have: finite, and not negative. ValueError naming the field."""
        if self.status != OK:
            raise ValueError(f"a measured cell has status {OK!r}, not {self.status!r}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            values = value if isinstance(value, list) else [value]
            flat = [x for v in values for x in (v if isinstance(v, list) else [v])]
            if any(not math.isfinite(x) or x < 0 for x in flat if x is not None):
                raise ValueError(f"impossible value in `{name}`: {value!r} (times and sizes are finite and >= 0)")


def cell_label(cell: Cell | FailedCell) -> str:
    """ "cached p16", or "batched p16 b4" past batch 1: how messages name a cell."""
    return f"{cell.engine} p{cell.prompt_tokens}" + (f" b{cell.batch}" if cell.batch > 1 else "")


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
    status: str = FAILED

    @property
    def key(self) -> tuple[str, int, int, int]:
        return self.engine, self.prompt_tokens, self.new_tokens, self.batch

    @property
    def label(self) -> str:
        return cell_label(self)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> FailedCell:
        known = {k: v for k, v in doc.items() if k in _FAILED_FIELDS}
        try:
            return msgspec.convert(known, cls)
        except msgspec.ValidationError as e:
            raise ValueError(str(e)) from None


_FAILED_FIELDS = frozenset(f.name for f in dataclasses.fields(FailedCell))


_NON_NEGATIVE = (
    "ttft_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "decode_tok_s",
    "total_ms",
    "peak_mem_bytes",
    "spread_pct",
    "ttft_runs_ms",
    "itl_runs_ms",
    "total_runs_ms",
    "runs",
    "prompt_tokens",
    "new_tokens",
    "batch",
)


def exact_parity(tokens: list[list[int]], reference: list[list[int]]) -> Parity:
    """Exact parity of free-running tokens (one list a sequence) with naive's, judged on the tokens alone."""
    steps = {
        i for t, r in zip(tokens, reference, strict=False) for i, (a, b) in enumerate(zip(t, r, strict=False)) if a != b
    }
    match = not steps and [len(t) for t in tokens] == [len(r) for r in reference]
    return Parity("exact", match, min(steps) if steps else None, len(steps), None, 0)


def _parity_fields(parity: Parity | None) -> dict:
    if parity is None:
        return {}
    return {
        "parity_mode": parity.mode,
        "first_divergence_step": parity.first_divergence_step,
        "differing_steps": parity.differing_steps,
        "worst_gap_ulps": parity.worst_gap_ulps,
        "nonfinite_steps": parity.nonfinite_steps,
    }


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
    env: dict
    config: dict
    complete: bool = False
    clock: Clock | None = None  # lines telemetry rows (perf_counter_ns) up with traces (epoch ns)
    failed: list[FailedCell] = field(default_factory=list)  # cells that raised; results.json lists them after `cells`

    def to_json(self) -> dict:
        return {
            "version": SCHEMA_VERSION,
            "complete": self.complete,
            "config": self.config,
            "env": self.env,
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
        """Write results.json, cells.parquet and cells.csv, each atomically (a Ctrl-C never leaves half a file)."""
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / RESULTS_FILE, json.dumps(self.to_json(), indent=1))
        frame = self.cells_frame(failed=True)
        with atomic_path(folder / CELLS_FILE) as tmp:
            frame.to_parquet(tmp, index=False)
        with atomic_path(folder / CELLS_CSV) as tmp:
            frame.to_csv(tmp, index=False)

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
    """Read a results.json (or the folder holding one). Raises ProbeError with a one-line reason."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ProbeError(f"no results file at {p}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProbeError(f"cannot read {p}: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or "env" not in data:
        raise ProbeError(f"{p} is not a probe results file (expected an object with cells and env)")
    for key in ("env", "config"):
        if not isinstance(data.get(key, {}), dict):
            raise ProbeError(f"{p}: malformed results file: {key} is a {type(data[key]).__name__}, not an object")
    cells, failed = [], []
    for i, c in enumerate(data["cells"]):
        try:
            if isinstance(c, dict) and c.get("status") == FAILED:
                failed.append(FailedCell.from_json(c))
            else:
                cells.append(Cell.from_json(c))
        except ValueError as e:
            raise ProbeError(f"{p}: malformed cell {i}: {e}") from None
    extra = data.get("extra")
    clock = data.get("clock") or (extra.get("clock") if isinstance(extra, dict) else None)
    try:
        clock = msgspec.convert(clock, Clock) if clock is not None else None
    except msgspec.ValidationError as e:
        raise ProbeError(f"{p}: malformed clock: {e}") from None
    return BenchResults(cells, data["env"], data.get("config", {}), data.get("complete") is True, clock, failed)
