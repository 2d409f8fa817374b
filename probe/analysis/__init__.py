"""The analysis side, which needs no torch. Six packages and one leaf, each importing only the floors below it
(tests/test_layout.py holds them to it), from the bottom:

- `intervals`: interval arithmetic and statistics by group on sorted int64 arrays; imports nothing here.
- `records/`: what probe writes and reads back (results, sidecars, telemetry, run folders, files within limits).
- `trace/`: the event table and its readers (chrome JSON, nsys SQLite).
- `ledger/`: a trace to one exact ledger a step (steps, GPU, kernels, host), many traces as a job's ranks.
- `roofline/`: what a step or an op should cost on a device (the devices, the formulas, a step's, an op's).
- `regression/`: two measurements compared (samples, rules, statistics) and a run against its history.
- `diagnosis/`: what bounds each step and what fixing it buys (evidence, what-ifs, the verdict, the answer), and
  probe run's predictions and report.

`roofline` and `regression` stand side by side: neither imports the other.
"""
