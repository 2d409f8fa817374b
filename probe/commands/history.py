"""The run history: every run `probe run`, `bench`, `baseline` and `profile` record, in one DuckDB file
(probe-history.duckdb in the current folder; --history PATH or $PROBE_HISTORY), and the trend check over it.

  probe history list [--config TEXT] [--last N] [--json]   the runs, newest first
  probe history check [--window N] [--counts-only] [--json] [--markdown FILE]
        the latest run of each configuration against the earlier runs of its configuration and environment, by
        probe compare's rule: launch counts exactly against the previous run (any increase alerts and names the
        op or kernel), timings by ratio of medians and Mann-Whitney U against the last N runs' samples.
        Exit 0 no regression (or not enough history yet), 1 regression, 2 unusable input.
  probe history show RUN                                    one run against its predecessor, as probe compare prints
  probe history import DIR                                  add run folders, results / baseline files and traces

Recording: a failed write never costs a run its results folder; one line says why the history was not updated.
With the default file the command's exit code stays as it was; with a file you named (--history or
$PROBE_HISTORY) a failed write exits 2, so that CI notices.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands import print_json

HELP = "the run history (DuckDB): list runs, check the trend of every configuration, show a run, import runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="history_command", required=True, parser_class=type(p))
    listing = sub.add_parser("list", help="the runs, newest first")
    listing.add_argument("--config", help="only configurations whose id starts with, or whose label contains, this")
    listing.add_argument("--last", type=int, help="only the newest N runs")
    listing.add_argument("--json", action="store_true", help="print JSON instead of the table")
    checking = sub.add_parser("check", help="judge the latest run of each configuration; exit 1 on a regression")
    checking.add_argument("--config", help="only configurations whose id starts with, or whose label contains, this")
    add_rule_arguments(checking, window=True)
    checking.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown")
    checking.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    showing = sub.add_parser("show", help="one run against its predecessor, as probe compare prints it")
    showing.add_argument("run", help="a run id (or its first characters), or `latest`")
    add_rule_arguments(showing, window=False)
    showing.add_argument("--json", action="store_true", help="print JSON instead of the table")
    importing = sub.add_parser("import", help="add existing run folders, results files and traces")
    importing.add_argument("dir", type=Path, help="a folder to search, a run folder, a results file or a trace")
    for q in (listing, checking, showing, importing):
        q.add_argument("--history", type=Path, metavar="PATH", help=history_help())


def history_help() -> str:
    # Spelled out rather than imported: building a recording command's flags must not load DuckDB and scipy.
    return "the history file (default: $PROBE_HISTORY, else ./probe-history.duckdb)"


def add_rule_arguments(p: argparse.ArgumentParser, window: bool) -> None:
    from probe.analysis.compare import ALPHA, THRESHOLD
    from probe.analysis.history import WINDOW

    if window:
        p.add_argument(
            "--window", type=int, default=WINDOW, help=f"earlier runs whose timings are pooled (default: {WINDOW})"
        )
    p.add_argument("--threshold", type=float, default=THRESHOLD, help=f"ratio of medians (default: {THRESHOLD})")
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"Mann-Whitney U significance level (default: {ALPHA})")
    p.add_argument("--counts-only", action="store_true", help="gate only on the exact launch counts")


def main(args: argparse.Namespace) -> int:
    from probe.analysis import history

    path, _ = history.history_path(args.history)
    if args.history_command == "import":
        return import_runs(path, args.dir)
    rules = history.Rules(
        window=getattr(args, "window", 1),
        threshold=getattr(args, "threshold", history.THRESHOLD),
        alpha=getattr(args, "alpha", history.ALPHA),
        counts_only=getattr(args, "counts_only", False),
    )
    with history.connect(path) as con:
        if args.history_command == "list":
            return list_runs(history.list_runs(con, args.config, args.last), args.json, path)
        if args.history_command == "show":
            return show_run(history.show(con, args.run, rules), args.json)
        result = history.check(con, str(path), rules, args.config)
    return report_check(result, args.json, args.markdown)


def list_runs(runs, as_json: bool, path: Path) -> int:
    if as_json:
        print_json([r.to_json() for r in runs])
        return 0
    from rich.markup import escape
    from rich.table import Table

    from probe.render import console as render

    table = Table(title=f"probe history: {path} ({len(runs)} run(s), newest first)", title_justify="left")
    for col in ("run", "recorded (UTC)", "command", "commit", "configuration", "config id", "device", "torch"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            *(escape(str(x)) for x in (r.run_id, f"{r.recorded_at:%Y-%m-%d %H:%M:%S}", r.command, r.short_commit)),
            *(escape(str(x)) for x in (r.config, r.config_id, r.device_name, r.torch)),
        )
    render.stdout().print(table)
    return 0


def show_run(judgement, as_json: bool) -> int:
    from probe.commands.compare import print_report

    if as_json:
        print_json(judgement.to_json())
    elif judgement.comparison is None:
        print(f"run {judgement.run.run_id} @ {judgement.run.short_commit}: {judgement.run.config}")
        print(judgement.reason)
    else:
        print_report(judgement.comparison)
    return 1 if judgement.regressed else 0


def report_check(result, as_json: bool, markdown: Path | None) -> int:
    from rich.markup import escape

    from probe.commands.compare import print_report
    from probe.render import console as render

    if markdown is not None:
        from probe.analysis.files import atomic_write
        from probe.errors import ProbeError

        try:
            atomic_write(markdown, result.to_markdown())
        except OSError as e:
            raise ProbeError(f"cannot write {markdown}: {e.strerror or e}") from None
    if as_json:
        print_json(result.to_json())
        return 1 if result.regressed else 0
    console = render.stdout()
    for j in result.judgements:
        console.print(
            f"[bold]{escape(j.run.config)}[/] ({j.run.config_id}): latest run {j.run.run_id} @ {j.run.short_commit}"
        )
        if j.comparison is None:
            console.print(f"  {escape(j.reason or '')}")
        else:
            for w in j.comparison.warnings:
                print(f"probe: WARNING: {w}", file=sys.stderr)
            print_report(j.comparison)
        console.print()
    verdict = "[bold red]REGRESSION[/]" if result.regressed else "no regression"
    console.print(f"probe history check: {verdict} ({len(result.judgements)} configuration(s), {result.path})")
    return 1 if result.regressed else 0


def import_runs(path: Path, folder: Path) -> int:
    from probe.analysis import history

    records, skipped = history.records_in(folder)
    added = 0
    for record in records:
        run_id = history.append(path, record)
        added += run_id is not None
        state = f"added {run_id}" if run_id else "already in the history"
        print(f"{state}: {record.command} {record.label} ({record.source})")
    for line in skipped:
        print(f"skipped: {line}", file=sys.stderr)
    print(f"{added} run(s) added to {path}; {len(records) - added} already there, {len(skipped)} skipped")
    return 0


# ---------------------------------------------------------------------------------------------------------
# recording, for the commands that measure


def add_record_arguments(p: argparse.ArgumentParser) -> None:
    """--history PATH and --no-history, for every command that records a run."""
    p.add_argument("--history", type=Path, metavar="PATH", help=history_help() + "; the run is appended to it")
    p.add_argument("--no-history", action="store_true", help="do not record this run in the history")


def record(
    args: argparse.Namespace,
    command: str,
    code: int = 0,
    results=None,
    traces=(),
    source: Path | None = None,
    folder: Path | None = None,
) -> int:
    """Append this run (bench `results`, profiled `traces`, or a run `folder` read back) to the history, after
    its own files are written. Returns the command's exit code: unchanged, unless the write failed and the user
    named the history file (then 2, or the code the command already had)."""
    if args.no_history:  # before the import: --no-history must never load DuckDB (an optional dependency)
        return code
    from probe.analysis import history
    from probe.analysis.environment import git_state
    from probe.errors import ProbeError

    path, named = history.history_path(args.history)
    try:
        commit, dirty = git_state(Path.cwd())
        how = dict(commit=commit, dirty=dirty, recorded_at=history.now_utc(), env_extra={"driver": driver_version()})
        if folder is not None:
            rec = history.folder_record(folder, command, **how)
        else:
            rec = history.run_record(command, source, results, [history.read_ledger(t) for t in traces], **how)
        run_id = history.append(path, rec)
    except (ProbeError, OSError) as e:
        print(f"probe: history not updated: {e}", file=sys.stderr)
        return (code or 2) if named else code
    done = f"recorded run {run_id}" if run_id else "this run was already recorded"
    print(f"history: {done} in {path}", file=sys.stderr)
    return code


def driver_version() -> str | None:
    """The NVIDIA driver, when the run was on a CUDA device and NVML answers; None otherwise."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML (ROCm, a container without the library): the driver is not known
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
