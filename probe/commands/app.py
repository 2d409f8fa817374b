"""Open the explorer (app.py at the repository root) on the runs and traces under --root: `streamlit run`,
bound to this machine (127.0.0.1) unless --address says otherwise. The app never reads a file outside the
root. Views: the sweep with its predictions, the per-step ledger, one step's timeline, top ops, and a
comparison with a baseline and its alerts (probe compare).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from probe.errors import ProbeError

APP = Path(__file__).resolve().parents[2] / "app.py"  # the checkout's app.py (the project installs editable)
ADDRESS = "127.0.0.1"  # the app serves every file under its root to whoever reaches the port
PORT = 8501  # Streamlit's own default
# The Host headers the app answers besides --address (.streamlit/config.toml holds the same for a bare streamlit
# run): a web page that rebinds its own name to this machine sends that name, and is refused (DNS rebinding).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        help="folder whose run folders and traces the app shows (default: the current folder)",
    )
    p.add_argument("--port", type=int, default=PORT, help=f"port to serve on (default: {PORT})")
    p.add_argument(
        "--address",
        default=ADDRESS,
        help=f"address to bind (default: {ADDRESS}; anything else exposes the root's files)",
    )


def allowed_hosts(address: str) -> list[str]:
    """The loopback names and the address the user gave; for a wildcard address (every interface), this
    machine's own names and addresses, which are what a browser elsewhere may send."""
    hosts = [*LOOPBACK_HOSTS, address]
    if address in ("0.0.0.0", "::", ""):
        hosts += [socket.gethostname(), socket.getfqdn()]
        inet = (socket.AF_INET, socket.AF_INET6)
        hosts += [a.address.split("%")[0] for ad in psutil.net_if_addrs().values() for a in ad if a.family in inet]
    return list(dict.fromkeys(h for h in hosts if h and h not in ("0.0.0.0", "::")))


def streamlit_command(root: Path, port: int, address: str = ADDRESS) -> list[str]:
    # No file watcher: it would watch the whole checkout (.venv included) for edits nobody makes here.
    hosts = [flag for host in allowed_hosts(address) for flag in ("--server.allowedHosts", host)]
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        *hosts,
        "--",
        "--root",
        str(root.resolve()),
    ]


def main(args: argparse.Namespace) -> int:
    if not APP.is_file():
        raise ProbeError(f"{APP} not found: probe app runs from a checkout (pip install -e .)")
    if not args.root.is_dir():
        raise ProbeError(f"--root {args.root}: not a folder")
    if not 0 < args.port < 65536:
        raise ProbeError(f"--port must be between 1 and 65535, got {args.port}")
    print(f"probe app: http://{args.address}:{args.port}  (root: {args.root.resolve()}; Ctrl-C stops it)", flush=True)
    cmd = streamlit_command(args.root, args.port, args.address)
    if os.name == "posix":  # become streamlit, so that a signal to this process reaches the server itself
        os.execv(cmd[0], cmd)
    return subprocess.call(cmd)
