"""Two measurements compared, and a run against its history: `samples` (what compare reads, from results or a
ledger), `rules` (the knobs every judging command shares), `stats` (ratio of medians, bootstrap, Mann-Whitney U),
`compare` (counts exactly, timings by ratio and test, what changed), `history/` (the DuckDB run history and its judge).

Imports records, trace, ledger and intervals; never roofline or diagnosis.
"""
