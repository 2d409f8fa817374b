"""The roofline: counts against models transformers builds, the write-ups' numbers, the CLI and its errors."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.arch import from_raw
from engines.configs import load_config
from engines.models import DTYPES
from probe.analysis import hardware
from probe.analysis.roofline.formulas import (
    DTYPE_BYTES,
    arch_for,
    batch_limit,
    cache_bytes,
    decode_step,
    kv_bytes_per_token,
    params,
    predict_step_ms,
    resident_bytes,
    step_cost,
    token_forwards,
    weights_bytes,
)
from probe.analysis.roofline.published import PUBLISHED, check_published, rounded
from probe.capture.machine import measure_copy_bandwidth
from probe.cli import main
from probe.errors import ProbeError
from tests.conftest import ROOT

A10 = 600e9  # bytes/s, the write-ups' card
SEEDS = ROOT / "docs" / "seeds"  # the two write-ups, copied verbatim from shared/seeds

# Small configs of each family, written to config.json by the tests. Odd sizes, so no term hides another.
SMALL = {
    "qwen2_tied": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    ),
    "qwen2_untied": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=301,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    ),
    "llama_biases": dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=257,
        max_position_embeddings=64,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
    ),
    "llama_tied": dict(
        model_type="llama",
        hidden_size=48,
        intermediate_size=100,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        vocab_size=97,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    ),
    "mistral": dict(
        model_type="mistral",
        hidden_size=96,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=3,
        vocab_size=211,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    ),
    "qwen3": dict(
        model_type="qwen3",
        hidden_size=64,
        head_dim=32,
        intermediate_size=100,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=199,
        max_position_embeddings=128,
        attention_bias=True,
        tie_word_embeddings=True,
    ),
    "gemma": dict(
        model_type="gemma",
        hidden_size=64,
        head_dim=24,
        intermediate_size=90,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        vocab_size=180,
        max_position_embeddings=64,
    ),
    "phi3": dict(
        model_type="phi3",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=150,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "gpt2": dict(
        model_type="gpt2",
        n_embd=48,
        n_layer=2,
        n_head=4,
        n_positions=40,
        vocab_size=111,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "gpt2_inner_untied": dict(
        model_type="gpt2",
        n_embd=40,
        n_layer=3,
        n_head=5,
        n_positions=50,
        n_inner=72,
        vocab_size=123,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    ),
}


def write_config(folder: Path, raw: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def build(spec: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(load_config(spec)).eval()


def streamed_numel(model) -> int:
    """Parameters a forward pass reads in full: all but the tables it gathers rows from."""
    gathered = {id(model.get_input_embeddings().weight)} - {id(model.get_output_embeddings().weight)}
    gathered |= {id(p) for name, p in model.named_parameters() if name.endswith("wpe.weight")}
    return sum(p.numel() for p in model.parameters() if id(p) not in gathered)


def cache_bytes_per_position(model, positions: int = 5) -> int:
    with torch.no_grad():
        out = model(torch.arange(2, 2 + positions)[None], use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values  # transformers 5.24 / 5.17
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert all(t.shape[-2] == positions for t in tensors)
    return sum(t.numel() * t.element_size() for t in tensors) // positions


# ---- counts against the models transformers builds -----------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_counts_match_the_built_model(name, tmp_path):
    spec = write_config(tmp_path / name, SMALL[name])
    arch, model = arch_for(spec), build(spec)
    assert params(arch) == sum(p.numel() for p in model.parameters())
    assert weights_bytes(arch, "float32") == 4 * streamed_numel(model)
    assert resident_bytes(arch, "float32") == 4 * params(arch)
    assert kv_bytes_per_token(arch, "float32") == cache_bytes_per_position(model)


def test_the_preset_is_the_write_ups_model():
    from transformers import AutoModelForCausalLM

    arch = arch_for("qwen2.5-1.5b")
    with torch.device("meta"):  # the 1.5B layout without allocating it
        model = AutoModelForCausalLM.from_config(load_config("qwen2.5-1.5b"))
    assert params(arch) == sum(p.numel() for p in model.parameters()) == 1_543_714_304
    assert arch.tied and model.lm_head.weight is model.model.embed_tokens.weight
    # tied: the LM head reads the whole shared matrix, so a pass reads every parameter once
    assert weights_bytes(arch, "float16") == resident_bytes(arch, "float16") == 3_087_428_608
    assert kv_bytes_per_token(arch, "float16") == 28 * 1024 == 2 * 28 * 2 * 128 * 2
    assert (arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.head_dim) == (28, 1536, 12, 2, 128)


def test_untied_embedding_is_gathered_not_read(tmp_path):
    tied = arch_for(write_config(tmp_path / "t", SMALL["qwen2_tied"]))
    untied = arch_for(write_config(tmp_path / "u", SMALL["qwen2_tied"] | {"tie_word_embeddings": False}))
    table = 300 * 64
    assert params(untied) == params(tied) + table  # a second vocab x hidden matrix exists...
    assert weights_bytes(untied, "float16") == weights_bytes(tied, "float16")  # ...but a pass reads one of them


def test_gpt2_aliases_read_from_a_raw_dict():
    arch = from_raw(SMALL["gpt2_inner_untied"])
    assert (arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.head_dim) == (40, 3, 5, 5, 8)
    assert (arch.max_positions, arch.tied) == (50, False)
    # c_fc and c_proj with biases: n_inner 72; unset, 4 * n_embd
    assert arch.params.mlp == 3 * (40 * 72 + 72 + 72 * 40 + 40)
    assert from_raw(SMALL["gpt2"]).params.mlp == 2 * (48 * 192 + 192 + 192 * 48 + 48)
    assert arch.params.embedding == 123 * 40 + 50 * 40  # the token table and the position table


def test_dtype_bytes_agree_with_torch():
    assert DTYPE_BYTES == {name: dtype.itemsize for name, dtype in DTYPES.items()}


# ---- the write-ups' formulas, exact --------------------------------------------------------------------


def test_token_forwards():
    assert (token_forwards(16, 256).naive, token_forwards(16, 256).cached) == (36_736, 272)
    big = token_forwards(4096, 256)
    assert (big.naive, big.cached) == (1_081_216, 4_352)
    assert big.naive == sum(4096 + i for i in range(256))
    assert big.recompute_ratio == 1_081_216 / 4_352


def test_cache_and_decode_step_at_the_write_ups_prompts():
    arch = arch_for("qwen2.5-1.5b")
    assert cache_bytes(arch, "float16", 16 + 256) == 7_798_784
    assert cache_bytes(arch, "float16", 4096 + 256) == 124_780_544 == 119 * 2**20
    weights_only = decode_step(arch, "float16", 0, 1, A10)
    assert weights_only.traffic_bytes == 3_087_428_608
    assert weights_only.traffic_ms == pytest.approx(5.145714346666667, rel=1e-12)
    assert round(weights_only.ceiling_tok_s) == 194
    step = decode_step(arch, "float16", 4352, 1, A10)
    assert step.kv_read_bytes == 124_780_544 and step.traffic_bytes == 3_212_209_152
    assert step.kv_read_ms == pytest.approx(124_780_544 / A10 * 1e3)
    assert decode_step(arch, "float16", 100, 3, A10).kv_read_bytes == 3 * 100 * 28_672


def test_batch_limit_is_the_largest_batch_that_fits_the_step():
    arch = arch_for("qwen2.5-1.5b")
    limit = batch_limit(arch, "float16", 22, 512, A10)
    assert limit.step_bytes == 13.2e9 and limit.cache_budget_bytes == 13.2e9 - 3_087_428_608
    assert (limit.max_cached_positions, limit.max_batch) == (352_698, 688)
    assert (
        decode_step(arch, "float16", 512, 688, A10).traffic_ms
        <= 22
        < decode_step(arch, "float16", 512, 689, A10).traffic_ms
    )
    assert batch_limit(arch, "float16", 1, 512, A10).max_batch == 0  # the weights alone overrun 1 ms


def test_predict_step_ms_takes_the_larger_term():
    arch = arch_for("qwen2.5-1.5b")
    assert predict_step_ms(arch, "float16", 272, 1, A10, floor_ms=19.32) == (19.32, "host")
    ms, term = predict_step_ms(arch, "float16", 272, 1, A10, floor_ms=1.0)
    assert term == "bandwidth" and ms == decode_step(arch, "float16", 272, 1, A10).traffic_ms
    ms, term = predict_step_ms(arch, "float16", 512, 2000, A10, floor_ms=19.32)
    assert term == "bandwidth" and ms > 22  # a big enough batch makes the cache traffic bind


def test_rounded_is_half_up_at_any_place():
    assert rounded(127.5, 0) == 128 and rounded(5.145, 2) == 5.15
    assert rounded(352_698, -3) == 353_000 and rounded(688, -1) == 690


def test_copy_bandwidth_is_a_positive_rate():
    rate = measure_copy_bandwidth("cpu", size_bytes=4 * 2**20, repeats=3)
    assert math.isfinite(rate) and rate > 0
    with pytest.raises(ProbeError):
        measure_copy_bandwidth("cpu", size_bytes=1000)


# ---- the device table -----------------------------------------------------------------------------------


def test_device_table_cites_a_source_per_entry():
    names = [d.name for d in hardware.DEVICES]
    assert len(names) == len(set(names))
    for d in hardware.DEVICES:
        assert d.memory_bandwidth_bytes_s > 0 and "https://" in d.source
    assert hardware.device("a10").memory_bandwidth_bytes_s == A10
    assert hardware.device("h100 sxm") is hardware.device("H100-SXM")
    with pytest.raises(ProbeError, match="unknown device"):
        hardware.device("Z80")


@pytest.mark.parametrize(
    "gpu_name, entry",
    [
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA GeForce RTX 4090", None),
        ("NVIDIA GH200 480GB", None),
    ],
)
def test_match_device_maps_torch_names(gpu_name, entry):
    found = hardware.match_device(gpu_name)
    assert (found.name if found else None) == entry


# ---- the published values and --check -------------------------------------------------------------------


def test_check_reproduces_every_published_value(capsys):
    assert main(["roofline", "--check"]) == 0
    assert "0 drifted" in capsys.readouterr().out
    checks = check_published()
    known = {c.id for c in checks if c.status == "known"}
    assert known == {"p2_traffic_p16_ms", "p2_traffic_p4096_ms", "p2_idle_share_about", "p2_shortfall_fastest"}
    assert all(c.status == "ok" for c in checks if c.id not in known)


def test_check_json(capsys):
    assert main(["roofline", "--check", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and len(data["checks"]) == len(check_published())
    p4096 = next(c for c in data["checks"] if c["id"] == "p2_traffic_p4096_ms")
    assert (p4096["published"], p4096["shown"], p4096["status"]) == (5.36, 5.35, "known")
    assert "3.09 GB + 125 MB" in p4096["why"]


def test_the_recorded_explanation_of_5_36_holds():
    # The write-up's own rounded inputs give 5.36; the exact bytes give 5.35.
    assert rounded((3.09e9 + 125e6) / A10 * 1e3, 2) == 5.36
    assert rounded((3_087_428_608 + 124_780_544) / A10 * 1e3, 2) == 5.35


def _edited(tmp_path: Path, edit) -> str:
    table = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    edit(table)
    path = tmp_path / "published.json"
    path.write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
    return str(path)


def _value(table: dict, value_id: str) -> dict:
    return next(v for v in table["values"] if v["id"] == value_id)


def test_a_drifted_published_value_fails_the_check(tmp_path, capsys):
    path = _edited(tmp_path, lambda t: _value(t, "p2_max_batch_512").update(published=700))
    assert main(["roofline", "--check", "--published", path]) == 1
    assert "1 drifted: p2_max_batch_512" in capsys.readouterr().out


def test_a_discrepancy_the_formulas_now_reproduce_is_stale(tmp_path, capsys):
    path = _edited(tmp_path, lambda t: _value(t, "p2_traffic_p4096_ms").update(published=5.35))
    assert main(["roofline", "--check", "--published", path]) == 1
    assert "stale" in capsys.readouterr().out


def test_a_drifted_device_table_fails_the_check(monkeypatch, capsys):
    drifted = tuple(
        d if d.name != "A10" else hardware.Device("A10", 610 * 10**9, d.source, d.pattern) for d in hardware.DEVICES
    )
    monkeypatch.setattr(hardware, "DEVICES", drifted)
    assert main(["roofline", "--check"]) == 1
    assert "p1_bandwidth_gb_s" in capsys.readouterr().out


def test_every_quote_is_verbatim_in_its_write_up():
    table = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    sources = [table["setup"]["source"]] + [m["source"] for m in table["measured"].values()]
    sources += [v["source"] for v in table["values"]]
    for source in sources:
        assert source["quote"] in (SEEDS / source["file"]).read_text(encoding="utf-8"), source["quote"]


# ---- the CLI -----------------------------------------------------------------------------------------------


def test_json_has_every_field(capsys):
    assert main(["roofline", "--json", "--step-ms", "22"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["params"], data["weights_bytes"], data["kv_bytes_per_token"]) == (1_543_714_304, 3_087_428_608, 28_672)
    assert (data["cache_bytes"], data["naive_token_forwards"], data["cached_token_forwards"]) == (
        7_798_784,
        36_736,
        272,
    )
    assert data["recompute_ratio"] == 36_736 / 272
    step = data["decode_step"]
    assert set(step) >= {"weight_bytes", "kv_read_bytes", "traffic_bytes", "traffic_ms", "kv_read_ms", "ceiling_tok_s"}
    assert step["context"] == 272 and step["kv_read_bytes"] == 7_798_784  # C defaults to P + L
    assert data["batch_limit"]["max_cached_positions"] == 352_698
    assert data["bandwidth_bytes_s"] == A10 and "A10" in data["bandwidth_source"]


def test_flags_reach_the_report(capsys, tmp_path):
    spec = write_config(tmp_path / "m", SMALL["mistral"])
    argv = [
        "roofline",
        "--model",
        spec,
        "--dtype",
        "bfloat16",
        "--prompt",
        "20",
        "--new-tokens",
        "10",
        "--batch",
        "3",
        "--context",
        "25",
        "--bandwidth",
        "1e12",
        "--step-ms",
        "0.5",
        "--json",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    arch = arch_for(spec)
    assert data["cache_bytes"] == 3 * 30 * kv_bytes_per_token(arch, "bfloat16")
    assert data["decode_step"]["kv_read_bytes"] == 3 * 25 * kv_bytes_per_token(arch, "bfloat16")
    assert data["batch_limit"] == dataclasses.asdict(batch_limit(arch, "bfloat16", 0.5, 25, 1e12))
    assert (data["bandwidth_bytes_s"], data["bandwidth_source"]) == (1e12, "--bandwidth")
    assert main(["roofline", "--device", "h100-sxm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bandwidth_bytes_s"] == 3.35e12


def test_table_output(capsys):
    assert main(["roofline", "--prompt", "4096"]) == 0
    out = capsys.readouterr().out
    assert "3,087,428,608" in out and "124,780,544" in out and "5.354 ms" in out


def test_measure_flag(capsys, monkeypatch):
    import probe.commands.roofline as command

    monkeypatch.setattr(command, "COPY_BYTES", 4 * 2**20)
    assert main(["roofline", "--measure", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bandwidth_bytes_s"] > 0 and data["bandwidth_source"].startswith("measured on")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "nope"], "unknown model"),
        (["--prompt", "0"], "--prompt must be at least 1"),
        (["--context", "0"], "--context must be at least 1"),
        (["--bandwidth", "-5"], "--bandwidth must be a positive number"),
        (["--bandwidth", "nan"], "--bandwidth must be a positive number"),
        (["--step-ms", "0"], "--step-ms must be a positive number"),
        (["--device", "Z80"], "unknown device"),
        (["--device", "A10", "--measure"], "give one"),
        (["--dtype", "int4"], "invalid choice"),
        (["--prompt", "131000"], "exceed the model's maximum of 131072"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    assert main(["roofline", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("probe: error:") and message in err and err.count("\n") == 1


def test_unknown_family_and_bad_published_file_are_one_line(tmp_path, capsys):
    spec = write_config(tmp_path / "bert", {"model_type": "bert", "hidden_size": 64})
    assert main(["roofline", "--model", spec]) == 2  # no formula: built on the meta device, which bert refuses
    err = capsys.readouterr().err
    assert "cannot build bert on the meta device" in err and err.count("\n") == 1
    for path in (
        tmp_path / "missing.json",
        _edited(tmp_path, lambda t: _value(t, "p1_naive_p16").update(quantity="nope")),
    ):
        assert main(["roofline", "--check", "--published", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("probe: error:") and err.count("\n") == 1


def test_importing_the_command_loads_no_torch():
    code = (
        "import argparse, sys, probe.commands.roofline as r; r.add_arguments(argparse.ArgumentParser()); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# ---- step_cost: one step's bytes and FLOPs, by hand ---------------------------------------------------------

CONFIGS = ROOT / "tests" / "data" / "configs"


def tiny(name: str, **changes):
    return from_raw(json.loads((CONFIGS / f"{name}.json").read_text()) | changes)


def test_step_cost_of_a_dense_decode_step():
    arch = arch_for("qwen2.5-1.5b")
    cost = step_cost(arch, "float16", sequences=1, new_tokens=1, context_tokens=271)
    assert cost.weight_bytes == cost.weight_bytes_min == 3_087_428_608  # tied: every parameter read once
    assert cost.kv_read_bytes == 272 * 28_672  # 271 cached + the new one, 28 KiB a position
    assert cost.kv_write_bytes == 28_672 and cost.state_bytes == 0
    assert cost.bytes == 3_087_428_608 + 273 * 28_672
    # linear: 2 x 1 token x 1,543,714,304 (the tied head on its one position included)
    assert cost.linear_flops == 2 * 1_543_714_304
    # attention: 2 x 12 heads x (128 + 128) x 272 keys, in 28 layers
    assert cost.attention_flops == 2 * 12 * 256 * 272 * 28 == 46_792_704
    assert cost.flops == cost.linear_flops + cost.attention_flops
    assert cost.traffic_ms(600e9) == pytest.approx(cost.bytes / 600e9 * 1e3)
    assert cost.compute_ms(125e12) == pytest.approx(cost.flops / 125e12 * 1e3)
    assert cost.experts_touched is None and any("LM head on 1" in n for n in cost.notes)


def test_step_cost_splits_tokens_and_context_evenly():
    arch = tiny("llama")  # 2 layers, 4 heads x 16, 2 KV heads: 2 x 2 x 16 = 64 elements a position a layer
    cost = step_cost(arch, "float32", sequences=2, new_tokens=3, context_tokens=5)
    # sequence 0: 3 cached + 2 new, sequence 1: 2 cached + 1 new
    assert cost.kv_read_bytes == 2 * 64 * 4 * ((3 + 2) + (2 + 1))
    assert cost.kv_write_bytes == 2 * 64 * 4 * 3
    # keys attended: sequence 0's tokens see 4 and 5, sequence 1's sees 3; QK and PV 2 x 4 x (16 + 16) a key
    assert cost.attention_flops == 2 * 4 * 32 * (4 + 5 + 3) * 2
    head = 251 * 64  # untied
    assert cost.linear_flops == 2 * 3 * (arch.params.total - arch.params.embedding - head) + 2 * 2 * head


def test_a_prefill_attends_causally():
    arch = tiny("llama")
    cost = step_cost(arch, "float32", sequences=2, new_tokens=10, context_tokens=0)
    # each sequence: 5 new tokens seeing 1..5 keys, 15 pairs; read back: its 5 positions
    assert cost.attention_flops == 2 * 4 * 32 * 15 * 2 * 2
    assert cost.kv_read_bytes == cost.kv_write_bytes == 2 * 64 * 4 * 10
    assert cost.logit_positions == 2
    assert step_cost(arch, "float32", 2, 10, 0, logit_positions=10).linear_flops > cost.linear_flops


def test_a_sliding_window_caps_what_a_step_reads():
    """The issue's mistral: 2 layers x 2 KV heads x 16 x float32 = 512 B a position, window 32, P + L = 272."""
    arch = tiny("mistral", sliding_window=32)
    assert kv_bytes_per_token(arch, "float32") == 512
    assert decode_step(arch, "float32", 272, 1, A10).kv_read_bytes == 32 * 512 == 16_384  # not 272 x 512 = 139,264
    full = tiny("mistral", sliding_window=None)
    assert decode_step(full, "float32", 272, 1, A10).kv_read_bytes == 139_264
    cost = step_cost(arch, "float32", 1, 1, 271)
    assert cost.kv_read_bytes == 16_384 and cost.attention_flops == 2 * 4 * 32 * 32 * 2  # 32 keys, 2 layers
    # a 40-token prefill: token p sees min(p, 32) keys: 1 + ... + 32 = 528, then 8 x 32
    prefill = step_cost(arch, "float32", 1, 40, 0)
    assert prefill.attention_flops == 2 * 4 * 32 * (528 + 8 * 32) * 2
    # between steps the layer keeps the last 31 positions (all the next token needs)
    assert cache_bytes(arch, "float32", 272) == 31 * 512


def test_moe_bounds_for_one_token_and_for_a_batch_that_touches_every_expert():
    arch = tiny("mixtral")  # 4 experts, top 2, 2 layers; an expert: 3 x 64 x 96
    each = 3 * 64 * 96
    assert (arch.experts.count, arch.experts.top_k, arch.experts.layers, arch.experts.params_each) == (4, 2, 2, each)
    one = step_cost(arch, "float32", 1, 1, 10)
    dense = arch.params.total - arch.params.embedding - arch.params.experts
    assert one.experts_touched == (2, 2) and one.weight_bytes == one.weight_bytes_min == 4 * (dense + 2 * 2 * each)
    batch = step_cost(arch, "float32", 8, 8, 80)
    assert batch.experts_touched == (2, 4)  # 8 tokens x top 2 = 16 >= 4: every expert, at most
    assert batch.weight_bytes == 4 * (dense + 4 * 2 * each) == weights_bytes(arch, "float32")
    assert batch.weight_bytes_min == one.weight_bytes
    # FLOPs: every token runs its top 2 in each layer, whatever the routing: 2 x (dense + 2 x 2 layers x each)
    assert one.linear_flops == 2 * (dense + 2 * 2 * each) and batch.linear_flops == 8 * one.linear_flops
    assert any("union bound" in n for n in batch.notes)


def test_mla_caches_the_latent_and_the_rope_key():
    arch = tiny("deepseek_v3")  # kv_lora_rank 32, qk_rope_head_dim 8; 4 heads of 16 + 8 (q, k) and 16 (v)
    assert arch.kv_width == (32, 8) and (arch.head_dim, arch.v_head_dim) == (24, 16)
    assert kv_bytes_per_token(arch, "float32") == 2 * (32 + 8) * 4  # 320 B, not 2 x 2 x 4 x 24 x 4
    cost = step_cost(arch, "float32", 1, 1, 9)
    assert cost.kv_read_bytes == 10 * 320 and cost.attention_flops == 2 * 4 * (24 + 16) * 10 * 2
    assert any("MLA" in n for n in cost.notes)


def test_state_layers_read_and_write_their_state_and_cache_no_token():
    mamba = tiny("mamba")  # 2 layers, inner 128: conv 128 x 4, SSM 128 x 8
    assert mamba.attention_layers == 0 and mamba.state.elements == 128 * 4 + 128 * 8
    cost = step_cost(mamba, "float32", 3, 3, 30)
    assert cost.kv_read_bytes == cost.kv_write_bytes == cost.attention_flops == 0
    assert cost.state_bytes == 2 * 3 * 2 * (128 * 12) * 4  # read and written, 3 sequences, 2 layers
    assert cache_bytes(mamba, "float32", 10_000) == cache_bytes(mamba, "float32", 10) == 2 * 128 * 12 * 4
    hybrid = tiny("qwen3_next")  # 3 delta-net layers, then full attention
    assert hybrid.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert hybrid.attention_layers == 1 and hybrid.state_layers == 3
    assert kv_bytes_per_token(hybrid, "float32") == 2 * 2 * 16 * 4  # one layer of 4 keeps K and V


def test_bad_steps_are_one_line():
    arch = tiny("llama")
    for args in ((0, 1, 0), (2, 1, 0), (1, 1, -1)):
        with pytest.raises(ProbeError, match="a step needs"):
            step_cost(arch, "float32", *args)
