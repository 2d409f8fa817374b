"""Twelve real traces probe was never tuned to (`../shared/traces/wild/`, PROVENANCE.md there): the steps as the
engine ran them and the median step's bound, each figure as `scripts/read_steps.py` reads it from the JSON with no
probe code (the reading of each is in docs/diagnosis.md). Skipped where that folder is absent: the traces are never
copied into the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.trace import load_trace

WILD = Path(__file__).resolve().parents[2] / "shared" / "traces" / "wild"
needs_wild = pytest.mark.skipif(not WILD.is_dir(), reason="../shared/traces/wild is not here")

# name: (the rule that found the steps, how many, the median step's position and name, its (bound, then,
# host_bound_by), and its (wall, sync wait, host work, GPU work) in ns)
READINGS = {
    # vLLM V1 on an H100, piecewise CUDA graphs: 11 worker execute_model frames (1 prefill, 9 decodes, 1 empty), not
    # 729 graph pieces. The median decode: host 18.711 - 1.379 (the .tolist() copy) = 17.332 ms against 16.544 ms
    # of GPU work: host-bound by Python, within 10% (1.05x)
    "h100_vllm_v1_llama_tp4_1000isl_32con": (
        "engine frames: vLLM V1 Worker.execute_model",
        11,
        6,
        "vllm/v1/worker/gpu_worker.py(263): execute_model",
        ("host", None, "python"),
        (18_710_990, 1_378_719, 17_332_271, 16_544_310),
    ),
    # the same on an MI300X: 44.543 - 1.098 = 43.445 ms of host work for 15.363 ms of GPU work, 2.83x
    "mi300x_vllm_v1_llama_tp4_1000isl_32con": (
        "engine frames: vLLM V1 Worker.execute_model",
        11,
        7,
        "vllm/v1/worker/gpu_worker.py(258): execute_model",
        ("host", None, "python"),
        (44_542_769, 1_098_049, 43_444_720, 15_362_886),
    ),
    # DeepSeek-V3's DualPipe chunk: one ProfilerStep, the GPU busy 128.515 ms for 112.202 ms of host work
    "h800_deepseek_v3_dualpipe_train_chunk": (
        "ProfilerStep",
        1,
        0,
        "ProfilerStep#1",
        ("gpu", None, None),
        (112_202_000, 0, 112_202_000, 128_515_000),
    ),
    # nano-vllm's LLMEngine.step, one decode through one layer: 3.416 ms of host work for 0.114 ms of GPU work
    "rtx4080_nanovllm_qwen3_decode_one_layer": (
        "engine frames: nano-vllm LLMEngine.step",
        1,
        0,
        "nanovllm/engine/llm_engine.py(144): step",
        ("host", None, "python"),
        (3_470_560, 54_385, 3_416_175, 113_983),
    ),
    # a cold MoE forward, one step: 556 ms of its 617 ms in launch calls (CUDA's lazy module loading), 513 of them
    # inside its cold calls: first-call set-up, the largest part of its host work
    "a100_switch_transformer_moe_forward_cold": (
        "whole trace",
        1,
        0,
        "trace",
        ("host", None, "setup"),
        (617_452_000, 7_857_000, 609_595_000, 12_054_000),
    ),
    # ResNet50 training, DataLoader in the loop's thread: data loading 68.694 ms of 173.966 ms of host work
    "v100_resnet50_train_dataloader_nw0": (
        "ProfilerStep",
        6,
        0,
        "ProfilerStep#5",
        ("host", None, "data"),
        (176_078_000, 2_112_000, 173_966_000, 100_629_000),
    ),
    # the same with four loader workers: op dispatch 56.1 ms leads 123.089 ms of host work against 102.093 ms
    "v100_resnet50_train_nw4": (
        "ProfilerStep",
        6,
        3,
        "ProfilerStep#8",
        ("host", None, "dispatch"),
        (126_272_000, 3_183_000, 123_089_000, 102_093_000),
    ),
    # ResNet, 30 iterations and no marker: a cycle from the DataLoader's range. The median iteration waits 142.250 ms
    # in the pageable 77 MB batch copy while the GPU runs the previous iteration: GPU-bound, 157.942 ms for 33.548
    "rtx2080ti_resnet_train_30iters_nosteps": (
        "repeating cycle: 30 iterations of sibling events from 'enumerate(DataLoader)",
        30,
        2,
        "iteration#2",
        ("gpu", None, None),
        (175_798_000, 142_250_000, 33_548_000, 157_942_000),
    ),
    # a linear model, 40 iterations on the loop's thread (not the autograd thread): 24.540 ms of host work, 13.068
    # of it the backward on the autograd thread while the loop's thread records nothing, for 8.828 ms of GPU work
    "rtx2080ti_linear_train_40iters_nosteps": (
        "repeating cycle: 40 iterations of sibling events from 'aten::linear'",
        40,
        27,
        "iteration#27",
        ("host", None, "other_threads"),
        (24_540_000, 0, 24_540_000, 8_828_000),
    ),
    # DLRM under DDP: sync wait 2.030 ms (the 880 us pageable device-to-host copy is one), host 12.425 ms for 6.590
    "v100_dlrm_ddp_rank0_step": (
        "ProfilerStep",
        1,
        0,
        "ProfilerStep#10",
        ("host", None, "other_threads"),
        (14_455_000, 2_030_000, 12_425_000, 6_590_000),
    ),
    # 260 launch calls and no GPU side: unknown
    "a100_launches_without_kernels": (
        "whole trace",
        1,
        0,
        "trace",
        ("unknown", None, None),
        (12_478_000, 0, 12_478_000, 0),
    ),
    # no GPU side at all: the thread's 13.571 ms from its first op (the 7.333 ms before it are lead-in)
    "cpu_only_qlora_compile_tiny": (
        "whole trace",
        1,
        0,
        "trace",
        ("cpu_only", None, "unattributed"),
        (13_571_293, 0, 13_571_293, 0),
    ),
}


@needs_wild
@pytest.mark.parametrize("name", sorted(READINGS))
def test_each_wild_trace_has_its_engines_steps_and_the_bound_the_events_show(name):
    rule, count, position, step, verdict, figures = READINGS[name]
    trace = load_trace(WILD / f"{name}.trace.json.gz")
    a = analyze(trace)
    d = diagnose_trace(a, Context.of(trace, analysis=a))
    assert a.step_rule.startswith(rule) and len(a.steps) == count
    m = d.median
    assert (d.steps.index(m), m.step) == (position, step)
    assert (m.bound, m.then, m.host_bound_by) == verdict
    e = m.evidence
    assert (e.wall_ns, e.sync_wait_ns, e.host_work_ns, e.gpu_busy_ns) == figures
    if m.bound == "unknown":
        assert m.what_if == ()
    # every step holds its GPU work: no piece of it is left out past the 5% the warning allows
    assert not any("outside every step" in w for w in a.warnings)


@needs_wild
def test_vllm_steps_are_found_by_steps_too():
    """`--steps execute_model` finds the same eleven frames (the worker's, outermost over the model runner's)."""
    path = WILD / "mi300x_vllm_v1_llama_tp4_1000isl_32con.trace.json.gz"
    a = analyze(load_trace(path), AnalyzeOptions.parse(steps="execute_model"))
    assert a.step_rule == "--steps" and len(a.steps) == 11
    assert {s.name for s in a.steps} == {"vllm/v1/worker/gpu_worker.py(258): execute_model"}


@needs_wild
def test_dlrm_blocking_copy_is_sync_wait():
    """The 880 us device-to-host copy to pageable memory returns as its GPU copy ends: sync wait, which reads
    1.127 (the cudaStreamSynchronize calls) + 0.880 + 0.023 (a 24 B one the same way) = 2.030 ms."""
    s = analyze(load_trace(WILD / "v100_dlrm_ddp_rank0_step.trace.json.gz")).steps[0]
    assert s.sync_wait_ns == 2_030_000
    copies = [x for x in s.sync_sites if x.call == "cudaMemcpyAsync"]
    assert sorted((x.wait_ns, x.copy_kind, x.copy_memory) for x in copies) == [(903_000, "DtoH", "pageable")]


@needs_wild
def test_dlrm_rank0s_sync_waits_on_the_other_ranks_behind_its_collectives():
    """Rank 0 of eight: of its 1.987 ms own sync wait, 1.899 ms ran behind NCCL kernels (all_to_all waiting for the
    last rank). Removing the sync keeps that: max(host 12.425 + 1.899, GPU 6.590) = 14.324 ms against the step's
    14.412, saving 0.088 ms, not the 1.987 ms that max(12.425, 6.590) would claim."""
    trace = load_trace(WILD / "v100_dlrm_ddp_rank0_step.trace.json.gz")
    d = diagnose_trace(analyze(trace), Context.of(trace)).steps[0]
    (sync,) = [w for w in d.what_if if w.change.startswith("remove the sync")]
    assert (round(sync.predicted_step_ms, 6), round(sync.saving_ms, 6)) == (14.324, 0.088)
    assert "a wait on the other ranks" in sync.arithmetic
    s = analyze(trace).steps[0]
    assert (s.own_wait_ns, s.peer_wait_ns) == (1_987_000, 1_899_000)


@needs_wild
def test_string_thread_ids_stay_distinct_in_the_2021_schema():
    trace = load_trace(WILD / "v100_resnet50_train_nw4.trace.json.gz")
    s = analyze(trace).steps[3]
    assert s.other_threads and all(t.tid != s.tid for t in s.other_threads)  # the autograd thread, apart
