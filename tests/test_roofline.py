"""The roofline: counts against models transformers builds, the write-ups' numbers, the CLI and its errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.arch import ArchError, from_raw
from engines.configs import load_config
from engines.models import DTYPES
from probe.analysis.roofline import devices as hardware
from probe.analysis.roofline.device_file import device_file
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
from tests.conftest import ROOT, SHARED, needs_shared

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
        assert d.memory_bandwidth_bytes_s > 0 and "https://" in d.source and "https://" in d.spec_source
        assert d.memory_bytes and d.memory_bytes % 2**30 == 0  # the vendors' GB of device memory are GiB
        if d.name != "A10G":  # no vendor prints the A10G's FLOP/s
            assert {"float32", "float16"} <= set(d.peak_flops_s) and all(v > 0 for v in d.peak_flops_s.values())
    assert hardware.device("A10G").peak_flops_s == {}
    for name in ("H100", "MI250X", "MI250", "B200", "L40S"):
        assert name in "".join(names)
    h100 = hardware.device("H100-SXM")
    assert h100.memory_bytes == 80 * 2**30
    assert (h100.flops_s("bfloat16"), h100.flops_s("float8_e4m3fn")) == (989.5e12, 1979e12)  # dense
    assert hardware.device("T4").flops_s("bfloat16") is None  # Turing has no bf16 tensor cores
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
        ("AMD Instinct MI300X VF", "MI300X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("AMD Instinct MI250", "MI250"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("Tesla V100-PCIE-16GB", "V100-PCIe"),
        ("NVIDIA A100-PG509-200", "A100-40GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA H800", "H800"),
        ("NVIDIA H800 PCIe", "H800-PCIe"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("NVIDIA GeForce RTX 4080", "RTX-4080"),
        ("NVIDIA GeForce RTX 5090", "RTX-5090"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        # a laptop part is not its desktop namesake: NVIDIA prints no figures for it (hardware.UNPUBLISHED)
        ("NVIDIA GeForce RTX 4080 Laptop GPU", None),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
    ],
)
def test_match_device_maps_torch_names(gpu_name, entry):
    found = hardware.match_device(gpu_name)
    assert (found.name if found else None) == entry
    if entry:
        assert hardware.device(gpu_name) is found  # a trace's deviceProperties name works as --device


def test_a_laptop_part_is_named_with_why_no_figures():
    part = hardware.unpublished("NVIDIA GeForce RTX 4080 Laptop GPU")
    assert part is not None and "https://" in part.why and hardware.unpublished("NVIDIA H100 80GB HBM3") is None


def test_device_file_reads_the_table_fields(tmp_path):
    """--device-file: a card the table lacks, with measured peaks; every field checked, each error one line."""
    path = tmp_path / "card.json"
    path.write_text(
        json.dumps(
            {
                "name": "My Card",
                "memory_bandwidth_bytes_s": 512e9,
                "memory_bytes": 16 * 2**30,
                "peak_flops_s": {"bfloat16": 100e12, "float32": 20e12},
                "source": "measured with probe roofline --measure",
            }
        )
    )
    d = device_file(path)
    assert (d.name, d.memory_bandwidth_bytes_s, d.memory_bytes) == ("My Card", 512_000_000_000, 16 * 2**30)
    assert (d.flops_s("bfloat16"), d.flops_s("float8_e4m3fn"), d.spec_source) == (
        100e12,
        None,
        "measured with probe roofline --measure",
    )
    for doc, error in (
        ([1, 2], "a JSON object"),
        ({"name": "x"}, "'memory_bandwidth_bytes_s' must be a positive number"),
        ({"name": "x", "memory_bandwidth_bytes_s": -1}, "positive number"),
        ({"name": "x", "memory_bandwidth_bytes_s": 1e9, "peak_flops_s": {"bf16": True}}, "peak_flops_s.bf16"),
        ({"name": "x", "memory_bandwidth_bytes_s": 1e9, "bandwidth": 1}, "unknown field(s) bandwidth"),
        ({"memory_bandwidth_bytes_s": 1e9}, "'name'"),
    ):
        path.write_text(json.dumps(doc))
        with pytest.raises(ProbeError, match=re.escape(error)):
            device_file(path)


@needs_shared
def test_capacity_is_binary_as_real_traces_report_it():
    """Every public and peer trace (../shared/traces) whose deviceProperties name is in the table reports
    totalGlobalMem within 2% below the table's GiB figure (the driver keeps a little): decimal GB would be 7% too
    small."""
    import gzip

    seen = {}
    for path in sorted(p for d in ("public", "peer") for p in (SHARED / d).glob("*.json.gz")):
        text = gzip.open(path, "rt").read(400_000)
        for name, total in re.findall(r'"name":\s*"([^"]+)",[^}]*?"totalGlobalMem":\s*(\d+)', text):
            if (entry := hardware.match_device(name)) is not None:
                seen[entry.name] = int(total)
                assert 0.98 * entry.memory_bytes <= int(total) <= entry.memory_bytes, (path.name, name, total)
    assert set(seen) >= {"B200", "MI300X", "V100", "A100-40GB"}


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


# ---- every family: the formulas against the meta device and a real cache ------------------------------------

FAMILY_CONFIGS = sorted(p.stem for p in CONFIGS.glob("*.json"))
UNCAPPED = {"gpt_neo"}  # local layers: a windowed cache would keep w - 1 positions, transformers keeps them all


def test_every_family_has_a_tiny_config_and_a_rule():
    from engines.arch import RULES

    assert len(FAMILY_CONFIGS) == 34 and set(FAMILY_CONFIGS) == set(RULES)


@pytest.mark.parametrize("name", FAMILY_CONFIGS)
def test_formula_counts_equal_the_meta_device_build(name):
    from engines.meta import meta_params

    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    counts, head = meta_params(raw)
    arch = from_raw(raw)
    assert arch.params == counts and arch.head_params == head


@pytest.mark.parametrize("name", FAMILY_CONFIGS)
def test_cache_layout_equals_a_real_cache_after_a_prefill(name):
    """Layer types and window as transformers' cache reads them; every tensor a 20-token prefill leaves in the cache,
    element for element: K/V widths, the window's w - 1 positions, the SSM / delta-net states."""
    from transformers import AutoModelForCausalLM
    from transformers.cache_utils import get_layer_types_and_kwargs

    arch = tiny(name)
    config = load_config(str(CONFIGS / f"{name}.json"))
    types, kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    if name in UNCAPPED:  # the window lives in the attention's own mask; the cache keeps every position
        arch = dataclasses.replace(arch, layer_types=("full_attention",) * arch.layers, window=None)
    assert tuple(types) == arch.layer_types
    assert {k["sliding_window"] for k in kwargs if "sliding_window" in k} == ({arch.window} if arch.window else set())
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        cache = model(torch.arange(3, 23)[None], use_cache=True).cache
    held = 0
    for kind, layer in zip(arch.layer_types, cache.layers, strict=True):
        if kind in ("full_attention", "sliding_attention", "hybrid"):
            positions = min(20, arch.window - 1) if kind == "sliding_attention" else 20
            assert layer.keys.shape[-2] == layer.values.shape[-2] == positions
            assert (layer.keys[0, :, 0].numel(), layer.values[0, :, 0].numel()) == arch.kv_width
            held += layer.keys.numel() + layer.values.numel()
        if kind in ("linear_attention", "hybrid"):
            conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
            assert (conv.numel(), recurrent.numel()) == (arch.state.conv, arch.state.recurrent)
            held += conv.numel() + recurrent.numel()
    assert cache_bytes(arch, "float32", 20) == 4 * held


def test_family_defaults_are_transformers_own():
    from engines.arch import families
    from engines.meta import family_defaults

    table = families()
    assert {name: family_defaults(name) for name in table} == table


def test_falcon_keeps_k_and_v_for_every_head():
    """The issue's falcon: new_decoder_architecture with 2 K/V heads of 4. transformers broadcasts them to every
    head before the cache update: 2 layers x 2 x 4 heads x 16 x float32 = 1,024 B a position, where 2 heads would
    keep 512."""
    new = tiny("falcon", new_decoder_architecture=True, num_kv_heads=2)
    assert new.kv_heads == 4 and kv_bytes_per_token(new, "float32") == 1024
    assert any("broadcasts its 2 K/V heads to all 4" in n for n in new.notes)
    assert tiny("falcon", multi_query=True).kv_heads == 1
    assert tiny("falcon", multi_query=False).kv_heads == 4
    with pytest.raises(ArchError, match="needs new_decoder_architecture"):  # transformers cannot run it either
        tiny("falcon", multi_query=False, num_kv_heads=2)


@pytest.mark.parametrize(
    "changes",
    [
        {"multi_query": False},
        {"new_decoder_architecture": True, "num_kv_heads": 2},
        {"parallel_attn": False},
    ],
)
def test_falcon_variants_against_meta_and_a_real_cache(changes):
    from transformers import AutoModelForCausalLM

    from engines.configs import config_from_dict
    from engines.meta import meta_params

    raw = json.loads((CONFIGS / "falcon.json").read_text()) | changes
    arch = from_raw(raw)
    assert (arch.params, arch.head_params) == meta_params(raw)
    model = AutoModelForCausalLM.from_config(config_from_dict(raw)).eval()
    with torch.no_grad():
        cache = model(torch.arange(3, 8)[None], use_cache=True).cache
    assert cache.layers[0].keys.shape[1] == arch.kv_heads


# ---- the batch limit: memory, compute, a measured step ----------------------------------------------------------


def test_batch_limit_is_bounded_by_memory_and_by_compute():
    arch, h100 = arch_for("llama-3-8b"), hardware.device("H100-SXM")
    assert params(arch) == 8_030_261_248 and kv_bytes_per_token(arch, "bfloat16") == 131_072  # 2 x 32 x 8 x 128 x 2
    limit = batch_limit(
        arch, "bfloat16", None, 64, h100.memory_bandwidth_bytes_s, memory_bytes=h100.memory_bytes, peak_flops_s=989.5e12
    )
    # memory: (0.9 x 80 GiB - 16,060,522,496 B of weights) / (64 positions x 131,072 B) = 7,301.4
    assert limit.memory_max_batch == (int(0.9 * 80 * 2**30) - 16_060_522_496) // (64 * 131_072) == 7_301
    # compute: B x (2 x 7,504,924,672 + 2 x 32 x 256 x 64 x 32) / 989.5e12 >= (15,009,849,344 + B x 64 x 131,072) /
    # 3.35e12 from B = 4.4805 ms / (15.203 - 2.504 us) = 352.8, so 353
    assert limit.compute_bound_batch == 353 and (limit.max_batch, limit.binding) == (353, "compute")
    assert limit.traffic_max_batch is None and limit.step_ms is None  # no measured step: no budget
    # at 8,192 positions the KV reads outgrow the FLOPs: never compute-bound; memory binds at 57
    long = batch_limit(arch, "bfloat16", None, 8192, 3.35e12, memory_bytes=h100.memory_bytes, peak_flops_s=989.5e12)
    assert (long.compute_bound_batch, long.max_batch, long.binding) == (None, 57, "memory")
    weights_only = batch_limit(arch, "bfloat16", None, 64, 3.35e12, memory_bytes=10 * 2**30)
    assert weights_only.max_batch == 0  # 16 GB of weights in 9 GiB usable


def test_roofline_says_when_the_batch_does_not_fit(capsys):
    argv = ["roofline", "--model", "llama-3-8b", "--dtype", "bfloat16", "--device", "NVIDIA H100 80GB HBM3"]
    assert main([*argv, "--batch", "64", "--context", "8192"]) == 0
    captured = capsys.readouterr()
    # 16,060,522,496 B of weights + 64 x 8,192 x 131,072 B = 68,719,476,736 B of KV = 84.78 GB > 0.9 x 80 GiB
    assert "does not fit: weights 16.06 GB + KV cache 68.72 GB" in captured.err
    assert "= 84.78 GB > 77.31 GB usable (90% of 85.90 GB = 80 GiB)" in captured.err
    assert "DOES NOT FIT" in captured.out
    assert main([*argv, "--batch", "64", "--context", "8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    need, usable = 84_779_999_232, 0.9 * 80 * 2**30
    assert data["fit"] == {"fits": False, "need_bytes": need, "usable_bytes": usable, "positions": 8192}
    assert (data["batch_limit"]["max_batch"], data["batch_limit"]["binding"]) == (57, "memory")
    assert main([*argv, "--batch", "8", "--context", "8192", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit"]["fits"] is True


@pytest.mark.parametrize(
    "changes", [{"layer_types": ["full_attention"]}, {"layer_types": ["full_attention", "chunked_attention"]}]
)
def test_layer_types_a_rule_cannot_read_are_one_line(changes, capsys):
    with pytest.raises(ArchError, match="layer_types must list 2 of full_attention, sliding_attention"):
        tiny("gemma2", **changes)
