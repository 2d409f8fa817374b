"""The environment a result is measured in, recorded where torch runs: versions, device, CPU, probe's commit
(probe.analysis.records.environment.Environment, which the analysis side reads back)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pynvml
import torch
import transformers

from probe.analysis.records.environment import Environment, git_state

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def driver_version(device: torch.device) -> str | None:
    """The NVIDIA driver, when the run is on a CUDA device and NVML answers; None otherwise."""
    if device.type != "cuda":
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML (ROCm, a container without the library): the driver is not known
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def environment(device: torch.device, dtype: str) -> Environment:
    commit, dirty = git_state(ROOT)
    return Environment(
        torch=str(torch.__version__),  # a TorchVersion, a str subclass: plain text for every encoder
        transformers=transformers.__version__,
        python=platform.python_version(),
        device=str(device),
        device_name=device_name(device),
        cuda=torch.version.cuda,
        driver=driver_version(device),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        dtype=dtype,
        commit=commit,
        dirty=dirty,
        platform=platform.platform(),
    )
