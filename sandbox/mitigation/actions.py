"""One function per remediation of the taxonomy, each a real operation on the running stack.

Every action checks its input against the stack first (`Refused`: a ValueError, nothing changed) and then acts:
a rolling deploy (a rollback or a setting change, as `sandbox deploy` does), a replica's actor killed so that
Serve replaces its process, a replica drained (its health check fails, so Serve routes it nothing new, lets what
it has in flight finish and replaces it: what a failing readiness probe does behind a load balancer), one more
replica, an admission limit at the ingress, or the replicas' CPU quota lifted. `mitigate` dispatches by id; each
returns a report (a dict) of what it did.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

from faults.base import FaultContext
from faults.container_target import container_replicas, engine
from faults.cpu_throttle import lift_quota, quota_of
from sandbox.mitigation import history, settings, shed_limit
from sandbox.mitigation.catalogue import ACTIONS, SETTING_CHANGES
from services.serve.config import torch_threads
from services.stack import node_pool
from services.stack.deploy_config import INGRESS, SERVER, DeployConfig
from services.stack.deployer import deploy_changes, deploy_config
from services.stack.progress import Steps
from services.stack.settings import SandboxConfig
from services.stack.state import StackState


class Refused(ValueError):
    """Bad input for this action on this stack (an unknown replica, a version never deployed, nothing to
    change): nothing was changed."""


class NoRoom(RuntimeError):
    """The machine cannot take what the action asks for (scale-out with every CPU given out)."""


def check_options(action: str, replica: str | None = None, version: str | None = None,
                  limit: int | None = None) -> None:
    """`Refused` for an action that is not one, or options it does not take or lacks; nothing needs a stack."""
    spec = ACTIONS.get(action)
    if spec is None:
        raise Refused(f"unknown action {action!r}; choose from {', '.join(ACTIONS)}")
    for given, name, takes in ((replica, "--replica", spec.replica), (version, "--version", spec.version),
                               (limit, "--limit", spec.limit)):
        if given is not None and not takes:
            raise Refused(f"{action} takes no {name}")
    if spec.replica and not replica:
        raise Refused(f"{action} needs --replica (the replica's id, as the metrics' `replica` label shows it)")
    if limit is not None and limit < 1:
        raise Refused(f"--limit must be a positive number of requests, got {limit}")


def mitigate(action: str, cfg: SandboxConfig, state: StackState, *, replica: str | None = None,
             version: str | None = None, limit: int | None = None, steps: Steps | None = None,
             timeout_s: float = 300.0, baseline: Path | None = None) -> dict:
    """Apply one action to the running stack and return its report; `Refused` before any change. `baseline`: the
    config whose values a setting change returns to (a drill's: the one its healthy baseline ran on); else the
    shipped one (SandboxConfig.serve_config)."""
    check_options(action, replica, version, limit)
    steps = steps or Steps()
    started = time.time()
    if action == "no-action":
        report = {"changed": "nothing"}
    elif action == "rollback-deploy":
        report = rollback_deploy(cfg, state, version, steps, timeout_s)
    elif action == "shed-load":
        report = shed_load(cfg, state, limit, steps, timeout_s)
    elif action in SETTING_CHANGES:
        report = change_setting(action, cfg, state, steps, timeout_s, baseline)
    else:
        with FaultContext(cfg, state, timeout_s=timeout_s) as ctx:
            if action == "restart-replica":
                report = restart_replica(ctx, replica, steps, timeout_s)
            elif action == "drain-replica":
                report = drain_replica(ctx, replica, steps, timeout_s)
            elif action == "scale-out":
                report = scale_out(ctx, steps, timeout_s)
            else:
                report = raise_cpu_limit(ctx)
    return {"action": action, "started": round(started, 3), "seconds": round(time.time() - started, 2), **report}


def _deployed(state: StackState) -> DeployConfig:
    return DeployConfig.load(Path(state.deployed_config))


def rollback_deploy(cfg, state, version: str | None, steps: Steps, timeout_s: float) -> dict:
    """The application as the earlier version ran it (its engine settings and args, under its label); what
    was set in place since (replicas, knobs, the admission limit) stays, as a rollback of an image would."""
    current = _deployed(state)
    try:
        target = history.rollback_target(state.run_dir, current.version, version)
    except ValueError as e:
        raise Refused(str(e)) from None
    new = current.copy()
    new.app["args"] = copy.deepcopy(target.args)
    new.validate()
    report = deploy_config(cfg, state, new, timeout_s, steps, what=f"roll back to {target.version}")
    return {"from_version": current.version, "version": report["version"], "rolling": report["rolling"]}


def change_setting(action: str, cfg, state, steps: Steps, timeout_s: float, baseline: Path | None = None) -> dict:
    current = _deployed(state)
    # a fleet tuned away from the shipped defaults (an incident's setup: a smaller memory budget, fewer
    # sequences) goes back to its own tuned values: the shipped 0.9 is no fix for a budget tuned to 0.75
    good = DeployConfig.load(baseline or cfg.serve_config)
    label = history.fresh_version(state.run_dir, current.version)
    try:
        new, assignments = settings.change(action, current, good, label)
    except ValueError as e:
        raise Refused(str(e)) from None
    report = deploy_config(cfg, state, new, timeout_s, steps, what=", ".join(assignments))
    return {"from_version": current.version, "version": report["version"], "set": assignments}


def shed_load(cfg, state, limit: int | None, steps: Steps, timeout_s: float) -> dict:
    """The ingress admits at most `limit` requests at once (default: the most the engines held at once in the
    drill's healthy baseline, sandbox/mitigation/shed_limit.py) and answers the rest with OpenAI's 429."""
    current = _deployed(state)
    basis = "given"
    if limit is None:
        limit, basis = shed_limit.default_limit(
            cfg, state, current.replicas * int(settings.engine_setting(current, "max_num_seqs")))
        steps.note(f"shed-load: admitting at most {limit} requests at once: {basis}")
    before = (current.deployment(INGRESS).get("user_config") or {}).get("max_inflight_requests")
    if before == limit:
        raise Refused(f"shed-load: the ingress already admits at most {limit} requests at once")
    deploy_changes(cfg, state, [f"ingress.max_inflight_requests={limit}"], None, timeout_s, steps)
    return {"max_inflight_requests": limit, "before": before, "limit_from": basis}


def _replica_rows(ctx: FaultContext) -> list[dict]:
    return [r for r in ctx.serve().replicas(ctx.state.app_name, SERVER) if r.get("state") == "RUNNING"]


def _running_row(ctx: FaultContext, replica: str) -> tuple[dict, list[dict]]:
    rows = _replica_rows(ctx)
    row = next((r for r in rows if r.get("replica_id") == replica), None)
    if row is None:
        running = ", ".join(sorted(str(r.get("replica_id")) for r in rows)) or "none"
        raise Refused(f"no running replica {replica!r} (running: {running})")
    return row, rows


def _replaced(ctx: FaultContext, replica: str, rows: list[dict], timeout_s: float, what: str) -> dict:
    """Waits until `replica` is gone and the fleet has as many running replicas as before."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ids = {r.get("replica_id") for r in _replica_rows(ctx)}
        if replica not in ids and len(ids) >= len(rows):
            return {"replica": replica, "replaced_by": sorted(ids - {r.get("replica_id") for r in rows})}
        time.sleep(0.5)
    raise RuntimeError(f"replica {replica} was {what}, but Serve had not replaced it after {timeout_s:.0f}s")


def restart_replica(ctx: FaultContext, replica: str, steps: Steps, timeout_s: float) -> dict:
    """Kill the replica's actor; Serve's controller starts a new one on the deployed config (without any
    settings of its own, outside any CPU group it was moved to). What it had in flight fails. Returns once the
    fleet is whole again."""
    row, rows = _running_row(ctx, replica)
    import ray

    ctx.connect_ray()
    with steps.step(f"restarting replica {replica}"):
        ray.kill(ray.get_actor(row["actor_name"], namespace="serve"), no_restart=True)
        return _replaced(ctx, replica, rows, timeout_s, "killed")


def drain_replica(ctx: FaultContext, replica: str, steps: Steps, timeout_s: float) -> dict:
    """The replica fails its health checks from now on (services/serve/replica_runtime.py): after three (about
    6 s) Serve routes it nothing new, lets what it has in flight finish (its graceful shutdown) and starts a
    replacement on the deployed config. Slower than a restart, and nothing in flight is lost. A replica on a
    machine of its own (a container node) moves off it, as a drained node's work does: a fresh machine joins,
    the old one is cordoned, so the replacement starts on the fresh one, and the old one is removed once
    empty (services/stack/node_pool.py). Returns once the fleet is whole again."""
    _, rows = _running_row(ctx, replica)
    import ray

    runtime = ctx.runtime()
    machine = _container_node(ctx, replica)
    if machine is not None:
        client = engine()
        with steps.step(f"starting a fresh machine for replica {replica}'s replacement"):
            fresh, _ = node_pool.join(ctx.cfg, ctx.state, client, ctx.state.container_nodes)
        node_pool.cordon(ctx.state, machine[1], f"drain-replica {replica}: its replacement goes to {fresh}")
    with steps.step(f"draining replica {replica}"):
        ray.get(runtime.drain.remote(replica))
        report = _replaced(ctx, replica, rows, timeout_s, "draining")  # on a timeout it goes on draining
    ray.get(runtime.forget.remote(replica))  # gone: its id is never used again
    if machine is not None:
        with steps.step(f"removing the machine it left ({machine[0]})"):
            node_pool.leave(ctx.cfg, ctx.state, client, machine[0])
        report["moved"] = {"from": machine[0], "to": fresh}
    return report


def _container_node(ctx: FaultContext, replica: str) -> tuple[str, str] | None:
    """(name, Ray node id) of the container node the replica runs on; None for one on the head."""
    if not ctx.state.container_nodes:
        return None
    return next(((name, r.node_id) for r, name in container_replicas(ctx) if r.replica_id == replica), None)


def scale_out(ctx: FaultContext, steps: Steps, timeout_s: float) -> dict:
    """One more replica where it adds capacity: a core of this machine for each of its engine's threads beside
    the replicas' (another engine on busy cores only shares them), and a CPU Ray can give it."""
    import ray

    current = _deployed(ctx.state)
    cores = len(os.sched_getaffinity(0))
    threads = torch_threads(settings.engine_setting(current, "torch_threads")) or 1
    if (current.replicas + 1) * threads > cores:
        raise NoRoom(f"scale-out: no room for another replica on this machine: {current.replicas} replicas of "
                     f"{threads} thread(s) each already use its {cores} cores (another would share them, not add "
                     "capacity)")
    need = float((current.deployment(SERVER).get("ray_actor_options") or {}).get("num_cpus", 1))
    ctx.connect_ray()
    free = float(ray.available_resources().get("CPU", 0.0))
    if free < need:
        raise NoRoom(f"scale-out: no room for another replica: each needs {need:g} CPU and Ray has {free:g} free")
    deploy_changes(ctx.cfg, ctx.state, [f"replicas={current.replicas + 1}"], None, timeout_s, steps)
    return {"replicas": current.replicas + 1, "before": current.replicas}


def raise_cpu_limit(ctx: FaultContext) -> dict:
    """Each replica process's CPU quota lifted (what raising a pod's limit past its use does)."""
    lifted = []
    for row in _replica_rows(ctx):
        held = quota_of(int(row["pid"])) if row.get("pid") else None
        if held is not None:
            lift_quota(held[0])
            lifted.append(row["replica_id"])
    if not lifted:
        raise Refused("raise-cpu-limit: no replica runs under a CPU quota")
    return {"replicas": sorted(lifted)}
