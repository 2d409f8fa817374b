"""The models probe builds and the devices it knows: the presets (real architectures, seeded random weights: nothing
is downloaded), the decoder families each engine serves (each engine's own refusal asked of every family's default
config), the GPUs of the roofline's device table, and where a config for any other model comes from."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from engines.configs import presets
from probe.analysis.roofline.devices import DEVICES
from probe.commands import print_json

if TYPE_CHECKING:
    from rich.table import Table

ANY_CONFIG = (
    "any other model: its config.json (on the Hugging Face Hub, the model page's Files tab; no weights needed) as "
    "--model path/to/config.json, or a local model folder with its weights as --model path/to/folder; "
    "docs/models.md lists what each family needs"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of the tables")


def main(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from engines.served import refusals
    from probe.render.console import stdout

    refused = refusals()
    if args.json:
        print_json(
            {
                "presets": {name: preset_json(name) for name in presets()},
                "engines": {e: {"serves": served(why), "refuses": why} for e, why in refused.items()},
                "devices": [d.name for d in DEVICES],
                "other_models": ANY_CONFIG,
            }
        )
        return 0
    console = stdout()
    console.print(presets_table())
    console.print(engines_table(refused))
    console.print(f"[bold]devices in the roofline's table[/] (--device NAME): {', '.join(d.name for d in DEVICES)}")
    console.print(escape(ANY_CONFIG))
    return 0


def preset_json(name: str) -> dict:
    from probe.analysis.roofline.formulas import arch_for

    a = arch_for(name)
    return {"family": a.model_type, "layers": a.layers, "hidden": a.hidden, "parameters": a.params.total}


def served(why: dict[str, str]) -> list[str]:
    from engines.served import families

    return [f for f in families() if f not in why]


def presets_table() -> Table:
    from rich.table import Table

    table = Table(title="presets (--model NAME): real architectures, seeded random weights", title_justify="left")
    for col in ("preset", "family", "layers", "hidden", "parameters"):
        table.add_column(col, justify="left" if col in ("preset", "family") else "right")
    for name in presets():
        p = preset_json(name)
        table.add_row(name, p["family"], str(p["layers"]), str(p["hidden"]), f"{p['parameters'] / 1e6:,.1f} M")
    return table


def engines_table(refused: dict[str, dict[str, str]]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    from engines.served import families

    table = Table(title="the decoder families each engine serves (--engines NAME)", title_justify="left")
    for col in ("engine", "serves", "refuses, and why"):
        table.add_column(col)
    for engine, why in refused.items():
        serves = "every family below" if not why else f"all but {', '.join(why)}"
        table.add_row(engine, serves, escape("; ".join(f"{f}: {w}" for f, w in why.items())) or "-")
    table.caption = f"families: {', '.join(families())}"
    table.caption_justify = "left"
    return table
