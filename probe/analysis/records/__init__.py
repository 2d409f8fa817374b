"""What probe writes and reads back, typed, with no analysis in it: `files` (opening only regular files, JSON
within limits, atomic writes, trace names), `runfolder` (a run folder's files and the rule for one that holds
some), `environment` (where a run ran and when two differ), `results` (results.json and cells.parquet),
`telemetry` (samples and the contention rule), `sidecar` (a trace's `.meta.json` and the profiler's cost per event).

Imports nothing else of probe.analysis but `intervals`.
"""
