"""Counting a model's parameters by module kind on the meta device: exact for any family transformers ships.

The model is built with `torch.device("meta")`, so no weight is allocated, and every parameter is assigned one kind
by the module that owns it (the rule `engines.arch` documents and its formulas follow). `python -m engines.meta
--families` rewrites engines/families.json, the config defaults `engines.arch` reads, from the installed transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.cache_utils import get_layer_types_and_kwargs
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from engines.arch import FAMILIES_FILE, FULL, HYBRID, KINDS, LINEAR, RULES, SLIDING, Arch, Experts, Params, from_raw
from engines.configs import ModelError, config_from_dict, max_positions

ATTENTION_PARTS = {"self_attn", "attn", "attention", "self_attention"}
MIXER_PARTS = {"mixer", "mamba", "linear_attn"}
NORM_CLASS = re.compile(r"Norm", re.IGNORECASE)


def build_meta(config) -> PreTrainedModel:
    """The model of a transformers config, its parameters on the meta device (shapes only)."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def kind_of(model: PreTrainedModel, name: str) -> str:
    """The module kind of parameter `name` (see engines.arch)."""
    owner_name, _, _ = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    parts = owner_name.split(".")
    head = model.get_output_embeddings()
    if isinstance(owner, torch.nn.Embedding):
        return "embedding"
    if head is not None and owner is head:
        return "lm_head"
    if NORM_CLASS.search(type(owner).__name__):
        return "norms"
    if "experts" in parts:
        return "experts"
    if ATTENTION_PARTS & set(parts):
        return "attention"
    if MIXER_PARTS & set(parts):
        return "mixer"
    return "mlp" if any(p.isdigit() for p in parts) else "other"


def count_params(model: PreTrainedModel) -> Params:
    """Parameters by kind; a tied matrix once, under the kind of its first name (the token table)."""
    counts = dict.fromkeys(KINDS, 0)
    for name, p in model.named_parameters():  # remove_duplicate=True: a shared tensor is listed once
        counts[kind_of(model, name)] += p.numel()
    return Params(**counts)


def head_params(model: PreTrainedModel) -> int:
    """Parameters the LM head reads whole each pass: its matrix (the token table when tied) and its bias."""
    head = model.get_output_embeddings()
    return sum(p.numel() for p in head.parameters())


def meta_params(raw: dict) -> tuple[Params, int]:
    """(parameters by kind, head parameters) of a config.json's dict, counted on the meta device."""
    model = build_meta(config_from_dict(raw))
    return count_params(model), head_params(model)


EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def meta_arch(raw: dict) -> Arch:
    """The Arch of any family transformers ships: parameters counted on the meta device, the cache layout from the
    config's generic keys and transformers' own layer types (for families engines.arch has no rule for)."""
    config = config_from_dict(raw)
    text = config.get_text_config(decoder=True)
    try:
        model = build_meta(config)
    except Exception as e:  # a family's own checks, in its own words
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ModelError(f"cannot build {raw['model_type']} on the meta device: {type(e).__name__}: {first}") from None
    counts = count_params(model)
    types, kwargs = get_layer_types_and_kwargs(text)
    known = {FULL, SLIDING, LINEAR, HYBRID}
    layer_types = tuple(t if t in known else FULL for t in types)
    window = next((k["sliding_window"] for t, k in zip(layer_types, kwargs, strict=True) if t == SLIDING), None)
    hidden, heads = text.hidden_size, getattr(text, "num_attention_heads", 0) or 0
    kv = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (hidden // heads if heads else 0)
    experts = None
    moe = [m for n, m in model.named_modules() if n.split(".")[-1] == "experts"]
    count = next((getattr(text, k) for k in EXPERT_COUNT_KEYS if getattr(text, k, None)), None)
    if moe and count and counts.experts:
        experts = Experts(count, text.num_experts_per_tok, len(moe), counts.experts // (count * len(moe)))
    notes = [f"{raw['model_type']}: counted on the meta device; the cache layout read from the config's generic keys"]
    if set(types) - known:
        notes.append(f"layer types {sorted(set(types) - known)} taken as full attention")
    if LINEAR in layer_types or HYBRID in layer_types:
        notes.append("linear-attention state not modelled for this family")
    return Arch(
        model_type=raw["model_type"],
        layers=len(layer_types),
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        v_head_dim=head_dim,
        vocab=text.vocab_size,
        tied=model.get_output_embeddings().weight is model.get_input_embeddings().weight,
        max_positions=max_positions(text),
        params=counts,
        head_params=head_params(model),
        layer_types=layer_types,
        window=window,
        kv_width=(kv * head_dim, kv * head_dim),
        experts=experts,
        notes=tuple(notes),
    )


# ---- families.json -------------------------------------------------------------------------------------------

# Config fields that say nothing about shapes.
NOISE = {
    "output_hidden_states",
    "return_dict",
    "dtype",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "architectures",
    "id2label",
    "label2id",
    "problem_type",
    "output_attentions",
    "tokenizer_class",
    "prefix",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "task_specific_params",
    "finetuning_task",
    "transformers_version",
    "add_cross_attention",
    "torchscript",
    "pruned_heads",
    "use_cache",
    "initializer_range",
    "cross_attention_hidden_size",
    "tie_encoder_decoder",
}


def family_defaults(model_type: str) -> dict:
    """A config class's field defaults (JSON values only) and its attribute map, as engines/families.json holds."""
    cls = CONFIG_MAPPING[model_type]
    defaults = {}
    for f in dataclasses.fields(cls):
        if f.name in NOISE or f.name.startswith("_") or "dropout" in f.name or "pdrop" in f.name:
            continue
        value = list(f.default) if isinstance(f.default, tuple) else f.default
        if value is dataclasses.MISSING or (isinstance(value, float) and not math.isfinite(value)):
            continue
        try:
            json.dumps(value)
        except TypeError:
            continue
        defaults[f.name] = value
    return {"attribute_map": dict(getattr(cls, "attribute_map", {})), "defaults": defaults}


def cache_elements(config, positions: int = 20) -> int:
    """Elements a real cache holds after a `positions`-token prefill of the model (random weights, on the CPU)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        cache = model(torch.arange(3, 3 + positions)[None], use_cache=True).cache
    held = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            held += t.numel() if isinstance(t, torch.Tensor) else 0
        for states in (getattr(layer, "conv_states", {}), getattr(layer, "recurrent_states", {})):
            held += sum(t.numel() for t in states.values() if t is not None)
    return held


def family_table(folder: str) -> str:
    """Markdown: for each config.json in `folder`, parameters by the formula and on the meta device, and the cache
    a 20-token prefill holds by the formula and in a real cache (float32 bytes)."""
    rows = [
        "| family | parameters (formula) | parameters (meta device) | layers: full / sliding (window) / state | "
        "KV per position, formula | cache after 20 tokens, formula | real cache |",
        "|---|--:|--:|---|--:|--:|--:|",
    ]
    for path in sorted(Path(folder).glob("*.json")):
        raw = json.loads(path.read_text())
        arch, (counts, _) = from_raw(raw), meta_params(raw)
        positions = 20
        window = min(positions, arch.window - 1) if arch.window else positions
        width = sum(arch.kv_width)
        full = arch.attention_layers - arch.sliding_layers
        formula = 4 * (
            width * (full * positions + arch.sliding_layers * window)
            + arch.state_layers * (arch.state.elements if arch.state else 0)
        )
        real = 4 * cache_elements(config_from_dict(raw), positions)
        sliding = f"{arch.sliding_layers} ({arch.window})" if arch.sliding_layers else "0"
        rows.append(
            f"| {path.stem} | {arch.params.total:,} | {counts.total:,} | {full} / {sliding} / {arch.state_layers} | "
            f"{4 * width * arch.attention_layers:,} B | {formula:,} B | {real:,} B |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", action="store_true", help="rewrite engines/families.json")
    parser.add_argument("--table", metavar="FOLDER", help="print the formula-vs-meta table for FOLDER's configs")
    args = parser.parse_args()
    if args.families:
        table = {name: family_defaults(name) for name in sorted(RULES)}
        FAMILIES_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {FAMILIES_FILE}: {len(table)} families")
    if args.table:
        print(family_table(args.table))


if __name__ == "__main__":
    main()
