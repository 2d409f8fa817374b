"""Trace reading speed and memory, whole processes, beside HTA on the same files.

    python -m benchmarks.parse_bench --hta-python /tmp/hta-venv/bin/python   # the table below, HTA in its venv
    python -m benchmarks.parse_bench --no-hta                                # ours only
    python -m benchmarks.parse_bench --big-gb 3                              # also stream a 3 GB trace
    python -m benchmarks.parse_bench --steps 20 --nsys-events 0 --nesting 0  # one row, nothing else
    python -m benchmarks.parse_bench --baseline /tmp/probe-main --no-hta      # parse time beside another checkout

1. Decode traces of ~400k events (benchmarks/synthetic_traces.py) at 20 and 1000 steps: `probe analyze FILE
   --json` as a user runs it, from interpreter start to exit, against HTA's TraceAnalysis() load plus
   get_temporal_breakdown() in its own process, with each one's peak RSS and CPU time; the two alternate, best of
   --repeat each, so that both see the same load. The event count is fixed while the step count changes, so a
   cost that grows with the steps shows. A further run of ours splits parse and ledger.
2. An Nsight Systems export of ~1M events: load_trace alone, and `probe analyze` whole.
3. N cpu_ops, user ranges or runtime calls nested N deep against N side by side, in one step: parse, ledger and
   one step's timeline (`probe analyze --step`), at N and 2N, so a superlinear cost shows.
4. With --baseline DIR (another checkout of probe, e.g. `git archive main | tar -x -C DIR`): load_trace of the
   same files (decode traces at each step count, the same with record_shapes' input shapes, the nsys export) by
   this tree and by DIR, in alternating child processes (ABBA, --repeat times), best of each: a reader change
   shows as before/after on one machine in one run.
5. With --rules: the kernel-category table on one kernel name of 40k and 80k characters built against it
   ("flashinfer" repeated), beside the old attention rule `flashinfer.*(prefill|decode)` alone, in process.
6. With --big-gb: a trace of that many GB (uncompressed, written to a temp folder and deleted after) through
   `probe analyze`, with its peak RSS: the document is streamed, so memory follows the event table, not the file.

Every process is a child of this small one, measured by os.wait4 (wall from spawn to reap, CPU, peak RSS: the
kernel's ru_maxrss, which for a child also counts this parent's pages at spawn, so the parent's own peak is
printed as the floor under every figure). The machine is shared: the load average is printed with the tables.
No figure here is asserted anywhere; this script only reports.

What the readers were built from, measured here (2 shared cores; this VM drifts by a third between processes,
so each line is a best of a few). The 400k-event, 20-step file (97 MB); parse = load_trace in process:

| chrome reader | parse s | peak MiB | why |
|---|---|---|---|
| orjson.loads, a dict walk, a regex pass for exact ts/dur (before) | 1.1-1.2 | 700 | whole process 2.4 s, 840 MiB |
| orjson.loads alone | 0.4-1.1 | 685 | 400k dicts of ~10 keys, and the whole text, at once |
| msgspec.json.decode, untyped | 1.3 | 465 | the same dicts, built by msgspec |
| msgspec, a typed Struct an event, Raw ts/dur, whole file | 0.17 + 0.12 | 346 | keys not read are never built |
| the same, streamed in 8 MiB pieces | 0.43 | 120 | one piece in memory at a time (whole process) |
| + other phases as empty structs, one hash a name, one copy a piece (now) | 0.34 | 90 | flows: a third |

The profile that led there (cProfile of the old load_trace + ledger, 1.9 s under the profiler): the dict walk
0.63 s own time (3.7M dict.get, 2.7M list.append), orjson.loads 0.38 s, the regex pass for ts/dur 0.12 s; the
ledger 0.05 s. And of the old `probe analyze` process, 1.0 s and 170 MiB went to importing scipy and pandas for
`compare` before the trace was opened. Now (per stage, summed over pieces): decode 0.10-0.12 s, name ids 0.04,
six field lists 0.04, exact times 0.04, integer columns 0.03, reading 0.04.

| nsys reader, 1M events | load_trace s |
|---|---|
| fetchall, a Python generator a column (before) | 1.4 |
| fetchall, numpy on the rows | ~1.1 |
| ADBC SQLite driver to Arrow | 0.3, plus 0.36 to import it |
| one group_concat a column per 256k rows, parsed by numpy (now, no new dependency) | 0.8 |

What grew with the step count at 1000 steps (cProfile of `probe analyze --json`, then timed unprofiled):

| stage | before | now |
|---|---|---|
| launch delays: np.percentile once a step | ledger 0.125 s | one grouped pass (grouped_quantiles): 0.10 s |
| `--json` by json.dumps (0.41 s of a 1.03 s profile) | process 0.63 s, 120 MiB | msgspec: 0.59 s, 102 MiB |
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EVENTS = 400_000  # where HTA's load time was first measured (10.7 s at 20 steps, 118 s at 1000)
DEFAULT_STEPS = (20, 1000)
NSYS_EVENTS = 1_000_000
NESTING = 30_000  # and twice that


@dataclass(frozen=True)
class Run:
    """One child process, measured from outside."""

    code: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    stdout: str
    stderr: str

    @property
    def failed(self) -> str:
        return "" if self.code == 0 else f"exit {self.code}: {(self.stderr.strip().splitlines() or [''])[-1][:60]}"


def run(cmd: list[str], timeout: float, root: Path = ROOT) -> Run:
    """Run `cmd` in `root` (which it imports probe from) with output to files (no pipe to fill), and reap it with
    wait4 for its own resource usage."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(root)}
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=root, env=env)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return Run(
            code=proc.returncode,
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            peak_mib=usage.ru_maxrss / 1024,  # KiB on Linux
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def make(*args: str) -> str:
    done = run([sys.executable, "-m", "benchmarks.synthetic_traces", *args], timeout=3600)
    if done.code:
        raise SystemExit(f"making {args}: {done.failed}")
    return done.stdout.strip()


def analyze(path: Path) -> Run:
    return run([sys.executable, "-m", "probe", "analyze", str(path), "--json"], timeout=3600)


def measure(
    who: str, path: Path, python: str = sys.executable, timeout: float = 600, root: Path = ROOT
) -> tuple[Run, dict]:
    """A child that times its own parts (parse, ledger) in process, with the probe of `root`; its JSON line, or {}
    when it failed."""
    cmd = [python, "-m", "benchmarks.parse_bench", "--measure", who, str(path)]
    if who == "hta" or root != ROOT:  # this file by path (it imports nothing of ours at the top): HTA's venv has
        # no probe, and another checkout is measured by this file's code with that checkout's probe (PYTHONPATH)
        cmd = [python, str(Path(__file__).resolve()), "--measure", who, str(path)]
    done = run(cmd, timeout, root)
    return done, (json.loads(done.stdout.strip().splitlines()[-1]) if done.code == 0 else {})


# --- in the child ------------------------------------------------------------------------------------------


def measure_ours(path: str, timeline: bool = False) -> dict:
    from probe.analysis.ledger.build import analyze as ledger
    from probe.analysis.ledger.timeline import step_events
    from probe.analysis.trace import load_trace

    t0, c0 = time.perf_counter(), time.process_time()
    trace = load_trace(path)
    t1, c1 = time.perf_counter(), time.process_time()
    result = ledger(trace)
    t2 = time.perf_counter()
    out = {"parse_s": t1 - t0, "parse_cpu_s": c1 - c0, "ledger_s": t2 - t1}
    out |= {"events": len(trace), "steps": len(result.steps)}
    if timeline:  # what `probe analyze --step 0` adds; not by default: the ledger's step_events is quadratic in
        # (runtime calls x enclosing ranges), hours for a 1M-event nsys export read as one window
        step_events(trace, result.steps[0])
        out["timeline_s"] = time.perf_counter() - t2
    return out


def measure_hta(path: str) -> dict:
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(Path(path).parent))
    t1 = time.perf_counter()
    analysis.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    return {"parse_s": t1 - t0, "ledger_s": t2 - t1}


# --- the tables --------------------------------------------------------------------------------------------


def decode_rows(
    tmp: Path, steps: list[int], events: int, hta_python: str | None, hta_timeout: float, repeat: int = 1
) -> list:
    """Per step count: `probe analyze --json` and HTA alternating (probe, HTA, probe, ...), `repeat` times, the best
    wall of each kept with its CPU and peak: on a shared machine both sides then see the same load."""
    rows = []
    for n in steps:
        folder = tmp / f"s{n}"  # HTA reads every trace in a folder: one a folder
        folder.mkdir()
        path = folder / "trace.json"
        make("decode", str(path), str(n), str(events))
        row: dict = {"steps": n, "file_mb": path.stat().st_size / 1e6, "load": os.getloadavg()[0]}
        for _ in range(repeat):
            row["ours"] = _best(row.get("ours"), analyze(path))
            if hta_python:
                done, parts = measure("hta", path, hta_python, hta_timeout)
                if _best(row.get("hta"), done) is done:
                    row["hta"], row["hta_parts"] = done, parts
        _, row["parts"] = measure("ours", path)
        rows.append(row)
        path.unlink()
    return rows


def _best(kept: Run | None, new: Run) -> Run:
    """The faster of two runs of one side; a failed run only when no other is kept."""
    if kept is None or (kept.failed and not new.failed) or (not new.failed and new.wall_s < kept.wall_s):
        return new
    return kept


def print_decode(rows: list, repeat: int = 1) -> None:
    print(f"\n## probe analyze vs HTA, ~{rows[0]['parts'].get('events', 0):,} events kept, whole processes")
    print(f"(best of {repeat} each, alternating; CPU s beside wall: the wall also counts waiting for a core)\n")
    print(
        "| steps | file MB | load | probe s | probe CPU s | probe peak MiB | HTA s | HTA CPU s | HTA peak MiB | speed "
        "| memory | parse s | ledger s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, hta, p = r["ours"], r.get("hta"), r["parts"]
        cells = [str(r["steps"]), f"{r['file_mb']:.0f}", f"{r['load']:.1f}"]
        cells += [ours.failed or f"{ours.wall_s:.2f}", f"{ours.cpu_s:.2f}", f"{ours.peak_mib:.0f}"]
        if hta is None or hta.failed or ours.failed:
            cells += [hta.failed if hta else "-", "", "", "", ""]
        else:
            cells += [f"{hta.wall_s:.1f}", f"{hta.cpu_s:.1f}", f"{hta.peak_mib:.0f}"]
            cells += [f"{hta.wall_s / ours.wall_s:.1f}x", f"{ours.peak_mib / hta.peak_mib:.2f}x HTA"]
        cells += [f"{p.get('parse_s', float('nan')):.2f}", f"{p.get('ledger_s', float('nan')):.2f}"]
        print("| " + " | ".join(cells) + " |")


def print_nsys(tmp: Path, events: int) -> None:
    path = tmp / "export.sqlite"
    make("nsys", str(path), str(events))
    done, parts = measure("ours", path)
    whole = analyze(path)
    print(f"\n## nsys SQLite export, {events:,} events, {path.stat().st_size / 1e6:.0f} MB\n")
    print("| load_trace s | ledger s | probe analyze s | peak MiB |")
    print("|---|---|---|---|")
    if done.failed or whole.failed:
        print(f"| {done.failed or whole.failed} | | | |")
    else:
        print(f"| {parts['parse_s']:.2f} | {parts['ledger_s']:.2f} | {whole.wall_s:.2f} | {whole.peak_mib:.0f} |")
    path.unlink()


def print_nesting(tmp: Path, n: int) -> None:
    print(f"\n## {n:,} and {2 * n:,} events nested inside each other, or side by side, in one step\n")
    print("| events | what | layout | parse s | ledger s | one step's timeline s |")
    print("|---|---|---|---|---|---|")
    for kind in ("ops", "ranges", "calls"):
        for count in (n, 2 * n):
            for layout in ("flat", "nested"):
                path = tmp / f"{layout}{count}.json"
                make(layout, str(path), str(count), kind)
                done, p = measure("timeline", path)
                cells = (
                    [done.failed, "", ""]
                    if done.failed
                    else [f"{p[k]:.3f}" for k in ("parse_s", "ledger_s", "timeline_s")]
                )
                print(f"| {count:,} | {kind} | {layout} | " + " | ".join(cells) + " |")
                path.unlink()


def print_baseline(tmp: Path, baseline: Path, steps: list[int], events: int, nsys_events: int, repeat: int) -> None:
    """load_trace of the same files by this tree and by `baseline`, alternating (ABBA), best of `repeat` each."""
    files = []
    for n in steps:
        for shapes in (False, True):
            path = tmp / f"base{n}{'s' if shapes else ''}.json"
            make("decode", str(path), str(n), str(events), *(["--shapes"] if shapes else []))
            files.append((f"decode, {n} steps{', shapes' if shapes else ''}", path))
    if nsys_events:
        make("nsys", str(tmp / "base.sqlite"), str(nsys_events))
        files.append((f"nsys, {nsys_events:,} events", tmp / "base.sqlite"))
    # CPU seconds beside wall: on a shared machine the wall clock also counts the time spent waiting for a core
    print(f"\n## load_trace, this tree against {baseline} (best of {repeat}, alternating)\n")
    print("| file | MB | before s | after s | before CPU s | after CPU s | CPU after/before | before MiB | after MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, path in files:
        best: dict[Path, tuple[float, float, float]] = {}
        for i in range(repeat):
            order = (baseline, ROOT) if i % 2 == 0 else (ROOT, baseline)
            for root in order:
                done, parts = measure("ours", path, root=root)
                if done.failed:
                    raise SystemExit(f"{label} with {root}: {done.failed}")
                now = (parts["parse_s"], parts.get("parse_cpu_s", float("nan")), done.peak_mib)
                best[root] = tuple(map(min, zip(best.get(root, now), now, strict=True)))
        (b, bc, bm), (a, ac, am) = best[baseline], best[ROOT]
        mb = path.stat().st_size / 1e6
        print(f"| {label} | {mb:.0f} | {b:.3f} | {a:.3f} | {bc:.3f} | {ac:.3f} | {ac / bc:.2f} | {bm:.0f} | {am:.0f} |")
        path.unlink()


def print_rules() -> None:
    """The built-in category rules on long names: linear in the length (each rule has a bounded width), where the
    old `flashinfer.*(prefill|decode)` read to the end of the name from every "flashinfer" in it."""
    import re

    from probe.analysis.ledger.kernels import DEFAULT_RULES

    old = re.compile(r"flashinfer.*(prefill|decode)", re.IGNORECASE)
    print("\n## kernel-category rules on one long kernel name\n")
    print("| characters | the whole table now, s | the old attention rule alone, s |")
    print("|---|---|---|")
    for n in (40_000, 80_000):
        name = "flashinfer" * (n // 10)
        t0 = time.perf_counter()
        DEFAULT_RULES.category(name)
        t1 = time.perf_counter()
        old_s = "-"
        if n <= 40_000:  # quadratic: 80k takes four times as long again
            old.search(name)
            old_s = f"{time.perf_counter() - t1:.2f}"
        print(f"| {n:,} | {t1 - t0:.3f} | {old_s} |")


def print_big(tmp: Path, gb: float) -> None:
    path = tmp / "big.trace.json"
    steps = int(make("big", str(path), str(gb)))
    size = path.stat().st_size
    done = analyze(path)
    path.unlink()
    print(f"\n## a {size / 1e9:.1f} GB trace ({steps:,} steps), streamed\n")
    print("| probe analyze s | CPU s | peak MiB |")
    print("|---|---|---|")
    print(f"| {done.failed or f'{done.wall_s:.1f}'} | {done.cpu_s:.1f} | {done.peak_mib:.0f} |")


def _own_peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="events in each decode trace")
    p.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS), help="step counts to try")
    p.add_argument("--no-hta", action="store_true", help="skip HTA even if it is installed")
    p.add_argument("--hta-timeout", type=float, default=600, help="seconds before an HTA run is abandoned")
    # HTA 0.6.1 (traceinsight) breaks under pandas 3 on traces past 32k events (an int16 index column can no
    # longer be upcast in place), so its side may need its own environment: a venv with pandas<3.
    p.add_argument("--hta-python", default=sys.executable, help="interpreter that has HTA installed")
    p.add_argument("--nsys-events", type=int, default=NSYS_EVENTS, help="events in the nsys export (0: skip)")
    p.add_argument("--nesting", type=int, default=NESTING, help="ops nested / side by side (0: skip)")
    p.add_argument("--big-gb", type=float, default=0, help="also stream a trace of this many GB (0: skip)")
    p.add_argument("--rules", action="store_true", help="also time the kernel-category rules on long names")
    p.add_argument("--baseline", type=Path, help="another checkout of probe: load_trace before (it) and after (this)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating (best kept)")
    p.add_argument("--measure", nargs=2, metavar=("WHO", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        who, path = args.measure
        print(json.dumps(measure_hta(path) if who == "hta" else measure_ours(path, timeline=who == "timeline")))
        return 0
    # byte-compiled, as pip installs a package (HTA's is): with PYTHONDONTWRITEBYTECODE set and no .pyc beside it,
    # every `probe analyze` process compiled probe's modules anew (about 0.07 s here, a tenth of the whole run)
    compileall.compile_dir(ROOT / "probe", quiet=1)
    has_hta = not args.no_hta and run([args.hta_python, "-c", "import hta.trace_analysis"], 120).code == 0
    print(f"load average {os.getloadavg()[0]:.1f}; HTA {'from ' + args.hta_python if has_hta else 'not run'}")
    if args.rules:
        print_rules()
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        if args.baseline:
            print_baseline(Path(tmp), args.baseline.resolve(), args.steps, args.events, args.nsys_events, args.repeat)
            return 0
        hta = args.hta_python if has_hta else None
        rows = decode_rows(Path(tmp), args.steps, args.events, hta, args.hta_timeout, args.repeat)
        print_decode(rows, args.repeat)
        if args.nsys_events:
            print_nsys(Path(tmp), args.nsys_events)
        if args.nesting:
            print_nesting(Path(tmp), args.nesting)
        if args.big_gb:
            print_big(Path(tmp), args.big_gb)
    print(f"\nthis parent's own peak: {_own_peak_mib():.0f} MiB; load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
