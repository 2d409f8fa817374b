"""What bounds each step, and what fixing it buys: `evidence` (the figures and thresholds), `what_if` (the changes
and their prices), `verdict` (the judgement and its words), `answer` (all of it for a trace, with the step and op
rooflines: what `probe analyze` prints first). And probe run's own: `predictions` (the write-ups' predictions
checked against this machine) and `report` (report.json).

The top floor of the analysis: it may import every other package here.
"""
