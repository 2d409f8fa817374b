"""probe: instrumented decode engines, traces, per-step ledgers, rooflines and regression alerts."""

__version__ = "0.1.0"
