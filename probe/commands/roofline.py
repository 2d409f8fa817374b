"""Roofline of a decode step, from a model config alone: the bytes a step must move (weights once, the KV cache it
attends to), the FLOPs it must do, how long the device's bandwidth and peak need for them, whether the weights and
cache fit its memory, the token forwards a cache saves, and the largest batch memory, compute and a step budget
allow. Parameters are counted by the torch-free formulas of engines/arch.py, or, for a family without one (or
with `--count meta`), on the meta device when torch is importable. `--check` recomputes every number the
write-ups derive (probe/analysis/roofline/published.json) and exits 1 if any has drifted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from engines.arch import ArchError, from_raw
from engines.configs import ModelError
from probe.analysis.roofline.devices import DEVICES, device
from probe.commands import print_json
from probe.errors import ProbeError
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args, knob

HELP = "bytes a decode step moves, its bandwidth floor and batch limit; --check the write-ups' numbers"

DEFAULT_DEVICE = "A10"  # the write-ups' card
MEMORY_SHARE = "90%"  # formulas.MEMORY_FRACTION, as printed (imported with the formulas, not at --help)
COPY_BYTES, COPY_REPEATS = 256 * 2**20, 10  # --measure: far past any CPU's last-level cache or a GPU's L2


@dataclass(frozen=True)
class RooflineConfig:
    model: str = knob("qwen2.5-1.5b", "preset name, config.json or local model folder")
    dtype: str = knob("float16", "weights and KV cache dtype", choices=("float32", "float16", "bfloat16"))
    prompt: int = knob(16, "prompt tokens, P")
    new_tokens: int = knob(256, "generated tokens, L")
    batch: int = knob(1, "sequences per step, B")
    context: int | None = knob(None, "positions one decode step reads, C (default: P+L, the cache in full)")
    device: str | None = knob(
        None,
        f"bandwidth from the device table: {', '.join(d.name for d in DEVICES)} "
        f"(default: {DEFAULT_DEVICE}, the write-ups' card)",
    )
    bandwidth: float | None = knob(None, "memory bandwidth in bytes/s, e.g. 600e9 (instead of --device)")
    measure: bool = knob(False, "measure this machine's copy bandwidth, CUDA when available (instead of --device)")
    step_ms: float | None = knob(None, "a measured step, ms: the batch's traffic must fit in it (default: no budget)")
    count: str = knob(
        "auto",
        "how parameters are counted: formula (torch-free), meta (a meta-device build, needs torch), "
        "auto (formula when the family has one, else meta)",
        choices=("auto", "formula", "meta"),
    )

    def __post_init__(self):
        for name in ("prompt", "new_tokens", "batch", "context"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ProbeError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        for name in ("bandwidth", "step_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ProbeError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
        chosen = [
            f
            for f, on in (
                ("--device", self.device is not None),
                ("--bandwidth", self.bandwidth is not None),
                ("--measure", self.measure),
            )
            if on
        ]
        if len(chosen) > 1:
            raise ProbeError(f"{' and '.join(chosen)} each set the bandwidth: give one")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, RooflineConfig)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--check",
        action="store_true",
        help="recompute every number the write-ups derive; exit 1 on drift (other flags are ignored)",
    )
    p.add_argument(
        "--published",
        type=Path,
        default=None,
        help="the published values --check reads (default: probe/analysis/roofline/published.json)",
    )


def bandwidth_of(cfg: RooflineConfig) -> tuple[float, str]:
    """The bandwidth in bytes/s and where it comes from."""
    if cfg.bandwidth is not None:
        return cfg.bandwidth, "--bandwidth"
    if cfg.measure:
        from engines.models import resolve_device
        from probe.capture.env import device_name
        from probe.capture.machine import measure_copy_bandwidth

        dev = resolve_device("auto")
        measured = measure_copy_bandwidth(str(dev), COPY_BYTES, COPY_REPEATS)
        return measured, (
            f"measured on {device_name(dev)}: copy of {COPY_BYTES // 2**20} MiB, bytes read + written,"
            f" median of {COPY_REPEATS}"
        )
    entry = device(cfg.device or DEFAULT_DEVICE)
    return entry.memory_bandwidth_bytes_s, f"{entry.name}: {entry.source}"


def arch_of(spec: str, count: str):
    """(Arch, how it was counted): the torch-free formula, or a meta-device build (torch, on demand)."""
    from probe.analysis.records.files import model_raw

    try:
        raw = model_raw(spec)
    except ModelError as e:
        raise ProbeError(str(e)) from None
    if count != "meta":
        try:
            return from_raw(raw), f"formula (engines/arch.py, {raw['model_type']})"
        except ArchError as e:
            if count == "formula" or importlib.util.find_spec("torch") is None:
                raise ProbeError(f"{e}" + ("" if count == "formula" else "; torch is not importable here")) from None
    if importlib.util.find_spec("torch") is None:
        raise ProbeError("--count meta builds the model on the meta device, which needs torch")
    from engines.meta import meta_arch

    try:
        return meta_arch(raw), "meta-device build"
    except ModelError as e:
        raise ProbeError(str(e)) from None


def main(args: argparse.Namespace) -> int:
    if args.check:
        return check(args.published, args.json)
    from probe.analysis.roofline.formulas import roofline
    from probe.render import console as render

    cfg = from_args(RooflineConfig, args)
    arch, counted_by = arch_of(cfg.model, cfg.count)
    longest = max(cfg.prompt + cfg.new_tokens, cfg.context or 0)
    if arch.max_positions is not None and longest > arch.max_positions:
        raise ProbeError(f"{longest} positions exceed the model's maximum of {arch.max_positions}")
    bandwidth, source = bandwidth_of(cfg)
    entry = device(cfg.device or DEFAULT_DEVICE) if cfg.bandwidth is None and not cfg.measure else None
    report = roofline(
        arch,
        cfg.dtype,
        prompt=cfg.prompt,
        new_tokens=cfg.new_tokens,
        batch=cfg.batch,
        context=cfg.context,
        bandwidth_bytes_s=bandwidth,
        bandwidth_source=source,
        step_ms=cfg.step_ms,
        model=cfg.model,
        counted_by=counted_by,
        device=entry.name if entry else None,
        peak_flops_s=entry.flops_s(cfg.dtype) if entry else None,
        memory_bytes=entry.memory_bytes if entry else None,
    )
    if args.json:
        print_json(report.to_json())
    else:
        render.stdout().print(table(report))
        if report.fit and not report.fit["fits"]:
            print(fit_line(report), file=sys.stderr)
    return 0


def fit_line(r) -> str:
    f = r.fit
    verdict = "fits" if f["fits"] else "does not fit"
    return (
        f"{r.device} memory: {verdict}: weights {r.resident_bytes / 1e9:.2f} GB + KV cache "
        f"{(f['need_bytes'] - r.resident_bytes) / 1e9:.2f} GB (B={r.batch} x {f['positions']:,} positions) = "
        f"{f['need_bytes'] / 1e9:.2f} GB {'<=' if f['fits'] else '>'} {f['usable_bytes'] / 1e9:.2f} GB usable "
        f"({MEMORY_SHARE} of {r.memory_bytes / 1e9:.2f} GB = {r.memory_bytes / 2**30:.0f} GiB)"
    )


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n:,.0f} B ({n / scale:.2f} {unit})"
    return f"{n:,.0f} B"


def _flops(n: float) -> str:
    return f"{n:,.0f} ({n / 1e9:.2f} GFLOP)"


def table(r):
    """The report as a rich table: quantity, value, and how it is counted."""
    t = _empty_table(r)
    rows = _model_rows(r) + _step_rows(r)
    if r.fit is not None:
        rows.append(("memory", "fits" if r.fit["fits"] else "DOES NOT FIT", fit_line(r)))
    rows.append(_batch_limit_row(r.batch_limit))
    for row in rows:
        t.add_row(*row)
    for note in r.step_cost.notes:
        t.add_row("note", "", note)
    return t


def _empty_table(r):
    """The table's frame: the configuration in its title, the bandwidth and its source in its caption."""
    from rich.table import Table

    t = Table(
        title=f"roofline: {r.model} {r.dtype}, P={r.prompt} L={r.new_tokens} B={r.batch} C={r.context}",
        title_justify="left",
        caption_justify="left",
        caption=f"bandwidth {r.bandwidth_bytes_s / 1e9:,.1f} GB/s from {r.bandwidth_source}",
    )
    for col in ("quantity", "value", "how"):
        t.add_column(col, justify="right" if col == "value" else "left")
    return t


def _model_rows(r) -> list[tuple[str, str, str]]:
    """The model's rows: its parameters, the weights and KV cache it holds, and the token forwards a cache saves."""
    a = r.arch
    kinds = ", ".join(f"{k} {v:,}" for k, v in r.params_by_kind.items() if v)
    window = f", window {a.window} on {a.sliding_layers} layers" if a.sliding_layers else ""
    return [
        (
            "parameters",
            f"{r.params:,}",
            f"{a.model_type}: {a.layers} layers, hidden {a.hidden}, {a.heads}/{a.kv_heads} heads x {a.head_dim}, "
            f"tied={a.tied}{window}; counted by {r.counted_by}",
        ),
        ("  by kind", "", kinds),
        ("weights read per pass", _bytes(r.weights_bytes), "dense weights + every expert; gathered tables left out"),
        ("weights resident", f"{_bytes(r.resident_bytes)} = {r.resident_bytes / 2**30:.2f} GiB", "parameters x dtype"),
        (
            "KV cache per position",
            f"{r.kv_bytes_per_token:,} B ({r.kv_bytes_per_token / 2**10:.1f} KiB)",
            f"{a.attention_layers} attention layers x (keys {a.kv_width[0]} + values {a.kv_width[1]}) x dtype",
        ),
        ("KV cache", f"{_bytes(r.cache_bytes)} = {r.cache_bytes / 2**20:.1f} MiB", "B x (P+L) positions; windows cap"),
        ("token forwards, no cache", f"{r.naive_token_forwards:,}", "per sequence: sum over i < L of (P + i)"),
        ("token forwards, cached", f"{r.cached_token_forwards:,}", "per sequence: P + L"),
        ("recompute ratio", f"{r.recompute_ratio:,.1f}x", f"{100 * (1 - 1 / r.recompute_ratio):.1f}% recomputed"),
    ]


def _step_rows(r) -> list[tuple[str, str, str]]:
    """The decode step's rows: the bytes it moves and how long they take, its FLOPs and compute time at the
    device's peak, its ceiling in tokens a second, and a MoE model's weight bytes at either end of the batch."""
    step, cost = r.decode_step, r.step_cost
    rows = [
        (f"decode step at C={step.context}: weights", _bytes(step.weight_bytes), ""),
        ("  KV cache read", _bytes(step.kv_read_bytes), "B x C positions (at most the window on sliding layers)"),
        ("  traffic", _bytes(step.traffic_bytes), "reads (writes add " + _bytes(cost.kv_write_bytes) + ")"),
        ("  traffic time", f"{step.traffic_ms:.3f} ms", f"of which KV cache {step.kv_read_ms:.3f} ms"),
        ("  FLOPs", _flops(cost.flops), f"linear {cost.linear_flops:,} + attention {cost.attention_flops:,}"),
    ]
    if r.compute_ms is not None:
        rows.append(
            (
                "  compute time",
                f"{r.compute_ms:.3f} ms",
                f"at {r.peak_flops_s / 1e12:,.1f} TFLOP/s ({r.dtype}, dense, {r.device}); binds: {r.binding_term}",
            )
        )
    rows.append(("  ceiling", f"{step.ceiling_tok_s:,.1f} tok/s", "B tokens per traffic time"))
    if r.expert_bounds:
        b = r.expert_bounds
        rows += [
            ("  MoE weights at B=1", _bytes(b["batch_1_weight_bytes"]), "dense + top_k experts a layer"),
            ("  MoE weights, every expert", _bytes(b["all_experts_weight_bytes"]), "a batch that touches them all"),
        ]
    return rows


def _batch_limit_row(limit) -> tuple[str, str, str]:
    """The batch limit's row: the largest batch, each bound known beside it and the one that binds."""
    bounds = [
        (name, value)
        for name, value in (
            ("memory", limit.memory_max_batch),
            ("compute-bound from", limit.compute_bound_batch),
            (f"traffic within {limit.step_ms:g} ms" if limit.step_ms else "", limit.traffic_max_batch),
        )
        if value is not None
    ]
    return (
        f"batch limit at C={limit.sequence_tokens:,}",
        f"{limit.max_batch:,}" if limit.max_batch is not None else "-",
        "; ".join(f"{n} {v:,}" for n, v in bounds) + (f"; binds: {limit.binding}" if limit.binding else "")
        or "no device memory, peak or step budget known",
    )


def check(path: Path | None, as_json: bool) -> int:
    from probe.analysis.roofline.published import check_published
    from probe.render import console as render

    checks = check_published(path)
    failed = [c for c in checks if not c.passed]
    if as_json:
        print(
            json.dumps(
                {"passed": not failed, "checks": [dataclasses.asdict(c) | {"passed": c.passed} for c in checks]},
                indent=1,
                ensure_ascii=False,
            )
        )
    else:
        render.stdout().print(check_table(checks))
        for c in checks:
            if c.why:
                print(f"{c.id} ({c.status}): published {_num(c.published)}, formulas give {_num(c.shown)}. {c.why}")
        known = sum(c.status == "known" for c in checks)
        print(
            f"{len(checks)} published values: {len(checks) - known - len(failed)} reproduce, {known} are "
            f"recorded discrepancies that still compute as recorded, {len(failed)} drifted"
            + (f": {', '.join(c.id for c in failed)}" if failed else "")
        )
    return 1 if failed else 0


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.4f}".rstrip("0")


def check_table(checks):
    from rich.table import Table

    t = Table(title="published values, recomputed", title_justify="left")
    for col in ("value", "published", "computed", "unit", "status", "from"):
        t.add_column(col, justify="right" if col in ("published", "computed") else "left")
    style = {"ok": "green", "known": "yellow", "drift": "bold red", "stale": "bold red"}
    for c in checks:
        t.add_row(c.id, _num(c.published), _num(c.computed), c.unit, f"[{style[c.status]}]{c.status}[/]", c.file)
    return t
