"""Typed bench results and their files: `results.json` (everything) and `cells.parquet` (one row a cell)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from probe.errors import ProbeError

RESULTS_FILE, CELLS_FILE = "results.json", "cells.parquet"
SCHEMA_VERSION = 1


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


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
    tokens_match_naive: bool | None  # None when no naive reference exists
    deterministic: bool  # every recorded run produced the same tokens
    sync_overhead_ms: float | None  # CUDA: cost per step of the per-step sync (Part 1's 0.23 ms)
    decode_ops: int | None = None  # aten ops dispatched by one decode forward (None: compiled/captured step)
    prefill_ops: int | None = None
    decode_ops_by_op: dict[str, int] = field(default_factory=dict)
    prefill_ops_by_op: dict[str, int] = field(default_factory=dict)
    ttft_runs_ms: list[float] = field(default_factory=list)
    itl_runs_ms: list[list[float]] = field(default_factory=list)  # raw per-step latencies, one list a run
    total_runs_ms: list[float] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)  # first recorded run, one list a sequence
    extra: dict = field(default_factory=dict)  # later stages attach figures here (counts, telemetry, ...)

    @property
    def key(self) -> tuple[str, int, int, int]:
        return self.engine, self.prompt_tokens, self.new_tokens, self.batch

    @classmethod
    def from_runs(cls, engine: str, prompt_tokens: int, batch: int, ttft_ms: list[float],
                  itl_ms: list[list[float]], total_ms: list[float], tokens: list[list[list[int]]],
                  peak_mem_bytes: int, peak_mem_kind: str, reference: list[list[int]] | None,
                  sync_overhead_ms: float | None = None) -> Cell:
        new_tokens = len(itl_ms[0]) + 1
        tok_s = [batch * len(steps) / (sum(steps) / 1e3) for steps in itl_ms]
        flat = [x for steps in itl_ms for x in steps]
        mid = statistics.median(tok_s)
        return cls(
            engine=engine, prompt_tokens=prompt_tokens, new_tokens=new_tokens, batch=batch, runs=len(ttft_ms),
            ttft_ms=statistics.median(ttft_ms), itl_p50_ms=percentile(flat, 50), itl_p90_ms=percentile(flat, 90),
            decode_tok_s=mid, total_ms=statistics.fmean(total_ms), peak_mem_bytes=peak_mem_bytes,
            peak_mem_kind=peak_mem_kind, spread_pct=100 * (max(tok_s) - min(tok_s)) / mid,
            tokens_match_naive=None if reference is None else tokens[0] == reference,
            deterministic=all(t == tokens[0] for t in tokens), sync_overhead_ms=sync_overhead_ms,
            ttft_runs_ms=ttft_ms, itl_runs_ms=itl_ms, total_runs_ms=total_ms, tokens=tokens[0],
        )


RAW_FIELDS = ("ttft_runs_ms", "itl_runs_ms", "total_runs_ms", "tokens", "decode_ops_by_op", "prefill_ops_by_op",
              "extra")


@dataclass
class BenchResults:
    cells: list[Cell]
    env: dict
    config: dict
    complete: bool = False
    extra: dict = field(default_factory=dict)  # run-level figures (predictions, counts, ...)

    def to_json(self) -> dict:
        return {"version": SCHEMA_VERSION, "complete": self.complete, "config": self.config, "env": self.env,
                "cells": [dataclasses.asdict(c) for c in self.cells], "extra": self.extra}

    def save(self, folder: Path) -> None:
        """Write results.json atomically (a Ctrl-C never leaves a half file) and the Parquet table."""
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / RESULTS_FILE, json.dumps(self.to_json(), indent=1))
        self.cells_frame().to_parquet(folder / CELLS_FILE, index=False)

    def cells_frame(self):
        import pandas as pd

        rows = [{k: v for k, v in dataclasses.asdict(c).items() if k not in RAW_FIELDS} for c in self.cells]
        return pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(Cell) if f.name not in RAW_FIELDS])


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
    names = {f.name for f in dataclasses.fields(Cell)}
    try:
        cells = [Cell(**{k: v for k, v in c.items() if k in names}) for c in data["cells"]]
    except TypeError as e:
        raise ProbeError(f"{p}: malformed cell: {e}") from None
    return BenchResults(cells, data["env"], data.get("config", {}), bool(data.get("complete")),
                        data.get("extra", {}))
