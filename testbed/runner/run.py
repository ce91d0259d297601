"""Running an experiment: every config x repeat on Ray, events collected, folder written.

This is the one place that wires the training actors together. For each config and
repeat: reserve a placement group (``testbed.runner.placement``), prepare the data on the
nodes where workers will land (untimed), start the shard and worker actors in their
bundles, the I/O gate (sequential init) and the step clock (``ssp``), all timed as
``setup``; run the initialization phase (``init``), run the training loop (``train``),
collect every actor's events, check that no update was lost, stop the actors, remove
the placement group, write the events atomically. A node monitor per node
(``testbed.runner.nodes``) samples the resources around each config.

A worker that fails ends the config at once: the driver waits for the workers one
result at a time and kills every actor of the config on the first error, so workers
blocked at a barrier do not wait for one that will never come. The config is then
recorded as ``failed`` with the events its actors still hold, and the sweep goes on.

Reliability (docs/reliability.md): a config with a deadline (``deadline_s``, or the default
the caller computed from the model) is stopped when it passes it and recorded as
``timed_out`` with the events collected so far. A config with kill faults or checkpoints gets
a state folder (``state/<config>-r<repeat>/`` in the run folder, emptied when the config starts
and removed when it ends normally, so a config resumed after a driver's crash starts clean) and
actors that Ray restarts (``restarts``) and whose calls it retries; the shards' lost updates
enter the update count check (applied = pushed - lost).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import psutil

from actors.clock import ClockActor
from actors.gate import remote_gate
from actors.host import WorkerHost, host_name
from actors.server import ServerActor
from testbed.config.errors import UserError
from testbed.config.faults import KillServer, KillWorker, shard_faults
from testbed.config.spec import (
    ExperimentSpec,
    InitIO,
    RunConfig,
    SyncMode,
    expand,
    spec_diff,
    with_reliability_defaults,
)
from testbed.data.dataset import DatasetInfo, check_data_dir, dataset_present_bytes, prepare_dataset, warm_dataset
from testbed.emulation.hosting import group_workers, requested_workers_per_process
from testbed.records.events import DEFAULT_INTERVAL_S, EventRecorder, Phase, Role, events_to_columns
from testbed.records.manifest import ConfigStatus, DataSet, RunStatus
from testbed.records.rundir import RunFolder, check_out_path, default_run_dir
from testbed.records.trace import chrome_trace
from testbed.runner.background import background_processes, cpu_between, cpu_snapshot, session_name
from testbed.runner.cluster import check_address, ray_session, resolve_address
from testbed.runner.guard import check_disk, check_memory, check_object_store, object_store_bytes_needed
from testbed.runner.nodes import NodeInfo, NodeMonitors, alive_nodes, prepare_on_nodes
from testbed.runner.placement import plan_placement, reserve

__all__ = ["ConfigOutcome", "run_config", "run_experiment", "LostUpdates", "PrepareData", "DeadlinePassed",
           "missing_runs"]

# Prepares the data set on one node, given the node id (see ``testbed.runner.nodes.prepare_on_nodes``).
PrepareData = Callable[[RunConfig], Callable[[str], Any]]


class _PrepareDataset:
    """The default data preparation: ``prepare_dataset`` on the node it runs on (picklable)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.data, self.dataset_bytes = cfg.data, cfg.workload.dataset_bytes

    def __call__(self, node: str) -> DatasetInfo:
        return prepare_dataset(self.data, self.dataset_bytes, node)


class _WarmDataset:
    """The warm pass (``warm_dataset``) over what preparation left on a node (picklable)."""

    def __init__(self, prepared: dict[str, DatasetInfo], block_bytes: int) -> None:
        self.prepared, self.block_bytes = prepared, block_bytes

    def __call__(self, node: str) -> DatasetInfo:
        return warm_dataset(self.prepared[node], self.block_bytes)


def prepare_locally(cfg: RunConfig) -> Optional[DatasetInfo]:
    """Prepare the config's data set on this machine (untimed); None when it has none."""
    if cfg.workload.dataset_bytes <= 0:
        return None
    return prepare_dataset(cfg.data, cfg.workload.dataset_bytes)


class DeadlinePassed(Exception):
    """The config ran past its deadline (caught in ``run_config``: the config is ``timed_out``)."""


def _get_fail_fast(refs: list, until: Optional[float] = None) -> list:
    """``ray.get(refs)``, but raising as soon as any of them fails rather than after all finish,
    and ``DeadlinePassed`` when ``time.monotonic()`` passes ``until``."""
    import ray
    pending = list(refs)
    while pending:
        timeout = None if until is None else max(0.0, until - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            raise DeadlinePassed()
        ray.get(ready)  # raises the task's error, if it failed
    return ray.get(refs)


def _collect_what_is_left(actors: list, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The events of every actor that still answers (a config that timed out or failed); a
    worker process answers with a list, one export per worker it hosts."""
    import ray
    refs = [a.events.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    out = []
    for ref in ready:
        try:
            got = ray.get(ref)
        except ray.exceptions.RayError:  # that actor is dead: its events are gone with it
            continue
        out.extend(got if isinstance(got, list) else [got])
    return out


class LostUpdates(RuntimeError):
    """A shard applied a different number of updates than the workers pushed: a testbed bug."""


@dataclasses.dataclass
class ConfigOutcome:
    config_id: str
    repeat: int
    columns: dict[str, list]
    server_stats: list[dict[str, Any]]
    worker_steps: list[int]
    nodes: dict[str, dict[str, Any]]          # actor name -> its node, IP and pid
    parameters: Optional[list[Any]] = None
    status: str = "ok"                        # ok, timed_out (past its deadline) or failed (an actor failed)
    prepared: dict[str, Any] = dataclasses.field(default_factory=dict)  # node -> what data preparation returned
    train_cpu_s: dict[str, float] = dataclasses.field(default_factory=dict)  # process -> CPU seconds in train
    # Ray's own processes on the driver's node (testbed.runner.background): name -> CPU seconds in train
    ray_background_cpu_s: dict[str, float] = dataclasses.field(default_factory=dict)
    worker_processes: list[list[int]] = dataclasses.field(default_factory=list)  # the workers each process hosts
    error: Optional[str] = None
    deadline_s: Optional[float] = None

    @property
    def lost_updates(self) -> int:
        return sum(s.get("lost_updates", 0) for s in self.server_stats)

    def info(self) -> dict[str, Any]:
        """What the manifest's ``finished`` entry records besides the events."""
        out: dict[str, Any] = {"server_updates": [s["updates"] for s in self.server_stats],
                               "lost_updates": [s.get("lost_updates", 0) for s in self.server_stats],
                               "server_restarts": [s.get("restarts", 0) for s in self.server_stats],
                               "actor_nodes": {a: n["node"] for a, n in self.nodes.items()},
                               "deadline_s": self.deadline_s, "train_cpu_s": self.train_cpu_s,
                               "ray_background_cpu_s": self.ray_background_cpu_s,
                               "worker_processes": self.worker_processes}
        if self.error:
            out["error"] = self.error
        return out


class ReusedActors:
    """Shard and worker processes kept from one config to the next, for a sweep of short runs
    whose process starts would cost more than their training (calibration's single-worker runs:
    a start per actor and run was a third of the per-call sweep, docs/model.md). A config asks
    for its shard ``i`` and its worker process ``p``: one made by an earlier config is given the
    new config's arguments (``reconfigure``: the constructor again, in the same process); one
    not made yet is made now, on the node of the config's bundle but outside its placement
    group (which goes when the config ends, and would take its actors with it), holding no CPU
    of Ray's. Only configs of one worker per process and without faults or checkpoints (a
    restarted actor would start from its first config's arguments). ``close()`` kills them all;
    use it as a context manager."""

    def __init__(self) -> None:
        self._actors: dict[tuple[str, int], Any] = {}

    @property
    def made(self) -> int:
        """Actors the pool has started and holds (each by the first config that needed it)."""
        return len(self._actors)

    def get(self, kind: str, index: int, cls: Any, options: dict[str, Any], node: str, *args: Any, **kwargs: Any) -> Any:
        """The actor ``kind`` ``index``: made with ``options`` less its placement, on ``node``, or
        the one made before, given ``args`` and ``kwargs`` again."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        actor = self._actors.get((kind, index))
        if actor is None:
            options = {k: v for k, v in options.items() if k not in ("num_cpus", "scheduling_strategy")}
            actor = cls.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                                **options).remote(*args, **kwargs)
            self._actors[(kind, index)] = actor
        else:
            # Synchronously: a threaded actor may run two calls of one caller at once.
            ray.get(actor.reconfigure.remote(*args, **kwargs))
        return actor

    def holds(self, actor: Any) -> bool:
        return any(actor is a for a in self._actors.values())

    def close(self) -> None:
        import ray
        for actor in self._actors.values():
            ray.kill(actor, no_restart=True)
        self._actors.clear()

    def __enter__(self) -> "ReusedActors":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def shard_threads(cfg: RunConfig) -> int:
    """A shard actor's threads (``max_concurrency``): each worker has at most one call in flight
    to a shard (a push, a pull or both in one, possibly blocked at the sync barrier), so N
    threads plus a few for the driver's calls suffice."""
    return cfg.workers + 4


def shard_reply_buffers(cfg: RunConfig) -> int:
    """The pulls' reply buffers a shard touches before the run (``ParameterServer``): one for
    every thread that may run a pull, since Ray hands a call to any free thread of the actor's
    pool and each thread copies into a buffer of its own; sync's two round snapshots are the
    shard's own (0 here). One a worker, as before 2026-12-05, left the pool's other threads to
    allocate theirs inside the timed pulls: one worker at 30 MiB had 3-4 pulls of 26-76 ms among
    pulls of 7-8 ms, in its first steps whatever its pull period, so the pull's mean moved with
    the period (docs/model.md, "A run's first large pulls")."""
    return 0 if cfg.sync is SyncMode.SYNC else shard_threads(cfg)


def _workers_per_process(cfg: RunConfig) -> Optional[int]:
    """How many workers a process hosts (``hosting.requested_workers_per_process`` says why)."""
    return requested_workers_per_process(cfg.compute.mode.value, cfg.workers_per_process)


def _cluster_shape(nodes: list[NodeInfo]) -> tuple[int, float]:
    """(nodes with CPUs, CPUs of the smallest of them): what a placement plan depends on."""
    cpus = [n.cpus for n in nodes if n.cpus > 0]
    return len(cpus), min(cpus, default=1.0)


def _restartable(cfg: RunConfig) -> dict[str, Any]:
    """Actor options that let Ray restart a crashed actor and retry the calls in flight; only for
    configs with kill faults or checkpoints (another crash stays a failure: docs/reliability.md)."""
    kills = any(isinstance(f, (KillWorker, KillServer)) for f in cfg.faults)
    if not (kills or cfg.checkpoint_every) or cfg.restarts == 0:
        return {}
    return {"max_restarts": cfg.restarts, "max_task_retries": -1}


def run_config(cfg: RunConfig, repeat: int, run_id: str, *, keep_parameters: bool = False,
               prepare_data: Optional[PrepareData] = None, state_dir: Optional[Path] = None,
               deadline_s: Optional[float] = None, reuse: Optional[ReusedActors] = None) -> ConfigOutcome:
    """Run one config once on the Ray this process is connected to.

    ``prepare_data(cfg)`` gives the callable that prepares the data set on a node (default:
    ``prepare_dataset`` there); it runs, untimed, on each node where workers land (once when
    ``data.shared``) before the actors start, and each worker reads the data set of its node.
    ``state_dir`` holds the checkpoints and crash records of a config with faults (default: a
    temporary folder). Whatever it holds when the config starts is removed first (an attempt
    that a driver's crash cut short must not be restored into this one), and it is removed
    when the config ends normally; after an exception it stays, and the next attempt clears it.
    ``deadline_s`` applies when the config sets none (``cfg.deadline_s`` wins). ``reuse``: take
    the shard and worker processes from it instead of starting new ones (``ReusedActors``).
    """
    if reuse is not None and (cfg.faults or cfg.checkpoint_every or cfg.workers > 1):
        raise ValueError("reused actors run only single-worker configs without faults or checkpoints")
    deadline_s = cfg.deadline_s if cfg.deadline_s is not None else deadline_s
    needs_state = bool(cfg.faults or cfg.checkpoint_every)
    own_state = needs_state and state_dir is None
    if own_state:
        state_dir = Path(tempfile.mkdtemp(prefix=f"testbed-{cfg.config_id}-"))
    elif needs_state:
        shutil.rmtree(state_dir, ignore_errors=True)
    state = str(state_dir) if needs_state else None
    try:
        outcome = _run_config(cfg, repeat, run_id, keep_parameters, prepare_data, state, deadline_s, reuse)
    except BaseException:
        if own_state:  # nobody else would find it
            shutil.rmtree(state_dir, ignore_errors=True)
        raise
    if needs_state:
        shutil.rmtree(state_dir, ignore_errors=True)
    return outcome


def _run_config(cfg: RunConfig, repeat: int, run_id: str, keep_parameters: bool,
                prepare_data: Optional[PrepareData], state: Optional[str],
                deadline_s: Optional[float], reuse: Optional[ReusedActors] = None) -> ConfigOutcome:
    import ray

    driver_node = ray.get_runtime_context().get_node_id()
    rec = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat, actor="driver",
                        role=Role.DRIVER, node=driver_node)
    cluster = alive_nodes()
    plan = plan_placement(cfg.placement, cfg.servers, cfg.workers, *_cluster_shape(cluster))
    restart = _restartable(cfg)
    server_cls = ray.remote(ServerActor)
    host_cls = ray.remote(WorkerHost)
    # Each worker has at most one call in flight to the step clock (ssp only).
    clock_cls = ray.remote(ClockActor).options(num_cpus=0, max_concurrency=cfg.workers + 2)
    elements = cfg.gradient_elements
    servers, hosts, clocks, gate, prepared = [], [], [], None, {}
    status, error, exports, stats, params, steps, identities = "ok", None, [], [], None, [], []
    train_cpu_s: dict[str, float] = {}
    background_cpu_s: dict[str, float] = {}
    def make(kind: str, index: int, cls: Any, options: dict[str, Any], node: str, *args: Any, **kwargs: Any) -> Any:
        if reuse is None:
            return cls.options(**options).remote(*args, **kwargs)
        return reuse.get(kind, index, cls, options, node, *args, **kwargs)

    with reserve(plan) as slots:
        if cfg.workload.dataset_bytes > 0:
            prepare = prepare_data(cfg) if prepare_data is not None else _PrepareDataset(cfg)
            prepared = prepare_on_nodes(prepare, slots.worker_nodes(), shared=cfg.data.shared)
        # Virtual workers: the workers of a node shared out over a few processes (a small
        # multiple of its cores, or workers_per_process each); a process starts in the bundle
        # of its first worker, on the node every one of its workers was placed on.
        groups = group_workers([slots.worker_node(i) for i in range(cfg.workers)],
                               {n.node: n.cpus for n in cluster}, _workers_per_process(cfg))
        until = time.monotonic() + deadline_s if deadline_s is not None else None
        try:
            with rec.timed(Phase.SETUP):
                if cfg.workload.dataset_bytes > 0 and cfg.data.init_io is InitIO.SEQUENTIAL:
                    gate = remote_gate(list(range(cfg.workers)))
                servers = [make("server", i, server_cls, dict(max_concurrency=shard_threads(cfg), **restart,
                                                              **slots.server_options(i)),
                                slots.server_node(i),
                               shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                               run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                               apply_extra_s=cfg.apply_seconds * (hi - lo) / elements,
                               wait_timeout_s=cfg.barrier_timeout_s, faults=shard_faults(cfg, i), state_dir=state,
                               network=cfg.network if cfg.network.shapes_anything else None,
                               reply_buffers=shard_reply_buffers(cfg),
                               sync_rounds=cfg.sync is SyncMode.SYNC)
                           for i, (lo, hi) in enumerate(cfg.shard_bounds())]
                if cfg.sync is SyncMode.SSP:
                    clocks = [clock_cls.remote(cfg.workers, cfg.staleness, cfg.barrier_timeout_s)]
                clock = clocks[0] if clocks else None
                # Two threads: the driver can ask for the workers' events while they train (a deadline).
                # A run on one node emulates every actor as a node of its own: every worker-shard
                # pair gets the between-node link figures (docs/network.md); on a cluster a worker
                # and a shard on one node get the same_node figures.
                multi_node = sum(1 for n in cluster if n.cpus > 0) > 1
                hosts = [make("host", p, host_cls, dict(max_concurrency=2, **restart, **slots.worker_options(g[0])),
                              slots.worker_node(g[0]),
                              cfg, g, servers, run_id, repeat, datasets_for(prepared, slots, g), gate, clock, state,
                              multi_node=multi_node)
                         for p, g in enumerate(groups)]
                identities = _get_fail_fast([a.ready.remote() for a in servers + hosts + clocks],
                                            until)[:len(servers + hosts)]
                if gate is not None:  # its process must be up before init is timed, too
                    _get_fail_fast([gate.done.remote()], until)
                # Last before init: a cache under the page cache cools within a minute, and starting
                # the actors takes seconds (docs/model.md, "The disk in the state calibration measured").
                if prepared and cfg.data.warm_pass and all(isinstance(v, DatasetInfo) for v in prepared.values()):
                    prepared = prepare_on_nodes(_WarmDataset(prepared, cfg.data.block_bytes), list(prepared),
                                                shared=False)
            with rec.timed(Phase.INIT):
                _get_fail_fast([h.init.remote() for h in hosts], until)
            # CPU used by each process during training (read outside the timed span): how much of
            # the machine a step costs, and whether the cores were the limit; and what Ray's own
            # processes on this node took meanwhile.
            cpu0 = _get_fail_fast([a.cpu_s.remote() for a in servers + hosts], until)
            session = session_name()
            background = background_processes(session, [i["pid"] for i in identities]) if session else []
            bg0 = cpu_snapshot(background)
            with rec.timed(Phase.TRAIN):
                per_host = _get_fail_fast([h.train.remote() for h in hosts], until)
            bg1 = cpu_snapshot(background)
            cpu1 = _get_fail_fast([a.cpu_s.remote() for a in servers + hosts], until)
            background_cpu_s = cpu_between(bg0, bg1)
            by_worker = {i: n for g, done in zip(groups, per_host) for i, n in zip(g, done)}
            steps = [by_worker[i] for i in range(cfg.workers)]
            processes = [f"server-{i}" for i in range(len(servers))] + [host_name(p, g) for p, g in enumerate(groups)]
            # A process restarted by a fault starts its CPU clock again: no figure for it.
            train_cpu_s = {n: b - a for n, a, b in zip(processes, cpu0, cpu1) if b >= a}
            exports = ray.get([s.events.remote() for s in servers])
            exports += [e for got in ray.get([h.events.remote() for h in hosts]) for e in got]
            stats = ray.get([s.stats.remote() for s in servers])
            params = ray.get([s.parameters.remote() for s in servers]) if keep_parameters else None
        except DeadlinePassed:
            status, error = "timed_out", f"stopped after its deadline of {deadline_s:g} s"
            exports = _collect_what_is_left(servers + hosts)
        except ray.exceptions.RayError as err:
            status, error = "failed", " ".join(f"{type(err).__name__}: {err}".split())[:2000]
            exports = _collect_what_is_left(servers + hosts)
        finally:
            # Actors go before their placement group is removed (leaving ``reserve``).
            for actor in servers + hosts + clocks + ([gate] if gate is not None else []):
                if reuse is None or not reuse.holds(actor):
                    ray.kill(actor, no_restart=True)
    nodes = {f"server-{i}": ident for i, ident in enumerate(identities[:len(servers)])}
    for p, (g, ident) in enumerate(zip(groups, identities[len(servers):])):
        nodes.update({f"worker-{i}": {**ident, "process": p} for i in g})
    if status == "ok":
        pushed = sum(steps)
        for st in stats:
            if st["updates"] != pushed - st["lost_updates"]:
                raise LostUpdates(f"{cfg.config_id}: shard {st['shard']} holds {st['updates']} updates, workers "
                                  f"pushed {pushed} and {st['lost_updates']} were lost with a crash")
    columns = events_to_columns([rec.export(), *exports])
    return ConfigOutcome(cfg.config_id, repeat, columns, stats, steps, nodes, params,
                         status=status, prepared=prepared, error=error, deadline_s=deadline_s,
                         train_cpu_s=train_cpu_s, ray_background_cpu_s=background_cpu_s,
                         worker_processes=[list(g) for g in groups])


def datasets_for(prepared: dict[str, Any], slots: Any, group: list[int]) -> Optional[DatasetInfo]:
    """The data set the workers of one process read: their node's (they share a node)."""
    return _dataset_for(prepared, slots.worker_node(group[0]))


def _dataset_for(prepared: dict[str, Any], node: str) -> Optional[DatasetInfo]:
    """The data set a worker on ``node`` reads: its node's, or the one shared copy."""
    if not prepared:
        return None
    return prepared.get(node, next(iter(prepared.values())))


def missing_runs(done: set[tuple[str, int]], configs: list[RunConfig], repeats: int) -> list[tuple[RunConfig, int]]:
    """The (config, repeat) pairs not in ``done`` (a run folder's finished ones), in sweep order."""
    return [(cfg, r) for cfg in configs for r in range(repeats) if (cfg.config_id, r) not in done]


def open_for_resume(path: Path, spec: ExperimentSpec) -> RunFolder:
    """The run folder to resume, after checking that ``spec`` is the one it was started with;
    refuses (naming the fields) when it is not. Writes nothing (``RunFolder.open_for_writing``
    takes the lock afterwards)."""
    folder = RunFolder.open(path)
    changed = spec_diff(with_reliability_defaults(folder.record.spec), spec.model_dump(mode="json"))
    if changed:
        raise UserError(f"{path}: the spec differs from the one this run was started with in: {', '.join(changed)}; "
                        f"resume with the same spec and --set options (leave out SPEC to use the saved one), "
                        f"or start a new run")
    return folder


def run_experiment(spec: ExperimentSpec, *, out: Optional[Path] = None, address: Optional[str] = None,
                   progress: Optional[Callable[[str, int, int], None]] = None,
                   monitor_interval_s: Optional[float] = DEFAULT_INTERVAL_S,
                   prepare_data: Optional[PrepareData] = None, resume: Optional[Path] = None,
                   deadlines: Optional[dict[str, float]] = None,
                   plan: Optional[list[tuple[RunConfig, int]]] = None,
                   manifest_extra: Optional[dict[str, Any]] = None,
                   before_settle: Optional[Callable[[RunFolder, RunStatus], None]] = None,
                   before_runs: Optional[Callable[[], None]] = None,
                   after_runs: Optional[Callable[[], None]] = None) -> RunFolder:
    """Run every config x repeat of ``spec`` and write a run folder; returns it.

    ``progress(label, done, total)`` is called before each config repeat and at the end.
    ``monitor_interval_s`` is the node monitors' sampling interval (None: no monitors).
    ``resume``: a run folder of the same spec; only the config repeats it lacks are run, into
    it, under its run id (none lacking: it is only marked ``complete``). ``deadlines``: config
    id -> seconds, for configs that set none. ``plan``: the (config, repeat) pairs to run, in order,
    instead of the spec's sweep x repeats (a draw from a validation space); ``manifest_extra``: more
    fields for the new manifest. ``before_settle(folder, status)`` runs, under the
    folder's lock, after the summary and trace and before the status ``complete`` is written
    (``testbed validate`` writes the profile and the report there, so ``complete`` comes last).
    ``before_runs()`` runs inside the Ray session, after its checks and before the first config
    (``testbed validate`` checks the session's per-call cost level there); ``after_runs()``, in
    the same session after the last config ran (not after an interrupt or an error), where
    ``testbed validate`` checks that level again.

    The folder is locked for the whole run (one writer per folder, docs/reliability.md); the
    lock is released when this returns or raises.
    """
    configs = list({c.config_id: c for c, _ in plan}.values()) if plan else expand(spec)
    if monitor_interval_s is not None and monitor_interval_s <= 0:
        raise UserError(f"the monitor interval must be > 0 s (or None: no monitors), got {monitor_interval_s}")
    address = resolve_address(address)  # --address, else RAY_ADDRESS (Ray's convention), else local Ray
    if address:
        check_address(address)  # before a run folder exists: nothing to clean up
    if resume is None and out is not None:
        check_out_path(Path(out))  # before the data set is written
    previous = open_for_resume(Path(resume), spec) if resume is not None else None
    if previous is not None and previous.manifest.get("sample"):
        s = previous.manifest["sample"]
        raise UserError(f"{resume}: a draw from a validation space is not resumed; re-make it with "
                        f"`testbed validate {s['space']} --sample {s['k']} --seed {s['seed']}`")
    todo = missing_runs(previous.record.finished_keys(), configs, spec.repeats) if previous else \
        list(plan) if plan else [(c, r) for c in configs for r in range(spec.repeats)]
    pending = list({c.config_id: c for c, _ in todo}.values())
    check_memory(pending, psutil.virtual_memory().available, repeats=spec.repeats)
    for data in {c.data for c in pending if c.workload.dataset_bytes > 0}:
        check_data_dir(data)
    check_disk(pending, _free_bytes, dataset_present_bytes)
    if previous is not None:
        # Locked before the data sets are written: a second writer is refused at once.
        folder = RunFolder.open_for_writing(Path(resume))
        todo = missing_runs(folder.record.finished_keys(), configs, spec.repeats)  # as of the lock: the last writer may just have ended
        pending = list({c.config_id: c for c, _ in todo}.values())
    # The data sets are checked and written here first (untimed; on a cluster again on each
    # worker node, where they are then found ready when the driver's node is one of them):
    # a refusal (tmpfs, no space) comes before any run folder exists.
    try:
        datasets: dict[tuple, Optional[DatasetInfo]] = {}
        for cfg in pending:
            key = (cfg.data.dir, cfg.data.file_bytes, cfg.workload.dataset_bytes, cfg.data.allow_cached)
            if key not in datasets:
                if progress and cfg.workload.dataset_bytes > 0:
                    progress(f"preparing the data set ({cfg.workload.dataset_bytes} bytes)", 0, 0)
                datasets[key] = prepare_locally(cfg)
    except BaseException:
        if previous is not None:
            folder.release()
        raise
    local = [d for d in datasets.values() if d is not None]
    total = len(todo) if plan else len(configs) * spec.repeats
    if previous is not None:
        run_id = folder.record.run_id
        if todo:
            folder.begin_resume(len(todo))
    else:
        run_id = uuid.uuid4().hex[:12]
        path = Path(out) if out else default_run_dir(spec.name)
        folder = RunFolder.create(
            path, run_id=run_id, experiment=spec.name, spec=spec.model_dump(mode="json"),
            configs=[c.model_dump(mode="json") for c in configs], repeats=spec.repeats,
            monitor_interval_s=monitor_interval_s,
            cache_bypass=all(d.cache_bypass for d in local) if local else None,
            data=[DataSet(directory=d.directory, fs_type=d.fs_type, cache_bypass=d.cache_bypass,
                          bytes=d.total_bytes) for d in local],
            **(manifest_extra or {}))
    try:
        if todo:
            _run_todo(folder, todo, total, run_id, address, monitor_interval_s, prepare_data, progress,
                      deadlines or {}, before_runs, after_runs)
        if progress:
            progress("done", total, total)
        # Inside the try: a Ctrl-C or an error while the summary and trace are written still
        # settles the status below, rather than leaving ``running``.
        _finish(folder, RunStatus.COMPLETE, before_settle=before_settle)
    except KeyboardInterrupt:
        _finish(folder, RunStatus.INCOMPLETE, "interrupted", quiet=True)
        raise
    except SystemExit:  # Ray's SIGTERM handler in the driver turns a kill into SystemExit
        _finish(folder, RunStatus.INCOMPLETE, "terminated", quiet=True)
        raise
    except UserError as err:
        _finish(folder, RunStatus.FAILED, str(err), quiet=True)
        raise
    except Exception as err:
        _finish(folder, RunStatus.FAILED, f"{type(err).__name__}: {err}", quiet=True)
        raise
    finally:
        folder.release()
    return folder


def _run_todo(folder: RunFolder, todo: list[tuple[RunConfig, int]], total: int, run_id: str,
              address: Optional[str], monitor_interval_s: Optional[float], prepare_data: Optional[PrepareData],
              progress: Optional[Callable[[str, int, int], None]], deadlines: dict[str, float],
              before_runs: Optional[Callable[[], None]] = None,
              after_runs: Optional[Callable[[], None]] = None) -> None:
    """The Ray session, its checks and monitors around ``_run_all``."""
    pending = list({c.config_id: c for c, _ in todo}.values())
    store = max(object_store_bytes_needed(c) for c in pending) * 2
    with ray_session(address, object_store_bytes=store):
        check_object_store(pending, _object_store_bytes())
        cluster = alive_nodes()
        for cfg in pending:  # an impossible placement fails before the first config runs
            plan_placement(cfg.placement, cfg.servers, cfg.workers, *_cluster_shape(cluster))
        folder.update(cluster=[dataclasses.asdict(n) for n in cluster])
        if before_runs is not None:
            before_runs()
        monitors = NodeMonitors([n.node for n in cluster], monitor_interval_s) if monitor_interval_s else None
        try:
            if monitors:
                folder.update(clock_offsets=monitors.clock_offsets())
            _run_all(folder, todo, total, run_id, monitors, prepare_data, progress, deadlines)
        finally:
            if monitors:
                monitors.close()
        if after_runs is not None:  # the monitors stopped: nothing of the check lands in a config's samples
            after_runs()


def _free_bytes(directory: str) -> int:
    """Free bytes of the file system that holds ``directory`` (or its nearest existing parent)."""
    path = Path(directory).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def _object_store_bytes() -> int:
    """The object store capacity of the Ray this process is connected to (the smallest node's)."""
    import ray
    stores = [n["Resources"].get("object_store_memory", 0) for n in ray.nodes() if n.get("Alive")]
    return int(min((s for s in stores if s > 0), default=0))


def _run_all(folder: RunFolder, todo: list[tuple[RunConfig, int]], total: int, run_id: str,
             monitors: Optional[NodeMonitors], prepare_data: Optional[PrepareData],
             progress: Optional[Callable[[str, int, int], None]], deadlines: dict[str, float]) -> None:
    """Each config repeat in turn; what a config leaves is its events, its monitor samples and one
    journal line (no manifest rewrite, no summary), so the bookkeeping per config does not grow
    with the number of configs done."""
    done = total - len(todo)
    for cfg, repeat in todo:
        if progress:
            progress(f"{cfg.config_id} workers={cfg.workers} repeat={repeat}", done, total)
        if monitors:
            monitors.start(cfg.config_id, repeat)
        state_dir = folder.path / "state" / f"{cfg.config_id}-r{repeat}"
        try:
            outcome = run_config(cfg, repeat, run_id, prepare_data=prepare_data, state_dir=state_dir,
                                 deadline_s=deadlines.get(cfg.config_id))
        finally:
            samples = monitors.stop() if monitors else None
            with contextlib.suppress(OSError):
                (folder.path / "state").rmdir()  # only when empty: the config's own folder is gone
        info = {**outcome.info(), "node_ips": {n["node"]: n["ip"] for n in outcome.nodes.values()}}
        folder.write_config_events(cfg.config_id, repeat, outcome.columns, status=ConfigStatus(outcome.status),
                                   info=info, resources=samples)
        done += 1


def _finish(folder: RunFolder, status: RunStatus, error: Optional[str] = None, *,
            before_settle: Optional[Callable[[RunFolder, RunStatus], None]] = None, quiet: bool = False) -> None:
    """Write the summary and Chrome trace of whatever finished, then the final status.

    ``quiet`` (on the way out after an error or an interrupt): nothing raises from here, so the
    error being handled is the one the caller sees; when even the status cannot be written (a
    full disk) the folder stays ``running``, and, its lock gone, reads as ``interrupted``."""
    try:
        events = folder.events()
        folder.write_summary(folder.summary(events))
        folder.write_trace(chrome_trace(events, folder.node_ips()))
        if before_settle is not None:
            before_settle(folder, status)
    except UserError as err:  # a full disk: the status line below still says what happened
        if not quiet:
            raise
        error = error or str(err)
    try:
        folder.set_status(status, error=error)
    except UserError:
        if not quiet:
            raise
