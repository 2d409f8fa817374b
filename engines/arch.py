"""What a decoder config builds, read without torch: parameters by module kind, the cache each layer keeps, experts.

A config.json says the sizes; its family's modeling_*.py decides the rest (which projections have a bias, how many
norms a layer has, whether K and V are kept for every head, which layers slide, which route to experts). This module
writes those rules down for the families below, as transformers 5.24 builds them, so the analysis side can count a
model's bytes on a machine without torch. Every count here is checked against the model transformers builds on the
meta device (`engines.meta`) and every cache width against a real cache after a prefill (tests/test_roofline.py),
for each tiny config in tests/data/configs/.

The family defaults (what a config.json may leave out) are transformers' own: engines/families.json holds each
config class's field defaults, copied from transformers 5.24 by `python -m engines.meta --families`, and a test
checks the copy. Derived values (`num_key_value_heads` None means every head, `layer_types` from a window and a
pattern, ...) follow each config class's `__post_init__`.

Module kinds, one rule for formula and meta count alike:
- embedding: the token table and learned position tables. A pass gathers rows from them, never reads them whole.
- lm_head: the output matrix when it is not the token table (0 when tied), with its bias.
- norms: every LayerNorm / RMSNorm, including those inside attention (q/k norms, MLA's latent norms).
- experts: routed experts; a token runs `top_k` of them.
- attention: the attention projections (and gpt-oss's sinks).
- mixer: state-space and linear-attention mixers (mamba, gated delta-net).
- mlp: everything else inside a layer: dense MLPs, shared experts, routers.
- other: anything else outside the layers (OPT's project_in / project_out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FAMILIES_FILE = Path(__file__).parent / "families.json"
KINDS = ("embedding", "attention", "mlp", "experts", "norms", "lm_head", "mixer", "other")
# Layer types as transformers' cache names them (cache_utils.get_layer_types_and_kwargs).
FULL, SLIDING, LINEAR, HYBRID = "full_attention", "sliding_attention", "linear_attention", "hybrid"
ATTENTION_TYPES = (FULL, SLIDING, HYBRID)  # layers with a per-token K/V cache
STATE_TYPES = (LINEAR, HYBRID)  # layers with a constant-size state


class ArchError(ValueError):
    """A config this module cannot read; one line, fit for a CLI error."""


@dataclass(frozen=True)
class Params:
    """Parameters by module kind, as `sum(p.numel())` counts them over the built model (a tied matrix once)."""

    embedding: int = 0
    attention: int = 0
    mlp: int = 0
    experts: int = 0
    norms: int = 0
    lm_head: int = 0
    mixer: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in KINDS)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in KINDS}


@dataclass(frozen=True)
class Experts:
    """Routed experts: `count` in each of `layers` layers, `top_k` run per token, `params_each` per expert."""

    count: int
    top_k: int
    layers: int
    params_each: int


@dataclass(frozen=True)
class State:
    """The constant-size state a linear-attention or SSM layer keeps per sequence, in elements."""

    conv: int  # the causal conv's last kernel-width inputs
    recurrent: int  # the SSM / delta-rule state

    @property
    def elements(self) -> int:
        return self.conv + self.recurrent


@dataclass(frozen=True)
class Arch:
    """A decoder's shapes, parameter counts and cache layout, from its config alone."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int  # K/V heads the cache keeps (falcon: see its rule)
    head_dim: int  # query and key width per head (MLA: nope + rope)
    v_head_dim: int
    vocab: int
    tied: bool  # the LM head is the token table
    max_positions: int | None
    params: Params
    head_params: int  # parameters the LM head reads whole each pass, tied or not (matrix and bias)
    layer_types: tuple[str, ...]  # per layer: full_attention, sliding_attention, linear_attention or hybrid
    window: int | None  # positions a sliding layer attends to, the current one included
    kv_width: tuple[int, int]  # elements per token per attention layer the cache keeps: (keys, values)
    state: State | None = None  # per linear / hybrid layer
    experts: Experts | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def attention_layers(self) -> int:
        return sum(t in ATTENTION_TYPES for t in self.layer_types)

    @property
    def sliding_layers(self) -> int:
        return self.layer_types.count(SLIDING)

    @property
    def state_layers(self) -> int:
        return sum(t in STATE_TYPES for t in self.layer_types)


# ---- reading a config ---------------------------------------------------------------------------------------


def families() -> dict[str, dict]:
    """model_type -> {"defaults": the config class's field defaults, "attribute_map": alias -> field}."""
    return json.loads(FAMILIES_FILE.read_text(encoding="utf-8"))


class _Config:
    """A config.json's values over its family's defaults, read by transformers' names or their aliases."""

    def __init__(self, raw: Mapping, family: dict):
        self.alias = family["attribute_map"]
        self.values = dict(family["defaults"])
        for key, value in raw.items():
            self.values[self.alias.get(key, key)] = value

    def get(self, key: str, default=None):
        value = self.values.get(self.alias.get(key, key))
        return default if value is None else value

    def int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if type(value) is not int or value < 1:
            raise ArchError(f"config: {key} must be a positive integer, got {value!r}")
        return value

    def flag(self, key: str) -> bool:
        return bool(self.get(key, False))


def _lin(inputs: int, outputs: int, bias: bool = False) -> int:
    return inputs * outputs + (outputs if bias else 0)


def _gated(hidden: int, inner: int, bias: bool = False) -> int:  # gate, up, down (SwiGLU)
    return 2 * _lin(hidden, inner, bias) + _lin(inner, hidden, bias)


def _plain(hidden: int, inner: int, bias: bool = True) -> int:  # up, down (GPT-2)
    return _lin(hidden, inner, bias) + _lin(inner, hidden, bias)


@dataclass
class _Build:
    """What a family's rule fills in; `Arch` is made from it."""

    c: _Config
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    v_head_dim: int | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    layer_types: list[str] | None = None
    window: int | None = None
    kv_width: tuple[int, int] | None = None
    state: State | None = None
    experts: Experts | None = None
    embed_dim: int | None = None  # the token table's width, when it is not `hidden` (OPT)
    head_bias: bool = False
    notes: list[str] = field(default_factory=list)

    def add(self, kind: str, n: int) -> None:
        self.counts[kind] += n

    def mha(self, qkv_bias: bool = False, o_bias: bool = False, q_width: int | None = None) -> int:
        """q, k, v, o (fused or not: the same count) of one layer."""
        q = q_width or self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return (
            _lin(self.hidden, q, qkv_bias)
            + 2 * _lin(self.hidden, kv, qkv_bias)
            + _lin(self.heads * self.head_dim, self.hidden, o_bias)
        )

    def norm(self, count: int = 1, width: int | None = None, bias: bool = False) -> None:
        self.add("norms", count * (width or self.hidden) * (2 if bias else 1))


def _base(c: _Config, kv_key: str = "num_key_value_heads", attention: bool = True) -> _Build:
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads") if attention else 0
    kv = c.get(kv_key) or heads
    b = _Build(
        c=c,
        layers=c.int("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        head_dim=c.get("head_dim") or (hidden // heads if heads else 0),
        vocab=c.int("vocab_size"),
        tied=c.flag("tie_word_embeddings"),
    )
    if attention and (type(kv) is not int or kv < 1 or heads % kv):
        raise ArchError(f"config: {heads} attention heads do not split into {kv!r} KV heads")
    return b


def _given_types(b: _Build, allowed: tuple[str, ...]) -> list[str] | None:
    """The config's own layer_types, checked: one a layer, each a type this family's rule knows."""
    given = b.c.get("layer_types")
    if not given:
        return None
    if not isinstance(given, list) or len(given) != b.layers or not set(given) <= set(allowed):
        raise ArchError(f"config: layer_types must list {b.layers} of {', '.join(allowed)}, got {given!r}"[:300])
    return list(given)


def _window_types(b: _Build, rule: Callable[[int], bool]) -> None:
    """layer_types from the config, else from `rule(i)` (True: sliding); the window from `sliding_window`."""
    given = _given_types(b, (FULL, SLIDING))
    b.layer_types = given or [SLIDING if rule(i) else FULL for i in range(b.layers)]
    if SLIDING in b.layer_types:
        b.window = b.c.int("sliding_window")


def _all_sliding_if_window(b: _Build) -> None:  # no layer_types field: every layer slides when a window is set
    _window_types(b, lambda i: b.c.get("sliding_window") is not None)


def _moe_layer(b: _Build, i: int) -> bool:  # Qwen2-MoE / Qwen3-MoE / Qwen3-Next
    step, only = b.c.get("decoder_sparse_step", 1), b.c.get("mlp_only_layers") or []
    return i not in only and b.c.get("num_experts", 0) > 0 and (i + 1) % step == 0


def _experts(b: _Build, count_key: str, inner: int, layers: int, each: int | None = None) -> Experts:
    """Sets `b.experts` and returns it."""
    count = b.c.int(count_key)
    each = 3 * b.hidden * inner if each is None else each  # fused gate_up (2I x H) and down (H x I)
    b.experts = Experts(count, b.c.int("num_experts_per_tok"), layers, each)
    b.add("experts", count * layers * each)
    b.add("mlp", layers * b.hidden * count)  # the router: H -> E, no bias
    return b.experts


# ---- the families -----------------------------------------------------------------------------------------


def _llama_like(
    b: _Build,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    mlp_bias: bool = False,
    norms: int = 2,
    qk_norm: str | None = None,  # "head": one head_dim weight for q and for k; "width": over all heads
    norm_bias: bool = False,
    gated: bool = True,
) -> None:
    """Attention, a (gated) MLP and `norms` norms a layer, a final norm: the shape most families share."""
    per_layer = b.mha(qkv_bias, o_bias)
    b.add("attention", b.layers * per_layer)
    if qk_norm == "head":
        b.norm(2 * b.layers, b.head_dim)
    elif qk_norm == "width":
        b.norm(b.layers, b.heads * b.head_dim)
        b.norm(b.layers, b.kv_heads * b.head_dim)
    inner = b.c.int("intermediate_size")
    dense_layers = b.layers - (b.experts.layers if b.experts else 0)
    b.add("mlp", dense_layers * (_gated(b.hidden, inner, mlp_bias) if gated else _plain(b.hidden, inner, mlp_bias)))
    b.norm(norms * b.layers + 1, bias=norm_bias)


def llama(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, mlp_bias=b.c.flag("mlp_bias"))
    b.layer_types = [FULL] * b.layers


def mistral(b: _Build) -> None:
    _llama_like(b)
    _all_sliding_if_window(b)


def phi3(b: _Build) -> None:  # fused qkv_proj and gate_up_proj: the same counts, no biases
    _llama_like(b)
    _all_sliding_if_window(b)


def qwen2(b: _Build) -> None:  # Qwen2Attention: bias on q, k, v; none on o or the MLP
    _llama_like(b, qkv_bias=True)
    _qwen_window(b)


def _qwen_window(b: _Build) -> None:
    """Qwen2 / Qwen3: `sliding_window` counts only with `use_sliding_window`, from layer `max_window_layers` on."""
    window = b.c.get("sliding_window") if b.c.flag("use_sliding_window") else None
    start = b.c.get("max_window_layers", 0)
    _window_types(b, lambda i: window is not None and i >= start)


def qwen3(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, qk_norm="head")
    _qwen_window(b)


def gemma(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias)
    b.layer_types = [FULL] * b.layers


def gemma2(b: _Build) -> None:  # pre- and post-norms around attention and the MLP: 4 a layer
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, norms=4)
    _window_types(b, lambda i: bool((i + 1) % 2))


def gemma3_text(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, norms=4, qk_norm="head")
    pattern = b.c.get("sliding_window_pattern", 6)
    _window_types(b, lambda i: bool((i + 1) % pattern))


def olmo2(b: _Build) -> None:  # q/k norms over all heads; the two norms a layer follow attention and the MLP
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, qk_norm="width")
    b.layer_types = [FULL] * b.layers


def cohere(b: _Build) -> None:  # one LayerNorm (weight only) a layer: attention and MLP run in parallel
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, norms=1, qk_norm="width" if b.c.flag("use_qk_norm") else None)
    b.layer_types = [FULL] * b.layers


def cohere2(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, norms=1)
    pattern = b.c.get("sliding_window_pattern", 4)
    _window_types(b, lambda i: bool((i + 1) % pattern))


def smollm3(b: _Build) -> None:
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, mlp_bias=b.c.flag("mlp_bias"))
    interval = b.c.get("no_rope_layer_interval", 4)
    no_rope = b.c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(b.layers)]
    window = b.c.flag("use_sliding_window") and b.c.get("sliding_window") is not None
    _window_types(b, lambda i: window and not no_rope[i])


def stablelm(b: _Build) -> None:
    parallel = b.c.flag("use_parallel_residual")  # attention and MLP share the input norm: no post-attention norm
    _llama_like(b, qkv_bias=b.c.flag("use_qkv_bias"), norms=1 if parallel else 2, norm_bias=True)
    if b.c.flag("qk_layernorm"):  # a LayerNorm (no bias) per head, for q and for k
        b.norm(b.layers, (b.heads + b.kv_heads) * b.head_dim)
    b.layer_types = [FULL] * b.layers


def starcoder2(b: _Build) -> None:  # biases everywhere (use_bias), a plain GELU MLP, LayerNorms
    bias = b.c.flag("use_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, mlp_bias=bias, norm_bias=True, gated=False)
    _all_sliding_if_window(b)


def granite(b: _Build) -> None:
    llama(b)


def mixtral(b: _Build) -> None:
    _experts(b, "num_local_experts", b.c.int("intermediate_size"), b.layers)
    _llama_like(b)
    _all_sliding_if_window(b)


def olmoe(b: _Build) -> None:
    _experts(b, "num_experts", b.c.int("intermediate_size"), b.layers)
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, qk_norm="width")
    b.layer_types = [FULL] * b.layers


def _qwen_moe(b: _Build, shared: bool) -> int:
    moe = [i for i in range(b.layers) if _moe_layer(b, i)]
    _experts(b, "num_experts", b.c.int("moe_intermediate_size"), len(moe))
    if shared and b.c.get("shared_expert_intermediate_size", 0) > 0:  # a gated MLP and its H -> 1 gate, every token
        b.add("mlp", len(moe) * (_gated(b.hidden, b.c.int("shared_expert_intermediate_size")) + b.hidden))
    return len(moe)


def qwen2_moe(b: _Build) -> None:
    _qwen_moe(b, shared=True)
    _llama_like(b, qkv_bias=b.c.flag("qkv_bias"))
    window = b.c.flag("use_sliding_window")
    start = b.c.get("max_window_layers", 0)
    _window_types(b, lambda i: window and bool((i + 1) % 2) and i < start)


def qwen3_moe(b: _Build) -> None:
    _qwen_moe(b, shared=False)
    bias = b.c.flag("attention_bias")
    _llama_like(b, qkv_bias=bias, o_bias=bias, qk_norm="head")
    window = b.c.get("sliding_window") if b.c.flag("use_sliding_window") else None
    _window_types(b, lambda i: window is not None)


def gpt_oss(b: _Build) -> None:
    inner = b.c.int("intermediate_size")
    # gate_up (H x 2I) and down (I x H), each with a bias; the router has a bias too
    each = _lin(b.hidden, 2 * inner, True) + _lin(inner, b.hidden, True)
    experts = _experts(b, "num_local_experts", inner, b.layers, each=each)
    b.add("mlp", b.layers * experts.count)
    bias = b.c.flag("attention_bias")
    b.add("attention", b.layers * (b.mha(bias, bias) + b.heads))  # + one sink logit per head
    b.norm(2 * b.layers + 1)
    _window_types(b, lambda i: bool((i + 1) % 2))


def deepseek_v2(b: _Build) -> None:
    """MLA: queries through a low-rank q_a/q_b pair (or one q_proj), keys and values from one compressed latent of
    `kv_lora_rank` plus a shared rope key of `qk_rope_head_dim`. transformers 5.24 caches that latent and the rope
    key (one "head" each) and expands them through kv_b_proj every step."""
    c, h = b.c, b.hidden
    nope, rope, v, kv_rank = (c.int(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
    b.head_dim, b.v_head_dim = nope + rope, v
    bias, q_rank = c.flag("attention_bias"), c.get("q_lora_rank")
    q = _lin(h, q_rank, bias) + _lin(q_rank, b.heads * (nope + rope)) if q_rank else _lin(h, b.heads * (nope + rope))
    kv = _lin(h, kv_rank + rope, bias) + _lin(kv_rank, b.heads * (nope + v))
    b.add("attention", b.layers * (q + kv + _lin(b.heads * v, h, bias)))
    b.norm(b.layers, kv_rank)
    if q_rank:
        b.norm(b.layers, q_rank)
    b.kv_width = (kv_rank, rope)
    dense = min(c.get("first_k_dense_replace", 0), b.layers)
    inner = c.int("moe_intermediate_size")
    experts = _experts(b, "n_routed_experts", inner, b.layers - dense)
    if c.get("n_shared_experts"):  # one gated MLP of n_shared x the expert width, every token
        b.add("mlp", experts.layers * _gated(h, inner * c.int("n_shared_experts"), c.flag("mlp_bias")))
    b.add("mlp", dense * _gated(h, c.int("intermediate_size"), c.flag("mlp_bias")))
    b.norm(2 * b.layers + 1)
    b.layer_types = [FULL] * b.layers
    b.notes.append(
        f"MLA: the cache keeps a {kv_rank}-wide latent and a {rope}-wide rope key a token, not K and V for "
        f"{b.heads} heads"
    )


def deepseek_v3(b: _Build) -> None:
    deepseek_v2(b)  # the same layout; e_score_correction_bias is a buffer, not a parameter


def gpt2(b: _Build) -> None:
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    h, inner = b.hidden, b.c.get("n_inner") or 4 * b.hidden
    b.add("attention", b.layers * (_lin(h, 3 * h, True) + _lin(h, h, True)))
    b.add("mlp", b.layers * _plain(h, inner))
    b.norm(2 * b.layers + 1, bias=True)
    b.add("embedding", b.c.int("n_positions") * h)
    b.layer_types = [FULL] * b.layers


def gpt_bigcode(b: _Build) -> None:  # multi_query: one K and one V head, fused into c_attn
    h, inner = b.hidden, b.c.get("n_inner") or 4 * b.hidden
    if b.c.flag("multi_query"):
        b.kv_heads = 1
    b.add("attention", b.layers * (_lin(h, h + 2 * b.kv_heads * b.head_dim, True) + _lin(h, h, True)))
    b.add("mlp", b.layers * _plain(h, inner))
    b.norm(2 * b.layers + 1, bias=True)
    b.add("embedding", b.c.int("n_positions") * h)
    b.layer_types = [FULL] * b.layers


def gpt_neo(b: _Build) -> None:
    """Local layers attend to the last `window_size` positions; the pattern comes from `attention_types`."""
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    h, inner = b.hidden, b.c.get("intermediate_size") or 4 * b.hidden
    b.add("attention", b.layers * (3 * h * h + _lin(h, h, True)))
    b.add("mlp", b.layers * _plain(h, inner))
    b.norm(2 * b.layers + 1, bias=True)
    b.add("embedding", b.c.int("max_position_embeddings") * h)
    types = b.c.get("attention_types") or [[["global", "local"], 12]]
    kinds = [kind for pattern, repeat in types for kind in pattern * repeat]
    if len(kinds) != b.layers:
        raise ArchError(f"config: attention_types gives {len(kinds)} layers, num_layers is {b.layers}")
    b.layer_types = [SLIDING if k == "local" else FULL for k in kinds]
    if SLIDING in b.layer_types:
        b.window = b.c.int("window_size")
        b.notes.append(
            "gpt_neo: local layers mask inside attention (its own causal table); transformers' cache keeps every "
            "position of them and attention reads them all; the window caps what a step must read"
        )


def gptj(b: _Build) -> None:  # attention and MLP in parallel off one LayerNorm; the LM head has a bias
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    h, inner = b.hidden, b.c.get("n_inner") or 4 * b.hidden
    b.add("attention", b.layers * 4 * h * h)
    b.add("mlp", b.layers * _plain(h, inner))
    b.norm(b.layers + 1, bias=True)
    b.head_bias = True
    b.layer_types = [FULL] * b.layers


def gpt_neox(b: _Build) -> None:
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    h, bias = b.hidden, b.c.flag("attention_bias")
    b.add("attention", b.layers * (_lin(h, 3 * h, bias) + _lin(h, h, bias)))
    b.add("mlp", b.layers * _plain(h, b.c.int("intermediate_size")))
    b.norm(2 * b.layers + 1, bias=True)
    b.layer_types = [FULL] * b.layers


def phi(b: _Build) -> None:  # parallel attention and MLP off one LayerNorm; biases everywhere, the LM head's too
    b.add("attention", b.layers * b.mha(True, True))
    b.add("mlp", b.layers * _plain(b.hidden, b.c.int("intermediate_size")))
    b.norm(b.layers + 1, bias=True)
    if b.c.flag("qk_layernorm"):
        b.norm(2 * b.layers, b.head_dim, bias=True)
    b.head_bias = True
    b.layer_types = [FULL] * b.layers


def bloom(b: _Build) -> None:  # ALiBi, no position table; a LayerNorm right after the embedding
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    h = b.hidden
    b.add("attention", b.layers * (_lin(h, 3 * h, True) + _lin(h, h, True)))
    b.add("mlp", b.layers * _plain(h, 4 * h))
    b.norm(2 * b.layers + 2, bias=True)
    b.layer_types = [FULL] * b.layers


def opt(b: _Build) -> None:
    """Learned positions with an offset of 2 rows; a token table of `word_embed_proj_dim`, projected in and out
    when that differs from the hidden size."""
    b.kv_heads = b.heads  # multi-head attention only: num_key_value_heads, if set, is not read
    c, h = b.c, b.hidden
    bias, affine = c.flag("enable_bias"), c.flag("layer_norm_elementwise_affine")
    b.add("attention", b.layers * 4 * _lin(h, h, bias))
    b.add("mlp", b.layers * _plain(h, c.int("ffn_dim"), bias))
    final = c.flag("do_layer_norm_before") and not c.flag("_remove_final_layer_norm")
    if affine:
        b.norm(2 * b.layers + final, bias=True)
    b.add("embedding", (c.int("max_position_embeddings") + 2) * h)
    embed = c.get("word_embed_proj_dim") or h
    if embed != h:
        b.embed_dim = embed
        b.add("other", 2 * embed * h)  # project_in and project_out, no bias
    b.layer_types = [FULL] * b.layers


def falcon(b: _Build) -> None:
    """K/V heads (transformers' FalconAttention): with new_decoder_architecture the projection makes
    `num_kv_heads` of them and broadcasts them to every head before the cache update, so the cache keeps all heads;
    otherwise multi_query makes one, and without it every head has its own."""
    c, h = b.c, b.hidden
    new, mqa, kv = c.flag("new_decoder_architecture"), c.flag("multi_query"), c.get("num_kv_heads")
    if not new and not mqa and kv not in (None, b.heads):
        raise ArchError(
            f"falcon: num_kv_heads={kv} needs new_decoder_architecture (transformers' FalconAttention cannot "
            f"reshape {b.heads} heads into {kv})"
        )
    made = (kv or b.heads) if new else (1 if mqa else b.heads)
    bias = c.flag("bias")
    b.add("attention", b.layers * (_lin(h, (b.heads + 2 * made) * b.head_dim, bias) + _lin(h, h, bias)))
    b.add("mlp", b.layers * _plain(h, c.get("ffn_hidden_size") or 4 * h, bias))
    if new:
        norms = c.get("num_ln_in_parallel_attn") or 2
    else:
        norms = 1 if c.flag("parallel_attn") else 2
    b.norm(norms * b.layers + 1, bias=True)
    b.layer_types = [FULL] * b.layers
    b.kv_heads = b.heads if new else made
    if new and made != b.heads:
        b.notes.append(
            f"falcon: transformers broadcasts its {made} K/V heads to all {b.heads} before caching them; "
            f"a cache of the {made} (vLLM's) would hold {made}/{b.heads} of it"
        )


def mamba(b: _Build) -> None:
    """Mamba-1: no attention, no per-token cache; each layer keeps a conv window and an SSM state per sequence."""
    c, h = b.c, b.hidden
    inner, state, kernel = int(c.get("expand", 2) * h), c.int("state_size"), c.int("conv_kernel")
    rank = c.get("time_step_rank")
    rank = math.ceil(h / 16) if rank in (None, "auto") else rank
    mixer = (
        _lin(h, 2 * inner, c.flag("use_bias"))  # in_proj
        + inner * kernel
        + (inner if c.flag("use_conv_bias") else 0)  # depthwise conv1d
        + _lin(inner, rank + 2 * state)  # x_proj
        + _lin(rank, inner, True)  # dt_proj
        + inner * state
        + inner  # A_log, D
        + _lin(inner, h, c.flag("use_bias"))  # out_proj
    )
    b.add("mixer", b.layers * mixer)
    b.norm(b.layers + 1)
    b.layer_types = [LINEAR] * b.layers
    b.state = State(conv=inner * kernel, recurrent=inner * state)


def _mamba2(c: _Config, hidden: int) -> tuple[int, int, State]:
    """Falcon-H1's Mamba-2 mixer: (parameters, norm parameters, state per sequence)."""
    inner = c.get("mamba_d_ssm") or int(c.get("mamba_expand", 2) * hidden)
    keys = ("mamba_n_heads", "mamba_n_groups", "mamba_d_state", "mamba_d_conv")
    heads, groups, state, kernel = (c.int(k) for k in keys)
    head_dim = c.get("mamba_d_head")
    head_dim = inner // heads if head_dim in (None, "auto") else head_dim
    conv = inner + 2 * groups * state
    params = (
        _lin(hidden, inner + conv + heads, c.flag("mamba_proj_bias"))
        + conv * kernel
        + (conv if c.flag("mamba_conv_bias") else 0)
        + 3 * heads  # dt_bias, A_log, D
        + _lin(inner, hidden, c.flag("projectors_bias"))
    )
    norm = inner if c.flag("mamba_rms_norm") else 0
    return params, norm, State(conv=conv * kernel, recurrent=heads * head_dim * state)


def falcon_h1(b: _Build) -> None:
    """Every layer runs attention and a Mamba-2 mixer side by side, then a gated MLP."""
    mixer, norm, state = _mamba2(b.c, b.hidden)
    bias = b.c.flag("attention_bias")
    b.add("attention", b.layers * b.mha(bias, bias))
    b.add("mixer", b.layers * mixer)
    b.add("mlp", b.layers * _gated(b.hidden, b.c.int("intermediate_size"), b.c.flag("mlp_bias")))
    b.norm(2 * b.layers + 1)
    b.add("norms", b.layers * norm)
    b.layer_types = [HYBRID] * b.layers
    b.state = state


def qwen3_next(b: _Build) -> None:
    """Gated delta-net (linear attention) in 3 of 4 layers, gated full attention in the 4th; MoE MLPs."""
    c, h = b.c, b.hidden
    interval = c.get("full_attention_interval", 4)
    given = _given_types(b, (FULL, LINEAR))
    b.layer_types = given or [LINEAR if (i + 1) % interval else FULL for i in range(b.layers)]
    full = b.layer_types.count(FULL)
    linear = b.layers - full
    bias = c.flag("attention_bias")
    b.add("attention", full * b.mha(bias, bias, q_width=2 * b.heads * b.head_dim))  # q and its output gate
    b.norm(2 * full, b.head_dim)
    kh, kd, vh, vd, kernel = (
        c.int(k)
        for k in (
            "linear_num_key_heads",
            "linear_key_head_dim",
            "linear_num_value_heads",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
    )
    conv = 2 * kh * kd + vh * vd
    mixer = _lin(h, 2 * kh * kd + 2 * vh * vd) + _lin(h, 2 * vh) + conv * kernel + 2 * vh + _lin(vh * vd, h)
    b.add("mixer", linear * mixer)  # in_proj_qkvz, in_proj_ba, conv1d, dt_bias and A_log, out_proj
    b.norm(linear, vd)
    moe = _qwen_moe(b, shared=True)
    b.add("mlp", (b.layers - moe) * _gated(h, c.int("intermediate_size")))
    b.norm(2 * b.layers + 1)
    b.state = State(conv=conv * kernel, recurrent=vh * kd * vd)


RULES: dict[str, Callable[[_Build], None]] = {
    f.__name__: f
    for f in (
        bloom,
        cohere,
        cohere2,
        deepseek_v2,
        deepseek_v3,
        falcon,
        falcon_h1,
        gemma,
        gemma2,
        gemma3_text,
        gpt2,
        gpt_bigcode,
        gpt_neo,
        gpt_neox,
        gpt_oss,
        gptj,
        granite,
        llama,
        mamba,
        mistral,
        mixtral,
        olmo2,
        olmoe,
        opt,
        phi,
        phi3,
        qwen2,
        qwen2_moe,
        qwen3,
        qwen3_moe,
        qwen3_next,
        smollm3,
        stablelm,
        starcoder2,
    )
}
ATTENTION_FREE = {"mamba"}
# Families transformers names differently from the text model's rule.
ALIASES = {"gemma3": "gemma3_text"}


def from_raw(raw: Mapping) -> Arch:
    """The Arch of a config.json's dict: its family's rule over its family's defaults."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("model_type"), str):
        raise ArchError("config has no model_type")
    model_type = raw["model_type"]
    rule = ALIASES.get(model_type, model_type)
    table = families()
    if rule not in RULES or rule not in table:
        raise ArchError(
            f"no torch-free layout for model_type {model_type!r} (known: {', '.join(sorted(RULES))}); "
            "with torch installed, probe counts any family on the meta device"
        )
    c = _Config(raw, table[rule])
    kv_key = "num_kv_heads" if rule == "falcon" else "num_key_value_heads"
    b = _base(c, kv_key, attention=rule not in ATTENTION_FREE)
    RULES[rule](b)
    return _finish(b, model_type)


def _finish(b: _Build, model_type: str) -> Arch:
    embed = b.embed_dim or b.hidden
    b.add("embedding", b.vocab * embed)
    head = b.vocab * embed + (b.vocab if b.head_bias else 0)
    if not b.tied:
        b.add("lm_head", head)
    v_head_dim = b.v_head_dim or b.head_dim
    kv_width = b.kv_width or (b.kv_heads * b.head_dim, b.kv_heads * v_head_dim)
    return Arch(
        model_type=model_type,
        layers=b.layers,
        hidden=b.hidden,
        heads=b.heads,
        kv_heads=b.kv_heads,
        head_dim=b.head_dim,
        v_head_dim=v_head_dim,
        vocab=b.vocab,
        tied=b.tied,
        max_positions=_max_positions(b.c),
        params=Params(**b.counts),
        head_params=head,
        layer_types=tuple(b.layer_types or [FULL] * b.layers),
        window=b.window,
        kv_width=kv_width,
        state=b.state,
        experts=b.experts,
        notes=tuple(b.notes),
    )


def _max_positions(c: _Config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = c.get(key)
        if type(value) is int and value > 0:
            return value
    return None
