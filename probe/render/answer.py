"""`probe analyze`'s first lines: the answer (probe.analysis.diagnosis.answer), before any table.

The median steady step's verdict and its evidence, what to fix first, the roofline beside the step when a model is
known, then one line for the median step of each other kind; and the per-op roofline as a table with the others.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from probe.analysis.diagnosis.answer import Answer
from probe.analysis.diagnosis.verdict import Diagnosis
from probe.text import short

WHAT_IF_SHOWN = 3
OP_ROWS = 10


def answer_lines(a: Answer) -> list[str]:
    """Two to six lines that read as the answer, each figure with its arithmetic, then what to fix first."""
    d = a.diagnosis.median
    if d is None:
        return []
    out = [f"[yellow]caveat:[/] {escape(c)}" for c in d.caveats]
    out.append(f"[bold]{escape(d.headline)}[/]")
    out += [f"  {escape(line)}" for line in d.lines]
    r = a.rooflines.get(_position(a, d))
    if r is not None:
        out.append(f"  roofline ({escape(a.model or '')}, {r.dtype}, {r.device}; tokens from {escape(r.tokens_from)}):")
        out.append(f"    {escape(r.departure)}")
    if d.what_if:
        out.append("  what to fix first:")
        for w in d.what_if[:WHAT_IF_SHOWN]:
            saves = f"saves {w.saving_ms:.3f} ms ({w.saving_pct:.0f}%)"
            out.append(
                f"    {escape(w.change)}: {w.predicted_step_ms:.3f} ms, {saves} = {escape(w.arithmetic)}; "
                f"if {escape(w.assumption)}"
            )
    out += [f"  {escape(line)}" for line in d.withheld]
    for kind, other in a.diagnosis.by_kind.items():
        if other is not d:
            out.append(f"  the median {escape(kind)} step: {escape(other.headline)}")
    mix = a.diagnosis.mix()
    if len(mix) > 1:
        n = sum(k for _, k, _ in mix)
        parts = ", ".join(f"{k} {escape(words)} ({ns / 1e6:,.3f} ms)" for words, k, ns in mix)
        out.append(f"  the {n} steps by verdict, measured time: {parts}")
    out += [f"[yellow]note:[/] {escape(n)}" for n in a.notes]
    return out


def _position(a: Answer, d: Diagnosis) -> int:
    return a.diagnosis.position_of(d)


def op_roofline_table(a: Answer) -> Table | None:
    """The per-op roofline's top rows by GPU time."""
    rows = a.op_roofline[:OP_ROWS]
    if not rows:
        return None
    table = Table(
        title=f"ops by GPU time beside the roofline ({a.device or 'no device: no bound'}; per call, medians of calls)",
        title_justify="left",
        caption=_op_caption(a, rows),
        caption_justify="left",
    )
    for c in ("op", "shapes", "dtype", "calls", "GFLOP", "MB", "GPU ms", "median us", "TFLOP/s", "TB/s", "FLOP/B",
              "bound", "% of roof", "over roof"):  # fmt: skip
        table.add_column(c, justify="left" if c in ("op", "shapes", "dtype", "bound") else "right")
    for o in rows:
        table.add_row(
            escape(short(o.op, 40)),
            escape(short(o.shapes, 40)),
            o.dtype or "-",
            str(o.count),
            _f(o.flops, 1e9, 3),
            _f(o.bytes, 1e6, 2),
            f"{o.kernel_us_total / 1e3:.3f}",
            f"{o.kernel_us_median:.1f}",
            _f(o.tflops_s_median, 1, 1),
            _f(o.tb_s_median, 1, 2),
            _f(o.intensity, 1, 1),
            o.bound or ("not modelled" if o.model is None else "-"),
            _f(o.roof_pct, 1, 0),
            "[bold yellow]yes[/]" if o.over_roof else "-",
        )
    return table


def _op_caption(a: Answer, rows) -> str | None:
    """What the ops hold of the GPU work, and why the first op over its roof can be there."""
    lines = [a.op_coverage.text] if a.op_coverage else []
    over = next((o for o in rows if o.over_roof), None)
    if over is not None:
        lines.append(
            f"over its roof: {short(over.op, 40)}: {over.over_roof_why} (each op's reason: --json, over_roof_why)"
        )
    return escape("\n".join(lines)) if lines else None


def _f(value: float | None, scale: float, digits: int) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"
