"""Device constants: memory bandwidth, memory capacity and peak dense FLOP/s per dtype, one table, each figure with
the vendor document it comes from.

Units: bytes/s and FLOP/s are decimal, as the vendors print them (600 GB/s = 600e9 bytes/s, 989.5 TFLOPS =
989.5e12 FLOP/s). Memory capacity is binary: the vendors' "80GB" of HBM is 80 GiB (five 16 GiB stacks on an
H100; nvidia-smi shows 81,559 MiB of it to programs), so `memory_bytes` = the printed figure x 2**30.

FLOP/s are dense: NVIDIA's datasheets print Hopper, Ada and Blackwell tensor figures "with sparsity" (2:4
structured), twice the dense rate, so the figure here is half the printed one, and the comment says so. fp32 is
the CUDA-core (non-tensor) rate, what an fp32 matmul gets with TF32 off (PyTorch's default for matmuls); fp8 is
listed only where the part has fp8 tensor cores. AMD prints dense peaks.

These are the vendors' theoretical peaks; a kernel reaches some fraction of them, so a roofline built on them is a
lower bound on step time, never a prediction of it (`probe roofline --measure` gives the copy rate).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from probe.analysis.records.files import read_json
from probe.errors import ProbeError

TERA, GIB = 10**12, 2**30


@dataclass(frozen=True)
class Device:
    name: str
    memory_bandwidth_bytes_s: int
    source: str  # the vendor document (title and URL) that prints the bandwidth figure
    pattern: str  # regex over torch.cuda.get_device_name() / a trace's deviceProperties name, case-insensitive
    memory_bytes: int | None = None
    peak_flops_s: dict[str, float] = field(default_factory=dict)  # dense, by dtype name: float32, bfloat16, ...
    spec_source: str = ""  # the vendor document that prints the capacity and FLOP/s figures

    def flops_s(self, dtype: str) -> float | None:
        """The dense peak for `dtype` (float8 for the fp8 formats), if the part has it."""
        return self.peak_flops_s.get("float8" if dtype.startswith("float8") else dtype)


def _t(**tflops: float) -> dict[str, float]:
    return {dtype: value * TERA for dtype, value in tflops.items()}


A100_PDF = (
    "NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5 TFLOPS, BF16/FP16 Tensor Core 312 TFLOPS dense, "
    "624 with sparsity; 40GB HBM2 / 80GB HBM2e), https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/"
    "a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
H100_DATASHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet (SXM: FP32 67 TFLOPS, BF16/FP16 1,979 and FP8 3,958 TFLOPS with "
    "sparsity, 80GB; PCIe: 51, 1,513, 3,026, 80GB; NVL: 60, 1,671, 3,341, 94GB), "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
MI200_SPECS = (
    "AMD Instinct MI200 series data sheet (MI250X: FP16/BF16 383 TFLOPS, FP32 matrix 95.7 TFLOPS, 128GB HBM2e, "
    "3.2768 TB/s; MI250: 362.1, 90.5, 128GB, 3.2768 TB/s), "
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/"
    "instinct-mi200-series-data-sheet.pdf"
)
MI200_NOTE = "; ROCm shows each of the module's two GCDs as a device: every figure here is half the module's"
H800_PAGE = (
    "NVIDIA H800 Tensor Core GPU specifications (SXM: FP32 67 TFLOPS, BF16/FP16 1,979 and FP8 3,958 TFLOPS with "
    "sparsity, 80GB HBM3, 3.35 TB/s; PCIe: 51, 1,513, 3,026, 80GB HBM2e, 2 TB/s), https://www.nvidia.cn/data-center/h800/"
)
# NVIDIA's GeForce figures are in its architecture whitepapers' appendix tables. GeForce tensor cores run fp16 and bf16
# with fp32 accumulation (what a torch matmul uses) at half their fp16-accumulate rate; the figure here is that
# fp32-accumulate rate, dense. fp8 is left out: the whitepapers print it with fp16 accumulation only.
TURING_WP = (
    "NVIDIA Turing GPU Architecture whitepaper, Table 1 (GeForce RTX 2080 Ti reference: FP32 13.4 TFLOPS, FP16 "
    "Tensor with FP32 accumulate 53.8 TFLOPS, 11 GB GDDR6, 616 GB/s), https://images.nvidia.com/aem-dam/en-zz/"
    "Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf"
)
AMPERE_WP = (
    "NVIDIA Ampere GA102 GPU Architecture whitepaper, Table (GeForce RTX 3090: FP32 35.6 TFLOPS, FP16 and BF16 "
    "Tensor with FP32 accumulate 71 | 142* TFLOPS, 24 GB GDDR6X, 936 GB/s), "
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
ADA_WP = (
    "NVIDIA Ada GPU Architecture whitepaper, Appendix A (GeForce RTX 4090: FP32 82.6 TFLOPS, FP16 and BF16 Tensor "
    "with FP32 accumulate 165.2 | 330.4* TFLOPS, 24 GB GDDR6X, 1008 GB/s; RTX 4080: 48.7, 97.5 | 194.9*, 16 GB "
    "GDDR6X, 716.8 GB/s), https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
BLACKWELL_WP = (
    "NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix (GeForce RTX 5090: FP32 104.8 TFLOPS, FP16 and BF16 "
    "Tensor with FP32 accumulate 209.5 | 419* TFLOPS, 32 GB GDDR7, 1792 GB/s), "
    "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf"
)
MI325X_SHEET = (
    "AMD Instinct MI325X data sheet (FP32 163.4 TFLOPS, FP16/BF16 1307.4 and FP8 2614.9 TFLOPS dense; 256 GB HBM3E, "
    "6 TB/s), https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/"
    "instinct-mi325x-datasheet.pdf"
)
MI355X_PAGE = (
    "AMD Instinct MI355X GPU specifications (FP32 vector 157.3 TFLOPS, FP16/BF16 2.5 PFLOPS and FP8 5.0 PFLOPS dense: "
    "256 CUs x 4,096 and 8,192 FLOP a clock at 2.4 GHz; 288 GB HBM3E, 8 TB/s), "
    "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"
)
# NVIDIA publishes no H20 datasheet on its own site (the part is sold in China only); these are the figures of its
# product brief as system makers print them. Dense: BF16/FP16 148, FP8 296 TFLOPS; FP32 44 TFLOPS.
H20_BRIEF = (
    "no public NVIDIA datasheet; NVIDIA H20 product brief figures as printed by system makers (96 GB HBM3, 4.0 TB/s; "
    "FP32 44, BF16/FP16 148 and FP8 296 TFLOPS dense), e.g. https://willitrunai.com/gpus/h20-96gb"
)

# Where one document lists several variants, the figure is the row for the named variant. Entries are tried in
# table order by match_device, so the more specific variants come before the catch-alls.
DEVICES: tuple[Device, ...] = (
    Device(
        "T4",
        320 * 10**9,
        "NVIDIA T4 Tensor Core GPU datasheet (320+ GB/s GDDR6), https://www.nvidia.com/en-us/data-center/tesla-t4/",
        r"\bT4\b",
        16 * GIB,
        _t(float32=8.1, float16=65),  # Turing: no bf16 tensor cores
        "NVIDIA T4 datasheet (Single-Precision 8.1 TFLOPS, Mixed-Precision FP16/FP32 65 TFLOPS, 16 GB GDDR6), "
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
    ),
    Device(
        "V100-PCIe",
        900 * 10**9,
        "NVIDIA V100 Tensor Core GPU datasheet (V100 PCIe: 900 GB/s HBM2), https://www.nvidia.com/en-us/data-center/v100/",
        r"V100.*PCIE",
        32 * GIB,
        _t(float32=14, float16=112),
        "NVIDIA V100 datasheet (PCIe: FP32 14 TFLOPS, Tensor 112 TFLOPS; 32/16 GB HBM2, the larger listed), "
        "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
    ),
    Device(
        "V100",
        900 * 10**9,
        "NVIDIA V100 Tensor Core GPU datasheet (V100 SXM2/PCIe: 900 GB/s HBM2), "
        "https://www.nvidia.com/en-us/data-center/v100/",
        r"\bV100",
        32 * GIB,
        _t(float32=15.7, float16=125),
        "NVIDIA V100 datasheet (SXM2: FP32 15.7 TFLOPS, Tensor 125 TFLOPS; 32/16 GB HBM2, the larger listed), "
        "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
    ),
    Device(
        "A10",
        600 * 10**9,
        "NVIDIA A10 Tensor Core GPU datasheet (GPU memory bandwidth 600 GB/s), "
        "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        r"\bA10\b",
        24 * GIB,
        _t(float32=31.2, bfloat16=125, float16=125),  # printed 125 | 250 with sparsity
        "NVIDIA A10 datasheet (FP32 31.2 TFLOPS, BF16/FP16 Tensor Core 125 | 250* TFLOPS, 24 GB GDDR6), "
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf",
    ),
    # NVIDIA publishes no A10G datasheet (it is AWS's G5 part); it is the A10's GA102 with the same 24 GB of
    # 384-bit GDDR6 at 12.5 Gbps, which is 600 GB/s. Its clocks differ from the A10's and no vendor prints its
    # FLOP/s, so none are given.
    Device(
        "A10G",
        600 * 10**9,
        "no vendor datasheet; Amazon EC2 G5 (https://aws.amazon.com/ec2/instance-types/g5/) lists 24 GB "
        "per A10G; 600 GB/s per Baseten, 'NVIDIA A10 vs A10G for ML model inference', "
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
        r"\bA10G\b",
        24 * GIB,
        {},
        "Amazon EC2 G5 instance types (24 GB GPU memory per A10G), https://aws.amazon.com/ec2/instance-types/g5/",
    ),
    Device(
        "L4",
        300 * 10**9,
        "NVIDIA L4 Tensor Core GPU datasheet (GPU memory bandwidth 300 GB/s), "
        "https://www.nvidia.com/en-us/data-center/l4/",
        r"\bL4\b",
        24 * GIB,
        _t(float32=30.3, bfloat16=121, float16=121, float8=242.5),  # printed 242 / 485 with sparsity
        "NVIDIA L4 datasheet (FP32 30.3 TFLOPS; BF16/FP16 242 and FP8 485 TFLOPS with sparsity; 24GB), "
        "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet",
    ),
    Device(
        "L40S",
        864 * 10**9,
        "NVIDIA L40S GPU datasheet (GPU memory bandwidth 864 GB/s), https://www.nvidia.com/en-us/data-center/l40s/",
        r"\bL40S\b",
        48 * GIB,
        _t(float32=91.6, bfloat16=362.05, float16=362.05, float8=733),  # printed 733 / 1,466 with sparsity
        "NVIDIA L40S datasheet (FP32 91.6 TFLOPS; BF16/FP16 362.05 | 733* and FP8 733 | 1,466* TFLOPS; 48GB "
        "GDDR6), https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
    ),
    Device(
        "A100-40GB",
        1555 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB PCIe and SXM: 1,555 GB/s), "
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        r"A100.*40\s*GB|A100-PG509-200",  # PG509-200: the A100 SXM4 40GB board (HTA's traces, 39.4 GiB)
        40 * GIB,
        _t(float32=19.5, bfloat16=312, float16=312),
        A100_PDF,
    ),
    Device(
        "A100-80GB-PCIe",
        1935 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe: 1,935 GB/s), "
        "https://www.nvidia.com/en-us/data-center/a100/",
        r"A100.*80\s*GB.*PCIe|A100.*PCIe.*80\s*GB",
        80 * GIB,
        _t(float32=19.5, bfloat16=312, float16=312),
        A100_PDF,
    ),
    Device(
        "A100-80GB-SXM",
        2039 * 10**9,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: 2,039 GB/s), "
        "https://www.nvidia.com/en-us/data-center/a100/",
        r"A100.*SXM.*80\s*GB|A100.*80\s*GB",
        80 * GIB,
        _t(float32=19.5, bfloat16=312, float16=312),
        A100_PDF,
    ),
    Device(
        "H100-PCIe",
        2000 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: 2 TB/s), "
        "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
        r"H100.*PCIe",
        80 * GIB,
        _t(float32=51, bfloat16=756.5, float16=756.5, float8=1513),
        H100_DATASHEET,
    ),
    Device(
        "H100-NVL",
        3900 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL: 3.9 TB/s), https://www.nvidia.com/en-us/data-center/h100/",
        r"H100.*NVL",
        94 * GIB,
        _t(float32=60, bfloat16=835.5, float16=835.5, float8=1670.5),
        H100_DATASHEET,
    ),
    Device(
        "H100-SXM",
        3350 * 10**9,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 3.35 TB/s), https://www.nvidia.com/en-us/data-center/h100/",
        r"H100",
        80 * GIB,
        _t(float32=67, bfloat16=989.5, float16=989.5, float8=1979),
        H100_DATASHEET,
    ),
    Device(
        "H200-NVL",
        4800 * 10**9,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM and NVL: 4.8 TB/s HBM3e), "
        "https://www.nvidia.com/en-us/data-center/h200/",
        r"H200.*NVL",
        141 * GIB,
        _t(float32=60, bfloat16=835.5, float16=835.5, float8=1670.5),
        "NVIDIA H200 datasheet (H200 NVL: FP32 60 TFLOPS; BF16/FP16 1,671 and FP8 3,341 TFLOPS with sparsity; "
        "141GB), https://www.nvidia.com/en-us/data-center/h200/",
    ),
    Device(
        "H200",
        4800 * 10**9,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM and NVL: 4.8 TB/s HBM3e), "
        "https://www.nvidia.com/en-us/data-center/h200/",
        r"\bH200\b",
        141 * GIB,
        _t(float32=67, bfloat16=989.5, float16=989.5, float8=1979),
        "NVIDIA H200 datasheet (H200 SXM: FP32 67 TFLOPS; BF16/FP16 1,979 and FP8 3,958 TFLOPS with sparsity; "
        "141GB), https://www.nvidia.com/en-us/data-center/h200/",
    ),
    Device(
        "B200",
        8000 * 10**9,
        "NVIDIA DGX B200 datasheet (8 GPUs: 64 TB/s HBM3e in all, 8 TB/s each), "
        "https://www.nvidia.com/en-us/data-center/dgx-b200/",
        r"\bB200\b",
        180 * GIB,
        _t(float32=75, bfloat16=2250, float16=2250, float8=4500),
        "NVIDIA HGX B200 specifications (8 GPUs: FP32 600 TFLOPS; FP16/BF16 36 and FP8 72 PFLOPS with sparsity; "
        "1,440GB in all), https://www.nvidia.com/en-us/data-center/hgx/",
    ),
    Device(
        "H800-PCIe",
        2000 * 10**9,
        H800_PAGE,
        r"H800.*PCIe",
        80 * GIB,
        _t(float32=51, bfloat16=756.5, float16=756.5, float8=1513),  # printed with sparsity: halved
        H800_PAGE,
    ),
    Device(
        "H800",
        3350 * 10**9,
        H800_PAGE,
        r"\bH800\b",
        80 * GIB,
        _t(float32=67, bfloat16=989.5, float16=989.5, float8=1979),  # the SXM part; printed with sparsity: halved
        H800_PAGE,
    ),
    Device(
        "H20",
        4000 * 10**9,
        H20_BRIEF,
        r"\bH20\b",
        96 * GIB,
        _t(float32=44, bfloat16=148, float16=148, float8=296),
        H20_BRIEF,
    ),
    Device(
        "RTX-2080-Ti",
        616 * 10**9,
        TURING_WP,
        r"RTX 2080 Ti(?!.*Laptop)",
        11 * GIB,
        _t(float32=13.4, float16=53.8),
        TURING_WP,
    ),  # Turing: no bf16 tensor cores
    Device(
        "RTX-3090",
        936 * 10**9,
        AMPERE_WP,
        r"RTX 3090(?! Ti)(?!.*Laptop)",
        24 * GIB,
        _t(float32=35.6, bfloat16=71, float16=71),
        AMPERE_WP,
    ),
    Device(
        "RTX-4080",
        716_800 * 10**6,
        ADA_WP,
        r"RTX 4080(?! SUPER)(?!.*Laptop)",
        16 * GIB,
        _t(float32=48.7, bfloat16=97.5, float16=97.5),
        ADA_WP,
    ),
    Device(
        "RTX-4090",
        1008 * 10**9,
        ADA_WP,
        r"RTX 4090(?! D)(?!.*Laptop)",
        24 * GIB,
        _t(float32=82.6, bfloat16=165.2, float16=165.2),
        ADA_WP,
    ),
    Device(
        "RTX-5090",
        1792 * 10**9,
        BLACKWELL_WP,
        r"RTX 5090(?!.*Laptop)",
        32 * GIB,
        _t(float32=104.8, bfloat16=209.5, float16=209.5),
        BLACKWELL_WP,
    ),
    Device(
        "MI355X",
        8000 * 10**9,
        MI355X_PAGE,
        r"MI355X",
        288 * GIB,
        _t(float32=157.3, bfloat16=2516.6, float16=2516.6, float8=5033.2),
        MI355X_PAGE,
    ),
    Device(
        "MI325X",
        6000 * 10**9,
        MI325X_SHEET,
        r"MI325X",
        256 * GIB,
        _t(float32=163.4, bfloat16=1307.4, float16=1307.4, float8=2614.9),
        MI325X_SHEET,
    ),
    Device(
        "MI300X",
        5300 * 10**9,
        "AMD Instinct MI300X accelerator data sheet (peak memory bandwidth 5.3 TB/s), "
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        r"MI300X",
        192 * GIB,
        _t(float32=163.4, bfloat16=1307.4, float16=1307.4, float8=2614.9),
        "AMD Instinct MI300X data sheet (FP32 163.4 TFLOPS, FP16/BF16 1307.4 and FP8 2614.9 TFLOPS dense; 192 GB "
        "HBM3), https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
        "amd-instinct-mi300x-data-sheet.pdf",
    ),
    Device(
        "MI250X",
        1638 * 10**9 + 4 * 10**8,
        MI200_SPECS + MI200_NOTE,
        r"MI250X",
        64 * GIB,
        _t(float32=47.85, bfloat16=191.5, float16=191.5),
        MI200_SPECS + MI200_NOTE,
    ),
    Device(
        "MI250",
        1638 * 10**9 + 4 * 10**8,
        MI200_SPECS + MI200_NOTE,
        r"MI250(?!X)",
        64 * GIB,
        _t(float32=45.25, bfloat16=181.05, float16=181.05),
        MI200_SPECS + MI200_NOTE,
    ),
)


@dataclass(frozen=True)
class Unpublished:
    """A part known by name whose vendor prints no bandwidth or FLOP/s for it: named, never guessed."""

    name: str
    pattern: str  # as Device.pattern
    why: str  # what the vendor prints instead, with its address


UNPUBLISHED: tuple[Unpublished, ...] = (
    Unpublished(
        "GeForce Laptop GPU",
        r"Laptop GPU",
        "NVIDIA prints no memory bandwidth or FLOP/s for its laptop GPUs, whose clocks and power the laptop's maker "
        "sets (https://www.nvidia.com/en-us/geforce/laptops/40-series/ lists the RTX 4080 Laptop GPU's 12 GB of "
        "GDDR6 and its 192-bit width only)",
    ),
)


def unpublished(gpu_name: str) -> Unpublished | None:
    """The entry of UNPUBLISHED a name as torch reports it falls under, if any."""
    return next((u for u in UNPUBLISHED if re.search(u.pattern, gpu_name, flags=re.IGNORECASE)), None)


_FILE_FIELDS = ("name", "memory_bandwidth_bytes_s", "memory_bytes", "peak_flops_s", "source", "spec_source")


def device_file(path: str | Path) -> Device:
    """A device from a JSON object with the table's fields (`--device-file`): a card the table lacks, or measured
    peaks in place of the datasheet's. `name` and `memory_bandwidth_bytes_s` are required; `memory_bytes`,
    `peak_flops_s` (dtype -> dense FLOP/s: float32, bfloat16, float16, float8) and `source` / `spec_source` (where
    the figures come from; the file itself by default) are optional. A one-line ProbeError names what is wrong."""
    doc = read_json(path)
    where = f"--device-file {path}"
    if not isinstance(doc, dict):
        raise ProbeError(f"{where}: a JSON object with the fields {', '.join(_FILE_FIELDS)}")
    unknown = sorted(set(doc) - set(_FILE_FIELDS))
    if unknown:
        raise ProbeError(f"{where}: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(_FILE_FIELDS)}")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ProbeError(f"{where}: 'name' must be the device's name, as text")
    bandwidth = _positive(doc.get("memory_bandwidth_bytes_s"), where, "memory_bandwidth_bytes_s", "bytes/s, e.g. 600e9")
    memory = doc.get("memory_bytes")
    if memory is not None:
        memory = int(_positive(memory, where, "memory_bytes", "bytes"))
    peaks = doc.get("peak_flops_s", {})
    if not isinstance(peaks, dict):
        raise ProbeError(f"{where}: 'peak_flops_s' must map a dtype to FLOP/s, e.g. {{\"bfloat16\": 312e12}}")
    flops = {str(k): _positive(v, where, f"peak_flops_s.{k}", "FLOP/s") for k, v in peaks.items()}
    said = f"the device file {path}"
    source, spec = doc.get("source", said), doc.get("spec_source", doc.get("source", said))
    if not isinstance(source, str) or not isinstance(spec, str):
        raise ProbeError(f"{where}: 'source' and 'spec_source' are text: where the figures come from")
    return Device(name.strip(), int(bandwidth), source, re.escape(name.strip()), memory, flops, spec)


def _positive(value, where: str, key: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ProbeError(f"{where}: {key!r} must be a positive number of {unit}, got {value!r}")
    return float(value)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def device(name: str) -> Device:
    """A table entry by name, ignoring case and punctuation (`h100-sxm`, `H100 SXM`, `h100sxm`), or by a name as
    torch or a trace's deviceProperties print it (`NVIDIA H100 80GB HBM3`, `AMD Instinct MI300X VF`)."""
    for d in DEVICES:
        if _key(d.name) == _key(name):
            return d
    found = match_device(name)
    if found is None:
        raise ProbeError(f"unknown device {name!r}: use one of {', '.join(d.name for d in DEVICES)}")
    return found


def match_device(gpu_name: str) -> Device | None:
    """The entry for a name as torch reports it ('NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3'), if any.

    Entries are tried in table order, so the more specific variants are listed before the catch-alls.
    """
    for d in DEVICES:
        if re.search(d.pattern, gpu_name, flags=re.IGNORECASE):
            return d
    return None
