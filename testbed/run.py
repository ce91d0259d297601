"""Running an experiment: every config x repeat on Ray, events collected, folder written.

This is the one place that wires the training actors together. For each config and
repeat: reserve a placement group (``testbed.placement``), prepare the data on the
nodes where workers will land (untimed), start the shard and worker actors in their
bundles, the I/O gate (sequential init) and the step clock (``ssp``), all timed as
``setup``; run the initialization phase (``init``), run the training loop (``train``),
collect every actor's events, check that no update was lost, stop the actors, remove
the placement group, write the events atomically. A node monitor per node
(``testbed.nodes``) samples the resources around each config.

A worker that fails ends the config at once: the driver waits for the workers one
result at a time and kills every actor of the config on the first error, so workers
blocked at a barrier do not wait for one that will never come.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import psutil

from actors.clock import ClockActor
from actors.gate import remote_gate
from actors.monitor import DEFAULT_INTERVAL_S
from actors.server import ServerActor
from actors.worker import WorkerActor
from testbed.cluster import check_address, ray_session
from testbed.errors import UserError
from testbed.guard import check_memory, object_store_bytes_needed
from testbed.nodes import NodeInfo, NodeMonitors, alive_nodes, prepare_on_nodes
from testbed.placement import plan_placement, reserve
from testbed.records import EventRecorder, Phase, Role, events_to_columns
from testbed.rundir import RunFolder, default_run_dir
from testbed.dataset import DatasetInfo, prepare_dataset
from testbed.spec import ExperimentSpec, InitIO, RunConfig, SyncMode, expand
from testbed.summary import summarize
from testbed.trace import chrome_trace

__all__ = ["ConfigOutcome", "run_config", "run_experiment", "LostUpdates", "PrepareData"]

# Prepares the data set on one node, given the node id (see ``testbed.nodes.prepare_on_nodes``).
PrepareData = Callable[[RunConfig], Callable[[str], Any]]


class _PrepareDataset:
    """The default data preparation: ``prepare_dataset`` on the node it runs on (picklable)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.data, self.dataset_bytes = cfg.data, cfg.workload.dataset_bytes

    def __call__(self, node: str) -> DatasetInfo:
        return prepare_dataset(self.data, self.dataset_bytes, node)


def prepare_locally(cfg: RunConfig) -> Optional[DatasetInfo]:
    """Prepare the config's data set on this machine (untimed); None when it has none."""
    if cfg.workload.dataset_bytes <= 0:
        return None
    return prepare_dataset(cfg.data, cfg.workload.dataset_bytes)


def _get_fail_fast(refs: list) -> list:
    """``ray.get(refs)``, but raising as soon as any of them fails rather than after all finish."""
    import ray
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)  # raises the task's error, if it failed
    return ray.get(refs)


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
    status: str = "ok"
    prepared: dict[str, Any] = dataclasses.field(default_factory=dict)  # node -> what data preparation returned
    train_cpu_s: dict[str, float] = dataclasses.field(default_factory=dict)  # actor -> CPU seconds in train


def _cluster_shape(nodes: list[NodeInfo]) -> tuple[int, float]:
    """(nodes with CPUs, CPUs of the smallest of them): what a placement plan depends on."""
    cpus = [n.cpus for n in nodes if n.cpus > 0]
    return len(cpus), min(cpus, default=1.0)


def run_config(cfg: RunConfig, repeat: int, run_id: str, *, keep_parameters: bool = False,
               prepare_data: Optional[PrepareData] = None) -> ConfigOutcome:
    """Run one config once on the Ray this process is connected to.

    ``prepare_data(cfg)`` gives the callable that prepares the data set on a node (default:
    ``prepare_dataset`` there); it runs, untimed, on each node where workers land (once when
    ``data.shared``) before the actors start, and each worker reads the data set of its node.
    """
    import ray

    driver_node = ray.get_runtime_context().get_node_id()
    rec = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat, actor="driver",
                        role=Role.DRIVER, node=driver_node)
    plan = plan_placement(cfg.placement, cfg.servers, cfg.workers, *_cluster_shape(alive_nodes()))
    server_cls = ray.remote(ServerActor)
    worker_cls = ray.remote(WorkerActor)
    # Each worker has at most one call in flight to the step clock (ssp only).
    clock_cls = ray.remote(ClockActor).options(num_cpus=0, max_concurrency=cfg.workers + 2)
    elements = cfg.gradient_elements
    servers, workers, clocks, gate, prepared = [], [], [], None, {}
    with reserve(plan) as slots:
        if cfg.workload.dataset_bytes > 0:
            prepare = prepare_data(cfg) if prepare_data is not None else _PrepareDataset(cfg)
            prepared = prepare_on_nodes(prepare, slots.worker_nodes(), shared=cfg.data.shared)
        datasets = [_dataset_for(prepared, slots.worker_node(i)) for i in range(cfg.workers)]
        try:
            with rec.timed(Phase.SETUP):
                if cfg.workload.dataset_bytes > 0 and cfg.data.init_io is InitIO.SEQUENTIAL:
                    gate = remote_gate(list(range(cfg.workers)))
                # Each worker has at most one call in flight to a shard (a push or a pull, possibly
                # blocked at the sync barrier), so N threads plus a few for the driver's calls suffice.
                servers = [server_cls.options(max_concurrency=cfg.workers + 4, **slots.server_options(i)).remote(
                               shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                               run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                               apply_extra_s=cfg.apply_seconds * (hi - lo) / elements,
                               wait_timeout_s=cfg.barrier_timeout_s)
                           for i, (lo, hi) in enumerate(cfg.shard_bounds())]
                if cfg.sync is SyncMode.SSP:
                    clocks = [clock_cls.remote(cfg.workers, cfg.staleness, cfg.barrier_timeout_s)]
                clock = clocks[0] if clocks else None
                workers = [worker_cls.options(**slots.worker_options(i)).remote(
                               cfg, i, servers, run_id, repeat, datasets[i], gate, clock)
                           for i in range(cfg.workers)]
                identities = ray.get([a.ready.remote() for a in servers + workers + clocks])[:len(servers + workers)]
                if gate is not None:  # its process must be up before init is timed, too
                    ray.get(gate.done.remote())
            with rec.timed(Phase.INIT):
                _get_fail_fast([w.init.remote() for w in workers])
            # CPU used by each actor during training (read outside the timed span): how much of
            # the machine a step costs, and whether the cores were the limit.
            cpu0 = ray.get([a.cpu_s.remote() for a in servers + workers])
            with rec.timed(Phase.TRAIN):
                steps = _get_fail_fast([w.train.remote() for w in workers])
            cpu1 = ray.get([a.cpu_s.remote() for a in servers + workers])
            exports = ray.get([a.events.remote() for a in servers + workers])
            stats = ray.get([s.stats.remote() for s in servers])
            params = ray.get([s.parameters.remote() for s in servers]) if keep_parameters else None
        finally:
            # Actors go before their placement group is removed (leaving ``reserve``).
            for actor in servers + workers + clocks + ([gate] if gate is not None else []):
                ray.kill(actor)
    names = [f"server-{i}" for i in range(len(servers))] + [f"worker-{i}" for i in range(len(workers))]
    pushed = sum(steps)
    for st in stats:
        if st["updates"] != pushed:
            raise LostUpdates(f"{cfg.config_id}: shard {st['shard']} applied {st['updates']} updates, "
                              f"workers pushed {pushed}")
    columns = events_to_columns([rec.export(), *exports])
    return ConfigOutcome(cfg.config_id, repeat, columns, stats, steps, dict(zip(names, identities)), params,
                         prepared=prepared, train_cpu_s={n: b - a for n, a, b in zip(names, cpu0, cpu1)})


def _dataset_for(prepared: dict[str, Any], node: str) -> Optional[DatasetInfo]:
    """The data set a worker on ``node`` reads: its node's, or the one shared copy."""
    if not prepared:
        return None
    return prepared.get(node, next(iter(prepared.values())))


def run_experiment(spec: ExperimentSpec, *, out: Optional[Path] = None, address: Optional[str] = None,
                   progress: Optional[Callable[[str, int, int], None]] = None,
                   monitor_interval_s: Optional[float] = DEFAULT_INTERVAL_S,
                   prepare_data: Optional[PrepareData] = None) -> RunFolder:
    """Run every config x repeat of ``spec`` and write a run folder; returns it.

    ``progress(label, done, total)`` is called before each config repeat and at the end.
    ``monitor_interval_s`` is the node monitors' sampling interval (None: no monitors).
    """
    configs = expand(spec)
    if monitor_interval_s is not None and monitor_interval_s <= 0:
        raise UserError(f"the monitor interval must be > 0 s (or None: no monitors), got {monitor_interval_s}")
    if address:
        check_address(address)  # before a run folder exists: nothing to clean up
    check_memory(configs, psutil.virtual_memory().available)
    # The data sets are checked and written here first (untimed; on a cluster again on each
    # worker node, where they are then found ready when the driver's node is one of them):
    # a refusal (tmpfs, no space) comes before any run folder exists.
    datasets: dict[tuple, Optional[DatasetInfo]] = {}
    for cfg in configs:
        key = (cfg.data.dir, cfg.data.file_bytes, cfg.workload.dataset_bytes, cfg.data.allow_cached)
        if key not in datasets:
            if progress and cfg.workload.dataset_bytes > 0:
                progress(f"preparing the data set ({cfg.workload.dataset_bytes} bytes)", 0, 0)
            datasets[key] = prepare_locally(cfg)
    local = [d for d in datasets.values() if d is not None]
    run_id = uuid.uuid4().hex[:12]
    path = Path(out) if out else default_run_dir(spec.name)
    folder = RunFolder.create(
        path, run_id=run_id, experiment=spec.name, spec=spec.model_dump(mode="json"),
        configs=[c.model_dump(mode="json") for c in configs], repeats=spec.repeats,
        extra={"monitor_interval_s": monitor_interval_s,
               "cache_bypass": all(d.cache_bypass for d in local) if local else None,
               "data": [{"directory": d.directory, "fs_type": d.fs_type, "cache_bypass": d.cache_bypass,
                         "bytes": d.total_bytes} for d in local]})
    total = len(configs) * spec.repeats
    store = max(object_store_bytes_needed(c) for c in configs) * 2
    try:
        with ray_session(address, object_store_bytes=store):
            cluster = alive_nodes()
            for cfg in configs:  # an impossible placement fails before the first config runs
                plan_placement(cfg.placement, cfg.servers, cfg.workers, *_cluster_shape(cluster))
            folder.manifest["cluster"] = [dataclasses.asdict(n) for n in cluster]
            monitors = NodeMonitors([n.node for n in cluster], monitor_interval_s) if monitor_interval_s else None
            try:
                if monitors:
                    folder.manifest["clock_offsets"] = monitors.clock_offsets()
                _run_all(folder, configs, spec.repeats, run_id, monitors, prepare_data, progress)
            finally:
                if monitors:
                    monitors.close()
        if progress:
            progress("done", total, total)
    except KeyboardInterrupt:
        _finish(folder, "incomplete", "interrupted")
        raise
    except UserError as err:
        _finish(folder, "failed", str(err))
        raise
    except Exception as err:
        _finish(folder, "failed", f"{type(err).__name__}: {err}")
        raise
    _finish(folder, "complete")
    return folder


def _run_all(folder: RunFolder, configs: list[RunConfig], repeats: int, run_id: str,
             monitors: Optional[NodeMonitors], prepare_data: Optional[PrepareData],
             progress: Optional[Callable[[str, int, int], None]]) -> None:
    done, total = 0, len(configs) * repeats
    for cfg in configs:
        for repeat in range(repeats):
            if progress:
                progress(f"{cfg.config_id} workers={cfg.workers} repeat={repeat}", done, total)
            if monitors:
                monitors.start(cfg.config_id, repeat)
            try:
                outcome = run_config(cfg, repeat, run_id, prepare_data=prepare_data)
            finally:
                samples = monitors.stop() if monitors else None
            folder.manifest["nodes"].update({n["node"]: n["ip"] for n in outcome.nodes.values()})
            folder.write_config_events(cfg.config_id, repeat, outcome.columns,
                                       info={"server_updates": [s["updates"] for s in outcome.server_stats],
                                             "actor_nodes": {a: n["node"] for a, n in outcome.nodes.items()},
                                             "train_cpu_s": outcome.train_cpu_s})
            if samples is not None:
                folder.append_resources(samples)
            folder.write_summary(summarize(folder.events(), folder.manifest["configs"],
                                           finished=folder.manifest["finished"]))
            done += 1


def _finish(folder: RunFolder, status: str, error: Optional[str] = None) -> None:
    """Write the Chrome trace of whatever finished, then the final status."""
    try:
        folder.write_trace(chrome_trace(folder.events(), folder.node_ips()))
    except UserError as err:  # a full disk: the status line below still says what happened
        error = error or str(err)
    folder.set_status(status, error=error)

