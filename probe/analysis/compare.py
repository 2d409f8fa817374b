"""Regression checks between two measurements: exact launch counts, noise-aware timings.

`load_samples(path) -> SampleSet` reads a results folder, a results.json, a baseline file (`probe baseline`)
or a trace (.json / .json.gz / .sqlite, through the ledger) into one typed shape: per key (a bench cell, or a
trace's step kind) the launch count per step with its op-name breakdown, and the raw timing samples.
`compare(baseline, current) -> Comparison` checks each key both sides share:

- Launches per step are deterministic (a property of the code, not of timing), so any increase is a
  regression; the alert names the ops that appeared or grew. Across torch / transformers versions or devices
  the counts legitimately change, so there they are reported but not gated, with a loud warning.
- Timings are noisy, so a timing regression needs both of asv's conditions: the ratio of medians is worse
  than `threshold`, and a two-sided Mann-Whitney U test on the raw samples gives p < `alpha`. The test only
  runs when each side has `min_samples` and the sample sizes can reach p < alpha at all (asv's rule);
  otherwise the verdict is "too few samples". The ratio comes with a percentile bootstrap confidence interval
  (fixed seed, so the output is the same every time). For tokens/s a regression is a drop.

Samples. Bench results: host time per step = every raw decode-step latency of every run (`itl_runs_ms`);
TTFT and decode tokens/s = one sample per run, tokens/s computed from the run's steps as the bench does.
Cache bookkeeping time is only in traces (the ledger's cache ranges), so results folders say it is absent.
Traces: one sample per step of the kind (wall and cache time); counts are the median over those steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from probe.analysis.environment import EnvDifference, Environment
from probe.analysis.files import CHROME, NSYS_SQLITE, read_json, sniff
from probe.analysis.ledger import analyze
from probe.analysis.results import RESULTS_FILE, BenchResults, Cell, decode_tok_s, load_results
from probe.analysis.sidecar import Sidecar, trace_meta
from probe.analysis.trace import load_trace
from probe.errors import ProbeError

THRESHOLD = 1.10  # asv's default factor: a 10% move of the median is the smallest one worth a look
ALPHA = 0.01  # two-sided Mann-Whitney U significance level
MIN_SAMPLES = 5  # per side; with 5 and 5 the smallest two-sided p is 2/252 = 0.008, just under ALPHA
CONFIDENCE = 0.95  # of the bootstrap interval around the ratio
RESAMPLES = 2000  # bootstrap resamples: enough for a stable 95% percentile interval
SEED = 0  # the bootstrap's, so that the same inputs always print the same interval

VERDICTS = ("regression", "improvement", "ok", "too few samples", "skipped: versions differ")


@dataclass(frozen=True)
class Metric:
    name: str  # JSON key
    label: str  # what tables say
    kind: str  # "count" | "timing"
    higher_is_worse: bool = True


DECODE_LAUNCHES = Metric("decode_launches", "launches/decode step", "count")
PREFILL_LAUNCHES = Metric("prefill_launches", "launches/prefill", "count")
LAUNCHES = Metric("launches", "launches/step", "count")
KERNELS = Metric("kernels", "kernels/step", "count")  # GPU traces: kernels launched per step, by name
HOST_US = Metric("host_us_per_step", "host us/step", "timing")
CACHE_US = Metric("cache_us_per_step", "cache us/step", "timing")
TTFT_MS = Metric("ttft_ms", "TTFT ms", "timing")
TOK_S = Metric("decode_tok_s", "decode tok/s", "timing", higher_is_worse=False)
METRICS = {m.name: m for m in (DECODE_LAUNCHES, PREFILL_LAUNCHES, LAUNCHES, KERNELS, HOST_US, CACHE_US, TTFT_MS, TOK_S)}


# ---------------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class Unit:
    """What one side measured for one key: a bench cell, or one step kind of a trace."""

    key: str  # "cached p16 n32" (a cell) or "decode" (a trace's step kind)
    counts: dict[str, float]  # count metric name -> launches
    ops: dict[str, dict[str, float]]  # count metric name -> its launches by op name (absent when not recorded)
    samples: dict[str, tuple[float, ...]]  # timing metric name -> raw samples


@dataclass(frozen=True)
class SampleSet:
    source: str
    kind: str  # "results" | "baseline" | "trace"
    env: Environment | None  # None when a trace has no sidecar
    config: dict  # what must agree for a comparison to mean anything: model, dtype (traces: engine, prompt, ...)
    units: dict[str, Unit]
    notes: tuple[str, ...] = ()
    complete: bool = True  # False for an interrupted sweep: cells it never reached are missing

    @property
    def family(self) -> str:
        return "trace" if self.kind == "trace" else "results"


def cell_unit(c: Cell, with_engine: bool = True) -> Unit:
    counts, ops = {}, {}
    for metric, total, by_op in (
        (DECODE_LAUNCHES, c.decode_ops, c.decode_ops_by_op),
        (PREFILL_LAUNCHES, c.prefill_ops, c.prefill_ops_by_op),
    ):
        if total is not None:  # None: a compiled or captured step, whose ops are not dispatched one by one
            counts[metric.name] = float(total)
            if by_op:
                ops[metric.name] = {k: float(v) for k, v in by_op.items()}
    tok_s = [t for run in c.itl_runs_ms if (t := decode_tok_s(c.batch, run)) is not None]
    samples = {
        HOST_US.name: tuple(x * 1e3 for run in c.itl_runs_ms for x in run),
        TTFT_MS.name: tuple(c.ttft_runs_ms),
        TOK_S.name: tuple(tok_s),
    }
    # A cell's identity across runs; without the engine when two different engines are held to each other.
    return Unit(str(c.key) if with_engine else c.key.shape, counts, ops, samples)


def from_results(results: BenchResults, source: str, kind: str = "results", with_engine: bool = True) -> SampleSet:
    """A results file's cells as units; `with_engine=False` keys them by prompt, tokens and batch alone, so two
    different engines' cells meet (probe ab)."""
    if not results.cells:
        raise ProbeError(f"{source}: has no cells")
    units: dict[str, Unit] = {}
    for c in results.cells:
        unit = cell_unit(c, with_engine)
        if unit.key in units:
            raise ProbeError(f"{source}: two cells for {unit.key}")
        units[unit.key] = unit
    config = {"model": results.config.model, "dtype": results.dtype}
    notes = (
        f"{CACHE_US.label}: not in bench results (only a trace's ledger measures cache bookkeeping; "
        "record one with probe profile)",
    )
    if not results.complete:
        notes += (f"{source}: an interrupted sweep (complete: false); only its finished cells are compared",)
    env = results.env if results.env != Environment() else None  # a file that recorded none
    return SampleSet(source, kind, env, config, units, notes, results.complete)


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def from_analysis(analysis, source: str, meta: Sidecar | None) -> SampleSet:
    """A ledger (probe.analysis.ledger.TraceAnalysis) as one unit per step kind: per-step samples, median
    counts (launches per step, or dispatched ops on a CPU-only trace: StepLedger.dispatched)."""
    steps = analysis.steps
    timed_cache = any(s.cache_ns for s in steps)
    units = {}
    for kind in dict.fromkeys(s.kind for s in steps):
        mine = [s for s in steps if s.kind == kind]
        launches = [s.dispatched for s in mine]
        names = sorted({n for s in mine for n in s.op_counts})
        ops = {LAUNCHES.name: {n: _median(s.op_counts.get(n, 0) for s in mine) for n in names}}
        counts = {LAUNCHES.name: _median(launches)}
        if analysis.on_gpu:  # which kernels run, and how often: a kernel that appears or multiplies alerts by name
            kernels = sorted({n for s in mine for n in s.kernel_counts})
            counts[KERNELS.name] = _median(s.kernels for s in mine)
            ops[KERNELS.name] = {n: _median(s.kernel_counts.get(n, 0) for s in mine) for n in kernels}
        samples = {HOST_US.name: tuple(s.wall_ns / 1e3 for s in mine)}
        if timed_cache:
            samples[CACHE_US.name] = tuple(s.cache_ns / 1e3 for s in mine)
        units[kind] = Unit(kind, counts, ops, samples)
    notes = () if timed_cache else (f"{source}: no cache ranges in the trace, so {CACHE_US.label} is absent",)
    # The engine is left out: a changed engine (a module:Class spec) against the stock one is the point.
    config = {k: getattr(meta.config, k) for k in ("model", "dtype", "prompt", "batch")} if meta else {}
    return SampleSet(source, "trace", meta.env if meta else None, config, units, notes)


def load_trace_samples(path: Path) -> SampleSet:
    return from_analysis(analyze(load_trace(path)), str(path), trace_meta(path))


def load_samples(path: str | Path) -> SampleSet:
    """Any supported input as a SampleSet. Raises ProbeError, with a one-line reason, for unusable input."""
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{p}: no such file or folder")
    if p.is_dir():
        if not (p / RESULTS_FILE).is_file():
            raise ProbeError(f"{p}: a folder without a {RESULTS_FILE}")
        p = p / RESULTS_FILE
    try:
        if p.stat().st_size == 0:
            raise ProbeError(f"{p}: empty file")
        if sniff(p) in (CHROME, NSYS_SQLITE):
            return load_trace_samples(p)
    except OSError as e:
        raise ProbeError(f"cannot read {p}: {e.strerror or e}") from None
    results = load_results(p)
    raw = read_json(p)  # load_results has checked it is a results object
    return from_results(results, str(p), "baseline" if raw.get("baseline") else "results")


# ---------------------------------------------------------------------------------------------------------
# statistics


@dataclass(frozen=True)
class Row:
    """One metric of one key. Timing rows hold medians of the raw samples; count rows hold the counts."""

    key: str
    metric: str  # a METRICS name
    label: str
    kind: str  # "count" | "timing"
    higher_is_worse: bool
    baseline: float | None
    current: float | None
    ratio: float | None  # current / baseline
    ci_low: float | None  # bootstrap interval of the ratio (timing rows with enough samples)
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney U
    n_baseline: int
    n_current: int
    verdict: str  # one of VERDICTS

    @property
    def worse_by(self) -> float | None:
        """The ratio turned so that > 1 is worse (a tokens/s drop reads as a slowdown)."""
        if self.ratio is None or self.ratio == 0:
            return None
        return self.ratio if self.higher_is_worse else 1 / self.ratio


@dataclass(frozen=True)
class Alert:
    key: str
    metric: str
    message: str


@dataclass(frozen=True)
class Comparison:
    baseline: str
    current: str
    threshold: float
    alpha: float
    min_samples: int
    counts_only: bool
    rows: tuple[Row, ...]
    alerts: tuple[Alert, ...]
    count_diffs: dict[str, dict[str, tuple[float, float]]]  # key -> op -> (baseline, current), appeared or grew
    warnings: tuple[str, ...]  # loud: versions or device differ, timings from different machines
    notes: tuple[str, ...] = ()  # quiet: absent metrics, keys on one side only
    versions_differ: bool = False

    @property
    def regressed(self) -> bool:
        return bool(self.alerts)

    def to_json(self) -> dict:
        return _finite(
            {
                "baseline": self.baseline,
                "current": self.current,
                "regression": self.regressed,
                "threshold": self.threshold,
                "alpha": self.alpha,
                "min_samples": self.min_samples,
                "counts_only": self.counts_only,
                "versions_differ": self.versions_differ,
                "warnings": list(self.warnings),
                "notes": list(self.notes),
                "alerts": [asdict(a) for a in self.alerts],
                "rows": [asdict(r) for r in self.rows],
                "count_diffs": {k: {op: list(v) for op, v in d.items()} for k, d in self.count_diffs.items()},
            }
        )

    def to_markdown(self) -> str:
        return markdown(self)


def _finite(obj):
    """NaN and infinity are not JSON: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def can_reach(n_a: int, n_b: int, alpha: float) -> bool:
    """asv's condition: the sample sizes allow a two-sided exact U test p below alpha at all."""
    return 2 / math.comb(n_a + n_b, min(n_a, n_b)) < alpha


def ratio_of_medians(base: Sequence[float], cur: Sequence[float]) -> float | None:
    b = _median(base)
    return _median(cur) / b if b > 0 else None


def bootstrap_ratio(base: Sequence[float], cur: Sequence[float]) -> tuple[float, float] | tuple[None, None]:
    """Percentile bootstrap interval of median(current) / median(baseline), the two sides resampled apart."""
    a, b = np.asarray(base, float), np.asarray(cur, float)
    if np.median(a) <= 0:
        return None, None

    def statistic(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    seed = {"rng": np.random.default_rng(SEED)}
    if "rng" not in stats.bootstrap.__code__.co_varnames:  # scipy < 1.15 names it random_state
        seed = {"random_state": np.random.default_rng(SEED)}
    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            (a, b),
            statistic,
            n_resamples=RESAMPLES,
            vectorized=True,
            paired=False,
            confidence_level=CONFIDENCE,
            method="percentile",
            batch=500,
            **seed,
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else (None, None)


def mann_whitney_p(base: Sequence[float], cur: Sequence[float]) -> float:
    if len(set(base) | set(cur)) == 1:
        return 1.0  # every value equal: nothing to rank
    return float(stats.mannwhitneyu(base, cur, alternative="two-sided").pvalue)


def timing_row(
    key: str,
    metric: Metric,
    base: Sequence[float],
    cur: Sequence[float],
    threshold: float,
    alpha: float,
    min_samples: int,
) -> Row:
    n_b, n_c = len(base), len(cur)
    common = dict(
        key=key,
        metric=metric.name,
        label=metric.label,
        kind=metric.kind,
        higher_is_worse=metric.higher_is_worse,
        n_baseline=n_b,
        n_current=n_c,
    )
    if not n_b or not n_c:
        return Row(
            **common,
            baseline=_median(base) if n_b else None,
            current=_median(cur) if n_c else None,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="too few samples",
        )
    ratio = ratio_of_medians(base, cur)
    row = Row(
        **common,
        baseline=_median(base),
        current=_median(cur),
        ratio=ratio,
        ci_low=None,
        ci_high=None,
        p_value=None,
        verdict="too few samples",
    )
    if min(n_b, n_c) < min_samples or not can_reach(n_b, n_c, alpha) or ratio is None:
        return row
    p = mann_whitney_p(base, cur)
    low, high = bootstrap_ratio(base, cur)
    worse = ratio if metric.higher_is_worse else (1 / ratio if ratio > 0 else math.inf)
    verdict = "ok"
    if p < alpha and worse > threshold:
        verdict = "regression"
    elif p < alpha and worse < 1 / threshold:
        verdict = "improvement"
    return Row(**{**asdict(row), "p_value": p, "ci_low": low, "ci_high": high, "verdict": verdict})


def count_row(key: str, metric: Metric, base: float, cur: float, versions_differ: bool) -> Row:
    verdict = "ok"
    if versions_differ:
        verdict = "skipped: versions differ"
    elif cur > base:
        verdict = "regression"
    elif cur < base:
        verdict = "improvement"
    return Row(
        key=key,
        metric=metric.name,
        label=metric.label,
        kind=metric.kind,
        higher_is_worse=True,
        baseline=base,
        current=cur,
        ratio=cur / base if base else None,
        ci_low=None,
        ci_high=None,
        p_value=None,
        n_baseline=1,
        n_current=1,
        verdict=verdict,
    )


def grown_ops(base: dict[str, float], cur: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Ops that appeared or grew, with (baseline, current) counts, largest growth first."""
    grown = {op: (base.get(op, 0.0), n) for op, n in cur.items() if n > base.get(op, 0.0)}
    return dict(sorted(grown.items(), key=lambda kv: (kv[1][0] - kv[1][1], kv[0])))


def fmt_count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def describe_ops(grown: dict[str, tuple[float, float]]) -> str:
    parts = [
        f"{op} {fmt_count(b)} -> {fmt_count(c)} " + ("(new)" if b == 0 else f"(+{fmt_count(c - b)})")
        for op, (b, c) in grown.items()
    ]
    return ", ".join(parts)


def count_alert(row: Row, grown: dict[str, tuple[float, float]], has_breakdown: bool) -> Alert:
    delta = row.current - row.baseline
    what = (
        describe_ops(grown)
        if grown
        else ("ops by name not recorded for this count" if not has_breakdown else "no single op grew")
    )
    return Alert(
        row.key,
        row.metric,
        f"{row.label} {fmt_count(row.baseline)} -> {fmt_count(row.current)} (+{fmt_count(delta)}): {what}",
    )


def timing_alert(row: Row) -> Alert:
    direction = "dropped" if not row.higher_is_worse else "rose"
    ci = f", 95% CI {row.ci_low:.3f}..{row.ci_high:.3f}" if row.ci_low is not None else ""
    return Alert(
        row.key,
        row.metric,
        f"{row.label} {direction}: median {fmt_value(row.baseline)} -> "
        f"{fmt_value(row.current)} (x{row.ratio:.3f}{ci}; Mann-Whitney p = "
        f"{row.p_value:.2g}, n = {row.n_baseline}/{row.n_current})",
    )


def fmt_value(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 100:
        return f"{x:,.1f}"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.2f}"


# ---------------------------------------------------------------------------------------------------------
# the comparison


def environment_warnings(
    base: SampleSet, cur: SampleSet, timings: bool = True
) -> tuple[list[str], list[EnvDifference]]:
    """Loud warnings, and what differs for the counts (torch, transformers, the device: any of it turns the count
    gate off). With `timings`, also warn when the timings come from different CPUs or thread counts."""
    warnings = []
    for side in (base, cur) if base.source != cur.source else (base,):
        if side.env is None:
            warnings.append(
                f"{side.source} records no environment (no .meta.json next to the trace): torch, "
                "transformers and device cannot be checked"
            )
    if base.env is None or cur.env is None:
        return warnings, []
    differ = base.env.differs_for_counts(cur.env)
    for d in differ:
        warnings.append(
            f"{_versus(d)}. Launch counts change with versions and devices, so they are shown but not gated"
        )
    for d in base.env.differs_for_timings(cur.env) if timings else ():
        warnings.append(f"{_versus(d)}: timings are from different machines or settings")
    return warnings, differ


def _versus(d: EnvDifference) -> str:
    return f"{d.key} differs: {d.ours} (baseline) vs {d.theirs} (current)"


def check_configs(base: SampleSet, cur: SampleSet) -> None:
    if base.family != cur.family:
        raise ProbeError(
            f"cannot compare a {base.family} input ({base.source}) with a {cur.family} input "
            f"({cur.source}): compare results with results, traces with traces"
        )
    for name in sorted(set(base.config) & set(cur.config)):
        b, c = base.config[name], cur.config[name]
        if b is not None and c is not None and b != c:
            raise ProbeError(f"mismatched configs: {name} is {b} in {base.source} but {c} in {cur.source}")


def compare(
    baseline: SampleSet | str | Path,
    current: SampleSet | str | Path,
    threshold: float = THRESHOLD,
    alpha: float = ALPHA,
    min_samples: int = MIN_SAMPLES,
    counts_only: bool = False,
    require_same_env: bool = False,
) -> Comparison:
    """Every key both sides share, every metric both measured. Raises ProbeError on unusable input: with
    `counts_only` (the CI gate) that includes a current run missing any of the baseline's cells, and with
    `require_same_env` torch, transformers or a device that differ (the gate would otherwise switch itself off)."""
    base = baseline if isinstance(baseline, SampleSet) else load_samples(baseline)
    cur = current if isinstance(current, SampleSet) else load_samples(current)
    if not threshold > 1:
        raise ProbeError(f"--threshold must be above 1 (a ratio such as 1.10), got {threshold}")
    if not 0 < alpha < 1:
        raise ProbeError(f"--alpha must be between 0 and 1, got {alpha}")
    check_configs(base, cur)
    keys = [k for k in base.units if k in cur.units]
    if not keys:
        raise ProbeError(
            f"mismatched configs: no {'step kind' if base.family == 'trace' else 'cell'} in common "
            f"(baseline: {', '.join(base.units)}; current: {', '.join(cur.units)})"
        )
    warnings, differences = environment_warnings(base, cur, timings=not counts_only)
    differ = bool(differences)
    if require_same_env and differ:
        raise ProbeError(f"--require-same-env: {_versus(differences[0])}")
    missing = [k for k in base.units if k not in cur.units]
    if counts_only and (missing or not cur.complete):
        what = (
            f"{len(missing)} of the baseline's {len(base.units)} cells missing ({', '.join(missing[:4])}"
            + (", ...)" if len(missing) > 4 else ")")
            if missing
            else "an interrupted sweep (complete: false)"
        )
        raise ProbeError(f"{cur.source} is incomplete: {what}; the count gate needs every cell")
    notes = list(dict.fromkeys(base.notes + cur.notes))
    for side, other, name in ((base, cur, "baseline"), (cur, base, "current")):
        only = [k for k in side.units if k not in other.units]
        if only:
            notes.append(f"only in the {name}, not compared: {', '.join(only)}")
    if counts_only:
        notes.append("timings not compared (--counts-only): only the deterministic launch counts are gated")
    rows, alerts, diffs = [], [], {}
    for key in keys:
        b, c = base.units[key], cur.units[key]
        for name in b.counts:
            if name not in c.counts:
                continue
            grown = grown_ops(b.ops.get(name, {}), c.ops.get(name, {}))
            if grown and name in (DECODE_LAUNCHES.name, LAUNCHES.name):
                diffs[key] = grown
            elif grown and name == KERNELS.name:
                diffs[f"{key} (kernels)"] = grown
            row = count_row(key, METRICS[name], b.counts[name], c.counts[name], differ)
            rows.append(row)
            if row.verdict == "regression":
                alerts.append(count_alert(row, grown, bool(b.ops.get(name) or c.ops.get(name))))
        if counts_only:
            continue
        for name in b.samples:
            if name not in c.samples:
                continue
            row = timing_row(key, METRICS[name], b.samples[name], c.samples[name], threshold, alpha, min_samples)
            rows.append(row)
            if row.verdict == "regression":
                alerts.append(timing_alert(row))
    return Comparison(
        base.source,
        cur.source,
        threshold,
        alpha,
        min_samples,
        counts_only,
        tuple(rows),
        tuple(alerts),
        diffs,
        tuple(warnings),
        tuple(notes),
        differ,
    )


# ---------------------------------------------------------------------------------------------------------
# Markdown (a CI comment)


def row_cells(r: Row) -> list[str]:
    """The table's cells for one row, shared by the Markdown and the terminal table."""
    fmt = fmt_count if r.kind == "count" else fmt_value

    def value(x: float | None) -> str:
        return "-" if x is None else fmt(x)

    ci = f"{r.ci_low:.3f}..{r.ci_high:.3f}" if r.ci_low is not None else "-"
    p = "-" if r.p_value is None else f"{r.p_value:.2g}"
    n = "-" if r.kind == "count" else f"{r.n_baseline}/{r.n_current}"
    ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
    return [r.key, r.label, value(r.baseline), value(r.current), ratio, ci, p, n, r.verdict]


COLUMNS = ("cell", "metric", "baseline", "current", "ratio", "95% CI", "p", "n", "verdict")


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(c: Comparison) -> str:
    head = "REGRESSION" if c.regressed else "no regression"
    lines = [
        f"### probe compare: {head}",
        "",
        f"`{_md(c.baseline)}` (baseline) vs `{_md(c.current)}` (current); timing regressions need a ratio of "
        f"medians past {c.threshold:g} and Mann-Whitney p < {c.alpha:g}; launch counts are exact.",
        "",
    ]
    for w in c.warnings:
        lines += [f"> **WARNING: {_md(w)}**", ">"]
    if c.warnings:
        lines[-1] = ""
    if c.alerts:
        lines += [f"**{len(c.alerts)} alert(s)**", ""]
        lines += [f"- `{_md(a.key)}` {_md(a.message)}" for a in c.alerts]
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "|".join("---" if col in ("cell", "metric", "verdict") else "---:" for col in COLUMNS) + "|")
    for r in c.rows:
        cells = row_cells(r)
        if r.verdict == "regression":
            cells[-1] = "**regression**"
        lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
    if c.count_diffs:
        lines += ["", "Ops that appeared or grew, per step:", ""]
        lines += [f"- `{_md(k)}`: {_md(describe_ops(d))}" for k, d in c.count_diffs.items()]
    if c.notes:
        lines += ["", *[f"_{_md(n)}_  " for n in c.notes]]
    return "\n".join(lines).rstrip() + "\n"


__all__ = [
    "ALPHA",
    "MIN_SAMPLES",
    "THRESHOLD",
    "Alert",
    "Comparison",
    "Metric",
    "Row",
    "SampleSet",
    "Unit",
    "compare",
    "from_analysis",
    "from_results",
    "load_samples",
    "markdown",
]
