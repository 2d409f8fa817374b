"""The median steady-state step of an analyzed trace: what `probe run` puts beside its predictions and what the
history keeps a run by."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from probe.analysis.ledger.host import MECHANISM, PURPOSE
from probe.analysis.ledger.types import TraceAnalysis, steady


@dataclass(frozen=True)
class MedianStep:
    """The median steady-state step (its decode steps, else every step): wall, each host part of both partitions,
    what it dispatched and GPU busy. Medians taken part by part, so the parts need not sum to the wall."""

    source: str
    steps: int  # how many steps the medians are over
    on_gpu: bool
    wall_us: float
    purpose_us: dict[str, float]  # purpose part -> median us (StepLedger.purpose_ns)
    mechanism_us: dict[str, float]  # mechanism part -> median us (StepLedger.mechanism_ns)
    dispatched: float  # launches on a GPU trace, top-level ops on a CPU one
    gpu_busy_us: float | None  # None on a CPU-only trace

    @property
    def dispatch(self) -> str:
        return "launches" if self.on_gpu else "top-level ops"

    @property
    def cache_us(self) -> float:
        return sum(v for k, v in self.purpose_us.items() if k.startswith("cache_"))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> MedianStep:
        doc = dict(doc)
        if "dispatched" not in doc:  # report.json files before the digest was typed
            gpu = doc.get("dispatch") == "launches"
            doc["dispatched"] = doc.get("launches") if gpu else doc.get("top_level_ops")
            doc["gpu_busy_us"] = doc.get("gpu_busy_us") if gpu else None
        if "on_gpu" not in doc:
            doc["on_gpu"] = doc.get("dispatch") == "launches"
        if "purpose_us" not in doc:  # one partition (parts_us) before the two: its rest is today's `model`
            old = dict(doc.get("parts_us") or {})
            rest = sum(old.pop(k, 0.0) for k in ("ops", "python", "unattributed"))
            doc["purpose_us"] = {**{k: v for k, v in old.items() if k in PURPOSE}, "model": rest}
            doc["mechanism_us"] = {}
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})


def median_step(analysis: TraceAnalysis) -> MedianStep:
    """The median steady-state step of `analysis`."""
    steps = steady(analysis.steps)

    def median(values) -> float:
        return float(np.median(values)) / 1e3

    return MedianStep(
        source=analysis.source,
        steps=len(steps),
        on_gpu=analysis.on_gpu,
        wall_us=median([s.wall_ns for s in steps]),
        purpose_us={p: median([s.purpose_ns[p] for s in steps]) for p in steps[0].purpose_ns},
        mechanism_us={p: median([s.mechanism_ns[p] for s in steps]) for p in MECHANISM},
        dispatched=float(np.median([s.dispatched for s in steps])),
        gpu_busy_us=median([s.gpu_busy_ns for s in steps]) if analysis.on_gpu else None,
    )
