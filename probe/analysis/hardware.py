"""Device constants: peak memory bandwidth, one table, each figure with the vendor document it comes from.

Units: bytes/s, decimal, as the vendors print them (600 GB/s = 600e9 bytes/s, 3.35 TB/s = 3.35e12).
These are the vendors' theoretical peaks; a copy kernel reaches some fraction of them, so a roofline built on
them is a lower bound on step time, never a prediction of it (`probe roofline --measure` gives the copy rate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from probe.errors import ProbeError


@dataclass(frozen=True)
class Device:
    name: str
    memory_bandwidth_bytes_s: int
    source: str  # the vendor document (title and URL) that prints the bandwidth figure
    pattern: str  # regex over torch.cuda.get_device_name(), case-insensitive


# Where one document lists several variants, the figure is the row for the named variant.
DEVICES: tuple[Device, ...] = (
    Device(
        "T4",
        320 * 10**9,
        "NVIDIA T4 Tensor Core GPU datasheet (320+ GB/s GDDR6), https://www.nvidia.com/en-us/data-center/tesla-t4/",
        r"\bT4\b",
    ),
    Device(
        "V100",
        900 * 10**9,
        "NVIDIA V100 Tensor Core GPU datasheet (V100 SXM2/PCIe: 900 GB/s HBM2), "
        "https://www.nvidia.com/en-us/data-center/v100/",
        r"\bV100",
    ),
    Device(
        "A10",
        600 * 10**9,
        "NVIDIA A10 Tensor Core GPU datasheet (GPU memory bandwidth 600 GB/s), "
        "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        r"\bA10\b",
    ),
    # NVIDIA publishes no A10G datasheet (it is AWS's G5 part); it is the A10's GA102 with the same 24 GB of
    # 384-bit GDDR6 at 12.5 Gbps, which is 600 GB/s.
    Device(
        "A10G",
        600 * 10**9,
        "no vendor datasheet; Amazon EC2 G5 (https://aws.amazon.com/ec2/instance-types/g5/) lists 24 GB "
        "per A10G; 600 GB/s per Baseten, 'NVIDIA A10 vs A10G for ML model inference', "
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
        r"\bA10G\b",
    ),
    Device(
        "L4",
        300 * 10**9,
        "NVIDIA L4 Tensor Core GPU datasheet (GPU memory bandwidth 300 GB/s), "
        "https://www.nvidia.com/en-us/data-center/l4/",
        r"\bL4\b",
    ),
    Device(
        "L40S",
        864 * 10**9,
        "NVIDIA L40S GPU datasheet (GPU memory bandwidth 864 GB/s), https://www.nvidia.com/en-us/data-center/l40s/",
        r"\bL40S\b",
    ),
    Device(
        "A100-40GB",
        1555 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB PCIe and SXM: 1,555 GB/s), "
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        r"A100.*40\s*GB",
    ),
    Device(
        "A100-80GB-PCIe",
        1935 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe: 1,935 GB/s), "
        "https://www.nvidia.com/en-us/data-center/a100/",
        r"A100.*80\s*GB.*PCIe|A100.*PCIe.*80\s*GB",
    ),
    Device(
        "A100-80GB-SXM",
        2039 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: 2,039 GB/s), "
        "https://www.nvidia.com/en-us/data-center/a100/",
        r"A100.*SXM.*80\s*GB|A100.*80\s*GB",
    ),
    Device(
        "H100-PCIe",
        2000 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: 2 TB/s), "
        "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
        r"H100.*PCIe",
    ),
    Device(
        "H100-NVL",
        3900 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL: 3.9 TB/s), https://www.nvidia.com/en-us/data-center/h100/",
        r"H100.*NVL",
    ),
    Device(
        "H100-SXM",
        3350 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 3.35 TB/s), https://www.nvidia.com/en-us/data-center/h100/",
        r"H100",
    ),
    Device(
        "H200",
        4800 * 10**9,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM and NVL: 4.8 TB/s HBM3e), "
        "https://www.nvidia.com/en-us/data-center/h200/",
        r"\bH200\b",
    ),
    Device(
        "B200",
        8000 * 10**9,
        "NVIDIA DGX B200 datasheet (8 GPUs: 64 TB/s HBM3e in all, 8 TB/s each), "
        "https://www.nvidia.com/en-us/data-center/dgx-b200/",
        r"\bB200\b",
    ),
    Device(
        "MI300X",
        5300 * 10**9,
        "AMD Instinct MI300X accelerator data sheet (peak memory bandwidth 5.3 TB/s), "
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        r"MI300X",
    ),
)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def device(name: str) -> Device:
    """A table entry by name, ignoring case and punctuation (`h100-sxm`, `H100 SXM`, `h100sxm`)."""
    for d in DEVICES:
        if _key(d.name) == _key(name):
            return d
    raise ProbeError(f"unknown device {name!r}: use one of {', '.join(d.name for d in DEVICES)}")


def match_device(gpu_name: str) -> Device | None:
    """The entry for a name as torch reports it ('NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3'), if any.

    Entries are tried in table order, so the more specific variants are listed before the catch-alls.
    """
    for d in DEVICES:
        if re.search(d.pattern, gpu_name, flags=re.IGNORECASE):
            return d
    return None
