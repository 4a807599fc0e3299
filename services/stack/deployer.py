"""Deploy changed settings to the running stack and wait until the change has fully landed.

A change of the application `args` (engine settings, version) changes Serve's
code version: every replica is replaced, a few at a time, while the others keep
serving. A change of only `user_config` or `num_replicas` is applied in place.
"Landed" means Serve reports the new config with every replica RUNNING, and —
for a new version — Prometheus holds engine metrics of that version from every
replica.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from services.stack.deploy_config import INGRESS, SERVER, DeployConfig
from services.stack.progress import Steps
from services.stack.serve_control import DeployError, ServeControl
from services.stack.settings import SandboxConfig
from services.stack.stack import wait_scraped
from services.stack.state import StackState


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _landed(detail: dict, new: DeployConfig) -> bool:
    deployed = detail.get("deployed_app_config") or {}
    if not _same(deployed.get("args"), new.args):
        return False
    for name in (SERVER, INGRESS):  # a runtime setting has landed once Serve's target holds it
        target = next((d for d in deployed.get("deployments") or [] if d.get("name") == name), {})
        if not _same(target.get("user_config") or {}, new.deployment(name).get("user_config") or {}):
            return False
    deployments = detail.get("deployments") or {}
    for name in (SERVER, INGRESS):
        replicas = (deployments.get(name) or {}).get("replicas") or []
        if not replicas or any(r.get("state") != "RUNNING" for r in replicas):
            return False
    return len(deployments[SERVER]["replicas"]) == new.replicas


def _rolled_out_failing(detail: dict | None, new: DeployConfig, ran: set[str]) -> bool:
    """Serve has the new config as its target and some replica of it ran before failing: the rollout
    reached the fleet and the new version fails under load (what a drill's faulty deploy is for)."""
    deployed = (detail or {}).get("deployed_app_config") or {}
    return _same(deployed.get("args"), new.args) and bool(ran)


def deploy_changes(cfg: SandboxConfig, state: StackState, assignments: list[str], version: str | None,
                   timeout_s: float, steps: Steps | None = None, tolerate_failing: bool = False,
                   on_poll: Callable[[], None] | None = None) -> dict:
    """Deploy and wait until it landed. With `tolerate_failing`, a rollout whose new replicas ran and
    then failed health checks (Serve: DEPLOY_FAILED, still retrying them) counts as landed, with
    `"healthy": False` in the report; a config that never ran a replica still raises. `on_poll` is
    called at every check while it waits (a rollout under load can take a minute or more)."""
    current = DeployConfig.load(Path(state.deployed_config))
    new = current.with_overrides(assignments, version)
    return deploy_config(cfg, state, new, timeout_s, steps, tolerate_failing, on_poll,
                         what=", ".join(assignments) or "version only")


def deploy_config(cfg: SandboxConfig, state: StackState, new: DeployConfig, timeout_s: float,
                  steps: Steps | None = None, tolerate_failing: bool = False,
                  on_poll: Callable[[], None] | None = None, what: str = "") -> dict:
    """Deploy the whole config `new` (a change of its application args rolls out a new version; the rest is
    applied in place) and wait until it landed; `deploy_changes` says the rest."""
    steps = steps or Steps()
    current = DeployConfig.load(Path(state.deployed_config))
    if state.ray_started:
        new.check_engine()
    rolling = not _same(new.args, current.args)
    ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
    before = set()
    ran: set[str] = set()
    last: dict = {}

    def watch(detail: dict | None) -> None:
        last["detail"] = detail
        replicas = (((detail or {}).get("deployments") or {}).get(SERVER) or {}).get("replicas") or []
        for r in replicas:
            if r.get("state") == "RUNNING" and r.get("replica_id") not in before:
                ran.add(r.get("replica_id"))
        if on_poll:
            on_poll()

    healthy = True
    try:
        kind = f"rolling update to {new.version}" if rolling else "applying in place"
        with steps.step(f"{kind}: {what or new.version}"):
            current_detail = ctl.application(new.app_name) or {}
            before = {r.get("replica_id") for r in
                      ((current_detail.get("deployments") or {}).get(SERVER) or {}).get("replicas") or []}
            ctl.deploy(new.data)
            try:
                ctl.wait_running(new.app_name, timeout_s, settled=lambda d: _landed(d, new), on_poll=watch)
            except DeployError:
                if not (tolerate_failing and rolling and _rolled_out_failing(last.get("detail"), new, ran)):
                    raise
                healthy = False
    finally:
        ctl.close()
    if rolling and healthy:
        with steps.step(f"waiting for Prometheus to see every replica on {new.version}"):
            wait_scraped(state, new.replicas, new.version, timeout_s, on_poll)
    n = len(list(Path(state.run_dir).glob("serve_config*.yaml")))
    path = Path(state.run_dir) / f"serve_config.{n}.{new.version}.yaml"
    new.save(path)
    state.deployed_config, state.version, state.replicas = str(path), new.version, new.replicas
    state.save(cfg.state_file)
    return {"version": new.version, "previous_version": current.version, "rolling": rolling,
            "replicas": new.replicas, "config": str(path), "healthy": healthy}
