"""Shaped links on the plain shard and worker (no Ray): where the waits happen, what they carry."""

import threading

import numpy as np

from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.config.spec import Network
from testbed.emulation.network import ShardLinks
from tests.factories import recorder as rec
from tests.factories import run_config as config


class WatchedLinks:
    """Links that record each transfer and whether the shard's lock was held during it."""

    shaped = True

    def __init__(self):
        self.server = None
        self.calls = []

    def receive(self, nbytes, near=False):
        self.calls.append(("receive", nbytes, near, self.server._lock.locked()))
        return 0.0

    def send(self, nbytes, near=False):
        self.calls.append(("send", nbytes, near, self.server._lock.locked()))
        return 0.0


def shard_with(links, elements=1024):
    server = ParameterServer(shard=0, lo=0, hi=elements, seed=1, learning_rate=0.1,
                             recorder=rec("server-0", "server"), links=links)
    if isinstance(links, WatchedLinks):
        links.server = server
    return server


def phases(server):
    return [e.phase for e in server.recorder.events()]


def test_push_crosses_the_inbound_link_before_the_lock_and_records_link_in_before_queue():
    links = WatchedLinks()
    server = shard_with(links)
    grad = np.ones(1024, np.float32)
    server.push(grad, worker=0, step=0)
    assert links.calls == [("receive", grad.nbytes, False, False)]
    assert phases(server) == ["link_in", "queue", "apply"]
    link_in = server.recorder.events()[0]
    assert link_in.bytes == grad.nbytes


def test_every_pull_form_crosses_the_outbound_link_after_the_copy_outside_the_lock():
    links = WatchedLinks()
    server = shard_with(links)
    grad = np.ones(1024, np.float32)
    server.pull(step=3, near=True)
    server.push_pull(grad, worker=0, step=0)
    server.push_pull_at(grad, worker=0, step=1, pulled_version=1, version=2)
    server.pull_at(2)
    kinds = [(kind, near, locked) for kind, _, near, locked in links.calls]
    assert kinds == [("send", True, False), ("receive", False, False), ("send", False, False),
                     ("receive", False, False), ("send", False, False), ("send", False, False)]
    assert all(nbytes == grad.nbytes for _, nbytes, _, _ in links.calls)
    outs = [e for e in server.recorder.events() if e.phase == "link_out"]
    assert [e.step for e in outs] == [3, 0, 1, -1]


def test_unshaped_links_record_nothing_extra():
    server = shard_with(ShardLinks("server-0", Network()))
    assert server.links is None
    server.push_pull(np.ones(1024, np.float32), worker=0, step=0)
    assert phases(server) == ["queue", "apply"]


def test_a_push_waiting_for_the_link_does_not_hold_the_apply_lock():
    """A slow push on the inbound link, and meanwhile a pull completes: the lock was free."""
    slow = ShardLinks("server-0", Network(bandwidth=8 * 200_000))  # 200 kB/s: 4 KiB takes ~20 ms
    server = shard_with(slow)
    pushing = threading.Thread(target=server.push, args=(np.ones(1024, np.float32), 0, 0))
    pushing.start()
    while slow.far.shaper.active(slow.far.inbound) == 0 and pushing.is_alive():
        pass
    acquired = server._lock.acquire(timeout=0.005)  # the push is on the link, not in the apply
    if acquired:
        server._lock.release()
    pushing.join(5)
    assert acquired
    link_in = [e for e in server.recorder.events() if e.phase == "link_in"][0]
    assert link_in.duration_ns >= 0.95 * 4096 / 200_000 * 1e9


class FakeLink:
    def __init__(self):
        self.sent, self.received = [], []

    def send(self, nbytes):
        self.sent.append(nbytes)

    def receive(self, nbytes):
        self.received.append(nbytes)


def test_worker_waits_its_own_link_for_bytes_to_far_shards_only():
    cfg = config(servers=2, gradient_bytes="8KiB", network={"bandwidth": "1Gbit"}, pull_every=2)
    shards = [ParameterServer(shard=i, lo=lo, hi=hi, seed=1, learning_rate=0.1, recorder=rec(f"server-{i}", "server"))
              for i, (lo, hi) in enumerate(cfg.shard_bounds())]
    client = LocalServerClient(shards)
    client.near = [True, False]  # shard 0 shares the worker's node
    worker = Worker(cfg, 0, client, rec("worker-0", "worker"), sleep=lambda s: None)
    assert worker.link is not None
    worker.link = FakeLink()
    worker.train(steps=2)
    half = cfg.gradient_bytes // 2
    # step 0: a push; step 1: a push with its due pull in one call (send, then receive)
    assert worker.link.sent == [half, half] and worker.link.received == [half]


def test_worker_has_no_link_when_unshaped_or_latency_only():
    client = LocalServerClient([])
    assert Worker(config(), 0, client, rec("worker-0", "worker")).link is None
    assert Worker(config(network={"latency": "1ms"}), 0, client, rec("worker-0", "worker")).link is None


class FakeHandle:
    """A shard handle whose calls record their arguments (no Ray)."""

    def __init__(self):
        self.calls = []
        self.push = self.pull = self.push_pull = self

    def remote(self, *args):
        self.calls.append(args)
        return args


def test_ray_client_passes_near_only_when_some_shard_is_near(monkeypatch):
    import sys
    import types

    from actors.worker import RayServerClient
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get=lambda refs: refs))
    g = np.ones(4, np.float32)
    far = RayServerClient([FakeHandle(), FakeHandle()])
    far.push([g, g], 0, 3, [0, 0])
    assert [len(h.calls[0]) for h in far.handles] == [4, 4]  # no near argument to serialise
    mixed = RayServerClient([FakeHandle(), FakeHandle()], near=[True, False])
    mixed.push([g, g], 0, 3, [0, 0])
    mixed.pull(step=3)
    assert [h.calls[0][-1] for h in mixed.handles] == [True, False]
    assert [h.calls[1] for h in mixed.handles] == [(3, True), (3, False)]
