"""One replica runs with different engine settings: same process, same labels, a rebuilt engine.

The settings go to the cluster's ReplicaRuntime actor under the replica's id;
the replica's watcher picks them up within about a second, lets its running
requests finish, rebuilds its engine from the deployed config plus these
settings, and reports the generation it applied (or why it could not). Inject
returns once the replica reports; revert gives the replica empty settings, so
it rebuilds back to the deployed config.

Settings are keyed by Serve's replica id: a replica that Serve restarts comes
back with a new id and the deployed config, and its old settings are dropped.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar

from faults.base import Fault, FaultContext, InjectionFailed, InvalidFault, Location, check_mapping, check_replica
from faults.deploys import _repo_config
from faults.replicas import Replica, is_running, list_replicas, select
from services.engine.config import EngineConfig
from services.serve.config import ServeAppConfig


def deployed_engine_config():
    """The EngineConfig that services/serve_config.yaml deploys (what settings are checked against)."""
    return ServeAppConfig.from_dict(_repo_config().args).engine_config()


@dataclass
class ReplicaOverride(Fault):
    """`set: {EngineConfig field: value}` on ONE replica (`replica: random | <index>`), in place."""
    type: ClassVar[str] = "replica-override"
    component: ClassVar[str] = "engine"
    needs_ray: ClassVar[bool] = True  # the runtime actor takes the settings
    set: dict
    replica: str | int = "random"
    poll_s: ClassVar[float] = 0.5
    _target: Replica | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_replica(self.replica)
        check_mapping("set", self.set)
        known = [f.name for f in dataclasses.fields(EngineConfig)]
        deployed = deployed_engine_config()
        for key, value in self.set.items():  # one at a time first, so the error names the key
            if key not in known:
                raise InvalidFault(f"set.{key}", "not an EngineConfig field")
            try:
                dataclasses.replace(deployed, **{key: value})
            except ValueError as e:
                raise InvalidFault(f"set.{key}", str(e)) from None
        try:
            dataclasses.replace(deployed, **self.set)
        except ValueError as e:
            raise InvalidFault("set", str(e)) from None

    def _inject(self, ctx: FaultContext) -> None:
        import ray

        target = select(list_replicas(ctx), self.replica, ctx.rng)
        self._target = target
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        ctx.log(f"replica-override: replica {target.replica_id}: {self.set}")
        runtime = ctx.runtime()
        generation = ray.get(runtime.put.remote(target.replica_id, dict(self.set)))
        self._wait_applied(ctx, runtime, target, generation)
        now = {r.replica_id: r.pid for r in list_replicas(ctx)}
        if now.get(target.replica_id) != target.pid:
            raise InjectionFailed(f"replica-override: replica {target.replica_id} was restarted while rebuilding")

    def in_place(self, ctx: FaultContext) -> str | None:
        """In place while a running replica has settings of its own in the runtime (and applied them): a replica
        that Serve replaced comes back under a new id, with none."""
        import ray

        runtime = ctx.runtime()
        for replica in list_replicas(ctx):
            status = ray.get(runtime.status.remote(replica.replica_id))
            if status["settings"] and status["applied"] >= status["generation"] and not status["error"]:
                return (f"replica {replica.replica_id} runs with settings of its own "
                        f"({', '.join(sorted(status['settings']))})")
        return None

    def _revert(self, ctx: FaultContext) -> None:
        import ray

        if self._target is None:
            return
        runtime = ctx.runtime()
        replica = self._target.replica_id
        generation = ray.get(runtime.put.remote(replica, {}))
        if is_running(ctx, replica):
            ctx.log(f"replica-override (revert): replica {replica} back to the deployed config")
            self._wait_applied(ctx, runtime, self._target, generation)
        ray.get(runtime.forget.remote(replica))
        self._target = None

    def _wait_applied(self, ctx: FaultContext, runtime, target: Replica, generation: int) -> None:
        import ray

        deadline = time.monotonic() + ctx.timeout_s
        while True:
            status = ray.get(runtime.status.remote(target.replica_id))
            if status["applied"] >= generation:
                if status["error"]:
                    raise InjectionFailed(f"replica-override: replica {target.replica_id} refused the settings: "
                                          f"{status['error']}")
                return
            if time.monotonic() > deadline:
                raise InjectionFailed(f"replica-override: replica {target.replica_id} did not apply the settings "
                                      f"within {ctx.timeout_s:.0f}s")
            if not is_running(ctx, target.replica_id):
                raise InjectionFailed(f"replica-override: replica {target.replica_id} stopped running")
            time.sleep(self.poll_s)
