"""The Diagnosis and Op roofline views: a trace's answer (what bounds its median step, the roofline, what to fix
first) or a run's predictions and claims; every (op, shapes) against the device's roofs. Figures:
probe.explorer.figures.diagnosis.
"""

from __future__ import annotations

import urllib.parse

import streamlit as st

from probe.analysis.diagnosis.answer import Answer
from probe.analysis.diagnosis.verdict import bound_words
from probe.analysis.ledger.types import kind_words
from probe.analysis.roofline.devices import device
from probe.explorer import figures, sources
from probe.explorer.figures.style import md, printable
from probe.explorer.loaders import LOAD_ERRORS, Reading, RooflineInputs, Run, TraceSource, ViewContext, key, load_answer
from probe.explorer.widgets import show_table


def show_diagnosis(loaded: Run | TraceSource, ctx: ViewContext) -> None:
    """The answer first: for a trace, what bounds its median step (and the median step of each other kind), the
    roofline beside it and what to fix first; for a run, its predictions and claims, and each trace's verdict."""
    if isinstance(loaded, Run):
        return show_run_diagnosis(loaded, ctx)
    result = trace_answer(loaded, ctx)
    if result is None:
        return
    d = result.diagnosis.median
    if d is None:
        st.info("No step in this trace, so no verdict: name the steps with --steps in the sidebar.")
        return
    analysis = loaded.analysis
    position = result.diagnosis.position_of(d)
    step = analysis.steps[position]
    for caveat in d.caveats:
        st.warning(md(caveat))
    over = "decode step" if analysis.summary.steps_used == "decode" else "step"
    st.subheader(md(f"{bound_words(d)}: the median {over}"))
    st.markdown(md(d.headline))
    st.markdown("\n".join(f"- {md(line)}" for line in d.lines))
    roofline = result.rooflines.get(position)
    st.plotly_chart(figures.diagnosis.step_figure(d, roofline), key="diagnosis_chart")
    one_step = (
        f"{ctx.source.link}&view=One+step&step={urllib.parse.quote_plus(printable(figures.step.step_label(step)))}"
    )
    st.caption(
        "The host window by what ran (probe's mechanism partition), its sync wait split into waiting on this "
        "trace's GPU work and waiting on work the trace does not hold, against the GPU's busy time"
        + (" and the roofline's two terms" if roofline else "")
        + f". [See this step on one clock]({one_step})."
    )
    others = [(kind, k) for kind, k in result.diagnosis.by_kind.items() if k is not d]
    for kind, k in others:
        with st.expander(md(f"The median {kind_words(kind)}: {bound_words(k)}")):
            st.markdown(md(k.headline))
            st.markdown("\n".join(f"- {md(line)}" for line in k.lines))
    st.subheader("The roofline beside the step")
    if roofline is not None:
        show_table(figures.diagnosis.roofline_frame(roofline), "roofline_table")
        st.markdown(md(roofline.departure))
        for note in roofline.notes:
            st.caption(md(figures.diagnosis.sidebar_words(note)))
    elif ctx.roofline.model is None:
        st.caption(
            "Name the model in the sidebar (a preset, or a config.json or model folder under the root), and the "
            "device when the trace does not say, for the bytes and FLOPs the step must move and do."
        )
    st.subheader("What to fix first")
    fixes = figures.diagnosis.what_if_frame(d)
    if fixes.empty:
        st.caption("No change the model of the step knows would shorten it.")
    else:
        show_table(fixes, "what_if_table")
    show_notes(result)


def show_notes(result: Answer) -> None:
    """The answer's notes, each flag said as the sidebar box that sets it."""
    for note in result.notes:
        st.caption(md(figures.diagnosis.sidebar_words(note)))


def trace_answer(trace: TraceSource, ctx: ViewContext) -> Answer | None:
    """The trace's answer with the sidebar's model and device; without them when they cannot be used (said)."""
    stamp = sources.stamp(trace.path)
    args = key(ctx.root), key(trace.path), stamp, ctx.reading
    try:
        result = load_answer(*args, ctx.roofline)
    except LOAD_ERRORS as e:
        st.error(f"No roofline: {md(figures.diagnosis.sidebar_words(sources.under_root(ctx.root, e)))}")
    else:
        picked = ctx.roofline.device
        if picked and result.device and result.device != picked:  # the trace's own device wins (answer.trace_device)
            st.info(md(f"The trace names its own device, {result.device}: the sidebar's {picked} is not used."))
        return result
    try:
        return load_answer(*args, RooflineInputs())
    except LOAD_ERRORS as e:
        st.error(f"Cannot diagnose {md(ctx.source.rel)}: {md(sources.under_root(ctx.root, e))}")
        return None


def show_run_diagnosis(run: Run, ctx: ViewContext) -> None:
    """As `probe run` prints it: the write-ups' claims checked on this run, each cell's prediction against its
    measurement, and the verdict on each trace the run profiled."""
    report = run.report
    if report is None:
        st.info("No report.json in this folder (a `probe bench` run): `probe run` writes the predictions and claims.")
    else:
        said = {True: "supported", False: "not supported", None: "not measured"}
        st.subheader("The write-ups' claims, on this run")
        st.markdown(
            "\n".join(
                f"- **{said[v.supported]}**: {md(v.claim)} ({md(v.source)}). {md(v.evidence)}" for v in report.verdicts
            )
        )
        st.subheader("Prediction against measurement, cell by cell")
        contended = figures.diagnosis.contended_cells(run.results)
        if contended:
            st.warning(md(run.results.contention or ""))
        st.plotly_chart(figures.diagnosis.predictions_figure(report, contended), key="predictions_chart")
        m = report.machine
        if m is not None:  # None: measuring the machine failed (report.failed says why), so nothing was predicted
            st.caption(
                md(
                    f"Each cell's ITL over max(host floor, traffic / bandwidth): floor {m.floor_ms:.2f} ms "
                    f"({m.floor_source}), bandwidth {m.bandwidth_bytes_s / 1e9:.1f} GB/s ({m.bandwidth_source}). "
                    "At 1 the prediction holds; the last column names the term the gap points at."
                )
            )
        show_table(figures.diagnosis.predictions_frame(report, contended), "predictions_table")
        for note in report.notes:
            st.caption(md(note))
    folder = run.path / "traces" if run.path.is_dir() else None
    traces = sources.job_traces(ctx.root, folder) if folder is not None and folder.is_dir() else []
    if not traces:
        return
    st.subheader("Each profiled trace's verdict")
    lines = []
    for path in traces:
        source = sources.source_of(ctx.root, path)
        try:
            result = load_answer(key(ctx.root), key(path), sources.stamp(path), Reading(), RooflineInputs())
        except LOAD_ERRORS as e:
            lines.append(f"- {md(path.name)}: cannot read it ({md(sources.under_root(ctx.root, e))})")
            continue
        d = result.diagnosis.median
        where = f"[{md(path.name)}]({source.link}&view=Diagnosis)" if source is not None else md(path.name)
        verdict = "no step" if d is None else f"**{md(bound_words(d))}**. {md(d.headline)}"
        verdict += "".join(f" **Contended:** {md(c)}" for c in (d.caveats if d else ()))
        lines.append(f"- {where}: {verdict}")
    st.markdown("\n".join(lines))


def show_op_roofline(trace: TraceSource, ctx: ViewContext) -> None:
    """Every (op, shapes) that launched kernels against the device's roofs (probe.analysis.roofline.ops)."""
    result = trace_answer(trace, ctx)
    if result is None:
        return
    ops = result.op_roofline
    modelled = [o for o in ops if o.intensity and o.tflops_s_median]
    dev = device(result.device) if result.device else None
    if not modelled:
        st.info(
            "No op here has a FLOP and byte model with recorded shapes (a trace recorded with "
            "record_shapes=True, on a GPU), so there is nothing to hold against the roofs."
        )
    else:
        st.plotly_chart(figures.diagnosis.op_roofline_figure(ops, dev), key="op_roofline_chart")
        roof = f"{dev.name}'s roofs" if dev else "no roofs (pick the device in the sidebar)"
        st.caption(
            f"Each (op, input shapes) at its median call: FLOPs and bytes per call from TraceLens's formulas over "
            f"the recorded shapes (a gather's bytes are the rows it reads), against {md(roof)}; a marker's area is "
            "its share of the kernel time. An op far below the roof over its intensity is where the kernels leave "
            "speed behind; one ringed in red is over its roof, and its hover says why."
        )
    if result.op_coverage is not None:
        st.markdown(md(result.op_coverage.text[0].upper() + result.op_coverage.text[1:] + "."))
    over = sum(o.over_roof for o in ops)
    if over:
        st.warning(f"{over} op(s) over their roof: flagged in the table (over_roof), each with why (over_roof_why).")
    if ops:
        show_table(figures.diagnosis.op_roofline_frame(ops), "op_roofline_table")
    show_notes(result)
