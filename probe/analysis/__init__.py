"""The analysis side, which needs no torch: trace -> ledger -> report, and the regression rules."""
