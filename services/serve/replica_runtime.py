"""Per-replica engine settings that differ from the deployment's, changed at runtime.

A deploy changes every replica (a new version); `reconfigure()` changes every
replica in place. `ReplicaRuntime` is how ONE replica gets a different
EngineConfig without a restart: a named, detached Ray actor holding settings
per replica id, each change with a new generation number.

    operator ──put(replica, {field: value})──▶ ReplicaRuntime ◀──get(replica)── RuntimeWatcher (every replica, ~1 Hz)
    operator ◀──status(replica): applied generation, error── ReplicaRuntime ◀──report(replica, gen, error)──┘
    operator ──drain(replica)──▶ ReplicaRuntime ◀──draining(replica)── RuntimeWatcher ──▶ check_health() fails

A replica whose settings changed rebuilds its engine from
`dataclasses.replace(deployed_config, **settings)` (EngineLoop.rebuild: same
process, running requests finish first). Settings are keyed by Serve's replica
id, which a restarted replica does not keep: a replacement starts from the
deployment's config, as a restarted machine would.

A drain (`sandbox mitigate drain-replica`) is a readiness probe gone red, as a
load balancer drains a backend: the replica's health check fails from then
on, so Serve stops routing to it, lets its requests in flight finish (its
graceful shutdown), and starts a replacement on the deployed config.

The replicas create the actor (get-if-exists) when they start, so it is part
of every running stack; `ray stop` ends it with the cluster.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import ray

ACTOR_NAME = "replica_runtime"
NAMESPACE = "sandbox"


class ReplicaRuntime:
    def __init__(self):
        self._generation = 0
        self._settings: dict[str, tuple[int, dict]] = {}  # replica -> (generation, settings)
        self._reports: dict[str, tuple[int, str | None]] = {}  # replica -> (generation applied, error)
        self._draining: set[str] = set()

    def put(self, replica: str, settings: dict) -> int:
        """Give `replica` these settings ({} = the deployment's own); the generation to wait for."""
        self._generation += 1
        self._settings[replica] = (self._generation, dict(settings))
        return self._generation

    def get(self, replica: str) -> tuple[int, dict]:
        return self._settings.get(replica, (0, {}))

    def report(self, replica: str, generation: int, error: str | None) -> None:
        self._reports[replica] = (generation, error)

    def status(self, replica: str) -> dict:
        generation, settings = self.get(replica)
        applied, error = self._reports.get(replica, (0, None))
        return {"generation": generation, "settings": settings, "applied": applied, "error": error}

    def drain(self, replica: str) -> None:
        """From now on `replica` fails its health checks: Serve routes it nothing new and replaces it."""
        self._draining.add(replica)

    def draining(self, replica: str) -> bool:
        return replica in self._draining

    def forget(self, replica: str) -> None:
        self._settings.pop(replica, None)
        self._reports.pop(replica, None)
        self._draining.discard(replica)


_remote_class = None


def runtime_actor():
    """The cluster's ReplicaRuntime actor, created if it does not exist yet (needs ray.init)."""
    global _remote_class
    if _remote_class is None:
        _remote_class = ray.remote(num_cpus=0, max_restarts=-1)(ReplicaRuntime)
    return _remote_class.options(name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote()


class RuntimeWatcher:
    """Polls the actor for this replica's settings; calls apply(settings) when they change.

    Runs on its own thread, never the engine's; apply() is expected to block until
    the engine runs with the new settings (or raise, which is reported back).
    """

    def __init__(self, replica: str, apply: Callable[[dict], None], interval_s: float = 1.0,
                 rpc_timeout_s: float = 10.0):
        self.replica = replica
        self._apply = apply
        self.interval_s = interval_s
        self.rpc_timeout_s = rpc_timeout_s
        self.applied_generation = 0
        self.settings: dict = {}
        self.draining = False  # once asked to drain, for good: this process is on its way out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runtime-config", daemon=True)

    def start(self) -> RuntimeWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        actor = None
        while not self._stop.is_set():
            try:
                if actor is None:
                    actor = runtime_actor()
                self.poll(actor)
            except Exception:  # noqa: BLE001 - the actor is gone or busy: look it up again next time
                actor = None
            self._stop.wait(self.interval_s)

    def poll(self, actor) -> None:
        if not self.draining:
            self.draining = ray.get(actor.draining.remote(self.replica), timeout=self.rpc_timeout_s)
        generation, settings = ray.get(actor.get.remote(self.replica), timeout=self.rpc_timeout_s)
        if generation == self.applied_generation:
            return
        error = None
        if settings != self.settings:
            try:
                self._apply(settings)
                self.settings = settings
            except Exception as e:  # noqa: BLE001 - the engine keeps its previous settings
                error = f"{type(e).__name__}: {e}"
        ray.get(actor.report.remote(self.replica, generation, error), timeout=self.rpc_timeout_s)
        self.applied_generation = generation  # only once reported: a lost report is sent again
