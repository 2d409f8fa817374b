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

Every history is opened with DuckDB's external access off, a reader's read-only (it never writes the file, and
reads an older schema as it is); a name DuckDB reads as in-memory (`:memory:`) is refused. Recording: a failed
write never costs a run its results folder; one line says why the history was not updated.
With the default file the command's exit code stays as it was; with a file you named (--history or
$PROBE_HISTORY) a failed write exits 2, so that CI notices.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from probe.analysis.regression.rules import ONE_RUN, CompareRules
from probe.commands import print_json
from probe.commands._record import HISTORY_HELP
from probe.commands.compare import write_markdown
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

if TYPE_CHECKING:
    from probe.analysis.regression.history import HistoryCheck, Judgement, RunInfo


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="history_command", required=True, parser_class=type(p))
    listing = sub.add_parser("list", help="the runs, newest first")
    listing.add_argument("--config", help="only configurations whose id starts with, or whose label contains, this")
    listing.add_argument("--last", type=int, help="only the newest N runs")
    listing.add_argument("--json", action="store_true", help="print JSON instead of the table")
    checking = sub.add_parser("check", help="judge the latest run of each configuration; exit 1 on a regression")
    checking.add_argument("--config", help="only configurations whose id starts with, or whose label contains, this")
    add_config_arguments(checking, CompareRules)
    checking.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown")
    checking.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    showing = sub.add_parser("show", help="one run against its predecessor, as probe compare prints it")
    showing.add_argument("run", help="a run id (or its first characters), or `latest`")
    add_config_arguments(showing, CompareRules, skip=("window",))
    showing.add_argument("--json", action="store_true", help="print JSON instead of the table")
    importing = sub.add_parser("import", help="add existing run folders, results files and traces")
    importing.add_argument("dir", type=Path, help="a folder to search, a run folder, a results file or a trace")
    for q in (listing, checking, showing, importing):
        q.add_argument("--history", type=Path, metavar="PATH", help=HISTORY_HELP)


def main(args: argparse.Namespace) -> int:
    from probe.analysis.regression import history

    path, _ = history.history_path(args.history)
    if args.history_command == "import":
        return import_runs(path, args.dir)
    if args.history_command == "list":
        with history.connect(path) as con:
            return list_runs(history.list_runs(con, args.config, args.last), args.json, path)
    rules = from_args(CompareRules, args, window=ONE_RUN.window) if args.history_command == "show" else None
    with history.connect(path) as con:
        if rules is not None:
            return show_run(history.show(con, args.run, rules), args.json)
        result = history.check(con, str(path), from_args(CompareRules, args), args.config)
    return report_check(result, args.json, args.markdown)


def list_runs(runs: list[RunInfo], as_json: bool, path: Path) -> int:
    from rich.markup import escape
    from rich.table import Table

    from probe.render import console as render

    if as_json:
        print_json([r.to_json() for r in runs])
        return 0
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


def show_run(judgement: Judgement, as_json: bool) -> int:
    from probe.render.compare import print_comparison, warnings_to_stderr

    if as_json:
        print_json(judgement.to_json())
    elif judgement.comparison is None:
        print(f"run {judgement.run.run_id} @ {judgement.run.short_commit}: {judgement.run.config}")
        print(judgement.reason)
    else:
        warnings_to_stderr(judgement.comparison)
        print_comparison(judgement.comparison)
    return 1 if judgement.regressed else 0


def report_check(result: HistoryCheck, as_json: bool, markdown: Path | None) -> int:
    from rich.markup import escape

    from probe.render import console as render
    from probe.render.compare import print_comparison, warnings_to_stderr
    from probe.render.markdown import history_check_markdown

    write_markdown(markdown, history_check_markdown(result))
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
            warnings_to_stderr(j.comparison)
            print_comparison(j.comparison)
        console.print()
    verdict = "[bold red]REGRESSION[/]" if result.regressed else "no regression"
    console.print(f"probe history check: {verdict} ({len(result.judgements)} configuration(s), {result.path})")
    return 1 if result.regressed else 0


def import_runs(path: Path, folder: Path) -> int:
    from probe.analysis.regression import history

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
