"""A device from a file (`probe analyze --device-file`): a card the table in devices.py lacks, or measured peaks in
place of the datasheet's. Apart from the table so that `probe roofline --help`, which lists the table's names, does
not load the trace reader (numpy) that reads this file."""

from __future__ import annotations

import math
import re
from pathlib import Path

from probe.analysis.records.files import read_json
from probe.analysis.roofline.devices import Device
from probe.errors import ProbeError

_FILE_FIELDS = ("name", "memory_bandwidth_bytes_s", "memory_bytes", "peak_flops_s", "source", "spec_source")


def device_file(path: str | Path) -> Device:
    """A device from a JSON object with the table's fields (`--device-file`): a card the table lacks, or measured
    peaks in place of the datasheet's. `name` and `memory_bandwidth_bytes_s` are required; `memory_bytes`,
    `peak_flops_s` (dtype -> dense FLOP/s: float32, bfloat16, float16, float8) and `source` / `spec_source` (where
    the figures come from; the file itself by default) are optional. A one-line ProbeError names what is wrong."""
    doc = read_json(path, "device file")
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
