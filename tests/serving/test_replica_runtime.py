"""The runtime actor's drain: a replica asked to drain fails its health checks from its next poll on, for good."""
import pytest

from services.serve import replica_runtime
from services.serve.replica_runtime import ReplicaRuntime, RuntimeWatcher


class Local:
    """The actor's methods called in process: `actor.m.remote(...)` returns the value, which ray.get passes on."""

    def __init__(self, runtime: ReplicaRuntime):
        self.runtime = runtime

    def __getattr__(self, name):
        method = getattr(self.runtime, name)
        return type("M", (), {"remote": staticmethod(method)})


@pytest.fixture
def local_ray(monkeypatch):
    monkeypatch.setattr(replica_runtime.ray, "get", lambda value, timeout=None: value)


def test_a_drained_replica_reads_draining_and_the_others_do_not():
    runtime = ReplicaRuntime()
    runtime.drain("r1")
    assert (runtime.draining("r1"), runtime.draining("r2")) == (True, False)
    runtime.forget("r1")
    assert runtime.draining("r1") is False


def test_the_watcher_learns_of_the_drain_at_its_next_poll_and_keeps_it(local_ray):
    runtime = ReplicaRuntime()
    applied = []
    watcher = RuntimeWatcher("r1", applied.append)
    watcher.poll(Local(runtime))
    assert watcher.draining is False
    runtime.drain("r1")
    watcher.poll(Local(runtime))
    assert watcher.draining is True
    runtime.forget("r1")  # the drain is done once the replica is gone; this process never serves again
    watcher.poll(Local(runtime))
    assert watcher.draining is True and applied == []


def test_a_drain_leaves_the_replicas_own_settings_as_they_are(local_ray):
    runtime = ReplicaRuntime()
    applied = []
    watcher = RuntimeWatcher("r1", applied.append)
    runtime.put("r1", {"num_gpu_blocks": 64})
    runtime.drain("r1")
    watcher.poll(Local(runtime))
    assert watcher.draining is True and applied == [{"num_gpu_blocks": 64}]
    assert runtime.status("r1") == {"generation": 1, "settings": {"num_gpu_blocks": 64}, "applied": 1, "error": None}
