"""A trace's sidecar, typed: `<stem>.meta.json` (or `<stem>.nsys.meta.json`), which `probe profile` writes beside
every trace it records, read back here.

It holds the run's configuration (`ProfileConfig`), the environment it ran in (`Environment`), the two clocks read
at one instant (so telemetry samples line up with the trace), the profiler's cost per recorded event (torch.profiler
traces: probe.capture.calibrate), and the tool. Whatever else the tool wrote (the recorded run's tokens, per-step
times, the nsys command) is kept in `details` as written, for a person to read; probe reads none of it.

`read_sidecar(path)` finds and reads a trace's sidecar: None when there is none, a one-line ProbeError when there
is one that is not a probe sidecar (not JSON, nested too deep, a field of the wrong type).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from probe.analysis.records.environment import Clock, Environment
from probe.analysis.records.files import read_json, stem_names, stem_of
from probe.errors import ProbeError
from probe.settings import ProfileConfig

Tool = Literal["torch.profiler", "nsys"]
_TYPED = ("config", "env", "clock", "event_cost_ns", "tool")


# No profiler costs a millisecond an event (torch.profiler's are 0.1 to 10 us, probe.capture.calibrate): a larger
# cost is not a measurement, and would put the unprofiled estimate far below zero (or past a float, at 1e308).
MAX_EVENT_COST_NS = 1e6


@dataclass(frozen=True)
class EventCost:
    """What torch.profiler costs the host per event it records (probe.capture.calibrate measures it): an op or
    runtime call the dispatcher records, and a range opened from Python (record_function)."""

    op_ns: float
    range_ns: float

    def __post_init__(self) -> None:
        if not all(0 <= ns <= MAX_EVENT_COST_NS for ns in (self.op_ns, self.range_ns)):  # NaN fails too
            raise ValueError(
                f"event costs op {self.op_ns:g} ns, range {self.range_ns:g} ns: each must be from 0 to "
                f"{MAX_EVENT_COST_NS:,.0f} ns"
            )

    @classmethod
    def from_json(cls, doc) -> EventCost | None:
        """From a sidecar's `event_cost_ns`: {"op": ns, "range": ns}; None when absent or malformed, ValueError when
        the costs are past what a profiler could cost."""
        if isinstance(doc, dict) and all(isinstance(doc.get(k), int | float) for k in ("op", "range")):
            return cls(float(doc["op"]), float(doc["range"]))
        return None

    def to_json(self) -> dict:
        return {"op": self.op_ns, "range": self.range_ns}


@dataclass(frozen=True)
class Sidecar:
    config: ProfileConfig
    env: Environment
    clock: Clock | None = None  # None in sidecars written before the clock anchor
    event_cost: EventCost | None = None  # torch.profiler only
    tool: Tool | None = None
    details: dict = field(default_factory=dict)  # the rest, as the tool wrote it

    @property
    def contention(self) -> tuple[float | None, bool | None]:
        """(other processes' cores, contended) as `probe profile` recorded them for its own run (the verdict
        probe.analysis.records.telemetry.contention gave at capture); (None, None) when the sidecar predates the
        record."""
        c = self.details.get("contention")
        if not isinstance(c, dict):
            return None, None
        other, judged = c.get("other_cpu_cores"), c.get("contended")
        return (
            float(other) if isinstance(other, int | float) else None,
            judged if isinstance(judged, bool) else None,
        )

    @property
    def contended(self) -> bool | None:
        return self.contention[1]

    @property
    def threads(self) -> tuple[int, int] | None:
        """(intra-op threads the run used, the machine's cores), when the environment recorded both."""
        ran, cores = self.env.torch_threads, self.env.cpu_count
        return (ran, cores) if ran and cores else None

    @property
    def contended_caveat(self) -> str | None:
        """The line a diagnosis says first when the trace was recorded contended; None otherwise."""
        other, judged = self.contention
        if not judged:
            return None
        cores = f"{other:.2f} cores" if other is not None else "other processes' cores"
        return (
            f"recorded contended: {cores} of other work ran beside it "
            "(probe.analysis.records.telemetry's contention rule), so its host times are inflated and are not a "
            "verdict on the code"
        )

    def to_json(self) -> dict:
        return self.details | {
            "config": self.config.to_json(),
            "env": self.env.to_json(),
            "clock": dataclasses.asdict(self.clock) if self.clock else None,
            "event_cost_ns": self.event_cost.to_json() if self.event_cost else None,
            "tool": self.tool,
        }

    @classmethod
    def from_json(cls, doc) -> Sidecar:
        """ValueError, in one line naming the field, for anything that is not a probe sidecar."""
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict) for k in ("config", "env")):
            raise ValueError("not a probe sidecar (expected an object whose config and env are objects)")
        cost = doc.get("event_cost_ns")
        event_cost = EventCost.from_json(cost)
        if cost is not None and event_cost is None:
            raise ValueError(f"event_cost_ns is {cost!r}, not an object of op and range ns")
        try:
            clock = msgspec.convert(doc["clock"], Clock) if doc.get("clock") is not None else None
            tool = msgspec.convert(doc.get("tool"), Tool | None)
        except msgspec.ValidationError as e:
            raise ValueError(f"{e} (in clock or tool)") from None
        details = {k: v for k, v in doc.items() if k not in _TYPED}
        return cls(
            ProfileConfig.from_json(doc["config"]), Environment.from_json(doc["env"]), clock, event_cost, tool, details
        )


def sidecar_paths(trace: Path) -> tuple[Path, Path]:
    """Where a trace's sidecar may be, the first one there taken: <stem>.meta.json (torch.profiler) and
    <stem>.nsys.meta.json (nsys), the nsys one first for an nsys export (probe run writes both beside each other)."""
    stem = stem_of(trace.name)
    torch_meta, nsys_meta = trace.with_name(f"{stem}.meta.json"), trace.with_name(f"{stem}.nsys.meta.json")
    return (nsys_meta, torch_meta) if trace.name.endswith((".sqlite", ".sqlite.gz")) else (torch_meta, nsys_meta)


def unpaired_traces(folder: Path, stem: str, writing: list[Path]) -> list[Path]:
    """The traces in `folder` that would take the sidecar of `stem` about to be written (`writing`: the trace, its
    sidecar and the rest) as their own: named by that stem, not among `writing`, and with no sidecar of their own
    beside them but the ones being written (someone else's trace, or one whose sidecar this run replaces)."""
    return [
        trace
        for trace in (folder / name for name in stem_names(stem))
        if trace not in writing
        and trace.exists()
        and all(meta in writing for meta in sidecar_paths(trace) if meta.exists())
    ]


def read_sidecar(path: Path) -> Sidecar | None:
    """The sidecar `probe profile` wrote beside the trace at `path`, when one is there."""
    for candidate in sidecar_paths(Path(path)):
        if candidate.is_file():
            try:
                return Sidecar.from_json(read_json(candidate, "sidecar"))
            except ValueError as e:
                raise ProbeError(f"{candidate}: {e}") from None
    return None
