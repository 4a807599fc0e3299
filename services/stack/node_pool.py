"""The container nodes as machines of a pool: one joins, one is cordoned, one leaves.

A replica on a container node shares that machine with whatever else runs there (a noisy neighbour: the
container's CPU quota). Restarting the replica starts it on the same machine, because its slot is there
(services/stack/stack.py pins one replica per slot). Moving it off is what a platform does with a bad node:

    name, _ = join(cfg, state, client, taken)  # a fresh machine with a free slot, recorded in the state first
    cordon(state, node_id, "why")              # Ray schedules nothing new on the old one (its work goes on)
    ... drain the replica: Serve starts its replacement in the only free slot, the fresh machine's ...
    leave(cfg, state, client, old_name)        # the old machine goes, and with it what it imposed

Each step is recorded in the state file as it happens, so `sandbox down` removes every node, whatever ends the
move halfway.
"""
from __future__ import annotations

import time

from services.stack.container_node import ContainerNode, NodeSpec, remove_container
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

SLOT = "replica_slot"  # one per LLMServer replica, on the nodes that may hold one
NAME_PREFIX = "sandbox-node-"
CORDON_DEADLINE_S = 3600  # Ray asks for one; nothing kills the node at it (`leave` removes it)


def next_name(taken: list[str]) -> str:
    """sandbox-node-N, N one above the highest in `taken` (the nodes recorded now): never a running one's name."""
    used = {int(n[len(NAME_PREFIX):]) for n in taken if n.startswith(NAME_PREFIX) and n[len(NAME_PREFIX):].isdigit()}
    return f"{NAME_PREFIX}{max(used, default=0) + 1}"


def begin(cfg: SandboxConfig, state: StackState, client, name: str) -> ContainerNode:
    """Start the container of a node with one replica slot; it is in the state file before it exists."""
    state.container_nodes.append(name)  # recorded first: `down` removes it whatever happens next
    state.save(cfg.state_file)
    return ContainerNode.start(client, NodeSpec(name, state.ray_address, {SLOT: 1}, token_file=state.ray_token_file))


def join(cfg: SandboxConfig, state: StackState, client, taken: list[str]) -> tuple[str, str]:
    """A fresh node, joined to the cluster: (its name, its Ray node id)."""
    name = next_name(taken)
    node = begin(cfg, state, client, name)
    return name, node.wait_joined(state.dashboard_url, cfg.up_timeout_s, state.ray_token_file)


def cordon(state: StackState, node_id: str, reason: str) -> None:
    """Ray's drain of a node (what its autoscaler asks before it takes a machine away, and what the hidden
    `ray drain-node` CLI sends): no new task or actor is placed on it, and what runs there goes on. Needs this
    process connected to the cluster (ray.init), for the token."""
    import ray
    from ray.core.generated.autoscaler_pb2 import DrainNodeReason

    gcs = ray._raylet.GcsClient(address=state.ray_address)
    deadline_ms = int((time.time() + CORDON_DEADLINE_S) * 1000)
    accepted, why = gcs.drain_node(node_id, DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"), reason,
                                   deadline_ms)
    if not accepted:
        raise RuntimeError(f"Ray did not accept the drain of node {node_id}: {why}")


def leave(cfg: SandboxConfig, state: StackState, client, name: str) -> bool:
    """Remove a node's container and its record (SIGKILL: its raylet leaves, the head marks it dead)."""
    removed = remove_container(client, name)
    fresh = StackState.load(cfg.state_file)  # what others recorded meanwhile (a deploy's version) stays
    fresh.container_nodes = [n for n in fresh.container_nodes if n != name]
    fresh.save(cfg.state_file)
    state.container_nodes = fresh.container_nodes
    return removed
