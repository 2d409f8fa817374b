"""The write-ups' published numbers, recomputed through the formulas so they cannot drift silently.

published.json (beside this module) holds each number the write-ups derive, the sentence it appears in, its
unit and printed precision, and the inputs the derivation uses. `check_published` recomputes every one. A value
the write-ups' own rounding makes unreproducible carries a `discrepancy`: what the formulas give instead
(`reproduces_as`) and why; it passes while the formulas still give exactly that.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Literal

from probe.analysis.roofline.devices import device
from probe.analysis.roofline.formulas import (
    Arch,
    BatchLimit,
    DecodeStep,
    arch_for,
    batch_limit,
    cache_bytes,
    decode_step,
    kv_bytes_per_token,
    params,
    predict_step_ms,
    resident_bytes,
    token_forwards,
    weights_bytes,
)
from probe.errors import ProbeError

PUBLISHED = Path(__file__).parent / "published.json"

UNITS = {
    "": 1,
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "MB": 1e6,
    "GB": 1e9,
    "GB/s": 1e9,
    "ms": 1,
    "µs": 1,
    "tok/s": 1,
    "x": 1,
    "%": 0.01,
}


def _step(arch, dtype, context, batch, bandwidth_bytes_s) -> DecodeStep:
    return decode_step(arch, dtype, context, batch, bandwidth_bytes_s)


def _predicted_ms(arch, dtype, context, batch, bandwidth_bytes_s, floor_ms) -> float:
    return predict_step_ms(arch, dtype, context, batch, bandwidth_bytes_s, floor_ms)[0]


def _naive(prompt, new_tokens) -> int:
    return token_forwards(prompt, new_tokens).naive


def _limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s) -> BatchLimit:
    return batch_limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s)


# Each quantity in base units (bytes, ms, µs, counts, fractions). Parameter names are the input names. None: the
# quantity is not defined for these inputs (a batch limit's step budget without a step time).
QUANTITIES: dict[str, Callable[..., float | None]] = {
    "params": lambda arch: params(arch),
    "weights_bytes": lambda arch, dtype: weights_bytes(arch, dtype),
    "resident_bytes": lambda arch, dtype: resident_bytes(arch, dtype),
    "kv_bytes_per_token": lambda arch, dtype: kv_bytes_per_token(arch, dtype),
    "bandwidth_bytes_s": lambda bandwidth_bytes_s: bandwidth_bytes_s,
    "cache_bytes": lambda arch, dtype, prompt, new_tokens, batch: cache_bytes(arch, dtype, prompt + new_tokens, batch),
    "traffic_ms": lambda arch, dtype, context, batch, bandwidth_bytes_s: (
        _step(arch, dtype, context, batch, bandwidth_bytes_s).traffic_ms
    ),
    "ceiling_tok_s": lambda arch, dtype, context, batch, bandwidth_bytes_s: (
        _step(arch, dtype, context, batch, bandwidth_bytes_s).ceiling_tok_s
    ),
    # share of a measured step the traffic fills, and the rest: the GPU idle, waiting on the host
    "traffic_share": lambda arch, dtype, context, batch, bandwidth_bytes_s, step_ms: (
        _step(arch, dtype, context, batch, bandwidth_bytes_s).traffic_ms / step_ms
    ),
    "idle_share": lambda arch, dtype, context, batch, bandwidth_bytes_s, step_ms: (
        1 - _step(arch, dtype, context, batch, bandwidth_bytes_s).traffic_ms / step_ms
    ),
    "throughput_share": lambda arch, dtype, context, batch, bandwidth_bytes_s, tok_s: (
        tok_s / _step(arch, dtype, context, batch, bandwidth_bytes_s).ceiling_tok_s
    ),
    "step_bytes": lambda arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s: (
        _limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s).step_bytes
    ),
    "cache_budget_bytes": lambda arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s: (
        _limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s).cache_budget_bytes
    ),
    "max_cached_positions": lambda arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s: (
        _limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s).max_cached_positions
    ),
    "max_batch": lambda arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s: (
        _limit(arch, dtype, step_ms, sequence_tokens, bandwidth_bytes_s).max_batch
    ),
    "naive_token_forwards": lambda prompt, new_tokens: _naive(prompt, new_tokens),
    # 256·P + 32,640: the prompt term's slope and the generated tokens' constant
    "naive_forwards_per_prompt_token": lambda new_tokens: _naive(1, new_tokens) - _naive(0, new_tokens),
    "naive_forwards_constant": lambda new_tokens: _naive(0, new_tokens),
    "naive_forwards_prompt_term": lambda prompt, new_tokens: _naive(prompt, new_tokens) - _naive(0, new_tokens),
    "prompt_where_prompt_term_wins": lambda new_tokens: (
        _naive(0, new_tokens) / (_naive(1, new_tokens) - _naive(0, new_tokens))
    ),
    "naive_forwards_growth": lambda prompt, versus_prompt, new_tokens: (
        _naive(prompt, new_tokens) / _naive(versus_prompt, new_tokens)
    ),
    "cached_token_forwards": lambda prompt, new_tokens: token_forwards(prompt, new_tokens).cached,
    "recompute_ratio": lambda prompt, new_tokens: token_forwards(prompt, new_tokens).recompute_ratio,
    "recomputed_share": lambda prompt, new_tokens: 1 - 1 / token_forwards(prompt, new_tokens).recompute_ratio,
    # the host side: launches times the cost of issuing one, and that cost from a measured CPU time
    "launch_cost_us": lambda host_ms, launches: host_ms * 1e3 / launches,
    "launches_ms": lambda launches, launch_us: launches * launch_us / 1e3,
    "launches_share": lambda launches, launch_us, step_ms: launches * launch_us / 1e3 / step_ms,
    "above_floor": lambda step_ms, floor_ms: step_ms / floor_ms - 1,
    "above_floor_ms": lambda tok_s, floor_ms: 1e3 / tok_s - floor_ms,
    "predicted_step_ms": _predicted_ms,
    "predicted_tok_s": lambda arch, dtype, context, batch, bandwidth_bytes_s, floor_ms: (
        batch * 1e3 / _predicted_ms(arch, dtype, context, batch, bandwidth_bytes_s, floor_ms)
    ),
    "shortfall": lambda arch, dtype, context, batch, bandwidth_bytes_s, floor_ms, tok_s: (
        1 - tok_s / (batch * 1e3 / _predicted_ms(arch, dtype, context, batch, bandwidth_bytes_s, floor_ms))
    ),
}


Status = Literal["ok", "known", "drift", "stale"]  # known: a recorded discrepancy, still as recorded


@dataclass(frozen=True)
class PublishedCheck:
    id: str
    quantity: str
    published: float
    unit: str
    decimals: int
    computed: float  # full precision, in `unit`
    shown: float  # computed at the published precision
    status: Status
    file: str
    quote: str
    why: str = ""  # the recorded explanation, for "known" and "stale"

    @property
    def passed(self) -> bool:
        return self.status in ("ok", "known")


def rounded(value: float, decimals: int) -> float:
    """`value` as a write-up prints it: half away from zero, `decimals` places (negative: tens, thousands)."""
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def load_published(path: Path | None = None) -> dict:
    path = path or PUBLISHED
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ProbeError(f"cannot read published values {path}: {e}") from None
    for key in ("setup", "measured", "values"):
        if key not in table:
            raise ProbeError(f"published values {path}: no {key!r} section")
    return table


def check_published(path: Path | None = None) -> list[PublishedCheck]:
    """Recompute every published value; see the comment above QUANTITIES."""
    table = load_published(path)
    setup = table["setup"]
    arches: dict[str, Arch] = {}
    checks = []
    for entry in table["values"]:
        inputs = _entry_inputs(entry, setup, table["measured"])
        model = inputs.pop("model")
        arches.setdefault(model, arch_for(model))
        inputs["arch"] = arches[model]
        inputs["bandwidth_bytes_s"] = device(inputs.pop("device")).memory_bandwidth_bytes_s
        checks.append(_check_one(entry, inputs))
    return checks


def _entry_inputs(entry: dict, setup: dict, measured: dict) -> dict:
    """The setup, overridden by the entry's inputs; a string names a measured value."""
    for key in ("id", "quantity", "published", "unit", "decimals", "source"):
        if key not in entry:
            raise ProbeError(f"published value {entry.get('id', entry)!r}: no {key!r}")
    inputs = {k: v for k, v in setup.items() if k != "source"}
    for name, value in entry.get("inputs", {}).items():
        if isinstance(value, str) and name not in ("model", "dtype", "device"):
            if value not in measured:
                raise ProbeError(f"published value {entry['id']!r}: no measured value {value!r}")
            value = measured[value]["value"]
        inputs[name] = value
    if "context" not in inputs and "prompt" in inputs:
        inputs["context"] = inputs["prompt"] + inputs["new_tokens"]  # the cache in full
    return inputs


def _check_one(entry: dict, inputs: dict) -> PublishedCheck:
    name, quantity = entry["id"], entry["quantity"]
    if quantity not in QUANTITIES or entry["unit"] not in UNITS:
        raise ProbeError(f"published value {name!r}: unknown quantity {quantity!r} or unit {entry['unit']!r}")
    fn = QUANTITIES[quantity]
    wanted = inspect.signature(fn).parameters
    missing = [p for p in wanted if p not in inputs]
    given = entry.get("inputs", {})
    feeds_context = "context" in wanted and "context" not in given  # then `prompt` gave the context
    unused = [k for k in given if k not in wanted and not (k == "prompt" and feeds_context)]
    if missing or unused:
        raise ProbeError(
            f"published value {name!r}: {quantity} needs {', '.join(wanted)}; missing {missing}, unused {unused}"
        )
    value = fn(**{p: inputs[p] for p in wanted})
    if value is None:
        raise ProbeError(f"published value {name!r}: {quantity} is not defined for these inputs")
    computed = value / UNITS[entry["unit"]]
    shown = rounded(computed, entry["decimals"])
    known = entry.get("discrepancy")
    status: Status
    if known is None:
        status, why = ("ok" if shown == entry["published"] else "drift"), ""
    else:
        why = known["why"]
        if shown == entry["published"]:
            status = "stale"  # the formulas now give the published value: the recorded discrepancy is wrong
        else:
            status = "known" if shown == known["reproduces_as"] else "drift"
    return PublishedCheck(
        id=name,
        quantity=quantity,
        published=entry["published"],
        unit=entry["unit"],
        decimals=entry["decimals"],
        computed=computed,
        shown=shown,
        status=status,
        file=entry["source"]["file"],
        quote=entry["source"]["quote"],
        why=why,
    )
