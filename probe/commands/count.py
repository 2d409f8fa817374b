"""Aten ops dispatched per forward, for the prefill and for one decode step, per engine and prompt length.

The count is deterministic: the same in every run and every process. On a CPU it is the launch count of
the write-ups (on a GPU they counted 1,123 kernel launches per pass; `probe analyze` counts those from a
CUDA trace).
"""

from __future__ import annotations

import argparse
import dataclasses

from probe.commands import print_json
from probe.flags import int_list, str_list
from probe.settings import DTYPE_CHOICES, DTYPE_HELP, MODEL_HELP, BenchConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", type=str_list, default=("naive", "cached"), help="engines (default: naive,cached)")
    p.add_argument("--prompts", type=int_list, default=(16, 256), help="prompt lengths (default: 16,256)")
    p.add_argument("--model", default="auto", help=f"{MODEL_HELP} (default: auto)")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help=f"{DTYPE_HELP} (default: auto)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, ... (default: auto)")
    p.add_argument("--by-op", action="store_true", help="also list the decode step's ops by name")
    p.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    from engines.models import load_model, prompt_ids, resolve_device
    from probe.capture.config import settle, validate
    from probe.capture.count import count_forward_ops
    from probe.render import terminal
    from probe.render.console import stdout

    device = resolve_device(args.device)
    cfg = BenchConfig(
        engines=args.engines,
        prompts=args.prompts,
        new_tokens=2,
        model=args.model,
        dtype=args.dtype,
        device=args.device,
    )
    cfg = settle(cfg, device.type)
    classes = validate(cfg)
    model = load_model(cfg.model, cfg.dtype, str(device))
    counts = [
        count_forward_ops(classes[name](model), prompt_ids(p, 1, model.config.vocab_size).to(device))
        for p in sorted(args.prompts)
        for name in args.engines
    ]
    if args.json:
        print_json([dataclasses.asdict(c) for c in counts])
        return 0
    console = stdout()
    console.print(terminal.count_table(counts, f"aten ops per forward: {cfg.model} {cfg.dtype} on {device}"))
    if args.by_op:
        for c in counts:
            console.print(
                f"{c.engine} p{c.prompt_tokens} decode: "
                + ", ".join(f"{k.removeprefix('aten::')} {v}" for k, v in c.decode_by_op.items())
            )
    return 0
