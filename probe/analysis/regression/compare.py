"""Regression checks between two measurements: exact launch counts, noise-aware timings.

`compare(baseline, current, rules) -> Comparison` checks each key two `SampleSet`s share
(probe.analysis.regression.samples
reads any input into one):

- Launches per step are deterministic (a property of the code, not of timing), so any increase is a
  regression; the alert names the ops that appeared or grew, and every op or kernel that is new, grew, shrank or
  was removed is listed (`changes`, as HTA's trace diff lists them), kernels by short name. Across torch /
  transformers versions the counts legitimately change, so there they are reported but not gated, with a loud
  warning. Across devices nothing is gated: kernels are compared by category (the vendors name them apart), ops
  by name, timings shown.
- Timings are noisy, so a timing regression needs both of asv's conditions: the ratio of medians is worse
  than `threshold`, and a two-sided Mann-Whitney U test on the raw samples gives p < `alpha`. The test only
  runs when each side has `min_samples` and the sample sizes can reach p < alpha at all (asv's rule);
  otherwise the verdict is "too few samples". The ratio comes with a percentile bootstrap confidence interval
  (fixed seed, so the output is the same every time). For tokens/s a regression is a drop. A sample measured
  while other processes took the CPU (probe.analysis.records.telemetry's contention rule) is never a verdict: the row
  says "contended: not judged".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

from probe.analysis.ledger.kernels import DEFAULT_RULES, short_name
from probe.analysis.records.environment import EnvDifference
from probe.analysis.regression.comparable import Comparable, comparable
from probe.analysis.regression.rules import ALPHA, DEFAULTS, MIN_SAMPLES, THRESHOLD, CompareRules
from probe.analysis.regression.samples import (
    KERNELS,
    METRICS,
    Metric,
    MetricKind,
    SampleSet,
    Unit,
    from_analysis,
    from_results,
    load_samples,
)
from probe.analysis.regression.stats import bootstrap_ratio, can_reach, mann_whitney_p, median, ratio_of_medians
from probe.errors import ProbeError

Verdict = Literal[
    "regression",
    "improvement",
    "ok",
    "too few samples",
    "skipped: versions differ",  # counts across torch / transformers: shown, not gated
    "skipped: devices differ",  # anything across devices: shown, not gated
    "skipped: work differs",  # the steps did different work (probe.analysis.regression.comparable): shown, not gated
    "contended: not judged",  # timings measured while other processes took the CPU
    "engines differ: not gated",  # counts of two different engines (probe ab): a difference, not a regression
]
Change = Literal["new", "grown", "shrunk", "removed"]


@dataclass(frozen=True)
class Row:
    """One metric of one key. Timing rows hold medians of the raw samples; count rows hold the counts."""

    key: str
    metric: str  # a METRICS name
    label: str
    kind: MetricKind
    higher_is_worse: bool = True
    baseline: float | None = None
    current: float | None = None
    ratio: float | None = None  # current / baseline
    ci_low: float | None = None  # bootstrap interval of the ratio (timing rows with enough samples)
    ci_high: float | None = None
    p_value: float | None = None  # two-sided Mann-Whitney U
    n_baseline: int = 1
    n_current: int = 1
    verdict: Verdict = "ok"


@dataclass(frozen=True)
class OpChange:
    """One op or kernel whose count per step differs: new, grown, shrunk or removed (HTA's trace diff's classes)."""

    key: str
    metric: str  # "launches" (ops by name), "kernels" (by short name), "kernel categories" (across vendors), ...
    name: str
    baseline: float
    current: float
    steps: tuple[str, ...] = ()  # the steps it changed in, when the two traces' steps were paired by name; () = all

    @property
    def change(self) -> Change:
        if self.baseline == 0:
            return "new"
        if self.current == 0:
            return "removed"
        return "grown" if self.current > self.baseline else "shrunk"

    def __str__(self) -> str:
        where = f" ({', '.join(self.steps)})" if self.steps else ""
        return f"{self.change}: {self.name}, {fmt_count(self.baseline)} -> {fmt_count(self.current)} a step{where}"

    @property
    def line(self) -> str:
        """The change as every renderer lists it: its unit, what was counted, and the change."""
        return f"{self.key} {self.metric}: {self}"

    def to_json(self) -> dict:
        return asdict(self) | {"change": self.change}


@dataclass(frozen=True)
class Alert:
    key: str
    metric: str
    message: str


@dataclass(frozen=True)
class Comparison:
    baseline: str
    current: str
    rules: CompareRules
    rows: tuple[Row, ...]
    alerts: tuple[Alert, ...]
    changes: tuple[OpChange, ...]  # every op or kernel count that differs, per key, largest move first
    warnings: tuple[str, ...]  # loud: versions or device differ, timings from different machines
    notes: tuple[str, ...] = ()  # quiet: absent metrics, keys on one side only
    versions_differ: bool = False  # torch, transformers or the device: counts are not gated
    devices_differ: bool = False  # nothing is gated
    comparable: Comparable | None = None  # the keys compared and how their work differs (work differs: not gated)

    @property
    def work_differs(self) -> bool:
        return self.comparable is not None and self.comparable.work_differs

    @property
    def regressed(self) -> bool:
        return bool(self.alerts)

    # The rules' knobs, as the JSON and the renderers read them.
    threshold = property(lambda self: self.rules.threshold)
    alpha = property(lambda self: self.rules.alpha)
    min_samples = property(lambda self: self.rules.min_samples)
    counts_only = property(lambda self: self.rules.counts_only)

    def to_json(self) -> dict:
        rules = self.rules.to_json()
        rules.pop("window")
        return _finite(
            {
                "baseline": self.baseline,
                "current": self.current,
                "regression": self.regressed,
                **rules,
                "versions_differ": self.versions_differ,
                "devices_differ": self.devices_differ,
                "work_differs": self.work_differs,
                "warnings": list(self.warnings),
                "notes": list(self.notes),
                "alerts": [asdict(a) for a in self.alerts],
                "rows": [asdict(r) for r in self.rows],
                "changes": [c.to_json() for c in self.changes],
            }
        )


def _finite(obj):
    """NaN and infinity are not JSON: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------------------------
# statistics


def timing_row(
    key: str,
    metric: Metric,
    base: Sequence[float],
    cur: Sequence[float],
    rules: CompareRules = DEFAULTS,
    skipped: Verdict | None = None,
) -> Row:
    """The timing rule for one metric. `skipped` (contended samples, other devices): medians and ratio only."""
    n_b, n_c = len(base), len(cur)
    row = Row(
        key,
        metric.name,
        metric.label,
        metric.kind,
        metric.higher_is_worse,
        baseline=median(base) if n_b else None,
        current=median(cur) if n_c else None,
        n_baseline=n_b,
        n_current=n_c,
        verdict="too few samples",
    )
    if not n_b or not n_c:
        return row if skipped is None else replace(row, verdict=skipped)
    ratio = ratio_of_medians(base, cur)
    row = replace(row, ratio=ratio)
    if skipped is not None:
        return replace(row, verdict=skipped)
    if min(n_b, n_c) < rules.min_samples or not can_reach(n_b, n_c, rules.alpha) or ratio is None:
        return row
    p = mann_whitney_p(base, cur)
    low, high = bootstrap_ratio(base, cur)
    worse = ratio if metric.higher_is_worse else (1 / ratio if ratio > 0 else math.inf)
    verdict: Verdict = "ok"
    if p < rules.alpha and worse > rules.threshold:
        verdict = "regression"
    elif p < rules.alpha and worse < 1 / rules.threshold:
        verdict = "improvement"
    return replace(row, p_value=p, ci_low=low, ci_high=high, verdict=verdict)


def count_row(key: str, metric: Metric, base: float, cur: float, skipped: Verdict | None = None) -> Row:
    verdict: Verdict = "ok"
    if skipped is not None:
        verdict = skipped
    elif cur > base:
        verdict = "regression"
    elif cur < base:
        verdict = "improvement"
    return Row(
        key,
        metric.name,
        metric.label,
        metric.kind,
        baseline=base,
        current=cur,
        verdict=verdict,
        ratio=cur / base if base else None,
    )


def grown_ops(base: dict[str, float], cur: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Ops that appeared or grew, with (baseline, current) counts, largest growth first."""
    grown = {op: (base.get(op, 0.0), n) for op, n in cur.items() if n > base.get(op, 0.0)}
    return dict(sorted(grown.items(), key=lambda kv: (kv[1][0] - kv[1][1], kv[0])))


def op_changes(key: str, metric: str, base: dict[str, float], cur: dict[str, float]) -> list[OpChange]:
    """Every name whose count differs, the largest move first (then by name)."""
    names = sorted(set(base) | set(cur))
    found = [OpChange(key, metric, n, base.get(n, 0.0), cur.get(n, 0.0)) for n in names]
    found = [c for c in found if c.baseline != c.current]
    return sorted(found, key=lambda c: (-abs(c.current - c.baseline), c.name))


def paired_steps(b: Unit, c: Unit) -> list[tuple[str, dict, dict]] | None:
    """The two sides' steps paired by name (step name, baseline's counts, current's), when both hold the same
    steps, each name once: two traces of the same iterations (HTA's trace diff compares iteration to iteration).
    None otherwise: the median counts of the kind are diffed."""
    names = [n for n, _ in b.steps]
    if not names or len(set(names)) != len(names) or sorted(names) != sorted(n for n, _ in c.steps):
        return None
    theirs = dict(c.steps)
    return [(n, ops, theirs[n]) for n, ops in b.steps]


def _step_changes(key: str, metric: str, paired, group) -> list[OpChange]:
    """Changes step by step, one line for a change that is the same in several steps (naming them, or none when it
    is the same in every step)."""
    found: dict[tuple, list[str]] = {}
    for step, base, cur in paired:
        b, c = (_regroup(side.get(metric, {}), group) for side in (base, cur))
        for change in op_changes(key, metric, b, c):
            found.setdefault((change.name, change.baseline, change.current), []).append(step)
    out = [
        OpChange(key, metric, name, b, c, () if len(steps) == len(paired) else tuple(steps))
        for (name, b, c), steps in found.items()
    ]
    return sorted(out, key=lambda ch: (-abs(ch.current - ch.baseline), ch.name))


def _regroup(by_name: dict[str, float], group=None) -> dict[str, float]:
    if group is None:
        return dict(by_name)
    out: dict[str, float] = {}
    for name, n in by_name.items():
        out[group(name)] = out.get(group(name), 0.0) + n
    return out


def fmt_count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def describe_ops(grown: dict[str, tuple[float, float]]) -> str:
    parts = [
        f"{op} {fmt_count(b)} -> {fmt_count(c)} " + ("(new)" if b == 0 else f"(+{fmt_count(c - b)})")
        for op, (b, c) in grown.items()
    ]
    return ", ".join(parts)


def _sides(row: Row) -> tuple[float, float]:
    """A judged row's two figures: a verdict is given only where both sides measured the metric."""
    if row.baseline is None or row.current is None:
        raise ValueError(f"{row.key} {row.metric}: judged without both sides")
    return row.baseline, row.current


def count_alert(row: Row, grown: dict[str, tuple[float, float]], has_breakdown: bool) -> Alert:
    base, cur = _sides(row)
    delta = cur - base
    what = (
        describe_ops(grown)
        if grown
        else ("ops by name not recorded for this count" if not has_breakdown else "no single op grew")
    )
    return Alert(
        row.key,
        row.metric,
        f"{row.label} {fmt_count(base)} -> {fmt_count(cur)} (+{fmt_count(delta)}): {what}",
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


COLUMNS = ("cell", "metric", "baseline", "current", "ratio", "95% CI", "p", "n", "verdict")


def row_cells(r: Row) -> list[str]:
    """The table's cells for one row, shared by the Markdown, the terminal table and the explorer."""
    fmt = fmt_count if r.kind == "count" else fmt_value

    def value(x: float | None) -> str:
        return "-" if x is None else fmt(x)

    ci = f"{r.ci_low:.3f}..{r.ci_high:.3f}" if r.ci_low is not None else "-"
    p = "-" if r.p_value is None else f"{r.p_value:.2g}"
    n = "-" if r.kind == "count" else f"{r.n_baseline}/{r.n_current}"
    ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
    return [r.key, r.label, value(r.baseline), value(r.current), ratio, ci, p, n, r.verdict]


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
                f"{side.source} records no environment (no .meta.json next to the trace, no deviceProperties): "
                "torch, transformers and device cannot be checked"
            )
    if base.env is None or cur.env is None:
        return warnings, []
    differ = base.env.differs_for_counts(cur.env)
    for d in differ:
        if d.key == "device":
            warnings.append(
                f"{_versus(d)}. Different devices: kernels are compared by category and ops by name, and nothing "
                "is gated"
            )
        else:
            warnings.append(
                f"{_versus(d)}. Launch counts change with versions and devices, so they are shown but not gated"
            )
    for d in base.env.differs_for_timings(cur.env) if timings else ():
        warnings.append(f"{_versus(d)}: timings are from different machines or settings")
    return warnings, differ


def _versus(d: EnvDifference) -> str:
    return f"{d.key} differs: {d.ours} (baseline) vs {d.theirs} (current)"


def _check_complete(base: SampleSet, cur: SampleSet) -> None:
    """The count gate needs every cell of the baseline."""
    missing = [k for k in base.units if k not in cur.units]
    if missing or not cur.complete:
        what = (
            f"{len(missing)} of the baseline's {len(base.units)} cells missing ({', '.join(missing[:4])}"
            + (", ...)" if len(missing) > 4 else ")")
            if missing
            else "an interrupted sweep (complete: false)"
        )
        raise ProbeError(f"{cur.source} is incomplete: {what}; the count gate needs every cell")


def _count_rows(
    b: Unit, c: Unit, skipped: Verdict | None, devices_differ: bool
) -> tuple[list[Row], list[Alert], list[OpChange]]:
    """Each count both sides measured, and every op or kernel that moved: kernels by short name on one device,
    by category across devices (the vendors' names have nothing in common)."""
    rows, alerts, changes = [], [], []
    paired = paired_steps(b, c)
    for name in (n for n in b.counts if n in c.counts):
        base_ops, cur_ops = b.ops.get(name, {}), c.ops.get(name, {})
        row = count_row(b.key, METRICS[name], b.counts[name], c.counts[name], skipped)
        rows.append(row)
        group, what = None, name
        if name == KERNELS.name:  # kernels as people read them: by short name, by category across vendors
            group, what = (DEFAULT_RULES.category, "kernel categories") if devices_differ else (short_name, name)
        if row.verdict == "regression":
            grown = grown_ops(_regroup(base_ops, group), _regroup(cur_ops, group))
            alerts.append(count_alert(row, grown, bool(base_ops or cur_ops)))
        if paired is not None:
            found = _step_changes(b.key, name, paired, group)
            changes += [replace(ch, metric=what) for ch in found]
        else:
            changes += op_changes(b.key, what, _regroup(base_ops, group), _regroup(cur_ops, group))
    return rows, alerts, changes


def _timing_rows(
    b: Unit, c: Unit, rules: CompareRules, devices_differ: bool, work_differs: bool = False
) -> tuple[list[Row], list[Alert]]:
    skipped: Verdict | None = None
    if devices_differ:
        skipped = "skipped: devices differ"
    elif work_differs:
        skipped = "skipped: work differs"
    elif b.contended or c.contended:
        skipped = "contended: not judged"
    rows = [
        timing_row(b.key, METRICS[name], b.samples[name], c.samples[name], rules, skipped)
        for name in b.samples
        if name in c.samples
    ]
    return rows, [timing_alert(r) for r in rows if r.verdict == "regression"]


def _notes(base: SampleSet, cur: SampleSet, rules: CompareRules) -> list[str]:
    notes = list(dict.fromkeys(base.notes + cur.notes))
    for side, other, name in ((base, cur, "baseline"), (cur, base, "current")):
        only = [k for k in side.units if k not in other.units]
        if only:
            notes.append(f"only in the {name}, not compared: {', '.join(only)}")
    contended = [
        f"{name}'s {k}"
        for side, name in ((base, "baseline"), (cur, "current"))
        for k, u in side.units.items()
        if u.contended
    ]
    if contended and not rules.counts_only:
        notes.append(
            f"contended: not judged: other processes took the CPU while {', '.join(contended)} ran "
            "(probe.analysis.records.telemetry's contention rule), so those timings are shown but are no verdict"
        )
    if rules.counts_only:
        notes.append("timings not compared (--counts-only): only the deterministic launch counts are gated")
    return notes


def reconciled(rows: Sequence[Row]) -> list[str]:
    """Where a key's launch count alerts beside a timing that improved past the threshold, the two verdicts side by
    side and what they mean together: the gate on counts still holds (they are exact), the speed-up is real too."""
    out = []
    for key in dict.fromkeys(r.key for r in rows):
        counts = [r for r in rows if r.key == key and r.kind == "count" and r.verdict == "regression"]
        faster = [r for r in rows if r.key == key and r.kind == "timing" and r.verdict == "improvement"]
        if counts and faster:
            c, t = counts[0], faster[0]
            base, cur = _sides(c)
            out.append(
                f"{key}: {c.label} {fmt_count(base)} -> {fmt_count(cur)} (regression) beside {t.label} "
                f"x{t.ratio:.3f} (improvement): the current side launches more a step yet runs faster, so what it "
                "saved outweighs what the extra launches cost here; the count gate still fails, since launches are "
                "exact and cost more where the host is the bottleneck"
            )
    return out


ENGINES_DIFFER = (
    "launch counts of two different engines: what each launches is listed as a difference between them, not a "
    "regression (probe ab --gate-counts gates them)"
)


def compare(
    base: SampleSet,
    cur: SampleSet,
    rules: CompareRules = DEFAULTS,
    require_same_env: bool = False,
    gate_counts: bool = True,
) -> Comparison:
    """Every key both sides share, every metric both measured. Raises ProbeError on unusable input: with
    `rules.counts_only` (the CI gate) that includes a current run missing any of the baseline's cells, and with
    `require_same_env` torch, transformers or a device that differ (the gate would otherwise switch itself off).
    Without `gate_counts` (two different engines side by side, probe ab) the launch counts are shown and every op
    that differs is listed, as a difference between the two, never an alert."""
    shared = comparable(base, cur)  # ProbeError when nothing can be compared
    keys = shared.keys
    warnings, differences = environment_warnings(base, cur, timings=not rules.counts_only)
    if shared.warning:
        warnings.append(shared.warning)
    if require_same_env and differences:
        raise ProbeError(f"--require-same-env: {_versus(differences[0])}")
    if rules.counts_only:
        _check_complete(base, cur)
    devices_differ = any(d.key == "device" for d in differences)
    skipped: Verdict | None = None
    if devices_differ:
        skipped = "skipped: devices differ"
    elif differences:
        skipped = "skipped: versions differ"
    elif not gate_counts:
        skipped = "engines differ: not gated"
    if shared.work_differs and not devices_differ:
        skipped = "skipped: work differs"
    rows, alerts, changes = [], [], []
    for key in keys:
        b, c = base.units[key], cur.units[key]
        r, a, ch = _count_rows(b, c, skipped, devices_differ)
        rows += r
        alerts += a
        changes += ch
        if not rules.counts_only:
            r, a = _timing_rows(b, c, rules, devices_differ, shared.work_differs)
            rows += r
            alerts += a
    return Comparison(
        base.source,
        cur.source,
        rules,
        tuple(rows),
        tuple(alerts),
        tuple(changes),
        tuple(warnings),
        tuple(
            reconciled(rows)
            + _notes(base, cur, rules)
            + ([ENGINES_DIFFER] if skipped == "engines differ: not gated" else [])
        ),
        bool(differences),
        devices_differ,
        shared,
    )


__all__ = [
    "ALPHA",
    "COLUMNS",
    "MIN_SAMPLES",
    "THRESHOLD",
    "Alert",
    "Comparable",
    "Comparison",
    "CompareRules",
    "Metric",
    "OpChange",
    "Row",
    "SampleSet",
    "Unit",
    "compare",
    "comparable",
    "fmt_count",
    "from_analysis",
    "from_results",
    "load_samples",
    "row_cells",
]
