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
from pathlib import Path

from sandbox.deploy_config import INGRESS, SERVER, DeployConfig
from sandbox.progress import Steps
from sandbox.serve_control import ServeControl
from sandbox.settings import SandboxConfig
from sandbox.stack import wait_scraped
from sandbox.state import StackState


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _landed(detail: dict, new: DeployConfig) -> bool:
    deployed = detail.get("deployed_app_config") or {}
    if not _same(deployed.get("args"), new.args):
        return False
    server = next((d for d in deployed.get("deployments") or [] if d.get("name") == SERVER), {})
    if not _same(server.get("user_config") or {}, new.deployment(SERVER).get("user_config") or {}):
        return False
    deployments = detail.get("deployments") or {}
    for name in (SERVER, INGRESS):
        replicas = (deployments.get(name) or {}).get("replicas") or []
        if not replicas or any(r.get("state") != "RUNNING" for r in replicas):
            return False
    return len(deployments[SERVER]["replicas"]) == new.replicas


def deploy_changes(cfg: SandboxConfig, state: StackState, assignments: list[str], version: str | None,
                   timeout_s: float, steps: Steps | None = None) -> dict:
    steps = steps or Steps()
    current = DeployConfig.load(Path(state.deployed_config))
    new = current.with_overrides(assignments, version)
    if state.ray_started:
        new.check_engine()
    rolling = not _same(new.args, current.args)
    ctl = ServeControl(state.dashboard_url)
    try:
        what = f"rolling update to {new.version}" if rolling else "applying in place"
        with steps.step(f"{what}: {', '.join(assignments) or 'version only'}"):
            ctl.deploy(new.data)
            ctl.wait_running(new.app_name, timeout_s, settled=lambda d: _landed(d, new))
    finally:
        ctl.close()
    if rolling:
        with steps.step(f"waiting for Prometheus to see every replica on {new.version}"):
            wait_scraped(state, new.replicas, new.version, timeout_s)
    n = len(list(Path(state.run_dir).glob("serve_config*.yaml")))
    path = Path(state.run_dir) / f"serve_config.{n}.{new.version}.yaml"
    new.save(path)
    state.deployed_config, state.version, state.replicas = str(path), new.version, new.replicas
    state.save(cfg.state_file)
    return {"version": new.version, "previous_version": current.version, "rolling": rolling,
            "replicas": new.replicas, "config": str(path)}
