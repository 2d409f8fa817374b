"""What a step, or an op, should cost on a device: `devices` (the device table, each figure with its source),
`formulas` (the write-ups' bytes, token forwards and step model, from a model config), `published` (the write-ups'
numbers, recomputed), `step` (the roofline beside a measured step), `ops` (each op's roofline from its recorded
shapes).

Imports records, trace, ledger and intervals; never regression or diagnosis.
"""
