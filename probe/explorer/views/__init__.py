"""The explorer's views, one module a view beside the figures module it draws (probe.explorer.figures): app.py's
VIEWS table picks one, and calls it with the typed source it shows and the ViewContext.

| module | view(s) |
|---|---|
| `diagnosis` | Diagnosis (a trace's answer, or a run's predictions and each trace's verdict) and Op roofline |
| `sweep` | Sweep: a run's cells against prompt length |
| `ledger` | Step ledger: each step's wall by purpose and mechanism, beside its GPU time |
| `step` | One step: the step on one clock, its window and launch links |
| `ops` | Top ops: host self time by op, and the Python frames |
| `kernels` | Kernels: GPU time by kernel category, and the top kernels |
| `compare` | Compare and Alerts: the source against the sidebar's baseline |
| `history` | History: one configuration's runs, and what `probe history check` flagged |
| `ranks` | Ranks: a job's traces step by step, and its straggler |

Each view reads through probe.explorer.loaders (cached) and draws with probe.explorer.widgets and its figures
module; it holds no analysis.
"""

from probe.explorer.views import compare, diagnosis, history, kernels, ledger, ops, ranks, step, sweep

__all__ = ["compare", "diagnosis", "history", "kernels", "ledger", "ops", "ranks", "step", "sweep"]
