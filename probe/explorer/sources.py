"""The explorer's files: what lies under its root folder, and the one gate every path goes through.

Everything the app reads lies under one root folder. `list_sources` walks it (bounded: depth, count, no hidden
or virtual-env folders, no symlinked folders) for run folders (holding results.json), results files (`probe
baseline` files in a `baselines/` folder) and traces; `resolve_under` is the one gate every path goes through,
and it refuses anything that resolves outside the root, symlinks included. The app reads regular files only,
as the CLI does (a FIFO named like a history would hold a reader forever): `source_path` refuses anything else
in one line.

Names are the OS's bytes: a file name that is not UTF-8 is kept as Python keeps it (os.fsdecode's surrogate
escapes), so the file can still be opened, and shown through `printable` (Streamlit refuses lone surrogates).
The cached loaders key on `os.fsencode(path)` for the same reason.
"""

from __future__ import annotations

import argparse
import os
import stat
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engines.configs import presets
from probe.analysis.ledger.ranks import rank_in_name
from probe.analysis.records.files import is_trace_file, stem_of
from probe.analysis.records.results import RESULTS_FILE
from probe.analysis.records.runfolder import REPORT_FILE
from probe.analysis.records.sidecar import Sidecar, read_sidecar
from probe.analysis.regression.samples import SampleSet, from_analysis, from_results
from probe.errors import ProbeError
from probe.explorer.figures.style import printable

ROOT_ENV = "PROBE_APP_ROOT"
TELEMETRY_GLOB = "*telemetry*.parquet"  # probe.analysis.records.telemetry.write_samples: t_ns plus one column a figure
BASELINES_DIR = "baselines"  # `probe baseline` writes results files here (baselines/cpu-tiny.json)
HISTORY_SUFFIX = ".duckdb"  # run histories (probe.analysis.regression.history): probe-history.duckdb by default
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})  # and every .hidden folder
MAX_DEPTH = 6  # runs/run-x/next-static is 3 deep; deeper trees are not probe output
MAX_SOURCES = 500  # a root such as $HOME must not hang the sidebar


# ---------------------------------------------------------------------------------------------------------
# files under the root


SourceKind = Literal[
    "run", "trace", "history", "job"
]  # a results folder or file, a trace, a run history (DuckDB), a job


@dataclass(frozen=True)
class Source:
    rel: str  # path from the root, "/"-separated
    kind: SourceKind

    @property
    def label(self) -> str:
        """How the sidebar and the URL name it: valid UTF-8 whatever bytes the file's name holds."""
        return f"{self.kind}: {printable(self.rel)}"

    @property
    def link(self) -> str:
        """The app's URL query that opens this source."""
        return "?" + urllib.parse.urlencode({"source": self.label})


def app_root(argv: Sequence[str], environ: Mapping[str, str]) -> Path:
    """`--root DIR` after `streamlit run app.py --`, else $PROBE_APP_ROOT, else the current folder.

    argv is the whole sys.argv. Its options are the app's only when argv[0] is app.py: under AppTest (pytest)
    sys.argv is pytest's own command line.
    """
    parser = argparse.ArgumentParser(prog="app.py", add_help=False)
    parser.add_argument("--root")
    ours = list(argv[1:]) if argv and Path(argv[0]).name == "app.py" else []
    root = parser.parse_known_args(ours)[0].root or environ.get(ROOT_ENV) or "."
    return Path(root).expanduser().resolve()


def resolve_under(root: Path, rel: str | Path) -> Path:
    """root/rel with every symlink resolved; ProbeError when that is not inside root (absolute rel included)."""
    base = Path(root).resolve()
    path = (base / rel).resolve()
    if path != base and base not in path.parents:
        raise ProbeError(f"{rel}: outside the app's root")
    return path


def source_path(root: Path, source: Source) -> Path:
    """The source's path, once it and every file the app reads for it (a run folder's results.json and
    report.json) are known to lie inside root and to be regular files (or folders, for a run or a job)."""
    path = resolve_under(root, source.rel)
    if path.is_dir() and source.kind in ("run", "job"):
        for name in (RESULTS_FILE, REPORT_FILE) if source.kind == "run" else ():
            member = resolve_under(root, Path(source.rel) / name)
            if member.exists():
                regular_file(member)
        return path
    return regular_file(path)


def regular_file(path: Path) -> Path:
    """`path`, once it is a regular file: a FIFO, a device or a socket would hold or flood a reader (and the
    history's and results' readers open by name). ProbeError in one line otherwise."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ProbeError(f"{path}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
        raise ProbeError(f"{path}: not a regular file ({what}), so not read")
    return path


def list_sources(root: Path, max_depth: int = MAX_DEPTH, limit: int = MAX_SOURCES) -> tuple[list[Source], bool]:
    """Run folders, baseline files, traces, run histories and jobs (folders holding two traces or more: the ranks
    of one job, probe analyze's PATH...) under root, in that order, each sorted by path; and whether the listing
    stopped at `limit`. Symlinked folders are not entered; a symlinked file is listed only when it resolves inside
    root."""
    root = Path(root).resolve()
    runs, traces, histories, jobs = [], [], [], []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and depth < max_depth)
        if RESULTS_FILE in files and _inside(root, here / RESULTS_FILE):
            runs.append(Source(_rel(root, here), "run"))
        here_traces: list[str] = []
        for name in sorted(files):
            if here.name == BASELINES_DIR and name.endswith(".json") and _inside(root, here / name):
                runs.append(Source(_rel(root, here / name), "run"))
            elif is_trace_file(here / name) and _inside(root, here / name):
                traces.append(Source(_rel(root, here / name), "trace"))
                here_traces.append(name)
            elif name.endswith(HISTORY_SUFFIX) and _inside(root, here / name):
                histories.append(Source(_rel(root, here / name), "history"))
        if could_be_ranks(here_traces):
            jobs.append(Source(_rel(root, here), "job"))
        if len(runs) + len(traces) + len(histories) + len(jobs) >= limit:
            return _ordered(runs, traces, histories, jobs)[:limit], True
    return _ordered(runs, traces, histories, jobs), False


def could_be_ranks(names: Sequence[str]) -> bool:
    """Whether a folder's traces are listed as a job: two or more, each naming a distinct rank<N> in its file name
    (probe.analysis.ledger.ranks's rule, the half that needs no trace read). A run's `traces/` folder (a trace an
    engine) and a folder of unrelated traces are not; `probe analyze DIR` holds traces that say their rank only in
    distributedInfo to the rest of the rule."""
    ranks = [rank_in_name(n) for n in names]
    return len(names) >= 2 and None not in ranks and len(set(ranks)) == len(ranks)


def _ordered(*kinds: list[Source]) -> list[Source]:
    return [s for kind in kinds for s in sorted(kind, key=_by_rel)]


def _by_rel(s: Source) -> str:
    return s.rel


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


def _inside(root: Path, path: Path) -> bool:
    try:
        resolve_under(root, path.relative_to(root))
    except ProbeError:
        return False
    return True


KINDS = ("run", "trace", "history", "job")


def under_root(root: Path, text: object) -> str:
    """An error's text with the root's absolute path taken out (paths read from the root): an error line names no
    folder of the server's outside it."""
    base = str(Path(root).resolve())
    return str(text).replace(base + os.sep, "").replace(base, ".")


def link_refusal(root: Path, asked: str, listed: Collection[str]) -> str | None:
    """Why a link's `source` (a label, "trace: a/b.json.gz") is not opened, in one line that names no path outside
    the root; None when the app lists it."""
    if asked in listed:
        return None
    kind, _, rel = asked.partition(": ")
    if kind not in KINDS or not rel:
        return f"The link's source {printable(asked)!r} is not a run, trace, history or job label."
    try:
        path = resolve_under(root, rel)
    except ProbeError:
        return f"The link's {kind} lies outside the app's root, so it is not opened."
    if not path.exists():
        return f"The link's {kind} {printable(rel)} is not under the root (moved, or never there)."
    return (
        f"The link's {kind} {printable(rel)} is under the root but not listed: not a {kind} the app reads, or in a "
        f"hidden or virtual-env folder, deeper than {MAX_DEPTH} folders, or past the first {MAX_SOURCES} files."
    )


def source_of(root: Path, path: str | Path | None) -> Source | None:
    """The source a recorded path is (a history names each run's folder or trace), when it lies inside root."""
    if not path:
        return None
    base = Path(root).resolve()
    try:
        rel = Path(path).resolve().relative_to(base)
    except (ValueError, OSError):
        return None
    if not _inside(base, base / rel):
        return None
    kind: SourceKind = "trace" if is_trace_file(base / rel) else "run"
    return Source(rel.as_posix() or ".", kind)


def job_traces(root: Path, folder: Path) -> list[Path]:
    """A job's traces: the trace files directly in its folder, inside root (`is_trace_file`: by name, or a plain
    `.json` by its content)."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and is_trace_file(p) and _inside(root, p))


def stamp(path: Path) -> tuple:
    """What the caches key on besides the path: size and mtime of the file, or of a run folder's files (each
    named as bytes: a name need not be UTF-8)."""
    files = [path / RESULTS_FILE, path / REPORT_FILE] if path.is_dir() else [path]
    out: list[tuple[bytes, int | None, int | None]] = []  # (name, mtime, size); None: no stat (a missing file)
    for f in files:
        try:
            st = f.stat()
            out.append((os.fsencode(f.name), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((os.fsencode(f.name), None, None))
    return tuple(out)


def sidecar(root: Path, path: Path) -> Sidecar | None:
    """`probe profile`'s sidecar for a trace (probe.analysis.records.sidecar.read_sidecar), read only when every sidecar
    in the trace's folder lies inside root."""
    if not all(_inside(root, m) for m in path.parent.glob("*.meta.json")):
        return None
    return read_sidecar(path)


def telemetry_files(root: Path, folder: Path) -> list[Path]:
    """Telemetry sample files (probe.analysis.records.telemetry.write_samples) in a run or trace folder, inside root
    (one that is not a regular file is listed, and its reader says so in one line)."""
    return sorted(p for p in Path(folder).glob(TELEMETRY_GLOB) if _inside(root, p))


def trace_telemetry(root: Path, trace: Path) -> Path | None:
    """The samples `probe profile` recorded with this trace (`<stem>.telemetry.parquet`), inside root."""
    path = trace.parent / f"{stem_of(trace.name)}.telemetry.parquet"
    return path if path.is_file() and _inside(root, path) else None


def samples_for(root: Path, source: Source, loaded, devices: Sequence = ()) -> SampleSet:
    """The SampleSet probe compare checks, built from what the app has already loaded (results or an
    analysis, with the trace's deviceProperties), so that compare reads no file the app has not vetted. Each side is
    named by its path under the root: what compare says names no folder outside it."""
    path = source_path(root, source)
    if source.kind == "run":
        return from_results(loaded, printable(source.rel))
    return from_analysis(loaded, printable(source.rel), sidecar(root, path), devices)


def model_spec(root: Path, text: str) -> str | None:
    """What the sidebar's model box names, as the roofline takes it (probe.analysis.roofline.formulas.arch_for): a
    preset by its name, else a config.json or a model folder under the root, as an absolute path (the app reads no
    file outside its root); None for an empty box; ProbeError for anything else."""
    text = text.strip()
    if not text:
        return None
    if text in presets():
        return text
    path = resolve_under(root, text)
    if path.is_dir():
        regular_file(resolve_under(root, Path(text) / "config.json"))
    else:
        regular_file(path)
    return str(path)
