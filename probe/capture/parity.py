"""Token parity with naive, judged so that a verdict means the same thing in every dtype.

Engines do the arithmetic in different orders (a growing causal matmul in naive, single-row matmuls in cached,
inductor kernels in static, B-row matmuls in batched). In float32 that never flips a greedy choice here, so parity
is exact: the engine's free-running tokens must equal naive's. In float16 and bfloat16 the logits carry a few
units in the last place of noise, a near-tie flips sooner or later, and from there the two sequences have
nothing in common. So half precision is judged teacher-forced: the engine is fed naive's tokens, and at each step
its argmax must be naive's token, or within `NEAR_TIE_ULPS` of it (a near-tie, counted). Either way a step whose
logits hold a NaN or an inf fails the cell: argmax would "match" on them.

Every check runs in an untimed pass that reads each step's logits; the timed runs are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engines.base import Engine
from probe.analysis.records.results import Parity, ParityMode

EXACT: ParityMode = "exact"
TEACHER_FORCED: ParityMode = "teacher-forced"
# A step whose argmax differs from naive's token still matches when the engine's own logit for naive's token is
# within this many units in the last place (eps of the dtype x |top logit|) of its top logit. Measured on the tiny
# preset (4 layers, CPU), every logit of cached, static-eager and batched stays within 3.0 (float16) and 2.2
# (bfloat16) such units of naive's, so a gap of up to twice that is noise; 8 leaves room for a 28-layer model
# on other kernels, and a wrong position or an unwritten cache slot moves logits by whole units, far beyond it.
NEAR_TIE_ULPS = 8


def parity_mode(dtype: str) -> ParityMode:
    return EXACT if dtype == "float32" else TEACHER_FORCED


@dataclass(frozen=True)
class Checked:
    """One untimed run, every step's logits looked at. (B, N) tensors on the CPU, step 0 = the prefill's."""

    argmax: torch.Tensor  # the engine's own choice at each step
    gap_ulps: torch.Tensor  # (top logit - logit of the fed token) / (eps x |top logit|); 0 when free-running
    finite: torch.Tensor  # every logit of the step finite


def checked_run(engine: Engine, prompt: torch.Tensor, new_tokens: int, forced: torch.Tensor | None = None) -> Checked:
    """Greedy-decode `new_tokens` after `prompt` (B, P), or with `forced` (B, N) feed those tokens instead of the
    engine's own argmax (teacher forcing). Step i's figures are for the logits that predict token i."""
    eps = torch.finfo(next(engine.model.parameters()).dtype).eps
    device = prompt.device
    feed = None if forced is None else forced.to(device).T.contiguous()  # (N, B): row i feeds step i + 1
    argmax, gaps, finite = [], [], []
    with torch.inference_mode():
        logits = engine.prefill(prompt, prompt.shape[1] + new_tokens)
        for i in range(new_tokens):
            scores = logits.float()  # (B, V); read now: a replayed graph overwrites its output on the next step
            top, choice = scores.max(dim=-1)
            finite.append(torch.isfinite(scores).all(dim=-1))
            argmax.append(choice)
            token = choice if feed is None else feed[i]
            gaps.append((top - scores.gather(-1, token[:, None])[:, 0]) / (eps * top.abs().clamp_min(1.0)))
            if i + 1 < new_tokens:
                logits = engine.decode(token[:, None].clone())  # (B, 1), its own storage like the loop's argmax
    return Checked(*(torch.stack(x, dim=1).cpu() for x in (argmax, gaps, finite)))


def judge(mode: ParityMode, checked: Checked, reference: torch.Tensor, reference_finite: torch.Tensor) -> Parity:
    """The verdict of one cell against naive's tokens `reference` (B, N) and whether naive's own steps were
    finite (B, N). `checked` is free-running in exact mode, fed `reference` in teacher-forced mode."""
    differs = checked.argmax != reference  # (B, N)
    nonfinite = int((~(checked.finite & reference_finite)).any(dim=0).sum())
    steps = differs.any(dim=0).nonzero()
    first = int(steps[0]) if len(steps) else None
    differing = int(differs.any(dim=0).sum())
    if mode == EXACT:
        return Parity(mode, first is None and nonfinite == 0, first, differing, None, nonfinite)
    gaps = checked.gap_ulps[differs]
    worst = float(gaps.max()) if len(gaps) else None
    match = nonfinite == 0 and (worst is None or worst <= NEAR_TIE_ULPS)
    return Parity(mode, match, first, differing, worst, nonfinite)
