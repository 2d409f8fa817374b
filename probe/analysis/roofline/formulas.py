"""The write-ups' roofline, computed from any decoder config: bytes a decode step must move, and what follows.

The model (Part 1, "The floor every step sits on"; Part 2, "Where a decode step actually goes"): a decode
step reads every weight once plus the KV cache in full, so it takes at least traffic / bandwidth; the host
spends a floor issuing the step's kernels; the step takes the larger of the two, since the CPU runs ahead.

Conventions: bytes are bytes (GB = 1e9, GiB = 2**30), times are ms unless the name says otherwise, token
counts are per sequence unless a `batch` enters. Nothing here reads weights or touches a GPU, except
probe.capture.machine. Not modelled: sliding-window attention (a step reads all C positions) and
mixture-of-experts layers (families whose layout is unknown are refused, not guessed).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from engines.configs import config_from_dict, max_positions
from probe.analysis.files import model_config
from probe.errors import ProbeError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # the dtypes engines.models.DTYPES can build

ATTENTION = ("q", "k", "v", "o")
GATED_MLP = ("gate", "up", "down")


@dataclass(frozen=True)
class _Layout:
    """What a family's config keys leave unsaid: the layer's shape as its modeling_*.py builds it."""

    gated_mlp: bool = True  # gate, up and down projections (SwiGLU); False: up and down only (GPT-2)
    norm_bias: bool = False  # LayerNorm has weight and bias; RMSNorm has a weight only
    qk_norm: bool = False  # an RMSNorm over head_dim on q and on k (Qwen3)
    learned_positions: bool = False  # a max_positions x hidden table (GPT-2); rotary families have none
    biases: tuple[str, ...] | None = None  # fixed by the architecture; None: read attention_bias / mlp_bias


LAYOUTS = {
    "llama": _Layout(),
    "gemma": _Layout(),
    "qwen3": _Layout(qk_norm=True),
    "mistral": _Layout(biases=()),
    "phi3": _Layout(biases=()),  # fused qkv_proj and gate_up_proj: the same counts, no biases
    "qwen2": _Layout(biases=("q", "k", "v")),  # Qwen2Attention: bias on q, k, v; none on o or the MLP
    "gpt2": _Layout(gated_mlp=False, norm_bias=True, learned_positions=True, biases=ATTENTION + ("up", "down")),
}


def _first(cfg, *keys: str, required: bool = True) -> int | None:
    """The first of `keys` the config sets (standard name first, then GPT-2 style aliases)."""
    for key in keys:
        value = getattr(cfg, key, None)
        if value is not None:
            return int(value)
    if required:
        raise ProbeError(f"config has no {' / '.join(keys)}")
    return None


@dataclass(frozen=True)
class Arch:
    """The shapes a byte count needs, read from an HF decoder config."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # the LM head is the input embedding matrix
    biases: tuple[str, ...]  # projections with a bias: q k v o (attention), gate up down (MLP)
    max_positions: int | None
    gated_mlp: bool = True
    norm_bias: bool = False
    qk_norm: bool = False
    learned_positions: bool = False

    @classmethod
    def from_config(cls, cfg) -> Arch:
        """From a transformers config, or a config.json's dict (filled in with its family's defaults)."""
        if isinstance(cfg, Mapping):
            cfg = config_from_dict(dict(cfg))
        model_type = getattr(cfg, "model_type", None)
        if model_type not in LAYOUTS:
            raise ProbeError(
                f"roofline knows the layer layout of {', '.join(sorted(LAYOUTS))}; not of model_type {model_type!r}"
            )
        layout = LAYOUTS[model_type]
        hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
        heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
        if layout.biases is not None:
            biases = layout.biases
        else:
            biases = (ATTENTION if getattr(cfg, "attention_bias", False) else ()) + (
                GATED_MLP if getattr(cfg, "mlp_bias", False) else ()
            )
        arch = cls(
            model_type=model_type,
            layers=_first(cfg, "num_hidden_layers", "n_layer", "num_layers"),
            hidden=hidden,
            heads=heads,
            kv_heads=_first(cfg, "num_key_value_heads", "num_kv_heads", required=False) or heads,
            head_dim=_first(cfg, "head_dim", required=False) or hidden // heads,
            # GPT-2: n_inner None means 4 * n_embd (GPT2MLP)
            intermediate=_first(cfg, "intermediate_size", "n_inner", "ffn_dim", required=False) or 4 * hidden,
            vocab=_first(cfg, "vocab_size", "n_vocab"),
            tied=bool(getattr(cfg, "tie_word_embeddings", False)),
            biases=biases,
            max_positions=max_positions(cfg),
            gated_mlp=layout.gated_mlp,
            norm_bias=layout.norm_bias,
            qk_norm=layout.qk_norm,
            learned_positions=layout.learned_positions,
        )
        arch._validate()
        return arch

    def _validate(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            if getattr(self, name) < 1:
                raise ProbeError(f"config: {name} must be positive, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ProbeError(f"config: {self.heads} attention heads do not split into {self.kv_heads} KV heads")
        if self.learned_positions and not self.max_positions:
            raise ProbeError("config: learned position embeddings need n_positions / max_position_embeddings")


def arch_for(spec: str) -> Arch:
    """The Arch of a preset name, a config.json or a model folder (probe.analysis.files.model_config reads it)."""
    return Arch.from_config(model_config(spec))


# ---- counts -------------------------------------------------------------------------------------------


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ProbeError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def _bias(arch: Arch, projection: str, width: int) -> int:
    return width if projection in arch.biases else 0


def attention_params(arch: Arch) -> int:
    h, q, kv = arch.hidden, arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    weights = h * q + 2 * h * kv + q * h  # q, k, v, o
    biases = _bias(arch, "q", q) + _bias(arch, "k", kv) + _bias(arch, "v", kv) + _bias(arch, "o", h)
    return weights + biases + (2 * arch.head_dim if arch.qk_norm else 0)


def mlp_params(arch: Arch) -> int:
    h, i = arch.hidden, arch.intermediate
    matrices = 3 if arch.gated_mlp else 2
    return matrices * h * i + _bias(arch, "gate", i) + _bias(arch, "up", i) + _bias(arch, "down", h)


def norm_params(arch: Arch) -> int:
    return arch.hidden * (2 if arch.norm_bias else 1)


def layer_params(arch: Arch) -> int:
    return attention_params(arch) + mlp_params(arch) + 2 * norm_params(arch)


def params(arch: Arch) -> int:
    """Parameters the model has; a tied embedding counts once (as `sum(p.numel())` counts it)."""
    embeddings = arch.vocab * arch.hidden * (1 if arch.tied else 2)
    positions = arch.max_positions * arch.hidden if arch.learned_positions else 0
    return arch.layers * layer_params(arch) + norm_params(arch) + embeddings + positions


def weights_bytes(arch: Arch, dtype: str) -> int:
    """Bytes one forward pass reads for weights: every layer, the final norm and the LM head matrix.

    The LM head matmul reads its whole vocab x hidden matrix, tied or not, so a tied matrix is read in full,
    once. Tables a pass only gathers from are left out: an untied input embedding and GPT-2's position
    table give B rows a step, not the table (for the 1.5B preset that is 3 KiB against 3.09 GB).
    """
    streamed = arch.layers * layer_params(arch) + norm_params(arch) + arch.vocab * arch.hidden
    return streamed * dtype_bytes(dtype)


def resident_bytes(arch: Arch, dtype: str) -> int:
    """Bytes the weights occupy in memory (Part 1's '2.88 GiB of weights')."""
    return params(arch) * dtype_bytes(dtype)


def kv_bytes_per_token(arch: Arch, dtype: str) -> int:
    """Cache bytes per position per sequence: a key and a value of kv_heads x head_dim in every layer."""
    return 2 * arch.layers * arch.kv_heads * arch.head_dim * dtype_bytes(dtype)


def cache_bytes(arch: Arch, dtype: str, positions: int, batch: int = 1) -> int:
    return batch * positions * kv_bytes_per_token(arch, dtype)


@dataclass(frozen=True)
class TokenForwards:
    """Token forwards (one token through the model once) to generate L tokens after a P-token prompt."""

    naive: int  # no cache: step i feeds all P + i tokens, so sum over i < L of (P + i) = L*P + L(L-1)/2
    cached: int  # the prompt once, then one token a step: P + L (the write-ups' count)
    recompute_ratio: float  # naive / cached


def token_forwards(prompt: int, new_tokens: int) -> TokenForwards:
    naive = new_tokens * prompt + new_tokens * (new_tokens - 1) // 2
    cached = prompt + new_tokens
    return TokenForwards(naive, cached, naive / cached)


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of `batch` sequences, each attending over `context` cached positions."""

    context: int
    batch: int
    weight_bytes: int
    kv_read_bytes: int
    traffic_bytes: int
    traffic_ms: float  # traffic / bandwidth: no step can be faster
    kv_read_ms: float
    ceiling_tok_s: float  # batch tokens per traffic_ms: the rate bandwidth alone allows


def decode_step(arch: Arch, dtype: str, context: int, batch: int, bandwidth_bytes_s: float) -> DecodeStep:
    weight = weights_bytes(arch, dtype)
    kv = cache_bytes(arch, dtype, context, batch)
    traffic_ms = (weight + kv) / bandwidth_bytes_s * 1e3
    return DecodeStep(
        context=context,
        batch=batch,
        weight_bytes=weight,
        kv_read_bytes=kv,
        traffic_bytes=weight + kv,
        traffic_ms=traffic_ms,
        kv_read_ms=kv / bandwidth_bytes_s * 1e3,
        ceiling_tok_s=batch * 1e3 / traffic_ms,
    )


@dataclass(frozen=True)
class BatchLimit:
    """The largest batch whose weights plus cache reads still fit one step budget at this bandwidth."""

    step_ms: float
    sequence_tokens: int  # cached positions each sequence holds
    step_bytes: float  # what the bandwidth moves in step_ms
    cache_budget_bytes: float  # step_bytes less the weights, read once whatever the batch
    max_cached_positions: int
    max_batch: int


def batch_limit(arch: Arch, dtype: str, step_ms: float, sequence_tokens: int, bandwidth_bytes_s: float) -> BatchLimit:
    step_bytes = bandwidth_bytes_s * step_ms / 1e3
    budget = step_bytes - weights_bytes(arch, dtype)
    positions = max(0, math.floor(budget / kv_bytes_per_token(arch, dtype)))
    return BatchLimit(
        step_ms=step_ms,
        sequence_tokens=sequence_tokens,
        step_bytes=step_bytes,
        cache_budget_bytes=budget,
        max_cached_positions=positions,
        max_batch=positions // sequence_tokens,
    )


def predict_step_ms(
    arch: Arch, dtype: str, context: int, batch: int, bandwidth_bytes_s: float, floor_ms: float
) -> tuple[float, str]:
    """The write-ups' step model: max(host floor, traffic / bandwidth), and which term binds.

    Returns (predicted_ms, "host") when the floor is at least the traffic time (a tie goes to the host,
    since the GPU then waits on it), else (traffic_ms, "bandwidth").
    """
    traffic_ms = decode_step(arch, dtype, context, batch, bandwidth_bytes_s).traffic_ms
    return (floor_ms, "host") if floor_ms >= traffic_ms else (traffic_ms, "bandwidth")


# ---- the report ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    model: str
    dtype: str
    arch: Arch
    prompt: int
    new_tokens: int
    batch: int
    context: int
    bandwidth_bytes_s: float
    bandwidth_source: str
    params: int
    weights_bytes: int  # read by one pass (see weights_bytes)
    resident_bytes: int  # held in memory
    kv_bytes_per_token: int
    cache_bytes: int  # B * (P + L) * kv_bytes_per_token
    naive_token_forwards: int
    cached_token_forwards: int
    recompute_ratio: float
    decode_step: DecodeStep
    batch_limit: BatchLimit

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # tuples become lists


def roofline(
    arch: Arch,
    dtype: str,
    *,
    prompt: int,
    new_tokens: int,
    batch: int,
    context: int | None,
    bandwidth_bytes_s: float,
    bandwidth_source: str,
    step_ms: float,
    model: str = "",
) -> Roofline:
    """Every figure for one configuration; `context` defaults to P + L, the cache in full."""
    context = prompt + new_tokens if context is None else context
    forwards = token_forwards(prompt, new_tokens)
    return Roofline(
        model=model,
        dtype=dtype,
        arch=arch,
        prompt=prompt,
        new_tokens=new_tokens,
        batch=batch,
        context=context,
        bandwidth_bytes_s=bandwidth_bytes_s,
        bandwidth_source=bandwidth_source,
        params=params(arch),
        weights_bytes=weights_bytes(arch, dtype),
        resident_bytes=resident_bytes(arch, dtype),
        kv_bytes_per_token=kv_bytes_per_token(arch, dtype),
        cache_bytes=cache_bytes(arch, dtype, prompt + new_tokens, batch),
        naive_token_forwards=forwards.naive,
        cached_token_forwards=forwards.cached,
        recompute_ratio=forwards.recompute_ratio,
        decode_step=decode_step(arch, dtype, context, batch, bandwidth_bytes_s),
        batch_limit=batch_limit(arch, dtype, step_ms, context, bandwidth_bytes_s),
    )
