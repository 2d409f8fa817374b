"""The answer for a trace, in one typed result: every step's diagnosis (probe.analysis.diagnosis.verdict), its roofline
when
a model is known (probe.analysis.roofline.step), and the roofline of every op that launched kernels
(probe.analysis.roofline.ops). `probe analyze` prints it first and puts it in `--json`; the explorer draws it.

The device is `--device-file`'s when given, else the trace's own (`deviceProperties`), else `--device`; without
any, no roofline and a line that says so. The dtype is `--dtype`, else the input type of the GEMMs that took the
most GPU time, else bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import TraceDiagnosis, diagnose_trace
from probe.analysis.ledger.gpu import attribute
from probe.analysis.ledger.types import TraceAnalysis
from probe.analysis.roofline.devices import Device, device, match_device, unpublished
from probe.analysis.roofline.formulas import arch_for
from probe.analysis.roofline.ops import Coverage, OpRoofline, coverage, op_calls, step_op_rooflines, trace_op_rooflines
from probe.analysis.roofline.step import StepRoofline, TokenFlags, gpu_ms_at, shape_tokens, step_roofline
from probe.analysis.trace import Trace
from probe.errors import ProbeError

TOP_OPS_PER_STEP = 5


@dataclass(frozen=True)
class Answer:
    diagnosis: TraceDiagnosis
    rooflines: dict[int, StepRoofline] = field(default_factory=dict)  # by step position
    op_roofline: tuple[OpRoofline, ...] = ()  # over the whole trace, largest kernel time first
    step_ops: dict[int, tuple[OpRoofline, ...]] = field(default_factory=dict)  # the top ones of each step
    device: str | None = None
    model: str | None = None
    dtype: str | None = None
    notes: tuple[str, ...] = ()  # what could not be done, and why
    op_coverage: Coverage | None = None  # how much of the trace's GPU work op_roofline holds (None: no GPU work)

    def step_json(self, position: int, words: bool = False) -> dict:
        """What each step of `--json` gains: its diagnosis (its figures; with `words`, its sentences too), its
        roofline, its top ops' rooflines."""
        r = self.rooflines.get(position)
        d = self.diagnosis.steps[position]
        return {
            "diagnosis": d.to_json() if words else d.figures(),
            "roofline": r.to_json() if r else None,
            "op_roofline": [o.to_json() for o in self.step_ops.get(position, ())],
        }

    def to_json(self) -> dict:
        """The top level of `--json` gains these keys."""
        return {
            "diagnosis": self.diagnosis.to_json(),
            "op_roofline": [o.to_json() for o in self.op_roofline],
            "roofline": {"device": self.device, "model": self.model, "dtype": self.dtype},
            "answer_notes": list(self.notes),
            "op_roofline_coverage": self.op_coverage.text if self.op_coverage else None,
        }


def trace_device(trace: Trace, name: str | None, given: Device | None = None) -> tuple[Device | None, str | None]:
    """The device from `--device-file` when given, else the one the trace says it ran on, else the one named;
    (None, why not) when none is known. A device is named once, however many GPUs the trace lists."""
    if given is not None:
        return given, None
    said = list(dict.fromkeys(d.name for d in trace.devices if d.name))
    for gpu in said:
        found = match_device(gpu)
        if found is not None:
            return found, None
    if name:
        return device(name), None
    for gpu in said:
        part = unpublished(gpu)
        if part is not None:
            return None, f"the trace's device ({gpu}) has no published figures: {part.why}; give --device-file FILE"
    if said:
        return None, (
            f"the trace's device ({', '.join(said)}) is not in the device table: give --device NAME or "
            "--device-file FILE"
        )
    return None, "the trace does not name its device: give --device NAME (or --device-file FILE) for the rooflines"


def _dtype(ops: tuple[OpRoofline, ...], given: str | None) -> str:
    if given:
        return given
    for o in ops:  # largest kernel time first
        if o.model and o.model.startswith("gemm") and o.dtype:
            return o.dtype
    return "bfloat16"


def answer(
    trace: Trace,
    analysis: TraceAnalysis,
    model: str | None = None,
    device_name: str | None = None,
    dtype: str | None = None,
    flags: TokenFlags | None = None,
    contended: str | None = None,
    threads: tuple[int, int] | None = None,
    device_given: Device | None = None,
) -> Answer:
    """Diagnose every step; with a model and a device, put the roofline beside each; with shapes, the per-op
    roofline, over the trace and the top ones of each step. `threads`: (intra-op threads the trace ran on, the
    machine's cores), from its sidecar, for the CPU's threads what-if."""
    notes: list[str] = []
    wanted = analysis.on_gpu or device_name or device_given
    dev, why = trace_device(trace, device_name, device_given) if wanted else (None, None)
    if why:
        notes.append(why)
    calls = op_calls(trace, attribute(trace, *analysis.windows()))  # once for the trace; each step selects from it
    ops = tuple(trace_op_rooflines(trace, calls, dev))
    step_ops = {k: tuple(v) for k, v in step_op_rooflines(trace, calls, dev, TOP_OPS_PER_STEP).items()}
    if analysis.on_gpu and not any(o.model for o in ops):
        notes.append("no op with a model recorded its input shapes: profile with record_shapes=True for per-op figures")
    rooflines: dict[int, StepRoofline] = {}
    at = {}
    kind = _dtype(ops, dtype)
    if model is not None:
        arch = arch_for(model)
        if dev is None:
            notes.append("a model without a device: no roofline")
        shapes = shape_tokens(analysis) if dev is not None else {}
        for s in analysis.steps:
            if dev is None:
                break
            try:
                r = step_roofline(s, arch, kind, dev, analysis.on_gpu, shapes.get(s.position), flags or TokenFlags())
            except ProbeError as e:
                notes.append(str(e))
                continue
            rooflines[s.position] = r
            at[s.position] = gpu_ms_at(arch, kind, dev, r)
    context = replace(Context.of(trace, contended=contended, analysis=analysis), step_ops=step_ops, threads=threads)
    diagnosis = diagnose_trace(analysis, context, at)
    replayed = analysis.totals.graph_launches > 0
    held = coverage(ops, analysis.totals.gpu_busy_ns, replayed) if analysis.on_gpu else None
    return Answer(
        diagnosis,
        rooflines,
        ops,
        step_ops,
        dev.name if dev else None,
        model,
        kind if rooflines else dtype,
        tuple(dict.fromkeys(notes)),
        held,
    )
