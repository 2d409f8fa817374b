"""Markdown: the run report (report.md: tables through pandas, a figure not measured a dash), and probe compare's and
probe history check's reports (a CI comment)."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import pandas as pd

from probe.analysis.diagnosis.predictions import BASELINE_DEPARTED, WhatIfCheck
from probe.analysis.diagnosis.report import Figure, Report
from probe.analysis.records.results import BenchResults
from probe.analysis.regression.compare import COLUMNS, Comparison, row_cells
from probe.render.terminal import SERVING_COLUMNS, contention_text, floor_lines, parity_text, value_text
from probe.text import md_escape

if TYPE_CHECKING:  # a type only: rendering compare's report must not load DuckDB
    from probe.analysis.regression.history import HistoryCheck

CELL_COLUMNS = (
    "engine",
    "prompt_tokens",
    "batch",
    "ttft_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "decode_tok_s",
    "total_ms",
    "peak_mem_bytes",
    "spread_pct",
    "decode_ops",
)


def _markdown(frame: pd.DataFrame, floatfmt: str) -> str:
    """A table for report.md: a figure that was not measured (NaN, None) is a dash, not `nan`."""
    return frame.astype(object).where(frame.notna(), None).to_markdown(index=False, floatfmt=floatfmt, missingval="-")


def _engines(figures: list[Figure]) -> list[str]:
    return list(dict.fromkeys(e for f in figures for e in f.values))


def _cells(results: BenchResults) -> list[str]:
    cells = results.cells_frame()[list(CELL_COLUMNS)].copy()
    cells["decode_ops"] = cells["decode_ops"].astype("Int64")  # a count, or none where it was not measured (static)
    cells["tokens"] = [parity_text(c, markup=False) for c in results.cells]
    if results.contention:  # as the terminal marks them: the other processes' cores, CONTENDED
        cells["other CPU"] = [contention_text(c, markup=False) for c in results.cells]
    serving = results.cells_frame()[["engine", "prompt_tokens", "batch", *(name for _, name in SERVING_COLUMNS)]]
    lines = ["## Cells", ""]
    lines += [f"**Contended:** {md_escape(results.contention)}", ""] if results.contention else []
    lines += [_markdown(cells, ".2f"), ""]
    lines += ["## Serving figures (ms; vLLM benchmark_serving definitions)", "", _markdown(serving, ".2f"), ""]
    if results.failed:
        lines += ["## Cells that failed", ""]
        lines += [f"- {md_escape(f.label)}: {md_escape(f.error)}" for f in results.failed]
        lines.append("")
    return lines


def _figures(figures: list[Figure]) -> list[str]:
    if not figures:
        return []
    table = pd.DataFrame(
        {
            "figure": f.name,
            "unit": f.unit,
            **{e: value_text(f.values.get(e)) for e in _engines(figures)},
            "source": f.source,
        }
        for f in figures
    )
    return ["## The write-ups' hand measurements, measured here", "", table.to_markdown(index=False), ""]


def _predictions(report: Report) -> list[str]:
    lines = ["## Prediction vs measurement", ""]
    if report.machine is None:
        return lines + ["Not predicted: the machine (floor and bandwidth) was not measured.", ""]
    lines += [
        f"- prediction floor: {report.machine.floor_ms:.3f} ms ({report.machine.floor_source})",
        *(f"- {line}" for line in floor_lines(report)),
        "",
    ]
    preds = pd.DataFrame([dataclasses.asdict(p) for p in report.predictions])
    if not preds.empty:
        lines.append(_markdown(preds, ".3f"))
    return lines


def _digest(report: Report) -> list[str]:
    if not report.ledgers:
        return []
    digest = pd.DataFrame(
        [
            {"engine": e, "step_us": d.wall_us, **d.purpose_us, **d.mechanism_us, d.dispatch: d.dispatched}
            for e, d in report.ledgers.items()
        ]
    )
    return ["", "## Where a decode step goes (median decode step of a profiled run, us)", "", _markdown(digest, ".1f")]


def _overhead(report: Report) -> list[str]:
    o = report.overhead
    if o is None:
        return []
    return [
        "",
        "## Where a cached step goes (probe overhead)",
        "",
        f"Floor: {o.floor_ms:.3f} ms for a single-token forward with no cache "
        f"({o.launches_per_forward} {o.launch_kind}, {o.host_us_per_launch:.2f} us each). "
        f"Cached step at context {o.context_tokens}: {o.cached_step_ms:.3f} ms; "
        f"bookkeeping {o.bookkeeping_ms:.3f} ms of a {o.gap_ms:.3f} ms gap.",
        "",
        _markdown(pd.DataFrame([dataclasses.asdict(p) for p in o.pieces]), ".1f"),
    ]


def _self_check(report: Report) -> list[str]:
    c = report.self_check
    if c is None:
        return []
    lines = ["", "## Profiler self-check (before the timed work)", "", f"- {c.note}"]
    lines.append(
        f"- host ops of an eager forward: {c.cpu_ops_before} before, {c.cpu_ops_after} after {c.sessions} sessions"
    )
    if c.eager_kernels_before is not None:
        lines.append(
            f"- kernels of an eager forward: {c.eager_kernels_before} before, {c.eager_kernels_after} after; "
            f"of a CUDA-graph replay: {c.graph_kernels_before} before, {c.graph_kernels_after} after"
        )
    if c.teardown_cupti:
        lines.append(f"- {c.teardown_cupti}")
    return lines


def _problems(report: Report) -> list[str]:
    lines = []
    if report.failed:
        lines += ["", "## Parts that failed (the rest of the report stands)", ""]
        lines += [f"- **{md_escape(part)}**: {md_escape(error)}" for part, error in report.failed.items()]
    if report.warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {md_escape(w)}" for w in report.warnings]
    return lines


def _diagnoses(report: Report) -> list[str]:
    """What bounds each profiled engine's median step, and its what-ifs held against the change made."""
    if not report.diagnoses and not report.what_if_checks:
        return []
    out = ["", "## What bounds each profiled step (the step diagnosis, as `probe analyze` prints it)", ""]
    out += [f"- **{md_escape(label)}**: {md_escape(d.headline)}" for label, d in report.diagnoses.items()]
    if report.what_if_checks:
        out += [
            "",
            "### What-ifs checked by making the change (`what_if_checks`)",
            "",
            "| change | what-if | baseline priced ms | baseline measured ms | predicted ms | rebased ms | measured ms "
            "| error % | contended | wrong term, or why not judged |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        out += [_check_row(c) for c in report.what_if_checks]
    return out


def _check_row(c: WhatIfCheck) -> str:
    """A what-if check: the baseline as priced and as measured beside the change (with its departure), the
    prediction and the prediction rebased onto that baseline, the change measured, and its error on the rebased."""

    def figure(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    baseline = figure(c.baseline_step_ms)
    if c.baseline_error_pct is not None:
        departed = f", {md_escape(BASELINE_DEPARTED)}" if c.baseline_departed else ""
        baseline += f" ({c.baseline_error_pct:+.1f}%{departed})"
    figures = (
        figure(c.priced_step_ms),
        baseline,
        figure(c.predicted_step_ms),
        figure(c.rebased_step_ms),
        figure(c.measured_step_ms),
    )
    error = "-" if c.error_pct is None else f"{c.error_pct:+.1f}"
    why = c.wrong_term or (c.note if not c.judged else "holds")
    return (
        f"| {md_escape(c.change)} | {md_escape(c.what_if) or '-'} | {' | '.join(figures)} | {error} | "
        f"{'-' if c.contended is None else ('yes' if c.contended else 'no')} | {md_escape(why)} |"
    )


def _not_judged(results: BenchResults, report: Report) -> list[str]:
    """The contention rule, said once up front: what ran contended, and each judgment left unmade because of it."""
    busy = [
        f"cell {c.label} ({c.other_cpu_cores or 0.0:.2f} cores of other work)" for c in results.cells if c.contended
    ]
    if report.machine is not None and report.machine.contended:
        busy.append(f"the floor ({report.machine.other_cpu_cores or 0.0:.2f} cores of other work)")
    unmade = [f"verdict: {v.claim}: {v.evidence}" for v in report.verdicts if v.evidence.startswith("not judged")]
    unmade += [
        f"prediction {p.engine} p{p.prompt_tokens} B={p.batch}: {p.points_at}"
        for p in report.predictions
        if p.points_at.startswith("not judged")
    ]
    unmade += [f"what-if check {c.change}: {c.note}" for c in report.what_if_checks if c.note.startswith("not judged")]
    if not busy and not unmade:
        return []
    lines = ["## Not judged: contended", "", "A contended cell, floor or sample is never judged.", ""]
    lines += ["Ran contended:", "", *(f"- {md_escape(b)}" for b in busy), ""] if busy else []
    lines += ["Not judged because of it:", "", *(f"- {md_escape(u)}" for u in unmade), ""] if unmade else []
    return lines


def report_markdown(results: BenchResults, report: Report, figures: list[Figure] | tuple = ()) -> str:
    """The run report as Markdown, the answer first: where the run stands (and what it has not measured yet), the
    write-ups' predictions checked, what failed or warned; then the evidence: cells, serving figures, hand
    measurements, predictions, bookkeeping, the self-check."""
    env = results.env
    lines = [
        f"# probe run: {results.config.model} {results.dtype} on {env.device_name}",
        "",
        f"torch {env.torch}, transformers {env.transformers}, CPU {env.cpu_model}, "
        f"commit {env.commit}{'-dirty' if env.dirty else ''}",
        "",
        *_status(results, report),
    ]
    lines += _problems(report)[1:] + [""] if report.failed or report.warnings else []
    lines += _not_judged(results, report)
    lines += ["## The write-ups' predictions, checked here", ""]
    word = {True: "supported", False: "not supported", None: "not measured"}
    lines += [f"- **{word[v.supported]}**: {v.claim} ({v.source}). {v.evidence}" for v in report.verdicts]
    lines += _diagnoses(report) + [""]
    lines += _cells(results) + _figures(list(figures)) + _predictions(report) + _digest(report)
    lines += _overhead(report) + _self_check(report)
    return "\n".join(lines) + "\n"


STATUS = {
    "running": "**Running**: this report is rewritten after every cell and every part",
    "interrupted": "**Interrupted**",
    "complete": "",
}


def _status(results: BenchResults, report: Report) -> list[str]:
    """Where the run stands, when it is not complete: what the answers below rest on, the command that finishes it,
    what it has not measured yet; and the threads a CPU run chose."""
    lines = []
    if report.status != "complete" or report.missing:
        head = STATUS.get(report.status, f"**Failed**: {md_escape(report.status.removeprefix('failed: '))}")
        cells = len(results.cells) + len(results.failed)
        lines += [f"{head + '. ' if head else ''}The answers below are what the {cells} cells measured so far allow."]
        if report.resume:
            lines[-1] += f" To finish: `{report.resume}`"
        lines += ["", "Not measured yet:", "", *(f"- {md_escape(m)}" for m in report.missing), ""]
    if report.threads is not None:
        lines += [f"Threads: {md_escape(report.threads.reason)}.", ""]
    return lines


# ---------------------------------------------------------------------------------------------------------
# probe compare and probe history check (a CI comment)


def _code(text: str) -> str:
    """`text` as a code span a table cell can hold: `|` escaped, a fence one backtick longer than any run inside."""
    text = " ".join(str(text).splitlines()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def comparison_markdown(c: Comparison, level: int = 3) -> str:
    """probe compare's report: the verdict, the loud warnings, the alerts, every row, what changed by name."""
    head = "REGRESSION" if c.regressed else "no regression"
    lines = [
        f"{'#' * level} probe compare: {head}",
        "",
        f"{_code(c.baseline)} (baseline) vs {_code(c.current)} (current); timing regressions need a ratio "
        f"of medians past {c.threshold:g} and Mann-Whitney p < {c.alpha:g}; launch counts are exact.",
        "",
    ]
    for w in c.warnings:
        lines += [f"> **WARNING: {md_escape(w)}**", ">"]
    if c.warnings:
        lines[-1] = ""
    if c.alerts:
        lines += [f"**{len(c.alerts)} alert(s)**", ""]
        lines += [f"- {_code(a.key)} {md_escape(a.message)}" for a in c.alerts]
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "|".join("---" if col in ("cell", "metric", "verdict") else "---:" for col in COLUMNS) + "|")
    for r in c.rows:
        cells = row_cells(r)
        if r.verdict == "regression":
            cells[-1] = "**regression**"
        lines.append("| " + " | ".join(md_escape(x) for x in cells) + " |")
    if c.changes:
        lines += ["", "What changed, per step:", ""]
        lines += [f"- {_code(ch.key)} {md_escape(ch.metric)}: {md_escape(str(ch))}" for ch in c.changes]
    if c.notes:
        lines += ["", *[f"_{md_escape(n)}_  " for n in c.notes]]
    return "\n".join(lines).rstrip() + "\n"


def history_check_markdown(check: HistoryCheck) -> str:
    head = "REGRESSION" if check.regressed else "no regression"
    lines = [f"## probe history check: {head}", ""]
    for j in check.judgements:
        lines += [
            f"**{md_escape(j.run.config)}** (`{j.run.config_id}`): run `{j.run.run_id}` @ `{j.run.short_commit}`",
            "",
        ]
        if j.comparison is None:
            lines += [f"_{md_escape(j.reason or '')}_", ""]
        else:
            lines += [comparison_markdown(j.comparison, level=4), ""]
    return "\n".join(lines).rstrip() + "\n"
