"""Sweeps and trace analysis on real Ray clusters, every one on 127.0.0.1.

The module's cluster (ray.cluster_utils.Cluster): a head with no CPU (the drivers' node) and three worker nodes of
one CPU each, every node its own raylet, object store and node id, named by a custom resource (node-a, node-b,
node-c), with token authentication on (tests/conftest.py). This process joins it for the in-process tests; the CLI's
processes join it with --address and RAY_AUTH_MODE=token, as a user joins a real cluster. A node dies as a crashed
machine's does: its raylet is SIGKILLed, and a fresh node takes its name after the test. Local instances (no
--address), the listening sockets, and joins that fail are tested on the CLI alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

from probe.analysis.ledger.ranks import TraceFailure, analyze_one, lost_trace
from probe.analysis.ledger.types import TraceAnalysis
from probe.analysis.records.results import load_results
from probe.capture.config import BenchConfig
from probe.capture.raysweep import bench_on_ray
from probe.capture.sweep import bench
from probe.cluster import fan_out, is_loopback, listening
from probe.commands.analyze import analyze_and_answer
from tests.conftest import DATA, ROOT, interrupt_sweep, run_probe
from tests.ranks import make_rank_traces
from tests.variants import HOLD_DIR_VAR, RAISE_AT_PROMPT

# Under xdist (.ci/run) the module's tests share one worker, so one cluster serves them all.
pytestmark = pytest.mark.xdist_group("ray")

SMALL = dict(prompts=(8, 24), new_tokens=5, runs=1, warmup=0, device="cpu")
NODES = ("node-a", "node-b", "node-c")


@dataclass
class Nodes:
    """The module's cluster: its address, and its worker nodes by name."""

    cluster: Cluster
    address: str
    hold: Path  # HoldingEngine's marker folder

    def names(self) -> dict[str, str]:
        """Node id -> name, for the alive worker nodes."""
        return {
            n["NodeID"]: name for n in ray.nodes() if n["Alive"] for name in NODES if name in n.get("Resources", {})
        }

    def crash(self, node_id: str) -> str:
        """SIGKILL node `node_id`'s raylet and every process under it (its workers, its agents) at once, as a
        machine that crashes stops them all; returns the node's name."""
        name = self.names()[node_id]
        [node] = [n for n in self.cluster.worker_nodes if n.node_id == node_id]
        raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
        for p in [raylet, *raylet.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.dead.append((node, name))
        return name

    def heal(self) -> None:
        """Clear the crashed nodes' leftovers, and start a fresh node under each one's name."""
        while self.dead:
            node, name = self.dead.pop()
            self.cluster.remove_node(node, allow_graceful=False)
            self.cluster.add_node(num_cpus=1, resources={name: 1})
        self.cluster.wait_for_nodes()
        deadline = time.monotonic() + 60
        while len(self.names()) < len(NODES) and time.monotonic() < deadline:
            time.sleep(0.2)

    def __post_init__(self):
        self.dead: list = []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    hold = tmp_path_factory.mktemp("hold")
    assert os.environ["RAY_AUTH_MODE"] == "token"  # tests/conftest.py: token authentication, the session's token
    with pytest.MonkeyPatch.context() as env:
        env.setenv(HOLD_DIR_VAR, str(hold))  # every node inherits it, and the workers started there
        env.delenv("RAY_ADDRESS", raising=False)
        start = time.monotonic()
        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        for name in NODES:
            c.add_node(num_cpus=1, resources={name: 1})
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, logging_level=logging.WARNING)
        print(f"\nthe cluster: a head and {len(NODES)} nodes up and joined in {time.monotonic() - start:.1f} s")
        try:
            yield Nodes(c, c.address, hold)
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.fixture
def crashable(cluster):
    """The module's cluster, for a test that crashes nodes: fresh ones take their names after it."""
    yield cluster
    cluster.heal()


def sweep_args(address: str, out: Path, *more: str) -> list[str]:
    return ["bench", "--executor", "ray", "--address", address, "--new-tokens", "4", "--runs", "1", "--warmup", "0",
            "--device", "cpu", "--no-history", "--out", str(out), *more]  # fmt: skip


@pytest.mark.slow
def test_a_sweep_over_three_nodes_gives_the_cells_a_local_run_gives(cluster, tmp_path):
    cfg = BenchConfig(**SMALL, engines=("naive", "cached", "batched"), batch=(1, 2))
    here = bench(cfg, tmp_path / "local")
    there = bench_on_ray(cfg, tmp_path / "ray", None)
    assert [c.key for c in there.cells] == [c.key for c in here.cells]
    assert len(here.cells) == 12  # 3 engines, 2 prompts, 2 batches
    for a, b in zip(here.cells, there.cells, strict=True):
        assert (b.tokens, b.decode_ops, b.prefill_ops) == (a.tokens, a.decode_ops, a.prefill_ops)
        assert b.decode_ops_by_op == a.decode_ops_by_op and b.parity == a.parity and b.tokens_match_naive
        assert (b.host, b.device) == (a.host, "cpu") and a.node is None
    # The module's cluster listens where the tests' clusters must: on 127.0.0.1 only (every node is a child here).
    sockets = listening(os.getpid())
    assert {s.process for s in sockets} >= {"gcs_server", "raylet"} and all(is_loopback(s.ip) for s in sockets)
    names = cluster.names()
    print("\ncell            node    node id")
    for c in there.cells:
        print(f"{c.label:<15} {names[c.node]}  {c.node}")
    # Each node ran cells: the two naive cells went to two workers at once, the third took the first cell after.
    assert {names[c.node] for c in there.cells} == set(NODES)
    folder = tmp_path / "ray"
    for name in ("results.json", "cells.parquet", "cells.csv", "telemetry.parquet"):
        assert (folder / name).is_file()
    saved = load_results(folder)
    assert saved.env.executor == "ray" and saved.env.workers == 3 and saved.complete
    assert [c.node for c in saved.cells] == [c.node for c in there.cells]
    same = run_probe("compare", str(tmp_path / "local"), str(folder), "--counts-only")
    assert same.returncode == 0, same.stdout + same.stderr


@pytest.mark.slow
def test_on_ray_a_cell_that_raises_or_kills_its_worker_is_recorded_and_the_rest_finish(cluster, tmp_path):
    out = tmp_path / "o"
    engines = "naive,tests.variants:RaisingEngine,tests.variants:DyingEngine"
    args = sweep_args(cluster.address, out, "--engines", engines, "--prompts", f"8,{RAISE_AT_PROMPT},24")
    result = run_probe(*args)
    assert result.returncode == 1, result.stderr
    results = load_results(out)
    failed = {f.engine: f for f in results.failed}
    assert set(failed) == {"raising", "dying"} and {f.prompt_tokens for f in failed.values()} == {RAISE_AT_PROMPT}
    assert failed["raising"].error.startswith("RuntimeError: out of memory")
    assert failed["dying"].error.startswith("the worker died under this cell")
    assert failed["dying"].node in cluster.names()  # where it died
    # Every other cell finished, the dying engine's p24 on the worker Ray restarted after it died.
    assert len(results.cells) == 7 and all(c.tokens_match_naive for c in results.cells)
    assert ("dying", 24) in {(c.engine, c.prompt_tokens) for c in results.cells}
    # Piped, progress is a line a cell (a bar only on a terminal): the last of nine, two of them failed.
    done = [line for line in result.stdout.splitlines() if " of 9 done: " in line]
    assert len(done) == 9 and "cell 9 of 9 done: " in done[-1], result.stdout
    assert sum(": FAILED: " in line for line in done) == 2, result.stdout
    assert "2 of 9 cells failed: raising p16 on " in result.stderr


@pytest.mark.slow
def test_a_node_that_dies_under_a_cell_fails_it_the_rest_finish_and_resume_completes(crashable, tmp_path):
    """The holding engine's p16 cell stops in its prefill; its node's raylet is SIGKILLed. That cell is failed,
    named with its node; the other nodes finish the sweep; --resume runs that cell."""
    out = tmp_path / "sweep"
    args = sweep_args(crashable.address, out, "--engines", "naive,tests.variants:HoldingEngine", "--prompts", "8,16,24")
    marker = crashable.hold / f"holding-p{RAISE_AT_PROMPT}"
    proc = _probe(args)
    try:
        held = _wait_for_json(marker, proc)
        name = crashable.crash(held["node"])
        killed = time.monotonic()
        _wait_for(lambda: (out / "results.json").is_file() and load_results(out).failed, proc)
        print(f"\n{name} crashed under holding p16: the cell was failed {time.monotonic() - killed:.1f} s after")
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    print("the sweep that lost a node, its stderr's last lines:\n" + "\n".join(stderr.strip().splitlines()[-3:]))
    assert proc.returncode == 1, stderr
    results = load_results(out)
    [failed] = results.failed
    assert (failed.engine, failed.prompt_tokens, failed.node) == ("holding", 16, held["node"])
    assert failed.error.startswith("the node died under this cell (Ray: ")
    assert len(results.cells) == 5 and all(c.tokens_match_naive for c in results.cells) and results.complete
    assert len({c.node for c in results.cells}) >= 2  # the sweep went on over the nodes left
    assert "1 of 6 cells failed: holding p16 on " in stderr and ": the node died under this cell" in stderr

    done = run_probe(*args, "--resume")
    assert done.returncode == 0, done.stderr
    final = load_results(out)
    assert final.complete and final.failed == [] and len(final.cells) == 6
    assert all(c.tokens_match_naive for c in final.cells)
    kept = {c.key: c for c in results.cells}
    assert all(c.ttft_runs_ms == kept[c.key].ttft_runs_ms for c in final.cells if c.key in kept)  # not run again


@pytest.mark.slow
def test_sigterm_to_a_sweep_keeps_the_finished_cells_ends_its_workers_and_resume_finishes(cluster, tmp_path):
    out = tmp_path / "sweep"
    args = sweep_args(cluster.address, out, "--prompts", "8,16,32,64,128")
    args[args.index("--new-tokens") + 1] = "16"
    stopped = interrupt_sweep(args, out, signal.SIGTERM)
    err = stopped.stderr
    assert stopped.returncode == 128 + signal.SIGTERM, err
    kept = load_results(out)
    assert 2 <= len(kept.cells) < 10 and not kept.complete
    assert f"interrupted: {len(kept.cells)} of 10 cells kept in {out / 'results.json'}; to finish: probe bench " in err
    # Its workers (actors of this sweep's job) are gone from the cluster's nodes: nothing of it keeps a CPU.
    assert _wait_for(lambda: not _actor_processes(), None, timeout=30)

    done = run_probe(*args, "--resume")
    assert done.returncode == 0, done.stderr
    final = load_results(out)
    assert final.complete and len(final.cells) == 10 and all(c.tokens_match_naive for c in final.cells)
    by_key = {c.key: c for c in final.cells}
    for c in kept.cells:  # kept, not run again
        assert by_key[c.key].ttft_runs_ms == c.ttft_runs_ms and by_key[c.key].itl_runs_ms == c.itl_runs_ms


@pytest.mark.slow
def test_analyze_on_ray_names_the_same_straggler_as_the_local_pool(cluster, tmp_path):
    make_rank_traces(tmp_path / "job", ranks=4, slow_rank=1, stretch=1.5)
    local = run_probe("analyze", str(tmp_path / "job"), "--json")
    remote = run_probe("analyze", str(tmp_path / "job"), "--json", "--executor", "ray", "--address", cluster.address)
    assert local.returncode == remote.returncode == 0, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert b["by_step"] == a["by_step"] and b["straggler"] == a["straggler"]
    assert b["straggler"]["rank"] == 1 and b["straggler"]["slowest_steps"] == 5
    assert b["straggler"]["median_trail_pct"] == pytest.approx(50.0, abs=1e-4)


@pytest.mark.slow
def test_analyze_on_ray_a_trace_whose_node_died_is_named_and_the_others_are_analyzed(crashable, tmp_path):
    """Four traces of 2 s each on three nodes; the node analyzing the first one to start dies."""
    [long] = make_rank_traces(tmp_path, ranks=1, repeat=12)
    for r in (1, 2, 3):
        shutil.copy(long, tmp_path / f"copy{r}.trace.json.gz")
    cmd = ["analyze", str(tmp_path), "--json", "--executor", "ray", "--address", crashable.address]
    proc = _probe(cmd)
    try:
        task = _wait_for(lambda: _task_processes(f"ray::{analyze_and_answer.__name__}"), proc)[0]  # its Ray task
        raylet = task.parent()
        [node_id] = [
            n.node_id for n in crashable.cluster.worker_nodes if n.all_processes["raylet"][0].process.pid == raylet.pid
        ]
        name = crashable.crash(node_id)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and out, err
    doc = json.loads(out)
    [failed] = doc["failed"]
    assert failed["error"].startswith(("the node died under this task", "the worker died under this task")), failed
    assert len(doc["traces"]) == 3 and doc["one_job"] is False  # the copies all say rank 0: a list of traces
    assert f"probe: error: {failed['source']}: {failed['error']}" in err and "Traceback" not in err
    print(f"\n{name} died under {Path(failed['source']).name}: {failed['error']}")


@pytest.mark.slow
def test_a_task_no_alive_node_can_run_is_failed_not_waited_for(cluster):
    """No node has 64 CPUs: a task asking for them would wait forever; it is failed in its place, named."""
    items = [
        (DATA / "hand_decode.trace.json.gz", None),
        (DATA / "app" / "traces" / "tiny_cached_cpu_p16_n6.trace.json.gz", None),
    ]
    ran = fan_out(analyze_one, items, lost=lost_trace)
    assert [a.source for a in ran] == [str(p) for p, _ in items] and all(isinstance(a, TraceAnalysis) for a in ran)
    assert fan_out(analyze_one, items, num_cpus=64, lost=lost_trace) == [
        TraceFailure(str(p), "no alive Ray node has 64 CPU to run it") for p, _ in items
    ]


@pytest.mark.slow
def test_probe_run_sends_its_sweeps_to_ray(cluster, tmp_path):
    out = tmp_path / "run"
    result = run_probe(
        "run", "--executor", "ray", "--address", cluster.address, "--prompts", "8", "--new-tokens", "4", "--runs",
        "1", "--warmup", "0", "--device", "cpu", "--no-history", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    main, batched = load_results(out), load_results(out / "next-batched")
    assert main.env.executor == batched.env.executor == "ray"
    assert [(c.engine, c.batch) for c in main.cells + batched.cells] == [
        ("naive", 1), ("cached", 1), ("batched", 1), ("batched", 2), ("batched", 4), ("batched", 8),
    ]  # fmt: skip
    assert all(c.tokens_match_naive and c.host and c.device == "cpu" for c in main.cells + batched.cells)
    assert all(c.node in cluster.names() for c in main.cells + batched.cells)
    assert (out / "report.json").is_file() and "report folder:" in result.stdout


# ---------------------------------------------------------------------------------------------------------------
# A local instance (no --address), and joins that fail: the CLI alone, no cluster.


def local_env(**more: str) -> dict:
    """The environment of a CLI process that no cluster of this module's touches, and that gets none of Ray's
    settings from the tests (tests/conftest.py): the command must bring its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", HOLD_DIR_VAR))}
    return env | more


@pytest.mark.slow
def test_a_local_instance_listens_on_loopback_only_and_sigterm_leaves_nothing_behind(tmp_path):
    """Without token authentication (RAY_AUTH_MODE=disabled, which Ray allows): every port the sweep's local
    instance listens on, read while its cells run, is on 127.0.0.1. Then SIGTERM: the finished cells are kept in a
    consistent folder, and every process the command started is gone."""
    out = tmp_path / "sweep"
    args = ["bench", "--executor", "ray", "--prompts", "8,16,32,64,128", "--new-tokens", "16", "--runs", "2",
            "--warmup", "0", "--device", "cpu", "--no-history", "--out", str(out)]  # fmt: skip
    proc = _probe(args, env=local_env(RAY_AUTH_MODE="disabled"))
    try:
        _wait_for(lambda: (out / "results.json").is_file() and len(load_results(out).cells) >= 1, proc)
        sockets = listening(proc.pid)
        tree = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\nthe local instance's listening sockets during the sweep: {sorted((s.process, s.ip) for s in sockets)}")
    assert {s.process for s in sockets} >= {"gcs_server", "raylet"}  # the instance, not an empty read
    assert [s for s in sockets if not is_loopback(s.ip)] == []
    assert proc.returncode == 128 + signal.SIGTERM, err
    kept = load_results(out)
    assert 1 <= len(kept.cells) < 10 and not kept.complete
    assert f"interrupted: {len(kept.cells)} of 10 cells kept" in err
    assert len(pd.read_csv(out / "cells.csv")) == len(kept.cells) + len(kept.failed)  # the folder's files agree
    assert _wait_for(lambda: not [p for p in tree if _running(p)], None, timeout=30)


def test_a_local_instance_ray_would_put_on_the_network_is_refused(tmp_path):
    """RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 puts a local instance's node on the machine's network address, every
    port bound there; with authentication off, anyone who can reach the machine could run code in it."""
    _two_traces(tmp_path)
    env = local_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_AUTH_MODE="disabled")
    result = run_probe("analyze", str(tmp_path), "--executor", "ray", env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("probe: error: a local Ray instance listens on 127.0.0.1 only, and Ray would ")
    assert len(result.stderr.strip().splitlines()) == 1


class FakeGCS:
    """Something that answers on an address where a Ray cluster is expected, on another loopback address: it
    accepts every connection, sends an empty HTTP/2 SETTINGS frame, then keeps what it receives and never answers."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.2", 0))
        self.address = f"127.0.0.2:{self.server.getsockname()[1]}"
        self.received = bytearray()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            threading.Thread(target=self._keep, args=(conn,), daemon=True).start()

    def _keep(self, conn):
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                self.received += data

    def close(self):
        self.server.close()


@pytest.fixture
def fake_gcs():
    fake = FakeGCS()
    yield fake
    fake.close()


def _two_traces(folder: Path) -> None:
    """Something to analyze: the two CPU traces of tests/data/app (the test is about reaching Ray, not the traces)."""
    folder.mkdir(parents=True, exist_ok=True)
    for trace in (DATA / "app" / "traces").glob("*.trace.json.gz"):
        shutil.copy(trace, folder)


def _join(address: str, tmp_path: Path, **env: str) -> subprocess.Popen:
    _two_traces(tmp_path)
    return _probe(["analyze", str(tmp_path), "--executor", "ray", "--address", address], local_env(**env))


@pytest.mark.slow  # Ray joins a cluster (a fake GCS) in processes
def test_joining_sends_the_token_only_when_asked_and_gives_up_in_one_line(fake_gcs, tmp_path):
    """This machine holds a token (RAY_AUTH_TOKEN); an address answers that is no Ray cluster of ours. Asked for
    nothing, the command sends it no token, and says in one line that no cluster answered, after the timeout."""
    token = secrets.token_hex(16)
    proc = _join(fake_gcs.address, tmp_path / "a", RAY_AUTH_TOKEN=token, PROBE_RAY_CONNECT_TIMEOUT_S="8")
    _, err = proc.communicate(timeout=120)
    assert fake_gcs.connections >= 1 and b"PRI * HTTP/2.0" in fake_gcs.received  # it spoke gRPC to the fake
    assert token.encode() not in fake_gcs.received and b"authorization" not in fake_gcs.received
    assert proc.returncode == 2
    assert err.strip().splitlines()[-1] == (
        f"probe: error: joining the Ray cluster at {fake_gcs.address}: no answer within 8 s "
        "($PROBE_RAY_CONNECT_TIMEOUT_S)"
    )
    assert "Traceback" not in err

    # Asked (RAY_AUTH_MODE=token, Ray's documented way), the token goes: the check above can see one sent.
    fake_gcs.received.clear()
    proc = _join(fake_gcs.address, tmp_path / "b", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
                 PROBE_RAY_CONNECT_TIMEOUT_S="8")  # fmt: skip
    proc.communicate(timeout=120)
    assert proc.returncode == 2 and token.encode() in fake_gcs.received


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_join_that_waits(fake_gcs, tmp_path, signum):
    proc = _join(fake_gcs.address, tmp_path, PROBE_RAY_CONNECT_TIMEOUT_S="300")
    _wait_for(lambda: fake_gcs.connections >= 1 and len(fake_gcs.received) > 100, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)  # long before the 300 s the join would have waited
    assert proc.returncode == 128 + signum
    assert err.strip().splitlines()[-1] == f"probe: interrupted while joining the Ray cluster at {fake_gcs.address}"


def test_an_address_nothing_listens_on_is_one_line_at_once(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed on leaving: nothing listens there any more
    proc = _join(f"127.0.0.1:{port}", tmp_path, PROBE_RAY_CONNECT_TIMEOUT_S="300")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip() == f"probe: error: cannot join the Ray cluster at 127.0.0.1:{port}: Connection refused"


# ---------------------------------------------------------------------------------------------------------------


def _probe(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """`probe ARGS` started, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "probe", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _wait_for(check, proc: subprocess.Popen | None, timeout: float = 300):
    """check()'s first true value, asked every 50 ms; fails when `proc` ends first or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the command ended first: {proc.returncode} {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


def _wait_for_json(path: Path, proc: subprocess.Popen) -> dict:
    def read():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    return _wait_for(read, proc)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _task_processes(title: str) -> list[psutil.Process]:
    """The module cluster's worker processes (descendants of this one) whose title starts with `title`: Ray sets
    it to ray::<what runs there>."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if (p.cmdline() or [""])[0].startswith(title) and _running(p):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _actor_processes() -> list[psutil.Process]:
    return _task_processes("ray::_Worker")
