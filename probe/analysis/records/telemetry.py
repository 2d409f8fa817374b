"""Telemetry summaries: pure functions of sample rows (`t_ns` plus figures) and time windows.

The kind of a figure decides the honest time-weighted mean over a window. A level is a value at an instant,
linear between rows. A rate is the average over the interval since the previous row, constant over that
interval. A counter is cumulative: only differences mean something. A missing figure is absent or NaN in rows
and None in summaries, never 0. (The figures and their sources: probe.capture.telemetry.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from probe.analysis.intervals import merge
from probe.analysis.records.files import atomic_path

TELEMETRY_FILE = "telemetry.parquet"  # a run folder's raw samples: t_ns, one column a figure, and the cell's position
LEVEL, RATE, COUNTER = "level", "rate", "counter"
FIGURES: dict[str, str] = {
    "gpu_mem_used_bytes": LEVEL,
    "gpu_util_pct": LEVEL,
    "mem_util_pct": LEVEL,
    "sm_clock_mhz": LEVEL,
    "mem_clock_mhz": LEVEL,
    "power_w": LEVEL,
    "energy_j": COUNTER,
    "rss_bytes": LEVEL,
    "proc_cpu_pct": RATE,
    "sys_cpu_pct": RATE,
    "threads": LEVEL,
    "sampler_cpu_pct": RATE,  # the sampler process's own CPU (ProcessSampler): the machine's, not the run's
}
Row = dict[str, float]  # "t_ns" (an int, perf_counter_ns) plus figures
Window = tuple[int, int]  # [start_ns, end_ns] in perf_counter_ns


def decode_windows(generations: Iterable) -> list[Window]:
    """Each run's decode phase, [start + ttft, start + total], from `probe.capture.loop.Generation`s."""
    return [(g.start_ns + g.ttft_ns, g.start_ns + g.total_ns) for g in generations]


def _merge(windows: Iterable[Window]) -> list[Window]:
    """The union of the non-empty windows, sorted (touching windows join)."""
    spans = [w for w in windows if w[1] > w[0]]
    starts, ends = merge(np.array([a for a, _ in spans], np.int64), np.array([b for _, b in spans], np.int64))
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _columns(samples) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(t_ns sorted, {figure: float array with NaN for missing}) from rows or a DataFrame of them."""
    if hasattr(samples, "columns"):
        t = samples["t_ns"].to_numpy(np.int64)
        cols = {c: samples[c].to_numpy(np.float64) for c in samples.columns if c != "t_ns"}
    else:
        rows = list(samples)
        t = np.array([r["t_ns"] for r in rows], dtype=np.int64)
        names = dict.fromkeys(k for r in rows for k in r if k != "t_ns")
        cols = {n: np.array([r.get(n, math.nan) for r in rows], dtype=np.float64) for n in names}
    order = np.argsort(t, kind="stable")
    return t[order], {n: v[order] for n, v in cols.items()}


def _relative(t: np.ndarray, spans: list[Window]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Times as float ns from the first row: exact in float64, unlike raw perf_counter_ns near 2**53."""
    origin = int(t[0]) if len(t) else 0
    return (t - origin).astype(np.float64), [(float(a - origin), float(b - origin)) for a, b in spans]


def _level(t: np.ndarray, v: np.ndarray, spans) -> tuple[float, float, float]:
    """(integral, covered duration, peak) of the piecewise-linear signal through the valid rows."""
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    area = covered = 0.0
    peak = -math.inf
    if not len(t):
        return area, covered, peak
    for a, b in spans:
        a, b = max(a, t[0]), min(b, t[-1])
        if b <= a:
            continue
        inner = (t > a) & (t < b)
        ts = np.concatenate(([a], t[inner], [b]))
        vs = np.concatenate((np.interp([a], t, v), v[inner], np.interp([b], t, v)))
        area += float(np.sum((vs[1:] + vs[:-1]) / 2 * np.diff(ts)))
        covered += b - a
        peak = max(peak, float(vs.max()))
    return area, covered, peak


def _rate(t: np.ndarray, v: np.ndarray, spans) -> tuple[float, float, float]:
    """(integral, covered duration, peak) of the signal that holds row k's value over (t[k-1], t[k]]."""
    starts, ends, vals = t[:-1], t[1:], v[1:]
    ok = ~np.isnan(vals)
    starts, ends, vals = starts[ok], ends[ok], vals[ok]
    area = covered = 0.0
    peak = -math.inf
    for a, b in spans:
        overlap = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0.0, None)
        area += float(np.sum(overlap * vals))
        covered += float(np.sum(overlap))
        if (overlap > 0).any():
            peak = max(peak, float(vals[overlap > 0].max()))
    return area, covered, peak


def summarize(samples, windows: Iterable[Window]) -> dict[str, float | None]:
    """`<figure>_mean` (time-weighted) and `<figure>_peak` over the union of `windows`, for every figure.

    Each figure is summarised over the part of the windows its rows cover; None where they cover none (a GPU
    figure on a CPU run, a backend dropped before the windows). Counters (energy_j) go to `energy_joules`.
    """
    t, cols = _columns(samples)
    t, spans = _relative(t, _merge(windows))
    out: dict[str, float | None] = {}
    for name in dict.fromkeys([*FIGURES, *cols]):
        kind = FIGURES.get(name, LEVEL)
        if kind == COUNTER:
            continue
        mean = peak = None
        if name in cols and len(t):
            area, covered, top = (_rate if kind == RATE else _level)(t, cols[name], spans)
            if covered > 0:
                mean, peak = area / covered, top
        out[f"{name}_mean"], out[f"{name}_peak"] = mean, peak
    return out


def _counter_delta(t: np.ndarray, e: np.ndarray, spans) -> float | None:
    ok = ~np.isnan(e)
    t, e = t[ok], e[ok]
    if len(t) < 2 or not spans or spans[0][0] < t[0] or spans[-1][1] > t[-1]:
        return None
    return float(sum(np.interp(b, t, e) - np.interp(a, t, e) for a, b in spans))


EnergySource = Literal["counter", "power_integral"]  # an energy counter's difference, or the integral of power_w


def _energy(samples, windows: Iterable[Window]) -> tuple[float | None, EnergySource | None]:
    t, cols = _columns(samples)
    t, spans = _relative(t, _merge(windows))
    if "energy_j" in cols and (joules := _counter_delta(t, cols["energy_j"], spans)) is not None:
        return joules, "counter"
    if "power_w" in cols and len(t) and spans:
        area, covered, _ = _level(t, cols["power_w"], spans)
        if covered == sum(b - a for a, b in spans):  # energy over part of the windows would be an undercount
            return area / 1e9, "power_integral"  # W * ns -> J
    return None, None


def energy_joules(samples, windows: Iterable[Window]) -> float | None:
    """Energy over the windows: the energy counter's difference where present, else the trapezoid integral
    of power_w. None when neither signal covers every window."""
    return _energy(samples, windows)[0]


@dataclass(frozen=True)
class TelemetrySummary:
    """Telemetry over a cell's decode phases (or one profiled run's): time-weighted means and peaks of every
    figure in FIGURES (None: not measured here), and the decode energy."""

    gpu_mem_used_bytes_mean: float | None = None
    gpu_mem_used_bytes_peak: float | None = None
    gpu_util_pct_mean: float | None = None
    gpu_util_pct_peak: float | None = None
    mem_util_pct_mean: float | None = None
    mem_util_pct_peak: float | None = None
    sm_clock_mhz_mean: float | None = None
    sm_clock_mhz_peak: float | None = None
    mem_clock_mhz_mean: float | None = None
    mem_clock_mhz_peak: float | None = None
    power_w_mean: float | None = None
    power_w_peak: float | None = None
    rss_bytes_mean: float | None = None
    rss_bytes_peak: float | None = None
    proc_cpu_pct_mean: float | None = None
    proc_cpu_pct_peak: float | None = None
    sys_cpu_pct_mean: float | None = None
    sys_cpu_pct_peak: float | None = None
    threads_mean: float | None = None
    threads_peak: float | None = None
    sampler_cpu_pct_mean: float | None = None
    sampler_cpu_pct_peak: float | None = None
    decode_energy_j: float | None = None
    energy_source: EnergySource | None = None
    energy_per_token_j: float | None = None
    # False: the decode phases add up to less than NVML's power window, so the energy is not theirs
    # (ENERGY_WINDOW_NOTE); None: no energy, or a file from before the check
    energy_reliable: bool | None = None
    samples_in_windows: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict | None) -> TelemetrySummary | None:
        if not isinstance(doc, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


# NVML's power readings are averages over a window of their own: nvmlDeviceGetPowerUsage averages over 1 s on Ampere
# and newer (NVML's reference). Decode phases that add up to less than that window get an energy that is mostly the
# window's, not theirs: the figure is kept in the JSON, marked unreliable, and not shown as a measurement.
MIN_ENERGY_NS = 1_000_000_000
ENERGY_WINDOW_NOTE = "under 1 s in all; NVML averages power over up to 1 s"


def cell_telemetry(samples, windows: Iterable[Window], tokens: int) -> TelemetrySummary:
    """Everything a results cell records: the summaries, decode energy, its source, J per `tokens`, and whether
    the phases were long enough for NVML's power sampling (MIN_ENERGY_NS) to measure them."""
    windows = list(windows)
    joules, source = _energy(samples, windows)
    covered = sum(b - a for a, b in _merge(windows))
    t, _ = _columns(samples)
    inside = sum(int(np.count_nonzero((t >= a) & (t <= b))) for a, b in _merge(windows))
    figures = {k: v for k, v in summarize(samples, windows).items() if k in _SUMMARY_FIELDS}
    return TelemetrySummary(
        **figures,
        decode_energy_j=joules,
        energy_source=source,
        energy_per_token_j=joules / tokens if joules is not None and tokens > 0 else None,
        energy_reliable=None if joules is None else covered >= MIN_ENERGY_NS,
        samples_in_windows=inside,
    )


_SUMMARY_FIELDS = frozenset(f.name for f in dataclasses.fields(TelemetrySummary))

# Contention: another process competing for the cores makes every timing of a cell unreliable (on this 2-core
# machine a busy loop beside a 2-thread decode made its steps 4x slower). The rule, over the union of a cell's
# decode phases (its recorded runs), from the /proc figures every cell samples:
#     other_cpu_cores = sys_cpu_pct_mean / 100 * cores - proc_cpu_pct_mean / 100 - sampler_cpu_pct_mean / 100
# the machine's busy CPU time (every core, from /proc/stat) less this process's own (its threads, a sampler thread's
# included) and less the sampler process's own (ProcessSampler: a child, which /proc/stat counts as another
# process), in cores, time-weighted; the cell is contended when that is at least CONTENDED_CORES. /proc/stat counts
# in 10 ms ticks, so phases shorter than MIN_JUDGED_NS in all are not judged (None): measured here, an idle machine
# reads -0.07..+0.02 cores over 0.12 s of phases, a busy-looping process beside the loop 0.63..1.07.
CONTENDED_CORES = 0.25  # a quarter of one core: 3x the idle noise above, a third of what a busy loop takes
MIN_JUDGED_NS = 100_000_000


@dataclass(frozen=True)
class Contention:
    other_cpu_cores: float | None  # the CPU other processes used beside this one, in cores (None: not measured)
    contended: bool | None  # other_cpu_cores >= CONTENDED_CORES; None: not judged


def contention(summary: TelemetrySummary | None, windows: Iterable[Window], cores: int) -> Contention:
    """The contention rule above, for a cell's telemetry summary over `windows` on a machine of `cores` cores."""
    if summary is None or summary.sys_cpu_pct_mean is None or summary.proc_cpu_pct_mean is None:
        return Contention(None, None)
    sampler = summary.sampler_cpu_pct_mean or 0.0  # None: a sampler thread, already inside proc_cpu_pct
    other = summary.sys_cpu_pct_mean / 100 * cores - summary.proc_cpu_pct_mean / 100 - sampler / 100
    covered = sum(b - a for a, b in _merge(windows))
    return Contention(other, other >= CONTENDED_CORES if covered >= MIN_JUDGED_NS else None)


def samples_frame(samples) -> pd.DataFrame:
    """The rows as a DataFrame: `t_ns` (int64), then every known figure (NaN where missing), then others."""
    t, cols = _columns(samples)
    names = list(dict.fromkeys([*FIGURES, *cols]))
    data = {"t_ns": t, **{n: cols.get(n, np.full(len(t), np.nan)) for n in names}}
    return pd.DataFrame(data, columns=["t_ns", *names])


def write_samples(samples, path: str | Path) -> Path:
    """Write the rows to Parquet atomically, so a Ctrl-C never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        samples_frame(samples).to_parquet(tmp, index=False)
    return path
