"""What the Streamlit explorer (app.py) shows, as pure functions: tidy frames and plotly figures, one module a
view, so that each view's drawing is found by its name.

| module | view |
|---|---|
| `diagnosis` | Diagnosis: a step's verdict, its roofline, what to fix first, the per-op roofline; a run's predictions |
| `sweep` | Sweep: a run's cells against prompt length, with report.json's predictions |
| `telemetry` | the telemetry panels under the Sweep and the trace views (bounded reads, min/max envelopes) |
| `ledger` | Step ledger: each step's host parts beside its GPU busy and idle time |
| `step` | One step: the step on one clock (host lanes, GPU streams, idle gaps, links), its two host partitions |
| `ops` | Top ops: host self time by op, and the Python frames |
| `kernels` | Kernels: GPU time by kernel category per step, and the top kernels |
| `compare` | Compare and Alerts: a baseline against the current trace or run, and probe compare's table |
| `history` | History: one configuration's runs and what `probe history check` flagged |
| `ranks` | Ranks: a job's traces step by step, and its straggler |
| `style` | every view: the colour table, the host categories, names made safe to show, units, round ticks |

Every number comes from a typed result (`BenchResults`, `Report`, `TraceAnalysis`, `Answer`, `StepClock`,
`Comparison`, `Ranks`, telemetry samples): these functions only reshape and draw them, so they are tested
without Streamlit, which this package never imports. Every name that reaches a plotly label, hover or title goes
through `style.label` (plotly reads HTML in them). Which files the app may read: probe.explorer.sources.
"""

from probe.explorer.figures import (
    compare,
    diagnosis,
    history,
    kernels,
    ledger,
    ops,
    ranks,
    step,
    style,
    sweep,
    telemetry,
)

__all__ = [
    "compare",
    "diagnosis",
    "history",
    "kernels",
    "ledger",
    "ops",
    "ranks",
    "step",
    "style",
    "sweep",
    "telemetry",
]
