"""What fixing a step would buy. `what_if`: the changes the write-ups reason about, each with its predicted step,
the saving, the arithmetic and the assumption it rests on, ranked by saving ("what to fix first"). Every prediction
is max(host work after the change, GPU work after the change), the same model as the verdict:

- capture the forward in a CUDA graph: the host time inside the capture region (`StepLedger.capturable_ns`: probe's
  forward range, else the model's nn.Module frames, else every op and runtime call) vanishes, one graph launch
  remains (the trace's own graph-launch call when it has one, else its median launch call); Python outside the
  region stays; kernels keep their durations.
- remove the sync: the host stops waiting and runs ahead; the step becomes max(host work, GPU work).
- batch B sequences (decode steps): host work per forward stays; GPU work grows with B. Without a model the GPU work
  is taken to grow linearly (every byte read again for each sequence: the pessimistic bound); with a roofline the
  measured GPU work is scaled by the roofline's predicted time at B over B = 1. B is the largest batch before the
  GPU binds, at most `MAX_BATCH`. The saving is per token: the step's time over B.
- fix the top Python frame or op (host-bound steps): host work loses that frame's or op's self time.
- kernels at the roofline (GPU-bound steps with a model): GPU work becomes the roofline's predicted GPU time.
"""

from __future__ import annotations

from dataclasses import dataclass

from probe.analysis.diagnosis.evidence import EXTERNAL_SHARE, Context, Evidence, ms, site_text
from probe.analysis.ledger.types import StepLedger

MAX_BATCH = 256  # the largest batch a what-if proposes


@dataclass(frozen=True)
class WhatIf:
    """One change and what it would buy. Times in ms; `saving_ms` is per token for a batch (its step over B)."""

    change: str
    predicted_step_ms: float
    saving_ms: float
    saving_pct: float
    arithmetic: str
    assumption: str

    def to_json(self) -> dict:
        return {
            "change": self.change,
            "predicted_step_ms": self.predicted_step_ms,
            "saving_ms": self.saving_ms,
            "saving_pct": self.saving_pct,
            "arithmetic": self.arithmetic,
            "assumption": self.assumption,
        }


def what_if(s: StepLedger, e: Evidence, on_gpu: bool, context: Context) -> list[WhatIf]:
    """The changes the write-ups reason about, with predicted savings, largest first.

    A change moves the binding term max(host work, GPU work); the measured step moves by as much: what the model
    does not explain of the measured step (a lead-in before the first GPU op, a sync's wait) stays. Removing the
    sync is the one change that removes that remainder instead: the host runs ahead, and the step becomes the model."""
    out: list[WhatIf] = []
    measured = e.measured_ns
    gpu = e.gpu_busy_ns
    model = max(e.host_work_ns, gpu)
    now = f"max(host {ms(e.host_work_ns)}, GPU {ms(gpu)}) = {ms(model)}"

    def add(change: str, predicted: float, arithmetic: str, assumption: str, per: int = 1) -> None:
        saving = measured - predicted / per
        if saving > 0:
            out.append(WhatIf(change, predicted / 1e6, saving / 1e6, 100 * saving / measured, arithmetic, assumption))

    def moved(change: str, host: float, gpu_after: float, terms: str, assumption: str, per: int = 1) -> None:
        after = max(host, gpu_after)
        predicted = measured - (model - after)
        per_token = f"; {ms(predicted / per)} ms a token" if per > 1 else ""
        add(
            change,
            predicted,
            f"{now} -> {terms} = {ms(after)}: {ms(measured)} measured - {ms(model - after)} = "
            f"{ms(predicted)} ms{per_token}",
            assumption,
            per,
        )

    if on_gpu and not s.graph_launches and s.launches and s.capturable_ns:
        replay = context.graph_launch_ns or context.launch_call_ns or 0.0
        host = e.host_work_ns - s.capturable_ns + replay
        moved(
            "capture the forward in a CUDA graph",
            host,
            gpu,
            f"max(host {ms(e.host_work_ns)} - {ms(s.capturable_ns)} captured + {ms(replay)} graph launch, "
            f"GPU {ms(gpu)})",
            f"the capture region ({s.capture_region}) holds every launch; its Python, dispatch and launch calls "
            "vanish; what lies outside it stays; kernels keep their durations",
        )
    if on_gpu and e.sync_wait_ns and measured > model:
        unseen = e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns
        add(
            "overlap the wait on unseen device work" if unseen else "remove the sync" + site_text(s),
            model,
            f"{ms(measured)} measured -> {now} ms",
            "the work waited for overlaps this step's own"
            if unseen
            else "the host issues the next step while the GPU runs this one: nothing it fetched is needed first",
        )
    if on_gpu and s.kind == "decode" and gpu and e.host_work_ns > gpu:
        b, gpu_b, how = _free_batch(e, context)
        if b > 1:
            moved(
                f"batch {b} sequences",
                e.host_work_ns,
                gpu_b,
                f"max(host {ms(e.host_work_ns)}, GPU {ms(gpu_b)} at B={b})",
                f"host work per forward stays; GPU work grows {how}",
                per=b,
            )
    if (not on_gpu or e.host_work_ns > gpu) and e.host_work_ns:
        if s.top_frames and s.top_frames[0].self_ns:
            f = s.top_frames[0]
            moved(
                f"fix the top Python frame, {f.frame}",
                e.host_work_ns - f.self_ns,
                gpu,
                f"max(host {ms(e.host_work_ns)} - {ms(f.self_ns)}, GPU {ms(gpu)})",
                "the frame's own time (its self time, calls inside it excluded) goes to zero",
            )
        if s.top_ops and s.top_ops[0].self_ns:
            o = s.top_ops[0]
            moved(
                f"fix the top op, {o.name} (x{o.calls})",
                e.host_work_ns - o.self_ns,
                gpu,
                f"max(host {ms(e.host_work_ns)} - {ms(o.self_ns)}, GPU {ms(gpu)})",
                "the op's dispatch time (its self time) goes to zero",
            )
    if on_gpu and gpu >= e.host_work_ns and context.gpu_ms_at is not None:
        roof = context.gpu_ms_at(1) * 1e6
        if roof < gpu:
            moved(
                "kernels at the roofline",
                e.host_work_ns,
                roof,
                f"max(host {ms(e.host_work_ns)}, roofline GPU {ms(roof)})",
                "every kernel moves its bytes at the device's peak bandwidth or computes at its peak FLOP/s",
            )
    return sorted(out, key=lambda w: (-w.saving_ms, w.change))


def batch_gpu_ns(e: Evidence, b: int, context: Context) -> float:
    """The step's GPU work with b times its sequences: scaled by the roofline's time at b over 1 when a model is
    known, else linearly (every byte read again for each sequence: the pessimistic bound)."""
    if context.gpu_ms_at is not None:
        return e.gpu_busy_ns * context.gpu_ms_at(b) / context.gpu_ms_at(1)
    return e.gpu_busy_ns * b


def predict_batch(e: Evidence, b: int, context: Context) -> float:
    """The measured step with b times its sequences, in ns: host work per forward stays, GPU work grows
    (batch_gpu_ns); the binding term moves and the measured step with it (what_if's model)."""
    model = max(e.host_work_ns, e.gpu_busy_ns)
    return e.measured_ns - (model - max(e.host_work_ns, batch_gpu_ns(e, b, context)))


def _free_batch(e: Evidence, context: Context) -> tuple[int, float, str]:
    """The largest batch before the GPU binds, its GPU work, and how that was scaled."""
    how = (
        "as the roofline's predicted step time at B over B = 1"
        if context.gpu_ms_at is not None
        else "linearly with B (every byte read again per sequence: the pessimistic bound)"
    )
    b = 1
    while b < MAX_BATCH and batch_gpu_ns(e, b + 1, context) <= e.host_work_ns:
        b += 1
    return b, batch_gpu_ns(e, b, context), how
