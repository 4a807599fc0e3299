"""Faults that go out as deploys: a new version with changed settings, or runtime knobs on every replica.

Both go through `services.stack.deployer.deploy_changes`, exactly as `sandbox deploy
--set key=value` does, so Serve does what it does for any deploy: a rolling
update to a new version (`deploy`), or `reconfigure()` in place (`knobs`).
Each records the value every key had before, and its revert deploys those
values back (a `deploy` also gets its previous version label back). A key the
config did not name before is set to its default, which behaves the same.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from faults.base import Fault, FaultContext, InvalidFault, Location, check_mapping
from services.engine.config import EngineConfig
from services.serve.config import ReplicaKnobs, ServeAppConfig, default_config_path
from services.stack.deploy_config import SERVER, DeployConfig
from services.stack.deployer import deploy_changes


def _default(cls, name: str):
    f = next(f for f in fields(cls) if f.name == name)
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def _assignment(key: str, value) -> str:
    return f"{key}={json.dumps(value)}"  # JSON is YAML: the deployer reads values with yaml.safe_load


def _repo_config():
    return DeployConfig.load(default_config_path())


@dataclass
class Deploy(Fault):
    """`set: {key: value}` as in `sandbox deploy --set` (engine.<field>, <engine field>, app args); a new version."""
    type: ClassVar[str] = "deploy"
    component: ClassVar[str] = "deployment"
    new_version: ClassVar[bool] = True
    public: ClassVar[bool] = True  # every deploy is in the deploy log, as in any deploy
    set: dict
    version: str | None = None  # the new version's label; None = the next one (v1 -> v2)
    _previous: dict | None = field(default=None, init=False, repr=False)  # key -> value before; None: nothing deployed
    _previous_version: str | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_mapping("set", self.set)
        if self.version is not None and not isinstance(self.version, str):
            raise InvalidFault("version", f"must be a version label, got {self.version!r}")
        for key in self.set:
            if key.startswith("knobs."):
                raise InvalidFault(f"set.{key}", "runtime knobs are not a deploy: use a fault of type knobs")
            if key in ("replicas", "version"):
                raise InvalidFault(f"set.{key}", "not a setting this fault changes"
                                   + (": use the fault's version field" if key == "version" else ""))
        repo = _repo_config()
        try:
            repo.with_overrides(self.assignments(), self.version).check_engine()
        except ValueError as combined:
            # Settings can depend on each other (a draft model needs speculative tokens), so the set is
            # judged whole; one key at a time only finds which key to name in the error.
            for key, value in self.set.items():
                try:
                    repo.with_overrides([_assignment(key, value)]).check_engine()
                except ValueError as e:
                    raise InvalidFault(f"set.{key}", str(e)) from None
            raise InvalidFault("version" if "version" in str(combined) else "set", str(combined)) from None

    def assignments(self) -> list[str]:
        return [_assignment(k, v) for k, v in self.set.items()]

    def _inject(self, ctx: FaultContext) -> None:
        current = DeployConfig.load(Path(ctx.state.deployed_config))
        self._previous = {key: _current_value(current, key) for key in self.set}
        self._previous_version = current.version
        ctx.log(f"deploy: {', '.join(self.assignments())}")
        try:
            # A new version that rolls out and then fails under load is the incident, not a failed injection.
            report = deploy_changes(ctx.cfg, ctx.state, self.assignments(), self.version, ctx.timeout_s,
                                    tolerate_failing=True, on_poll=ctx.tick)
        except ValueError as e:  # refused by the running stack's config before anything was deployed
            self._previous = None
            raise InvalidFault("set", str(e)) from None
        self._location = Location(version=report["version"], component=self.component)

    def in_place(self, ctx: FaultContext) -> str | None:
        """In place while the serving config has every setting this deploy set (one of them put back breaks the
        mechanism: int4 weights quantized per channel are not the coarse ones)."""
        serving = DeployConfig.load(Path(ctx.state.deployed_config))
        if all(_current_value(serving, key) == value for key, value in self.set.items()):
            return f"the serving version {serving.version} runs {', '.join(self.assignments())}"
        return None

    def _revert(self, ctx: FaultContext) -> None:
        if self._previous is None:
            return
        back = [_assignment(k, v) for k, v in self._previous.items()]
        ctx.log(f"deploy (revert): {', '.join(back)}, version {self._previous_version}")
        deploy_changes(ctx.cfg, ctx.state, back, self._previous_version, ctx.timeout_s)
        self._previous = None


def _current_value(config, key: str):
    """What `key` (as `sandbox deploy --set` names it) is in `config`, or its default."""
    section, _, name = key.rpartition(".")
    engine_fields = {f.name for f in fields(EngineConfig)}
    app_fields = {f.name for f in fields(ServeAppConfig)} - {"engine"}
    if section == "env":  # unset is None: the revert's `env.NAME=null` removes what the deploy added
        return config.env.get(name)
    if section == "engine" or (section == "" and name in engine_fields and name not in app_fields):
        engine = config.args.get("engine") or {}
        return engine[name] if name in engine else (None if name == "model" else _default(EngineConfig, name))
    return config.args[name] if name in config.args else _default(ServeAppConfig, name)


@dataclass
class Knobs(Fault):
    """`set: {knob: value}`: ReplicaKnobs (max_num_seqs, max_num_batched_tokens, ...) on every replica, in place."""
    type: ClassVar[str] = "knobs"
    component: ClassVar[str] = "runtime-knobs"
    set: dict
    _previous: dict | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_mapping("set", self.set)
        known = [f.name for f in fields(ReplicaKnobs)]
        for key in self.set:
            if key not in known:
                raise InvalidFault(f"set.{key}", f"unknown knob (knobs: {', '.join(known)})")
            try:
                ReplicaKnobs(**{key: self.set[key]})
            except ValueError as e:
                raise InvalidFault(f"set.{key}", str(e)) from None

    def _inject(self, ctx: FaultContext) -> None:
        current = DeployConfig.load(Path(ctx.state.deployed_config))
        knobs = current.deployment(SERVER).get("user_config") or {}
        self._previous = {k: knobs.get(k, _default(ReplicaKnobs, k)) for k in self.set}
        assignments = [_assignment(f"knobs.{k}", v) for k, v in self.set.items()]
        ctx.log(f"knobs: {', '.join(assignments)}")
        report = deploy_changes(ctx.cfg, ctx.state, assignments, None, ctx.timeout_s, on_poll=ctx.tick)
        self._location = Location(version=report["version"], component=self.component)

    def _revert(self, ctx: FaultContext) -> None:
        if self._previous is None:
            return
        back = [_assignment(f"knobs.{k}", v) for k, v in self._previous.items()]
        ctx.log(f"knobs (revert): {', '.join(back)}")
        deploy_changes(ctx.cfg, ctx.state, back, None, ctx.timeout_s)
        self._previous = None
