"""The write-ups' roofline: `formulas` (bytes, token forwards, the step model) and `published` (their numbers,
recomputed)."""
