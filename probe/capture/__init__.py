"""The capture side, which needs torch: config -> run -> trace.

Importing this package loads nothing; `config` is torch-free so every command can build its flags from it.
"""

import os

# torch's Kineto writes two `USDT:` lines to stderr for every profiler session, and probe profile opens dozens (its
# event-cost calibration). Kineto's levels run VERBOSE 0 .. ERROR 4, USDT 5, so hiding them hides its errors too;
# what those would report, a trace without GPU activity, the ledger warns about. KINETO_LOG_LEVEL set by the user
# is kept. Kineto reads it once, at its first session, so it is set here, before any.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
