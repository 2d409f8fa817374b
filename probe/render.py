"""Rich rendering of typed results. No analysis happens here."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from probe.results import BenchResults


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False, width=160)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _match(value: bool | None) -> str:
    return {True: "match", False: "[bold red]MISMATCH[/]", None: "-"}[value]


def cells_table(results: BenchResults, title: str | None = None) -> Table:
    env = results.env
    table = Table(title=title or f"{results.config.get('model')} {env.get('dtype')} on {env.get('device_name')}",
                  title_justify="left")
    batched = any(c.batch > 1 for c in results.cells)
    for col in ("engine", "prompt", *(("batch",) if batched else ()), "TTFT ms", "ITL p50 ms", "ITL p90 ms",
                "decode tok/s", "total ms", "peak MiB", "spread %", "ops/fwd", "tokens"):
        table.add_column(col, justify="left" if col in ("engine", "tokens") else "right")
    for c in results.cells:
        table.add_row(c.engine, str(c.prompt_tokens), *((str(c.batch),) if batched else ()), f"{c.ttft_ms:.2f}",
                      f"{c.itl_p50_ms:.2f}",
                      f"{c.itl_p90_ms:.2f}", f"{c.decode_tok_s:.1f}", f"{c.total_ms:.1f}",
                      f"{c.peak_mem_bytes / 2**20:.0f}", f"{c.spread_pct:.1f}",
                      "-" if c.decode_ops is None else str(c.decode_ops), _match(c.tokens_match_naive))
    sync = [c.sync_overhead_ms for c in results.cells if c.sync_overhead_ms is not None]
    if sync:
        table.caption = (f"per-step sync costs {min(sync):.3f}..{max(sync):.3f} ms "
                         "(runs with one final sync against runs with one per step)")
    return table


class ProgressBar:
    """A rich progress bar on stderr, driven by (description, advance) callbacks."""

    def __init__(self, total: int, enabled: bool = True):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=stderr(), disable=not enabled, transient=False)
        self._task = self._progress.add_task("starting", total=total)

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def __call__(self, description: str, advance: int) -> None:
        self._progress.update(self._task, description=description, advance=advance)
