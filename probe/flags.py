"""CLI flags generated from typed config dataclasses, so a default lives in one place: the field."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import types
import typing
from dataclasses import field

from probe.counts import MAX_COUNT, count
from probe.errors import ProbeError
from probe.here import shown


def _list_of(kind: type, what: str):
    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",")]
        if not text.strip() or any(not t for t in items):
            raise argparse.ArgumentTypeError(f"malformed {what} list {text!r}: use comma-separated values")
        try:
            values = tuple(kind(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"malformed {what} list {text!r}: {items} are not all {kind.__name__}s"
            ) from None
        return values

    return parse


int_list = _list_of(int, "integer")
str_list = _list_of(str, "name")


def count_flag(least: int):
    """An argparse type: a count (probe.counts: ASCII digits, at most MAX_COUNT) of at least `least`."""

    def parse(text: str) -> int:
        value = count(text.strip())
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from {least} to {MAX_COUNT:,}")
        return value

    return parse


def knob(default, help: str, parse=None, choices=None, resumable: bool = False):
    """A config field with its CLI help; `parse` turns the flag's text into the field's value. `resumable`: a
    sweep resumed with --resume may change it (probe.capture.sweep.check_resume)."""
    return field(default=default, metadata={"help": help, "parse": parse, "choices": choices, "resumable": resumable})


def _base_type(tp):
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def add_arguments(
    parser: argparse.ArgumentParser,
    cls,
    *,
    overrides_only: bool = False,
    skip: tuple[str, ...] = (),
    defaults: dict | None = None,
) -> None:
    """Add one flag per field of dataclass `cls`. With `overrides_only`, absent flags stay absent. `defaults`: the
    values the command itself uses where a flag is absent (what it gives from_args, or text saying what it does),
    shown in the help instead of the field's. Each flag's help states its default once: "auto" as what it is on this
    machine, and not at all where the help text already says it or there is none (None, an empty list)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        meta, tp = f.metadata, _base_type(hints[f.name])
        default = argparse.SUPPRESS if overrides_only else f.default
        help_text = meta.get("help", "")
        text = shown(f.name, (defaults or {}).get(f.name, f.default))
        if text is not None and "(default" not in help_text:
            help_text += f" (default: {text})"
        if tp is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            parser.add_argument(
                flag, type=meta.get("parse") or tp, default=default, help=help_text, choices=meta.get("choices")
            )


def from_args(cls, ns: argparse.Namespace, **base):
    """Build `cls` from parsed flags; `base` gives defaults that flags override."""
    values = dict(base)
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            values[f.name] = getattr(ns, f.name)
    return cls(**values)


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """Where the cells run, and what to do with an --out folder that already holds results (bench and run)."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: every cell in this process; ray: a cell per GPU (or per node on CPUs) of a Ray cluster",
    )
    p.add_argument("--address", help="--executor ray: the cluster to join (default: start a local Ray instance)")
    p.add_argument("--resume", action="store_true", help="keep the cells --out already holds and run the others")
    p.add_argument("--force", action="store_true", help="clear probe's own files from --out before the sweep")


def check_address(address: str | None, executor: str) -> None:
    """--address, before Ray is imported: only with --executor ray, and its host (`host:port`, `ray://host:port`,
    `auto`) one a resolver takes: an IP address, or labels of 1 to 63 characters that IDNA can encode."""
    if not address:
        return
    if executor != "ray":
        raise ProbeError("--address names a Ray cluster: use it with --executor ray")
    rest = address.partition("://")[2] or address
    host = (rest.rpartition(":")[0] if ":" in rest else rest).strip("[]")
    try:
        ipaddress.ip_address(host.split("%")[0])
        return
    except ValueError:
        pass
    try:
        host.encode("idna")
    except UnicodeError as e:
        reason = str(e).rpartition(": ")[2].rstrip(")")  # "encoding with 'idna' codec failed (UnicodeError: why)"
        raise ProbeError(
            f"--address {address!r}: host {host!r} is not a name a resolver takes: {reason} "
            "(a name is labels of 1 to 63 characters that IDNA can encode)"
        ) from None


def check_sweep_arguments(args: argparse.Namespace) -> None:
    check_address(args.address, args.executor)
    if (args.resume or args.force) and args.out is None:
        raise ProbeError("--resume and --force act on an --out folder")
