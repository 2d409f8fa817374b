"""`probe bench --executor ray`: a sweep's cells spread over a Ray cluster.

Placement is Ray's, from what each worker asks for. On GPUs a worker is an actor holding one whole GPU, so cells
never share a device (and one CPU, for its host loop: Ray then gives it one intra-op thread); on a CPU-only cluster
a worker holds every CPU of its node, so a node runs one cell at a time (a cell uses every core, one thread each).
Each worker builds the model once (a `CellRunner`) and runs the cells it is handed, one at a time. The driver hands
the next cell to whichever worker is free. Naive's tokens travel with the results: a cell judged against naive
waits until the naive cell of its prompt length has finished (when that cell runs in this sweep), and gets its
reference rows with it. Every outcome goes into the same results folder a local run writes
(`probe.capture.sweep.Sweep`), each cell with the host, device and Ray node it ran on.

A worker that dies (killed, or out of memory in a way Python cannot catch) fails the cell it was running ("the
worker died under this cell"); Ray restarts it, up to MAX_RESTARTS times, for the cells after it. A node that dies
fails the cell its worker was running ("the node died under this cell"), and its worker is not handed more: the
other nodes finish the sweep, the command exits 1, and `--resume` runs what failed. Ray notices a dead node by its
health checks: at once when the node's processes are ended, within about 15 s when its raylet is killed, about a
minute when the node hangs (docs/cluster.md). Nothing waits longer than that: a worker that does not start within
START_TIMEOUT_S, or is not back within RESTART_TIMEOUT_S, is given up, and when no worker is left the cells not run
are failed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from probe.analysis.records.environment import Environment
from probe.analysis.records.results import BenchResults, FailedCell
from probe.capture.config import BenchConfig, settle, validate
from probe.capture.sweep import CellOutcome, CellRunner, CellSpec, RefRows, Sweep, plan, precheck_resume
from probe.cluster import POLL_S, alive_nodes, lost_reason, session
from probe.errors import ProbeError

MAX_RESTARTS = 2  # a worker that died this often is not handed more cells
START_TIMEOUT_S = 900.0  # a worker's start: placed, torch imported, the model built (a large model takes minutes)
RESTART_TIMEOUT_S = 900.0  # a worker Ray restarts after it died: the same again


class _Worker:
    """One GPU, or one node's CPUs: the model built once, cells run one at a time."""

    def __init__(self, cfg: BenchConfig):
        gpus = ray.get_gpu_ids()
        self.runner = CellRunner(cfg, device_label=f"cuda:{gpus[0]}" if gpus else None)
        self.node = ray.get_runtime_context().get_node_id()

    def where(self) -> tuple[str, str, str, Environment]:
        return self.runner.host, self.runner.device_label, self.node, self.runner.environment()

    def run(self, spec: CellSpec, references: RefRows) -> CellOutcome:
        outcome = self.runner.run(spec, references=references)
        outcome.cell = dataclasses.replace(outcome.cell, node=self.node)
        return outcome


Worker = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=0)(_Worker)
# A Worker's actor handle. Ray types its methods' `.remote()` for editors only (a handle's attributes are `Never` to
# mypy), so the handle is untyped here.
WorkerHandle = Any


def placements(device: str) -> tuple[str, list[dict]]:
    """The device type the cells run on, and one set of actor options per worker: a GPU each when the cluster has
    GPUs (and --device allows them), else every CPU of each alive node, pinned to it."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if device.startswith("cuda") or (device == "auto" and gpus):
        if not gpus:
            raise ProbeError(f"--device {device}: the Ray cluster has no GPU")
        return "cuda", [dict(num_gpus=1, num_cpus=1)] * gpus
    return "cpu", [
        dict(num_cpus=r["CPU"], scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        for node, r in alive_nodes().items()
        if r.get("CPU", 0) > 0
    ]


def bench_on_ray(
    cfg: BenchConfig,
    out,
    address: str | None,
    progress: Callable[[int, int, int], None] = lambda done, running, failed: None,
    on_cell: Callable[[BenchResults], None] = lambda r: None,
    resume: bool = False,
) -> BenchResults:
    """The sweep of `cfg` on the Ray cluster at `address` (None: a local instance), saved into `out` after every
    cell as `probe.capture.sweep.bench` does. `progress(done, running, failed)` after every change."""
    with session(address):
        kind, options = placements(cfg.device)
        cfg = settle(cfg, kind)
        specs = plan(cfg, validate(cfg))
        if resume and out is not None:
            precheck_resume(cfg, out)  # before any worker builds a model
        on_worker = dataclasses.replace(cfg, device=kind)  # a worker sees its own GPU as cuda:0
        workers: list[WorkerHandle] = [Worker.options(**o).remote(on_worker) for o in options]
        try:
            where, env = _start(workers)
            sweep = Sweep(cfg, specs, dataclasses.replace(env, executor="ray", workers=len(where)), out, resume)
            return _Dispatch(sweep, where, progress, on_cell).run()
        finally:
            for w in workers:  # on a joined cluster the workers' GPUs and CPUs go back now, not at exit
                ray.kill(w)


def _start(workers: list[WorkerHandle]) -> tuple[dict, Environment]:
    """Where each worker that started is (host, device, node), once it has built its model; the first one's
    environment. A worker that cannot start (its node died, its model does not fit) is left out."""
    refs = {w.where.remote(): w for w in workers}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=START_TIMEOUT_S)
    where: dict = {}
    envs: list[Environment] = []
    errors: list[str] = []
    for ref in refs:
        if ref not in ready:
            errors.append(f"not started within {START_TIMEOUT_S:g} s")
            continue
        try:
            host, device, node, env_here = ray.get(ref)
        except ray.exceptions.RayError as e:
            errors.append(lost_reason(e, "worker's start"))
            continue
        where[refs[ref]] = (host, device, node)
        envs.append(env_here)
    if not where:
        raise ProbeError(f"no Ray worker could start: {errors[0] if errors else 'the cluster has no CPU or GPU'}")
    return where, envs[0]


@dataclass
class _Lost:
    """A cell whose worker died under it: failed once Ray says whether the worker's node lives (it restarts the
    worker there) or not."""

    worker: WorkerHandle
    spec: CellSpec
    ray_error: str  # the error's type, for the cell's message
    since: float  # time.monotonic() when it died


class _Dispatch:
    """The driver's loop: the next ready cell to each free worker, every outcome into the sweep. A worker is idle,
    running one cell, restarting after it died under one (asked where it is until Ray has it back, or says it cannot
    be), or gone."""

    def __init__(self, sweep: Sweep, where: dict, progress, on_cell):
        self.sweep, self.where, self.progress, self.on_cell = sweep, where, progress, on_cell
        self.pending, self.idle = list(sweep.todo), list(where)
        self.running: dict = {}  # object ref of `run` -> (worker, spec)
        self.restarting: dict[object, _Lost] = {}  # object ref of `where` -> the cell its worker died under
        self.references: RefRows = {}
        self.naive = {s.prompt_tokens: s.position for s in self.pending if s.name == "naive" and s.batch == 1}
        self.finished: set[int] = set()

    def ready(self, spec: CellSpec) -> bool:  # its naive reference is known, or will be computed where it runs
        first = self.naive.get(spec.prompt_tokens)
        return first is None or first == spec.position or first in self.finished

    def report(self) -> None:
        self.progress(len(self.sweep.done), len(self.running) + len(self.restarting), len(self.sweep.results.failed))

    def run(self) -> BenchResults:
        while self.pending or self.running or self.restarting:
            for spec in [s for s in self.pending if self.ready(s)][: len(self.idle)]:
                worker = self.idle.pop(0)
                self.pending.remove(spec)
                rows = {k: v for k, v in self.references.items() if k[0] == spec.prompt_tokens}
                self.running[worker.run.remote(spec, rows)] = (worker, spec)
            self.report()
            if not self.running and not self.restarting:  # no worker left alive: what is pending cannot run
                for spec in self.pending:
                    self.add(spec, FailedCell.of(spec.key, "no Ray worker left alive"))
                break
            done, _ = ray.wait([*self.running, *self.restarting], num_returns=1, timeout=POLL_S)
            for ref in done:
                if ref in self.restarting:
                    self.back(ref)
                else:
                    self.outcome(ref)
            self.give_up_restarts()
        self.report()
        return self.sweep.finish()

    def add(self, spec: CellSpec, cell, outcome: CellOutcome | None = None) -> None:
        outcome = outcome or CellOutcome(spec, cell)
        self.references.update(outcome.references)
        self.finished.add(spec.position)
        self.on_cell(self.sweep.add(outcome))

    def fail(self, worker, spec: CellSpec, error: str) -> None:
        host, device, node = self.where[worker]
        self.add(spec, FailedCell.of(spec.key, error, host=host, device=device, node=node))

    def outcome(self, ref) -> None:
        worker, spec = self.running.pop(ref)
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the call raised, not the worker: it takes the next cell
            self.idle.append(worker)
            self.fail(worker, spec, lost_reason(e, "cell"))
            return
        except ray.exceptions.RayError as e:  # the worker died (Ray restarts it on its node, if the node lives)
            self.restarting[worker.where.remote()] = _Lost(worker, spec, type(e).__name__, time.monotonic())
            return
        self.idle.append(worker)
        self.add(spec, outcome.cell, outcome)

    def back(self, ref) -> None:
        lost = self.restarting.pop(ref)
        try:
            host, device, node, _ = ray.get(ref)
        except ray.exceptions.ActorUnavailableError:  # still restarting: ask again
            time.sleep(POLL_S)
            self.restarting[lost.worker.where.remote()] = lost
            return
        except ray.exceptions.RayError as e:  # not coming back: its node died, or its restarts are used up
            node = self.where[lost.worker][2]
            what = "node" if node not in alive_nodes() else "worker"
            self.fail(
                lost.worker,
                lost.spec,
                f"the {what} died under this cell (Ray: {lost.ray_error}, then {type(e).__name__})",
            )
            return
        self.fail(lost.worker, lost.spec, f"the worker died under this cell (Ray: {lost.ray_error}; restarted)")
        self.where[lost.worker] = (host, device, node)
        self.idle.append(lost.worker)  # restarted, its model built again

    def give_up_restarts(self) -> None:
        now = time.monotonic()
        for ref, lost in list(self.restarting.items()):
            if now - lost.since > RESTART_TIMEOUT_S:
                del self.restarting[ref]  # not back in time: gone, as far as this sweep is concerned
                why = f"(Ray: {lost.ray_error}) and was not back in {RESTART_TIMEOUT_S:g} s"
                self.fail(lost.worker, lost.spec, f"the worker died under this cell {why}")
