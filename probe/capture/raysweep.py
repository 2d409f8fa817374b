"""`probe bench --executor ray`: a sweep's cells spread over a Ray cluster.

Placement is Ray's, from what each worker asks for. On GPUs a worker is an actor holding one whole GPU, so cells
never share a device (and one CPU, for its host loop: Ray then gives it one intra-op thread); on a CPU-only cluster
a worker holds every CPU of its node, so a node runs one cell at a time (a cell uses every core, one thread each).
Each worker builds the model once (a `CellRunner`) and runs the cells it is handed, one at a time. The driver hands
the next cell to whichever worker is free. Naive's tokens travel with the results: a cell judged against naive
waits until the naive cell of its prompt length has finished (when that cell runs in this sweep), and gets its
reference rows with it. Every outcome goes into the same results folder a local run writes
(`probe.capture.sweep.Sweep`), each cell with the host and device it ran on.

A worker that dies (killed, or out of memory in a way Python cannot catch) fails the cell it was running; Ray
restarts it, up to MAX_RESTARTS times, for the cells after it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from probe.analysis.results import BenchResults, FailedCell
from probe.capture.config import BenchConfig, settle, validate
from probe.capture.sweep import CellRunner, CellSpec, Outcome, RefRows, Sweep, one_line, plan, precheck_resume
from probe.cluster import session
from probe.errors import ProbeError

MAX_RESTARTS = 2  # a worker that died this often is not handed more cells
RESTART_POLL_S = 0.5  # how often a restarting worker is asked whether it is back


class _Worker:
    """One GPU, or one node's CPUs: the model built once, cells run one at a time."""

    def __init__(self, cfg: BenchConfig):
        gpus = ray.get_gpu_ids()
        self.runner = CellRunner(cfg, device_label=f"cuda:{gpus[0]}" if gpus else None)

    def where(self) -> tuple[str, str, dict]:
        return self.runner.host, self.runner.device_label, self.runner.environment()

    def run(self, spec: CellSpec, references: RefRows) -> Outcome:
        return self.runner.run(spec, references=references)


Worker = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=0)(_Worker)


def placements(device: str) -> tuple[str, list[dict]]:
    """The device type the cells run on, and one set of actor options per worker: a GPU each when the cluster has
    GPUs (and --device allows them), else every CPU of each alive node, pinned to it."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if device.startswith("cuda") or (device == "auto" and gpus):
        if not gpus:
            raise ProbeError(f"--device {device}: the Ray cluster has no GPU")
        return "cuda", [dict(num_gpus=1, num_cpus=1)] * gpus
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    return "cpu", [
        dict(
            num_cpus=n["Resources"]["CPU"],
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        )
        for n in nodes
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
        workers, where, env = _start(on_worker, options)
        sweep = Sweep(cfg, specs, dataclasses.replace(env, executor="ray", workers=len(workers)), out, resume)
        return _dispatch(sweep, workers, where, progress, on_cell)


def _start(cfg: BenchConfig, options: list[dict]):
    """The workers that started (each has built its model), where each is, and the first one's environment."""
    workers = [Worker.options(**o).remote(cfg) for o in options]
    started, where, errors = [], {}, []
    for w in workers:
        try:
            host, device, env = ray.get(w.where.remote())
        except ray.exceptions.RayError as e:
            errors.append(_error(e))
            continue
        started.append(w)
        where[w] = (host, device, env)
    if not started:
        raise ProbeError(f"no Ray worker could start: {errors[0] if errors else 'the cluster has no CPU or GPU'}")
    return started, where, where[started[0]][2]


def _error(e: BaseException) -> str:
    """A Ray error in one line: the exception a task raised, or that its worker died."""
    if isinstance(e, ray.exceptions.RayActorError):
        return f"the worker died under this cell (Ray: {type(e).__name__})"
    cause = getattr(e, "cause", None)
    return one_line(cause) if isinstance(cause, BaseException) else one_line(e)


def _dispatch(sweep: Sweep, workers: list, where: dict, progress, on_cell) -> BenchResults:
    pending, idle = list(sweep.todo), list(workers)
    running: dict = {}  # object ref -> (worker, spec)
    probes: dict = {}  # object ref -> a worker that died: asked where it is until Ray has restarted it
    deaths = dict.fromkeys(workers, 0)
    references: RefRows = {}
    naive = {s.prompt_tokens: s.position for s in pending if s.name == "naive" and s.batch == 1}
    finished: set[int] = set()

    def ready(spec: CellSpec) -> bool:  # its naive reference is known, or will be computed where it runs
        first = naive.get(spec.prompt_tokens)
        return first is None or first == spec.position or first in finished

    def report() -> None:
        progress(len(sweep.done), len(running), len(sweep.results.failed))

    try:
        while pending or running:
            for spec in [s for s in pending if ready(s)][: len(idle)]:
                worker = idle.pop(0)
                pending.remove(spec)
                rows = {k: v for k, v in references.items() if k[0] == spec.prompt_tokens}
                running[worker.run.remote(spec, rows)] = (worker, spec)
            report()
            if not running and not probes:  # no worker left alive: what is pending cannot run
                for spec in pending:
                    on_cell(sweep.add(Outcome(spec, FailedCell.of(spec.key, "no Ray worker left alive"))))
                break
            [ref], _ = ray.wait([*running, *probes], num_returns=1)
            if ref in probes:
                worker = probes.pop(ref)
                try:
                    ray.get(ref)
                    idle.append(worker)  # restarted, its model built again
                except ray.exceptions.ActorUnavailableError:  # still restarting
                    time.sleep(RESTART_POLL_S)
                    probes[worker.where.remote()] = worker
                except ray.exceptions.RayError:
                    pass  # gone for good
                continue
            worker, spec = running.pop(ref)
            try:
                outcome = ray.get(ref)
                idle.append(worker)
            except ray.exceptions.RayError as e:
                host, device, _ = where[worker]
                outcome = Outcome(spec, FailedCell.of(spec.key, _error(e), host=host, device=device))
                if not isinstance(e, ray.exceptions.RayActorError):
                    idle.append(worker)  # the call failed, not the worker
                else:
                    deaths[worker] += 1
                    if deaths[worker] <= MAX_RESTARTS:
                        probes[worker.where.remote()] = worker
            references.update(outcome.references)
            finished.add(spec.position)
            on_cell(sweep.add(outcome))
        report()
        return sweep.finish()
    finally:
        for w in workers:  # on a joined cluster the workers' GPUs and CPUs go back now, not at exit
            ray.kill(w)
