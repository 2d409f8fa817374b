"""A trace to one exact ledger a step: `build.analyze(trace, options) -> TraceAnalysis` (its figures are defined
in `build`'s docstring, its types in `types`), reading as its stages: `steps` (finding them), `gpu` (busy, idle,
launch delays), `kernels` (categories, short names), `host` (the two partitions of the host window), with `patterns`
for user regexes, and `phases` (a step's sequences and its phase, where no marker says it, from its recorded
shapes). Beside it: `median` (`median_step`, the median steady step), `timeline` (one step as a list, for `probe
analyze --step`), `ranks` (many traces as one job's ranks).

Imports records, trace and intervals; never roofline, regression or diagnosis.
"""
