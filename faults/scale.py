"""A fleet of another size: the LLMServer deployment's replica count, changed in place.

`replicas: N` does what `sandbox deploy --set replicas=N` does: Serve starts or stops replicas under the
version that serves (no new version, no rolling update). An incident's `setup` uses it to run its baseline on a
fleet of its own size (traffic-surge: one replica, leaving a core for scale-out to land on); in a variant's
faults it would be a scale-in that left the fleet short. Its revert puts the count back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from faults.base import Fault, FaultContext, InvalidFault, Location
from services.stack.deploy_config import DeployConfig
from services.stack.deployer import deploy_changes


@dataclass
class Scale(Fault):
    """`replicas: N` (a whole number >= 1): the number of LLMServer replicas, in place."""
    type: ClassVar[str] = "scale"
    component: ClassVar[str] = "capacity"
    public: ClassVar[bool] = True  # a fleet's size is on every dashboard, as any deploy is in its log
    replicas: int
    _previous: int | None = field(default=None, init=False, repr=False)  # the count before; None: unchanged

    def validate(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 1:
            raise InvalidFault("replicas", f"must be a whole number of replicas >= 1, got {self.replicas!r}")

    def _inject(self, ctx: FaultContext) -> None:
        before = DeployConfig.load(Path(ctx.state.deployed_config)).replicas
        self._location = Location(component=self.component)
        if before == self.replicas:
            return
        self._previous = before
        ctx.log(f"scale: replicas={self.replicas} (from {before})")
        deploy_changes(ctx.cfg, ctx.state, [f"replicas={self.replicas}"], None, ctx.timeout_s, on_poll=ctx.tick)

    def in_place(self, ctx: FaultContext) -> str | None:
        """In place while the deployment still runs no more replicas than this set (a scale-out undoes it)."""
        serving = DeployConfig.load(Path(ctx.state.deployed_config)).replicas
        if self._previous is not None and serving <= self.replicas < self._previous:
            return f"the deployment runs {serving} replica(s), {self._previous} before"
        return None

    def _revert(self, ctx: FaultContext) -> None:
        if self._previous is None:
            return
        ctx.log(f"scale (revert): replicas={self._previous}")
        deploy_changes(ctx.cfg, ctx.state, [f"replicas={self._previous}"], None, ctx.timeout_s)
        self._previous = None
