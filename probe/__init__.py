"""probe: instrumented decode engines, traces, per-step ledgers, rooflines and regression alerts."""

import os

# Ray reads this once, when it is first imported, and probe imports Ray for --executor ray. Off, Ray is in its
# local-only mode: a local instance's node address is the loopback, so every port it opens listens on 127.0.0.1
# (probe/cluster.py checks it). Set here because this package is imported before any of its modules imports Ray;
# a value the user set stays.
RAY_LOCAL_ONLY_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
os.environ.setdefault(RAY_LOCAL_ONLY_VAR, "0")

__version__ = "0.1.0"
