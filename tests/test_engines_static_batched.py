"""The static (graph-capturable) engine and the batched engine: parity and the properties they promise."""

from __future__ import annotations

import pytest
import torch

from engines import engine_class
from engines.batched import BatchedEngine
from engines.models import prompt_ids
from engines.static import StaticEagerEngine, StaticEngine
from probe.capture.count import OpCounter
from probe.capture.loop import generate


def naive_tokens(model, prompt, n):
    return generate(engine_class("naive")(model), prompt, n).tokens


def test_static_eager_matches_naive_and_reuses_its_buffers(tiny):
    engine = StaticEagerEngine(tiny)
    prompt = prompt_ids(24, 1, tiny.config.vocab_size)
    assert torch.equal(generate(engine, prompt, 12).tokens, naive_tokens(tiny, prompt, 12))
    buffers = [layer.keys.data_ptr() for layer in engine.cache.layers]
    assert torch.equal(generate(engine, prompt, 12).tokens, naive_tokens(tiny, prompt, 12))  # after a reset
    assert buffers == [layer.keys.data_ptr() for layer in engine.cache.layers]


def test_static_decode_has_fixed_shapes_and_no_host_sync(tiny):
    """Every decode step dispatches the same ops on the same shapes, and none reads a value back."""
    engine = StaticEagerEngine(tiny)
    prompt = prompt_ids(16, 1, tiny.config.vocab_size)
    signatures = []

    class Shapes(OpCounter):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            assert name not in ("aten::item", "aten::_local_scalar_dense", "aten::nonzero"), name  # host syncs
            self.counts[name + str([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])] += 1
            return func(*args, **(kwargs or {}))

    with torch.inference_mode():
        token = engine.prefill(prompt, 24).argmax(-1, keepdim=True)
        for _ in range(4):
            with Shapes() as shapes:
                token = engine.decode(token).argmax(-1, keepdim=True)
            signatures.append(shapes.counts)
    assert all(s == signatures[0] for s in signatures)


@pytest.mark.slow
def test_static_compiled_matches_naive(tiny):
    """torch.compile (inductor on CPU; CUDA graphs on a GPU) must not change a token."""
    prompt = prompt_ids(16, 1, tiny.config.vocab_size)
    engine = StaticEngine(tiny)
    assert engine.captures_decode
    assert torch.equal(generate(engine, prompt, 10).tokens, naive_tokens(tiny, prompt, 10))


def test_batched_rows_match_their_own_batch1_runs(tiny):
    prompt = prompt_ids(20, 4, tiny.config.vocab_size)
    out = generate(BatchedEngine(tiny), prompt, 10).tokens
    for row in range(4):
        assert torch.equal(out[row : row + 1], naive_tokens(tiny, prompt[row : row + 1], 10))


def test_batched_admits_ragged_prompts(tiny):
    """Rows of different lengths: each keeps its own position and mask, and matches its own run."""
    prompts = [prompt_ids(n, 1, tiny.config.vocab_size, seed=n)[0] for n in (3, 17, 41)]
    engine = BatchedEngine(tiny)
    with torch.inference_mode():
        token = engine.admit(prompts, 9).argmax(-1, keepdim=True)
        out = [token]
        for _ in range(8):
            token = engine.decode(token).argmax(-1, keepdim=True)
            out.append(token)
    tokens = torch.cat(out, 1)
    for row, prompt in enumerate(prompts):
        assert torch.equal(tokens[row : row + 1], naive_tokens(tiny, prompt[None], 9))
    assert engine.cache.lengths == [3 + 8, 17 + 8, 41 + 8]


def test_bench_batch_sweep_checks_each_row(tmp_path):
    from probe.capture.config import BenchConfig
    from probe.capture.sweep import bench

    results = bench(
        BenchConfig(
            engines=("cached", "batched"), prompts=(12,), batch=(1, 3), new_tokens=5, runs=1, warmup=0, device="cpu"
        )
    )
    assert [(c.engine, c.batch) for c in results.cells] == [
        ("cached", 1),
        ("batched", 1),
        ("cached", 3),
        ("batched", 3),
    ]
    assert all(c.tokens_match_naive for c in results.cells)
    assert len(results.cells[2].tokens) == 3  # one token list per sequence


@pytest.mark.slow
def test_static_compiles_each_shape_with_fixed_sizes_before_any_caller_times_it(tiny):
    """A new (batch, max_len) is compiled, and on CUDA captured and replayed, inside its prefill, so no decode step
    a caller times compiles; and every size is fixed, so a third shape compiles again rather than running a
    dynamic graph made for the second (automatic dynamic shapes did that: "size mismatch at index 2")."""
    engine = StaticEngine(tiny)
    a, b, c = (prompt_ids(n, 1, tiny.config.vocab_size) for n in (8, 16, 24))
    assert torch.equal(generate(engine, a, 6).tokens, naive_tokens(tiny, a, 6))
    with torch.inference_mode():
        token = engine.prefill(b, 16 + 6).argmax(-1, keepdim=True)  # a second shape: compiled here
    with torch._dynamo.config.patch(error_on_recompile=True):
        with torch.inference_mode():
            out = [token]
            for _ in range(5):  # what a timed run would do next: no compilation
                out.append(engine.decode(out[-1]).argmax(-1, keepdim=True))
        assert torch.equal(torch.cat(out, 1), naive_tokens(tiny, b, 6))
        assert torch.equal(generate(engine, a, 6).tokens, naive_tokens(tiny, a, 6))  # the first shape: cached
        with pytest.raises(torch._dynamo.exc.RecompileError):
            generate(engine, c, 6)  # a third shape must compile: no graph with a symbolic length serves it


@pytest.mark.slow
def test_a_sweep_sizes_each_static_cell_to_its_prompt_and_new_tokens():
    """Issue 32: each cell's StaticCache holds its own prompt + new tokens, as cached's does (a run-wide buffer made
    the shortest prompt attend over the longest's slots), so three prompt lengths compile three graphs."""
    from probe.capture.config import BenchConfig
    from probe.capture.sweep import bench

    torch._dynamo.reset()  # no graph of this shape left from an earlier test
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    cfg = BenchConfig(engines=("static",), prompts=(8, 16, 24), new_tokens=4, runs=1, warmup=0, device="cpu")
    results = bench(cfg)
    assert [c.prompt_tokens for c in results.cells] == [8, 16, 24] and all(c.tokens_match_naive for c in results.cells)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 3


def test_static_buffer_holds_its_prompt_and_new_tokens(tiny):
    engine = StaticEagerEngine(tiny)
    for length in (8, 16):
        prompt = prompt_ids(length, 1, tiny.config.vocab_size)
        assert torch.equal(generate(engine, prompt, 6).tokens, naive_tokens(tiny, prompt, 6))
        assert engine.cache.layers[0].keys.shape[2] == length + 6


def test_batched_refuses_ragged_rows_where_a_query_sits_at_the_key_length():
    """gpt_neo's local layers place each query at the key length, which rows of different lengths share: one line."""
    from engines.models import load_model
    from tests.conftest import DATA

    model = load_model(str(DATA / "configs" / "gpt_neo.json"), "float32", "cpu")
    prompts = [prompt_ids(n, 1, model.config.vocab_size)[0] for n in (5, 9)]
    with pytest.raises(ValueError, match="causal table at the key length.*rows of different lengths"):
        BatchedEngine(model).admit(prompts, 4)
    same = prompt_ids(9, 2, model.config.vocab_size)
    out = generate(BatchedEngine(model), same, 6).tokens  # one length: every query is at the key length
    assert torch.equal(out[1:], naive_tokens(model, same[1:], 6))
