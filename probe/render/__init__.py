"""Output, in one layer: `console` (the two Rich consoles), `terminal` (progress, a sweep's and a run's tables),
`ledger` (`probe analyze`'s tables) and `markdown` (report.md). The units, names and escaping they print through are
probe.text's, shared with the explorer and the analysis's sentences."""
