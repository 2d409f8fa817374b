"""What "auto" means on this machine, told without importing torch, so that a command's help can show the defaults
it will really use here and still build in a blink: the device "auto" resolves to, and the model and dtype that
device takes. engines.models.resolve_device decides for real (torch.cuda.is_available()); this reads only whether
the installed torch was built for a GPU and a GPU driver is loaded, which is what that answer rests on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

AUTO = "auto"
# What "auto" means for --model and --dtype, by device type: on a GPU the write-ups' own model and dtype; on a
# CPU a preset small enough to sweep in minutes, in float32 (exact token parity).
DEVICE_DEFAULTS = {"cuda": ("qwen2.5-1.5b", "float16"), "cpu": ("tiny", "float32")}
GPU_DRIVERS = ("/proc/driver/nvidia/version", "/dev/kfd")  # NVIDIA's driver, AMD's (ROCm)
GPU_LIBRARIES = ("libtorch_cuda*.so", "libtorch_hip*.so")  # a torch built for CUDA, or for ROCm


def device_here() -> str:
    """ "cuda" where torch was built for a GPU and a GPU driver is loaded, else "cpu"."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return "cpu"
    lib = Path(spec.origin).parent / "lib"
    built = any(any(lib.glob(pattern)) for pattern in GPU_LIBRARIES)
    return "cuda" if built and any(Path(p).exists() for p in GPU_DRIVERS) else "cpu"


def settled_here(field: str) -> str | None:
    """What an "auto" `field` (device, model, dtype) becomes on this machine; None for any other field."""
    device = device_here()
    model, dtype = DEVICE_DEFAULTS[device]
    return {"device": device, "model": model, "dtype": dtype}.get(field)


def shown(field: str, value) -> str | None:
    """A default as a flag's help shows it: a tuple comma-separated, "auto" with what it is here, None (nothing to
    show) for None or an empty tuple."""
    if value is None or value == ():
        return None
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if value == AUTO and (settled := settled_here(field)) is not None:
        return f"auto, which is {settled} here"
    return str(value)
