"""The environment a result was measured in: versions, device, CPU, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def environment(device: torch.device, dtype: str) -> dict:
    return {
        "torch": str(torch.__version__),  # a TorchVersion, a str subclass: plain text for every encoder
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": device_name(device),
        "cuda": torch.version.cuda,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "dtype": dtype,
        "git_commit": git_commit(),
        "platform": platform.platform(),
    }
