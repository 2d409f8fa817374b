"""Shared fixtures: the tiny preset is built once per session (it takes about a second)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
IN_CI = os.environ.get("PROBE_CI") == "1"  # .ci/run sets it: tools that CI installs must not be skipped


@pytest.fixture(scope="session")
def tiny():
    from engines.models import load_model

    return load_model("tiny", "float32", "cpu", seed=0)


def run_probe(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "probe", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=kw.pop("cwd", ROOT), **kw)
