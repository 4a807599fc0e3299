"""The container a replica runs in, for the container-level faults.

A replica's Ray node (Serve's REST API gives its node id) is a container node
when Ray's node name is the name of a container the sandbox started
(services/stack/container_node.py names each node after its container). `replica:
random | <index>` picks among the replicas that run in containers, sorted by id.

    target = pick(ctx, "random")          # ContainerTarget(replica_id, name, node_id)
    c = target.container()                # docker's Container
    rejoin(ctx, target)                   # start it again if it is down; wait until its node is back
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faults.base import FaultContext, InjectionFailed
from faults.replicas import Replica, list_replicas, select
from services.stack.container_node import (
    ContainerNode,
    EngineUnavailable,
    alive_nodes,
    docker_engine,
    sandbox_containers,
)


@dataclass(frozen=True)
class ContainerTarget:
    replica_id: str
    name: str  # the container's (and its Ray node's) name
    node_id: str  # the Ray node the replica was on at injection

    def node(self) -> ContainerNode:
        return ContainerNode(engine(), self.name)

    def container(self):
        return engine().containers.get(self.name)


_client = None


def engine():
    """One Docker client per process (faults of a drill share it); InjectionFailed when no engine answers."""
    global _client
    if _client is None:
        try:
            _client = docker_engine()
        except EngineUnavailable as e:
            raise InjectionFailed(f"container faults need a Docker engine: {e}") from e
    return _client


def container_replicas(ctx: FaultContext) -> list[tuple[Replica, str]]:
    """(replica, container name) for every RUNNING replica on a container node, sorted by replica id."""
    names = {c.name for c in sandbox_containers(engine())}
    node_names = {n["node_id"]: n.get("node_name") for n in alive_nodes(ctx.state.dashboard_url, ctx.state.ray_token_file)}
    return [(r, node_names[r.node_id]) for r in list_replicas(ctx) if node_names.get(r.node_id) in names]


def pick(ctx: FaultContext, selector: str | int) -> ContainerTarget:
    found = container_replicas(ctx)
    if not found:
        raise InjectionFailed("no LLMServer replica runs in a container node: start the stack with one "
                              "(an incident variant with `node: container`)")
    replica = select([r for r, _ in found], selector, ctx.rng)
    name = {r.replica_id: n for r, n in found}[replica.replica_id]
    return ContainerTarget(replica.replica_id, name, replica.node_id)


def rejoin(ctx: FaultContext, target: ContainerTarget) -> bool:
    """Start the container again if it is not running, and wait until its Ray node is alive.

    True when it had to be started. Each start of the container is a new Ray node; Serve places
    the node's replica on it again once it has joined (the node's slot is the replica's).
    """
    node = target.node()
    container = target.container()
    started = False
    if container.status == "paused":
        container.unpause()
    elif container.status != "running":
        container.start()
        started = True
    node.wait_joined(ctx.state.dashboard_url, timeout_s=ctx.timeout_s, token_file=ctx.state.ray_token_file)
    return started


def cgroup_dir(container, controller: str) -> Path:
    """The container's cgroup directory for a cgroup v1 controller (e.g. memory), or the v2 group."""
    container.reload()
    pid = container.attrs["State"]["Pid"]
    if not pid:
        raise InjectionFailed(f"container {container.name} is not running")
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        pre_f, post_f = pre.split(), post.split()
        if post_f[0] == "cgroup" and controller in post_f[2].split(","):
            mounts["v1"] = Path(pre_f[4])
        elif post_f[0] == "cgroup2":
            mounts.setdefault("v2", Path(pre_f[4]))
    for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = entry.split(":", 2)
        if "v1" in mounts and controller in controllers.split(","):
            return mounts["v1"] / path.lstrip("/")
        if "v1" not in mounts and controllers == "" and "v2" in mounts:
            return mounts["v2"] / path.lstrip("/")
    raise InjectionFailed(f"no {controller} cgroup found for container {container.name}")
