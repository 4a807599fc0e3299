"""The remediations that change an engine setting: each is a deploy of a new version with its settings put
back to what a known-good config serves: the one a drill's healthy baseline ran on (an incident's setup can
tune a fleet away from the shipped defaults: oom-at-peak's memory budget of 0.75), else the shipped config
(services/serve_config.yaml), else the engine's default.

A direction says which way the change must go: `raise-prefill-budget` on a fleet whose budget is already at
or above the known-good one changes nothing and is refused, as is any action whose settings are already as
known-good, except `raise-kv-cache`: a replica can run a smaller pool than the deployed config says (its own
settings), and a new version replaces every replica with the deployed pool. `sandbox deploy --set` stays
open for any other value.
"""
from __future__ import annotations

import json
from dataclasses import fields

from sandbox.mitigation.catalogue import SETTING_CHANGES
from services.engine.config import EngineConfig
from services.stack.deploy_config import DeployConfig


def engine_setting(config: DeployConfig, name: str):
    """A setting as `config` deploys it: its own value, else the engine's default."""
    engine = config.args.get("engine") or {}
    if name in engine:
        return engine[name]
    return next(f.default for f in fields(EngineConfig) if f.name == name)


def change(action: str, deployed: DeployConfig, good: DeployConfig, version: str) -> tuple[DeployConfig, list[str]]:
    """(the config to deploy, its `key=value` changes): `deployed` with the action's settings as the known-good
    config `good` has them, as `version`. ValueError when that changes nothing or goes the wrong way."""
    spec = SETTING_CHANGES[action]
    moved = {}
    for name in spec.settings:
        now, back = engine_setting(deployed, name), engine_setting(good, name)
        if now == back:
            continue
        wrong_way = spec.direction in ("up", "down") and None not in (now, back) \
            and (back > now) != (spec.direction == "up")
        if wrong_way:
            word = "raise" if spec.direction == "up" else "lower"
            raise ValueError(f"{action}: engine.{name} is {now}, past the known-good {back}; nothing to {word} "
                             "(`sandbox deploy --set` sets any value)")
        moved[name] = back
    if not moved and spec.direction == "reset":
        return deployed.with_overrides([], version), [f"version={version}"]
    if not moved:
        names = ", ".join(f"engine.{n}={engine_setting(deployed, n)}" for n in spec.settings)
        raise ValueError(f"{action}: nothing to change, the serving version already runs {names}")
    assignments = [f"engine.{name}={json.dumps(value)}" for name, value in moved.items()]  # JSON is YAML
    return deployed.with_overrides(assignments, version), assignments
