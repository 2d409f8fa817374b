"""The roofline beside a measured step (probe.analysis.roofline.step): the tokens an engine's marker says a step
processed, and the bytes, FLOPs and times of a real step worked out by hand."""

from __future__ import annotations

import json

import pytest

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.steps import StepTokens
from probe.analysis.roofline.devices import device
from probe.analysis.roofline.formulas import arch_for
from probe.analysis.roofline.step import TokenFlags, step_roofline
from probe.analysis.trace import load_trace
from probe.errors import ProbeError
from tests.conftest import shared_trace

QWEN = "qwen1.5-0.5b"  # the shipped preset: Qwen/Qwen1.5-0.5B's config.json


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        # TraceLens's detailed vLLM form: sq query tokens and sk keys attended, per phase; cached = sk - sq
        (
            "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)",
            StepTokens(32, 32, 55_054, "vLLM execute_ (detailed: sq, sk)"),
        ),
        (
            "execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)",
            StepTokens(15, 15_360, 0, "vLLM execute_ (detailed: sq, sk)"),
        ),
        (
            "execute_6147_context_2(sq6144sk7144sqsq20971520sqsk23019520)_generation_3(sq3sk6144sqsq3sqsk6144)",
            StepTokens(5, 6_147, 1_000 + 6_141, "vLLM execute_ (detailed: sq, sk)"),
        ),
        (
            "execute_context_2(6144)_generation_3(3)",
            StepTokens(5, 6_147, None, "vLLM execute_context_R(N)_generation_R(N)"),
        ),
        ("execute_new_2_cached_30", StepTokens(32, None, None, "vLLM execute_new_N_cached_M")),
        ("step[EXTEND bs=15 toks=15360]", StepTokens(15, 15_360, None, "SGLang step[] toks")),
        ("step[DECODE bs=32]", StepTokens(32, 32, None, "SGLang step[] bs")),
        (
            "step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]",
            StepTokens(2, 6, 14, "SGLang step[] (detailed: sq, sk)"),
        ),
        ("[Executor] _forward_step 12: 0 ctx reqs, 8 gen reqs", StepTokens(8, 8, None, "TensorRT-LLM _forward_step")),
    ],
)
def test_marker_tokens(tmp_path, name, tokens):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (step,) = analyze(load_trace(path)).steps
    assert step.tokens == tokens


def test_the_hf_prefill_beside_its_roofline():
    """Qwen1.5-0.5B, batch 16 x 559 tokens, bf16, on an H100 SXM (3.35 TB/s, 989.5 dense bf16 TFLOP/s).

    Bytes: weights 463,987,712 parameters x 2 = 927,975,424; a token's K and V are 24 layers x 2 x 16 heads x 64 x 2
    bytes = 98,304: written for the 8,944 new tokens (879,230,976) and read back by attention, each sequence
    reading its 559 positions (16 x 559 x 98,304 = 879,230,976): 2,686,437,376 in all.
    FLOPs: 2 x 8,944 x 308,405,248 (the parameters but the tied head's 155,582,464) + 2 x 16 logit rows x the head,
    plus attention 2 x 16 heads x (64 + 64) x 24 layers x 16 sequences x 559 x 560 / 2 keys."""
    a = analyze(load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")))
    (step,) = a.steps
    r = step_roofline(
        step, arch_for(QWEN), "bfloat16", device("NVIDIA H100 80GB HBM3"), a.on_gpu, flags=TokenFlags(8944, 16, 0)
    )
    assert (r.sequences, r.tokens, r.context_tokens, r.device) == (16, 8944, 0, "H100-SXM")
    assert r.bytes == 927_975_424 + 2 * 879_230_976
    linear = 2 * 8944 * (463_987_712 - 155_582_464) + 2 * 16 * 155_582_464
    attention = 2 * 16 * 128 * 24 * 16 * (559 * 560 // 2)
    assert r.flops == linear + attention
    assert r.traffic_ms == pytest.approx(r.bytes / 3.35e12 * 1e3)
    assert r.compute_ms == pytest.approx(r.flops / 989.5e12 * 1e3)
    assert r.binding_term == "compute" and r.predicted_gpu_ms == r.compute_ms
    assert r.measured_gpu_ms == step.gpu_busy_ns / 1e6 and r.efficiency == pytest.approx(
        r.predicted_gpu_ms / r.measured_gpu_ms
    )
    assert "the host term is what departs" in r.departure  # host work 33.0 ms > GPU busy 31.9 ms


def test_a_step_without_counts_needs_flags():
    a = analyze(load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")))
    with pytest.raises(ProbeError, match="--tokens"):
        step_roofline(a.steps[0], arch_for(QWEN), "bfloat16", device("H100-SXM"), True)


def test_marker_counts_win_over_flags():
    """The vLLM decode's marker says 32 sequences, 32 tokens, 55,054 cached positions; --context fills nothing."""
    a = analyze(load_trace(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz")))
    r = step_roofline(a.steps[0], arch_for(QWEN), "bfloat16", device("MI300X"), True, flags=TokenFlags(context=7))
    assert (r.sequences, r.tokens, r.context_tokens) == (32, 32, 55_054)
    assert r.tokens_from == "vLLM execute_ (detailed: sq, sk)"
