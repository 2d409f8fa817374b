"""Output, in one layer: `console` (the two Rich consoles), `terminal` (progress, a sweep's and a run's tables),
`ledger` (`probe analyze`'s tables), `markdown` (report.md) and `text` (units, names, escaping, one-line errors: a
leaf every layer may use). Importing the package imports none of them, so `probe.render.text` stays a leaf."""
