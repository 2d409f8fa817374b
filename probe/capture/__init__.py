"""The capture side, which needs torch: config -> run -> trace.

Importing this package loads nothing; `config` is torch-free so every command can build its flags from it.
"""
