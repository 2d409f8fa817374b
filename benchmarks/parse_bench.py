"""Parse-plus-ledger speed and memory on a synthetic decode-shaped trace of ~400k events.

    python benchmarks/parse_bench.py                 # 20 and 1000 steps, ours and HTA (if installed)
    python benchmarks/parse_bench.py --no-hta        # ours only
    python benchmarks/parse_bench.py --events 100000 --steps 20 1000
    python benchmarks/parse_bench.py --hta-python /tmp/hta-venv/bin/python   # HTA in a pandas<3 venv

The trace imitates what torch 2.13 writes for a CUDA decode loop under our annotations: one key a line,
`"ts": 5082905510131.070`, and per step the `decode#i` range (and its GPU copy), `forward`, per layer the
`cache.update#l` range and attention, groups of op -> child op -> cudaLaunchKernel -> kernel with their
`ac2g` flow arrows, then `sample` and `sync` with a cudaDeviceSynchronize. The event count is held fixed
while the step count changes, so a parser whose cost grows with the number of steps shows it.

Each case runs in a fresh subprocess, which reports its wall and CPU time and its peak RSS (VmHWM). The
machine is shared, so the load average at the start is printed with the table. HTA (the
`traceinsight` package, imported as `hta`) is timed the same way on the same file: TraceAnalysis() load plus
get_temporal_breakdown(). No figure here is asserted anywhere; this script only reports.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Why these: 4 layers like the tiny preset; ~400k events is where HTA's load time was measured (10.7 s at
# 20 steps, 118 s at 1000 on this machine kind), so the two numbers can be set side by side.
DEFAULT_EVENTS = 400_000
DEFAULT_STEPS = (20, 1000)
LAYERS = 4
PID = TID = 5469
STREAM = 7
T0_NS = 5_082_905_510_131_070  # torch 2.13's ts scale: ~5e12 us, where a float64 cannot hold the ns


def _event(ph: str, cat: str, name: str, pid, tid, ts_ns: int, dur_ns: int | None, args: str) -> str:
    lines = [
        "  {",
        f'    "ph": "{ph}",',
        f'    "cat": "{cat}",',
        f'    "name": "{name}",',
        f'    "pid": {pid},',
        f'    "tid": {tid},',
        f'    "ts": {ts_ns // 1000}.{ts_ns % 1000:03d}',
    ]
    if dur_ns is not None:
        lines[-1] += ","
        lines.append(f'    "dur": {dur_ns // 1000}.{dur_ns % 1000:03d}')
    lines.append("    ,")
    lines.append(f'    "args": {{\n      {args}\n    }}')
    return "\n".join(lines) + "\n  }"


def _flow(ph: str, ident: int, pid, tid, ts_ns: int) -> str:
    extra = ',\n    "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}",\n    "id": {ident},\n    "pid": {pid},\n    "tid": {tid},\n'
        f'    "ts": {ts_ns // 1000}.{ts_ns % 1000:03d},\n    "cat": "ac2g",\n    "name": "ac2g"{extra}\n  }}'
    )


class _Writer:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        self.out: list[str] = []
        self.t = T0_NS  # host clock
        self.gpu_t = T0_NS  # the stream's clock: kernels queue behind each other
        self.ext = 1
        self.corr = 1

    def op(self, cat: str, name: str, ts: int, dur: int) -> None:
        self.out.append(
            _event(
                "X",
                cat,
                name,
                PID,
                TID,
                ts,
                dur,
                f'"External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ext}',
            )
        )
        self.ext += 1

    def launch_group(self, name: str, kernel: str) -> None:
        """A top-level op, its child, the child's cudaLaunchKernel, the kernel, and the flow arrows."""
        rnd, t = self.rnd, self.t
        dur = rnd.randint(8_000, 20_000)
        self.op("cpu_op", name, t, dur)
        self.op("cpu_op", "aten::addmm" if name == "aten::linear" else name + "_out", t + 1_000, dur - 2_000)
        launch = t + 2_500
        self.out.append(
            _event(
                "X",
                "cuda_runtime",
                "cudaLaunchKernel",
                PID,
                TID,
                launch,
                4_000,
                f'"External id": {self.ext - 1},"cbid": 211, "correlation": {self.corr}',
            )
        )
        self.out.append(_flow("s", self.corr, PID, TID, launch))
        self.gpu_t = max(self.gpu_t, launch + 6_000)
        kd = rnd.randint(2_000, 9_000)
        self.out.append(
            _event(
                "X",
                "kernel",
                kernel,
                0,
                STREAM,
                self.gpu_t,
                kd,
                f'"queued": 0, "device": 0, "context": 1,"stream": {STREAM}, "correlation": {self.corr}, '
                '"registers per thread": 32, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0, '
                '"grid": [66, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 3',
            )
        )
        self.out.append(_flow("f", self.corr, 0, STREAM, self.gpu_t))
        self.gpu_t += kd
        self.corr += 1
        self.t += dur + rnd.randint(1_000, 3_000)  # the Python between ops

    def range(self, name: str, ts: int, dur: int) -> None:
        self.op("user_annotation", name, ts, dur)


def make_trace(steps: int, events: int = DEFAULT_EVENTS, seed: int = 0) -> bytes:
    """A torch-2.13-style chrome trace with `steps` decode steps and about `events` events in all."""
    w = _Writer(seed)
    fixed = 10 + 2 * LAYERS  # ranges per step outside the launch groups
    groups = max(LAYERS * 2, (events // steps - fixed) // 6)
    per_layer = groups // LAYERS
    for i in range(steps):
        start = w.t
        first_kernel = len(w.out)
        w.t += 3_000
        fwd = w.t
        for layer in range(LAYERS):
            for g in range(per_layer):
                if g == per_layer // 2:
                    t = w.t
                    w.launch_group("aten::cat", "CatArrayBatchedCopy")
                    w.range(f"cache.update#{layer}", t - 500, w.t - t)
                elif g == per_layer // 2 + 1:
                    w.launch_group("aten::scaled_dot_product_attention", "flash_fwd_kernel")
                else:
                    w.launch_group("aten::linear", "gemv_kernel")
        w.range("forward", fwd, w.t - fwd)
        t = w.t
        w.launch_group("aten::argmax", "reduce_kernel")
        w.range("sample", t - 200, w.t - t + 200)
        t = w.t
        sync = max(w.gpu_t - t, 5_000)
        w.out.append(
            _event(
                "X",
                "cuda_runtime",
                "cudaDeviceSynchronize",
                PID,
                TID,
                t + 500,
                sync,
                f'"cbid": 165, "correlation": {w.corr}',
            )
        )
        w.corr += 1
        w.t += sync + 1_000
        w.range("sync", t, w.t - t)
        w.out.insert(
            first_kernel,
            _event("X", "user_annotation", f"decode#{i}", PID, TID, start, w.t - start, f'"External id": {w.ext}'),
        )
        w.out.append(
            _event(
                "X",
                "gpu_user_annotation",
                f"decode#{i}",
                0,
                STREAM,
                start + 9_000,
                w.gpu_t - start - 9_000,
                f'"External id": {w.ext}',
            )
        )
        w.ext += 1
        w.t += 2_000
    head = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "distributedInfo": {"rank": 0},\n'
        '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n'
    )
    return (head + ",\n".join(w.out) + '\n  ],"traceName": "synthetic" }').encode()


def _peak_rss_bytes() -> int:
    """This process's peak resident set (probe.capture.telemetry.backends.peak_rss_bytes, repeated here because
    the HTA child runs under another venv's python, where probe is not importable). VmHWM, because ru_maxrss
    survives exec on Linux and would report the parent's peak (it held the generated trace) when larger."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def measure_ours(path: str) -> dict:
    from probe.analysis.ledger import analyze
    from probe.analysis.trace import load_trace

    before = _peak_rss_bytes()
    c0, t0 = time.process_time(), time.perf_counter()
    trace = load_trace(path)
    t1 = time.perf_counter()
    result = analyze(trace)
    c2, t2 = time.process_time(), time.perf_counter()
    return {
        "parse_s": t1 - t0,
        "ledger_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": c2 - c0,
        "peak_rss_bytes": _peak_rss_bytes(),
        "rss_before_bytes": before,
        "events": len(trace),
        "steps": len(result.steps),
        "kernels": result.totals.kernels,
    }


def measure_hta(path: str) -> dict:
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    c0, t0 = time.process_time(), time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(Path(path).parent))
    t1 = time.perf_counter()
    analysis.get_temporal_breakdown(visualize=False)
    c2, t2 = time.process_time(), time.perf_counter()
    return {
        "parse_s": t1 - t0,
        "ledger_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": c2 - c0,
        "peak_rss_bytes": _peak_rss_bytes(),
    }


def _run_child(which: str, path: Path, timeout: float, python: str = sys.executable) -> dict:
    cmd = [python, __file__, "--measure", which, str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:60]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _hta_available(python: str) -> bool:
    done = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="events in each synthetic trace")
    p.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS), help="step counts to try")
    p.add_argument("--no-hta", action="store_true", help="skip HTA even if it is installed")
    p.add_argument("--hta-timeout", type=float, default=600, help="seconds before an HTA run is abandoned")
    # HTA 0.6.1 (traceinsight) breaks under pandas 3 on traces past 32k events (an int16 index column can no
    # longer be upcast in place), so its side may need its own environment: a venv with pandas<3.
    p.add_argument(
        "--hta-python", default=sys.executable, help="interpreter that has HTA installed (default: this one)"
    )
    p.add_argument("--measure", nargs=2, metavar=("WHO", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        who, path = args.measure
        print(json.dumps(measure_ours(path) if who == "ours" else measure_hta(path)))
        return 0

    from rich.console import Console
    from rich.table import Table

    hta = not args.no_hta and _hta_available(args.hta_python)
    table = Table(
        title=f"parse + ledger, ~{args.events:,} events (load average {os.getloadavg()[0]:.1f})", title_justify="left"
    )
    for col in ("steps", "file MB", "events kept", "parse s", "ledger s", "total s", "CPU s", "peak RSS MiB"):
        table.add_column(col, justify="right")
    if hta:
        for col in ("HTA s", "HTA CPU s", "HTA peak MiB", "HTA / ours"):
            table.add_column(col, justify="right")
    rows = []
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        for steps in args.steps:
            folder = Path(tmp) / f"s{steps}"
            folder.mkdir()
            path = folder / "trace.json"
            path.write_bytes(make_trace(steps, args.events))
            ours = _run_child("ours", path, timeout=600)
            row = [str(steps), f"{path.stat().st_size / 1e6:.0f}"]
            if "error" in ours:
                row += [ours["error"], "", "", "", "", ""]
            else:
                row += [
                    f"{ours['events']:,}",
                    f"{ours['parse_s']:.2f}",
                    f"{ours['ledger_s']:.2f}",
                    f"{ours['total_s']:.2f}",
                    f"{ours['cpu_s']:.2f}",
                    f"{ours['peak_rss_bytes'] / 2**20:.0f}",
                ]
            result = {"steps": steps, "ours": ours}
            if hta:
                theirs = _run_child("hta", path, timeout=args.hta_timeout, python=args.hta_python)
                result["hta"] = theirs
                if "error" in theirs or "error" in ours:
                    row += [theirs.get("error", ""), "", "", ""]
                else:
                    row += [
                        f"{theirs['total_s']:.1f}",
                        f"{theirs['cpu_s']:.1f}",
                        f"{theirs['peak_rss_bytes'] / 2**20:.0f}",
                        f"{theirs['total_s'] / ours['total_s']:.1f}x",
                    ]
            table.add_row(*row)
            rows.append(result)
    Console(highlight=False, width=150).print(table)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
