"""Fault planning, validation and the actors' recovery logic, without Ray (plain classes,
crash hooks that raise instead of exiting the process)."""

import functools

import numpy as np
import pytest

from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.config.errors import UserError
from testbed.config.faults import ShardFaults, lost_updates_expected, shard_faults, worker_faults
from testbed.config.spec import expand, parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from tests.factories import recorder as rec
from tests.factories import run_config

config = functools.partial(run_config, workers=2)


class Crashed(Exception):
    pass


def test_plans_pick_each_actors_faults():
    cfg = config(servers=2, faults=[{"kind": "kill_worker", "worker": 1, "step": 3},
                                    {"kind": "straggler", "worker": 0, "factor": 2.5, "from_step": 2},
                                    {"kind": "kill_server", "shard": 1, "update": 7}], checkpoint_every=4)
    assert worker_faults(cfg, 1).kill_steps == (3,) and not worker_faults(cfg, 1).straggles
    slow = worker_faults(cfg, 0)
    assert [slow.slowdown(s) for s in range(4)] == [1.0, 1.0, 2.5, 2.5]
    assert shard_faults(cfg, 1) == ShardFaults((7,), 4) and shard_faults(cfg, 0).kill_updates == ()
    assert lost_updates_expected(7, 4) == 3 and lost_updates_expected(8, 4) == 0 and lost_updates_expected(5, 0) == 5


@pytest.mark.parametrize("faults,extra,needle", [
    ([{"kind": "kill_worker", "worker": 2, "step": 1}], {}, "worker 2 does not exist"),
    ([{"kind": "kill_worker", "worker": 0, "step": 6}], {}, "step must be in 1..5"),
    ([{"kind": "kill_worker", "worker": 0, "step": 0}], {}, "step must be in 1..5"),
    ([{"kind": "kill_server", "shard": 1, "update": 3}], {}, "shard 1 does not exist"),
    ([{"kind": "kill_server", "shard": 0, "update": 12}], {}, "update must be in 1..11"),
    ([{"kind": "kill_server", "shard": 0, "update": 3}], {"sync": "sync"}, "needs sync 'async' or 'ssp'"),
    ([{"kind": "kill_worker", "worker": 0, "step": 2}], {"restarts": 0}, "restarts is 0"),
    ([{"kind": "kill_worker", "worker": 0, "step": 2}] * 2, {"restarts": 2}, "listed twice"),
    ([{"kind": "straggler", "worker": 0, "factor": 1.0}], {}, "greater than 1"),
    ([{"kind": "straggler", "worker": 0, "factor": 2, "from_step": 9}], {}, "from_step must be < 6"),
    ([{"kind": "explode", "worker": 0}], {}, "does not match any of the expected tags"),
    ([{"kind": "kill_worker", "worker": 0, "step": 2, "when": 1}], {}, "when"),
])
def test_impossible_faults_are_spec_errors(faults, extra, needle):
    with pytest.raises(UserError, match="invalid spec") as err:
        config(faults=faults, **extra)
    assert needle in str(err.value)


def test_a_fault_past_the_end_in_one_sweep_point_names_the_point():
    spec = parse_spec({"name": "t", "workload": {"steps": 4}, "sweep": {"workers": [1, 2]},
                       "faults": [{"kind": "kill_worker", "worker": 1, "step": 2}]})
    with pytest.raises(UserError, match="sweep point workers=1"):
        expand(spec)


def test_config_ids_without_faults_do_not_change():
    # The reliability fields at their defaults stay out of the id: older run folders keep their ids.
    assert expand(parse_spec({"name": "x"}))[0].config_id == "c000-cc16b243"
    assert expand(parse_spec({"name": "x", "restarts": 2}))[0].config_id != "c000-cc16b243"


def test_a_killed_worker_resumes_where_it_stopped_and_keeps_its_events():
    cfg = config(workers=1, faults=[{"kind": "kill_worker", "worker": 0, "step": 3}])
    server = ParameterServer(shard=0, lo=0, hi=cfg.gradient_elements, seed=cfg.seed,
                             learning_rate=cfg.learning_rate, recorder=rec("server-0", "server"))
    saved = {}

    def crash(step):
        saved.update(events=first.recorder.export(), position=first.position())
        raise Crashed(step)

    first = Worker(cfg, 0, LocalServerClient([server]), rec("worker-0", "worker"), faults=worker_faults(cfg, 0),
                   crash=crash)
    with pytest.raises(Crashed):
        first.train()
    assert first.steps_done == 3 and saved["position"]["crashed_steps"] == [3]
    again = Worker(cfg, 0, LocalServerClient([server]), rec("worker-0", "worker"), faults=worker_faults(cfg, 0),
                   crash=crash)
    again.recorder.restore(saved["events"])
    again.resume(saved["position"], crashed_wall_ns=again.recorder.now()[0] - 5_000_000)
    assert again.train() == 6
    phases = [(e.phase, e.step) for e in again.recorder.events()]
    assert [s for p, s in phases if p == "compute"] == list(range(6))
    restarts = [e for e in again.recorder.events() if e.phase == "restart"]
    assert len(restarts) == 1 and restarts[0].step == 3 and restarts[0].duration_ns >= 5_000_000
    assert server.stats()["updates"] == 6


def test_a_straggler_sleeps_factor_times_longer_from_its_step():
    cfg = config(workers=1, faults=[{"kind": "straggler", "worker": 0, "factor": 3, "from_step": 4}])
    sleeps = []
    server = ParameterServer(shard=0, lo=0, hi=cfg.gradient_elements, seed=0, learning_rate=0.1,
                             recorder=rec("server-0", "server"))
    w = Worker(cfg, 0, LocalServerClient([server]), rec("worker-0", "worker"), sleep=sleeps.append,
               faults=worker_faults(cfg, 0))
    w.train()
    assert sleeps == pytest.approx([0.001] * 4 + [0.003] * 2)


class RestartableShard:
    """A shard whose kill_server fault raises ``Crashed`` (its process exits), keeping its last
    checkpoint and its crash record as the actor keeps them in the run folder; ``restart`` is
    Ray's restart of the actor: a new shard that recovers from them."""

    def __init__(self, cfg) -> None:
        self.cfg, self.store = cfg, {}
        self.server = self._make()

    def _make(self) -> ParameterServer:
        cfg = self.cfg
        return ParameterServer(shard=0, lo=0, hi=cfg.gradient_elements, seed=cfg.seed,
                               learning_rate=cfg.learning_rate, recorder=rec("server-0", "server"),
                               faults=shard_faults(cfg, 0), checkpoint=self._checkpoint, crash=self._crash)

    def _checkpoint(self, state) -> None:
        self.store["ckpt"] = {**state, "w": state["w"].copy()}

    def _crash(self) -> None:
        self.store["crash"] = self.server.crash_record()
        raise Crashed()

    def restart(self) -> None:
        self.server = self._make()
        self.server.recover(self.store.get("ckpt"), self.store["crash"])


@pytest.mark.parametrize("every,update", [(4, 7), (4, 8), (0, 5), (3, 1)])
def test_a_killed_shard_loses_exactly_the_updates_since_its_checkpoint(every, update):
    cfg = config(workers=2, checkpoint_every=every, faults=[{"kind": "kill_server", "shard": 0, "update": update}])
    shard = RestartableShard(cfg)
    source = [GradientSource(cfg.seed, i, cfg.gradient_elements) for i in range(2)]
    pending = [(step, i) for step in range(cfg.steps) for i in range(2)]
    while pending:
        step, i = pending[0]
        try:
            shard.server.push(source[i].fill(step).copy(), i, step)
        except Crashed:
            shard.restart()
            continue  # the push in flight is retried, as Ray does
        pending.pop(0)
    st = shard.server.stats()
    assert st["lost_updates"] == lost_updates_expected(update, every)
    assert st["updates"] == 2 * cfg.steps - st["lost_updates"] and st["restarts"] == 1
    # The parameters hold every gradient except the lost ones: the updates (checkpoint, update].
    order = [(step, i) for step in range(cfg.steps) for i in range(2)]
    lost = order[update - st["lost_updates"]:update]
    kept = [o for o in order if o not in lost]
    expected = initial_parameters(cfg.seed, 0, cfg.gradient_elements).copy()
    for step, i in kept:
        expected -= np.float32(cfg.learning_rate) * source[i].fill(step)
    np.testing.assert_allclose(shard.server.parameters(), expected, rtol=1e-5, atol=1e-5)


def test_a_push_whose_reply_died_with_the_shard_is_applied_again_and_not_counted_lost():
    # The shard applies (worker 1, step 4) as its 10th update and dies on the 11th push before
    # that reply leaves the process: Ray retries both, and the restart (from the checkpoint at 8)
    # applies both again. Only one update is lost: (worker 0, step 4).
    cfg = config(workers=2, checkpoint_every=4, faults=[{"kind": "kill_server", "shard": 0, "update": 10}])
    shard = RestartableShard(cfg)
    g = np.zeros(cfg.gradient_elements, dtype=np.float32)
    for step in range(5):
        for worker in range(2):
            shard.server.push(g, worker, step)
    with pytest.raises(Crashed):
        shard.server.push(g, 0, 5)
    shard.restart()
    assert shard.server.stats()["lost_updates"] == 2  # (0, 4) and (1, 4), until a retry shows otherwise
    shard.server.push(g, 1, 4)  # the retry of the push whose reply was lost
    shard.server.push(g, 0, 5)  # the push that found the shard dying
    st = shard.server.stats()
    assert (st["lost_updates"], st["retried_after_crash"], st["updates"]) == (1, 1, 10)


def test_a_retried_push_the_shard_holds_is_not_applied_twice():
    server = ParameterServer(shard=0, lo=0, hi=8, seed=0, learning_rate=0.5, recorder=rec("server-0", "server"))
    g = np.ones(8, dtype=np.float32)
    server.push(g, 0, 0)
    before = server.parameters()
    assert server.push(g, 0, 0) == 1
    np.testing.assert_array_equal(server.parameters(), before)


def test_recorder_export_restore_round_trip():
    a = rec("worker-0", "worker")
    a.record(__import__("testbed.records.events", fromlist=["Phase"]).Phase.COMPUTE, 0, 10, 5)
    b = rec("worker-0", "worker")
    b.record(__import__("testbed.records.events", fromlist=["Phase"]).Phase.PUSH, 1, 20, 5)
    b.restore(a.export())
    assert [(e.phase, e.step) for e in b.events()] == [("compute", 0), ("push", 1)]
