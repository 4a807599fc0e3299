"""What every fault is: typed fields validated up front, inject and revert through a real mechanism.

    fault = build({"type": "cpu-throttle", "replica": "random", "cpu_fraction": 0.2})   # InvalidFault if wrong
    where = fault.inject(ctx)        # Location: the replica / version / component it hit
    ...
    fault.revert(ctx)                # safe twice, and after a failed inject
    errors = revert_all(faults, ctx) # newest first; every revert is tried

`inject` marks the fault injected before it touches anything, so whatever a
failed inject managed to change is still reverted; each fault's `_revert` looks
only at what its `_inject` recorded.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar, Self

from services.stack import ray_token
from services.stack.ray_cluster import python_signal_handlers
from services.stack.serve_control import ServeControl

if TYPE_CHECKING:
    from faults.journal import FaultJournal
    from services.stack.settings import SandboxConfig
    from services.stack.state import StackState


class InvalidFault(ValueError):
    """A fault spec is wrong; `field` names the offending field (relative to the fault's dict)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class InjectionFailed(RuntimeError):
    """A valid fault could not be injected (or reverted) on the running stack."""


@dataclass(frozen=True)
class Location:
    """Where a fault landed, as a diagnosis names it: a replica id, a version, a component."""
    replica: str | None = None
    version: str | None = None
    component: str | None = None

    def to_dict(self) -> dict:
        return {"replica": self.replica, "version": self.version, "component": self.component}


def _quiet(message: str) -> None:
    pass


def _stay_on_loopback() -> None:
    """Let this driver reach a Ray head that listens on loopback only.

    `sandbox up` starts a loopback head with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    (services/stack/ray_cluster.py); without the same switch a driver turns 127.0.0.1
    into the machine's interface address and never finds the GCS. Ray reads the
    variable when it is imported, so the constant it was read into is set too.
    """
    import os

    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


@dataclass
class FaultContext:
    """The running stack a fault acts on, the drill's seeded RNG, and where progress goes."""
    cfg: SandboxConfig
    state: StackState
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    log: Callable[[str], None] = _quiet
    timeout_s: float = 180.0  # how long a deploy or a replica's rebuild may take to land
    # Called while an injection waits on a rollout: a drill keeps watching its alerts meanwhile, so a
    # page that fires mid-rollout is shown when it fires, not when the rollout has landed.
    tick: Callable[[], None] | None = None
    # Where a fault writes how to undo what outlives the drill (faults/journal.py); None: nowhere (tests).
    journal: FaultJournal | None = None
    _serve: ServeControl | None = field(default=None, init=False, repr=False)
    _ray_connected: bool = field(default=False, init=False, repr=False)

    def serve(self) -> ServeControl:
        """Serve's REST API on the dashboard (replica ids, pids, deployment state)."""
        if self._serve is None:
            self._serve = ServeControl(self.state.dashboard_url, token_file=self.state.ray_token_file)
        return self._serve

    def connect_ray(self) -> None:
        """Join the stack's Ray cluster as a driver (a no-op if this process already has).

        A driver shows in Ray's job list from the moment it connects: a drill
        runner should connect before traffic starts, not at injection time.
        """
        import logging

        import ray

        # Ray (and the runtime actor's module, which needs it) loads only where a fault talks to the cluster.
        from services.serve.replica_runtime import NAMESPACE

        if not ray.is_initialized():
            host = (self.state.ray_address or "").rpartition(":")[0]
            if host in ("127.0.0.1", "localhost"):
                _stay_on_loopback()
            ray_token.use_in_driver(self.state.ray_token_file)  # the sandbox's cluster refuses a driver without it
            with python_signal_handlers():  # Ray's own SIGTERM handler would end the drill without its clean-up
                ray.init(address=self.state.ray_address, namespace=NAMESPACE, log_to_driver=False,
                         logging_level=logging.WARNING)
            self._ray_connected = True

    def remember(self, fault: Fault) -> None:
        """A fault is about to change something: its undo record goes to the journal first."""
        if self.journal is not None:
            self.journal.remember(fault)

    def forget(self, fault: Fault) -> None:
        if self.journal is not None:
            self.journal.forget(fault)

    def runtime(self):
        """The cluster's ReplicaRuntime actor (services/serve/replica_runtime.py)."""
        from services.serve.replica_runtime import runtime_actor  # needs Ray: see connect_ray

        self.connect_ray()
        return runtime_actor()

    def close(self) -> None:
        if self._serve is not None:
            self._serve.close()
            self._serve = None
        if self._ray_connected:
            import ray

            ray.shutdown()
            self._ray_connected = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Fault:
    """A fault type's fields are its dataclass fields; `_`-prefixed ones are what inject recorded."""
    type: ClassVar[str] = ""
    component: ClassVar[str] = ""
    # What the rest of the house asks of a fault, so nothing outside faults/ tests a type name:
    needs_ray: ClassVar[bool] = False  # talks to the cluster as a Ray driver (a drill connects before traffic)
    node: ClassVar[str | None] = None  # the node kind it acts on: None (any stack) or "container"
    new_version: ClassVar[bool] = False  # rolls out a new version (a location's `version: injected`)
    public: ClassVar[bool] = False  # as visible as any change (a deploy's log): its type name is not a leak
    _injected: bool = field(default=False, init=False, repr=False, compare=False)
    _location: Location = field(default_factory=Location, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.validate()

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.init]

    def spec(self) -> dict:
        """The fault as an incident file writes it."""
        return {"type": self.type, **{name: getattr(self, name) for name in self.field_names()}}

    def validate(self) -> None:
        """Raise InvalidFault naming the field; touches nothing."""

    def inject(self, ctx: FaultContext) -> Location:
        """Inject once (a second call returns the same location); InjectionFailed if the stack refuses."""
        if self._injected:
            return self._location
        self.validate()
        self._injected = True
        try:
            self._inject(ctx)
        except (InvalidFault, InjectionFailed):
            raise
        except Exception as e:  # one error type for the caller; the cause is chained
            raise InjectionFailed(f"{self.type}: {type(e).__name__}: {e}") from e
        return self._location

    def revert(self, ctx: FaultContext) -> None:
        """Undo what inject did (or the part of it that happened); a no-op when nothing is injected."""
        if not self._injected:
            return
        self._revert(ctx)
        self._injected = False
        ctx.forget(self)

    @property
    def injected(self) -> bool:
        return self._injected

    def location(self) -> Location:
        return self._location

    def in_place(self, ctx: FaultContext) -> str | None:
        """Why this fault's mechanism is still in the stack, read from the stack as it is now (the serving
        config, a replica's process), not from what inject recorded: a mitigation's invariant
        (sandbox/mitigation/oracle.py). None where it is gone, or where nothing can be read for this type."""
        return None

    def undo_record(self) -> dict | None:
        """What `restore` needs (JSON) to undo this fault's changes from another process, when its own process
        was killed before the revert; None when stopping the stack undoes them (they live in its processes)."""
        return None

    @classmethod
    def restore(cls, record: dict) -> list[str]:
        """Undo from an `undo_record` (safe to repeat; what is gone is left alone); a line per change undone."""
        raise NotImplementedError(f"{cls.type} writes no undo record")

    def _inject(self, ctx: FaultContext) -> None:
        raise NotImplementedError

    def _revert(self, ctx: FaultContext) -> None:
        raise NotImplementedError


def revert_all(faults: list[Fault], ctx: FaultContext) -> list[str]:
    """Revert newest first; every revert is tried, and the errors come back instead of stopping the rest."""
    errors = []
    for fault in reversed(faults):
        try:
            fault.revert(ctx)
        except Exception as e:  # noqa: BLE001 - carry on with the others
            errors.append(f"{fault.type}: {type(e).__name__}: {e}")
            ctx.log(f"revert failed: {fault.type}: {e}")
    return errors


# -- field checks shared by the fault types ---------------------------------------
def check_mapping(name: str, value, allow_empty: bool = False) -> None:
    if not isinstance(value, dict) or (not value and not allow_empty):
        raise InvalidFault(name, f"must be a non-empty mapping of setting: value, got {value!r}")
    for key in value:
        if not isinstance(key, str) or not key:
            raise InvalidFault(name, f"keys must be setting names, got {key!r}")


def check_number(name: str, value, low: float, high: float, *, low_open: bool = True,
                 high_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise InvalidFault(name, f"must be a number in {interval}, got {value!r}")


def check_replica(value) -> None:
    """`random`, or an index into the running replicas sorted by id."""
    if value == "random":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidFault("replica", f"must be 'random' or a replica index 0, 1, ..., got {value!r}")
