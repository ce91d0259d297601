"""Running an experiment: every config x repeat on Ray, events collected, folder written.

This is the one place that wires actors together. For each config and repeat:
start the shard and worker actors (and the step clock in ``ssp``; timed as
``setup``), run the initialization phase (``init``), run the training loop
(``train``), collect every actor's events, check that no update was lost, write
the events atomically, stop the actors.

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
from actors.server import ServerActor
from actors.worker import WorkerActor
from testbed.cluster import check_address, ray_session
from testbed.errors import UserError
from testbed.guard import check_memory, object_store_bytes_needed
from testbed.records import EventRecorder, Phase, Role, concat_columns, events_to_columns
from testbed.rundir import RunFolder, default_run_dir
from testbed.dataset import DatasetInfo, prepare_dataset
from testbed.spec import ExperimentSpec, InitIO, RunConfig, SyncMode, expand
from testbed.summary import summarize

__all__ = ["ConfigOutcome", "run_config", "run_experiment", "LostUpdates"]


class LostUpdates(RuntimeError):
    """A shard applied a different number of updates than the workers pushed: a testbed bug."""


@dataclasses.dataclass
class ConfigOutcome:
    config_id: str
    repeat: int
    columns: dict[str, list]
    server_stats: list[dict[str, Any]]
    worker_steps: list[int]
    nodes: dict[str, dict[str, Any]]
    parameters: Optional[list[Any]] = None
    status: str = "ok"


def _remote_classes(cfg: RunConfig):
    import ray
    # Each worker has at most one call in flight to a shard (a push or a pull, possibly
    # blocked at the sync barrier) and to the clock, so N threads plus a few for the
    # driver's calls (ready, events, stats) are enough.
    server_cls = ray.remote(ServerActor).options(num_cpus=0, max_concurrency=cfg.workers + 4)
    worker_cls = ray.remote(WorkerActor).options(num_cpus=0)
    clock_cls = ray.remote(ClockActor).options(num_cpus=0, max_concurrency=cfg.workers + 2)
    return server_cls, worker_cls, clock_cls


def _get_fail_fast(refs: list) -> list:
    """``ray.get(refs)``, but raising as soon as any of them fails rather than after all finish."""
    import ray
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)  # raises the task's error, if it failed
    return ray.get(refs)


def prepare_data(cfg: RunConfig) -> Optional[DatasetInfo]:
    """Make sure the config's data set exists on this node (untimed); None when it has none."""
    if cfg.workload.dataset_bytes <= 0:
        return None
    return prepare_dataset(cfg.data, cfg.workload.dataset_bytes)


def run_config(cfg: RunConfig, repeat: int, run_id: str, *, keep_parameters: bool = False,
               dataset: Optional[DatasetInfo] = None) -> ConfigOutcome:
    """Run one config once on the Ray this process is connected to.

    ``dataset`` is the config's data set as prepared on this node (``prepare_data``); it is
    prepared here when not given.
    """
    import ray

    if dataset is None:
        dataset = prepare_data(cfg)

    driver_node = ray.get_runtime_context().get_node_id()
    rec = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat, actor="driver",
                        role=Role.DRIVER, node=driver_node)
    server_cls, worker_cls, clock_cls = _remote_classes(cfg)
    servers, workers, clocks, gate = [], [], [], None
    elements = cfg.gradient_elements
    try:
        with rec.timed(Phase.SETUP):
            if dataset is not None and cfg.data.init_io is InitIO.SEQUENTIAL:
                gate = remote_gate(list(range(cfg.workers)))
            servers = [server_cls.remote(shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                                         run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                                         apply_extra_s=cfg.apply_seconds * (hi - lo) / elements,
                                         wait_timeout_s=cfg.barrier_timeout_s)
                       for i, (lo, hi) in enumerate(cfg.shard_bounds())]
            if cfg.sync is SyncMode.SSP:
                clocks = [clock_cls.remote(cfg.workers, cfg.staleness, cfg.barrier_timeout_s)]
            clock = clocks[0] if clocks else None
            workers = [worker_cls.remote(cfg, i, servers, run_id, repeat, dataset, gate, clock)
                       for i in range(cfg.workers)]
            identities = ray.get([a.ready.remote() for a in servers + workers + clocks])[:len(servers + workers)]
        with rec.timed(Phase.INIT):
            _get_fail_fast([w.init.remote() for w in workers])
        with rec.timed(Phase.TRAIN):
            steps = _get_fail_fast([w.train.remote() for w in workers])
        exports = ray.get([a.events.remote() for a in servers + workers])
        stats = ray.get([s.stats.remote() for s in servers])
        params = ray.get([s.parameters.remote() for s in servers]) if keep_parameters else None
    finally:
        for actor in servers + workers + clocks + ([gate] if gate is not None else []):
            ray.kill(actor)
    names = [f"server-{i}" for i in range(len(servers))] + [f"worker-{i}" for i in range(len(workers))]
    pushed = sum(steps)
    for st in stats:
        if st["updates"] != pushed:
            raise LostUpdates(f"{cfg.config_id}: shard {st['shard']} applied {st['updates']} updates, "
                              f"workers pushed {pushed}")
    columns = events_to_columns([rec.export(), *exports])
    return ConfigOutcome(cfg.config_id, repeat, columns, stats, steps, dict(zip(names, identities)), params)


def run_experiment(spec: ExperimentSpec, *, out: Optional[Path] = None, address: Optional[str] = None,
                   progress: Optional[Callable[[str, int, int], None]] = None) -> RunFolder:
    """Run every config x repeat of ``spec`` and write a run folder; returns it.

    ``progress(label, done, total)`` is called before each config repeat and at the end.
    """
    configs = expand(spec)
    if address:
        check_address(address)  # before a run folder exists: nothing to clean up
    check_memory(configs, psutil.virtual_memory().available)
    # Data sets first (untimed): a refusal (tmpfs, no space) comes before any folder exists.
    datasets = {}
    for cfg in configs:
        key = (cfg.data.dir, cfg.data.file_bytes, cfg.workload.dataset_bytes, cfg.data.allow_cached)
        if key not in datasets:
            if progress and cfg.workload.dataset_bytes > 0:
                progress(f"preparing the data set ({cfg.workload.dataset_bytes} bytes)", 0, 0)
            datasets[key] = prepare_data(cfg)
    prepared = [d for d in datasets.values() if d is not None]
    run_id = uuid.uuid4().hex[:12]
    path = Path(out) if out else default_run_dir(spec.name)
    folder = RunFolder.create(
        path, run_id=run_id, experiment=spec.name, spec=spec.model_dump(mode="json"),
        configs=[c.model_dump(mode="json") for c in configs], repeats=spec.repeats,
        extra={"cache_bypass": all(d.cache_bypass for d in prepared) if prepared else None,
               "data": [{"directory": d.directory, "fs_type": d.fs_type, "cache_bypass": d.cache_bypass,
                         "bytes": d.total_bytes} for d in prepared]})
    config_dicts = folder.manifest["configs"]
    total = len(configs) * spec.repeats
    done = 0
    store = max(object_store_bytes_needed(c) for c in configs) * 2
    try:
        with ray_session(address, object_store_bytes=store):
            for cfg in configs:
                for repeat in range(spec.repeats):
                    if progress:
                        progress(f"{cfg.config_id} workers={cfg.workers} repeat={repeat}", done, total)
                    key = (cfg.data.dir, cfg.data.file_bytes, cfg.workload.dataset_bytes, cfg.data.allow_cached)
                    outcome = run_config(cfg, repeat, run_id, dataset=datasets[key])
                    folder.manifest["nodes"].update({n["node"]: n["ip"] for n in outcome.nodes.values()})
                    folder.write_config_events(cfg.config_id, repeat, outcome.columns,
                                               info={"server_updates": [s["updates"] for s in outcome.server_stats]})
                    folder.write_summary(summarize(folder.events(), config_dicts))
                    done += 1
        if progress:
            progress("done", done, total)
    except KeyboardInterrupt:
        folder.set_status("incomplete", error="interrupted")
        raise
    except UserError as err:
        folder.set_status("failed", error=str(err))
        raise
    except Exception as err:
        folder.set_status("failed", error=f"{type(err).__name__}: {err}")
        raise
    folder.set_status("complete")
    return folder
