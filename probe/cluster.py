"""Ray, for the commands that take `--executor ray`: joining a cluster (or starting a local instance) and fanning a
function out over it. Importing this module imports Ray, so only those commands import it, and only when asked.

    ray start --head                          # on the first machine; it prints the address to join
    ray start --address=HEAD_IP:6379          # on every other machine
    probe bench ... --executor ray --address HEAD_IP:6379

Without an address a local instance is started for the command (no dashboard) and shut down after it. The
scheduling is Ray's: probe only says what each task needs (a GPU, a node's CPUs, one CPU).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

import ray

from probe.errors import ProbeError

try:  # Ray 2.5x's token authentication: what ray.init(address="auto") calls to send the token this machine holds
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available as send_token,
    )
except ImportError:  # a Ray without token authentication
    send_token = None


@contextlib.contextmanager
def session(address: str | None = None) -> Iterator[None]:
    """Ray for the block: the cluster at `address`, or a local instance started (and shut down) here. A Ray this
    process already joined (a test's, a notebook's) is used as it is and left running."""
    if ray.is_initialized():
        yield
        return
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if address and send_token is not None:
        # ray.init sends this machine's token to a cluster it finds by address="auto", not to one named by
        # address: do what "auto" does, so a `ray start --head` cluster (token authentication is on by default
        # since Ray 2.5x) can be joined by name. $RAY_AUTH_MODE, when set, still decides.
        send_token(warn_if_disabled=False)
    try:
        # "local": a new instance, even where a `ray start` cluster runs (ray.init() would join that)
        ray.init(address=address or "local", **options)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise ProbeError(f"cannot start or join {where}: {str(e).strip().splitlines()[0]}") from None
    try:
        yield
    finally:
        ray.shutdown()


def fan_out(fn: Callable, items: Sequence, num_cpus: float = 1) -> list:
    """[fn(item) for item in items], each call a Ray task asking for `num_cpus`, in the items' order. `fn` should
    return its failures rather than raise them; a task Ray itself loses raises here."""
    task = ray.remote(num_cpus=num_cpus)(fn)
    return ray.get([task.remote(item) for item in items])
