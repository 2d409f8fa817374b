"""What mypy's Optional checks found reachable: each case crashed with an AttributeError or TypeError before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from engines.arch import SLIDING
from engines.batched import BatchedEngine
from engines.meta import meta_arch
from probe.analysis.roofline.formulas import arch_for, positions_read, step_cost
from probe.analysis.roofline.published import PUBLISHED, check_published
from probe.errors import ProbeError

CONFIGS = Path(__file__).parent / "data" / "configs"


def test_a_state_family_counted_on_the_meta_device_has_a_step_cost():
    """`probe roofline --count meta` on mamba: meta_arch keeps the linear layers but no State, which the notes read."""
    arch = meta_arch(json.loads((CONFIGS / "mamba.json").read_text()))
    assert arch.state_layers == arch.layers and arch.state is None
    cost = step_cost(arch, "float32", 1, 1, 10)
    assert cost.state_bytes == 0  # state_bytes already read no State as none
    assert any("linear-attention state not modelled" in n for n in cost.notes)
    assert not any(n.startswith("state:") for n in cost.notes)


def test_a_sliding_layer_without_a_window_reads_every_position():
    """No window: every position, as `_attended` (and so the FLOPs) already counts such a layer."""
    arch = dataclasses.replace(arch_for("tiny"), window=None)
    assert positions_read(arch, SLIDING, 100, 1) == 100


def test_a_published_quantity_undefined_for_its_inputs_is_one_line(tmp_path):
    """A batch limit's step budget with no step time is None; it was divided by its unit (a TypeError)."""
    table = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    entry = next(v for v in table["values"] if v["quantity"] == "step_bytes")
    table["values"] = [entry | {"inputs": entry["inputs"] | {"step_ms": None}}]
    path = tmp_path / "published.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(ProbeError, match="step_bytes is not defined for these inputs"):
        check_published(path)


def test_batched_decode_before_any_admit_says_so(tiny):
    with pytest.raises(RuntimeError, match="decode before any prefill or admit"):
        BatchedEngine(tiny).decode(torch.zeros(1, 1, dtype=torch.long))
