"""A Ray worker node inside a Docker container, joined to the sandbox's local head on loopback.

    client = docker_engine()                       # EngineUnavailable says why when no engine answers
    node = ContainerNode.start(client, NodeSpec("sandbox-node-1", "127.0.0.1:6379", {"replica_slot": 1}))
    node.wait_joined(dashboard_url)                # the node's Ray id, once the head lists it alive
    ...
    node.remove()

No registry is reachable here, so the image is an empty root filesystem
(`docker import` of an empty tar, tagged sandbox-node:local) and the host's
Python runtime and this checkout are mounted into it read-only: the container
runs exactly the code and libraries the head runs. It shares the host's network
(Docker here has no bridge), so Ray's ports are chosen free up front. The Ray
node is named after its container (`--node-name`): that is how a replica's node
and its container are matched. Ray's temp dir is a tmpfs: every start of the
container is a new node.
"""
from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.stack import ray_token
from services.stack.ports import free_block, free_ports
from services.stack.settings import REPO_ROOT

IMAGE = "sandbox-node:local"
ROLE_LABEL = "io.sandbox.role"  # every container the sandbox starts carries it: found and removed by it
ROLE = "ray-node"
# The host's runtime, read-only: the interpreter, its libraries, and what they link against.
HOST_MOUNTS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/root/.pyenv")


class EngineUnavailable(RuntimeError):
    """No Docker engine answers (or the `docker` package is missing)."""


class NodeError(RuntimeError):
    """The container node did not start or join the Ray cluster."""


def docker_engine(timeout_s: float = 5.0):
    """A client of the engine at DOCKER_HOST (or the default socket) that has answered a ping."""
    try:
        import docker
    except ImportError as e:
        raise EngineUnavailable("the `docker` Python package is not installed (pip install 'docker>=7')") from e
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except Exception as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise EngineUnavailable(f"no Docker engine answers at {where}: {e}") from e
    return client


def engine_problem() -> str | None:
    """Why container variants cannot run here, or None when a Docker engine answers."""
    try:
        docker_engine().close()
    except EngineUnavailable as e:
        return str(e)
    return None


def unrunnable(variant) -> str | None:
    """Why an incident variant cannot run on this machine (it needs a container node and no engine
    answers), or None. The engine is asked once per process."""
    if getattr(variant, "node", None) != "container":
        return None
    global _engine_problem
    if _engine_problem is None:
        _engine_problem = (engine_problem() or "",)
    return _engine_problem[0] or None


_engine_problem: tuple[str] | None = None


def ensure_image(client) -> str:
    """The empty image the nodes run from (imported once); its id."""
    import docker

    try:
        return client.images.get(IMAGE).id
    except docker.errors.ImageNotFound:
        pass
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    repository, _, tag = IMAGE.partition(":")
    client.api.import_image_from_data(empty.getvalue(), repository=repository, tag=tag)
    return client.images.get(IMAGE).id


def remove_image(client) -> None:
    import docker

    try:
        client.images.remove(IMAGE, force=True)
    except docker.errors.ImageNotFound:
        pass


@dataclass(frozen=True)
class NodeSpec:
    name: str  # the container's name: neutral, it is what `docker ps` shows
    ray_address: str  # the head's GCS, host:port
    resources: dict = field(default_factory=dict)  # custom Ray resources of the node
    num_cpus: int = 1
    object_store_mb: int = 128
    tmp_mb: int = 1024  # Ray's session dir (logs, sockets) lives here
    token_file: str | None = None  # the head's Ray token (mounted read-only; its path, never the token, in the env)

    def __post_init__(self):
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"name: a container name is letters, digits, '-', '_' and '.', got {self.name!r}")
        host, _, port = self.ray_address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"ray_address: expected host:port, got {self.ray_address!r}")
        if not isinstance(self.num_cpus, int) or self.num_cpus < 0:
            raise ValueError(f"num_cpus: must be a whole number >= 0, got {self.num_cpus!r}")
        if self.object_store_mb < 80:
            raise ValueError(f"object_store_mb: Ray needs at least 80 MB, got {self.object_store_mb}")
        for key, value in self.resources.items():
            if not isinstance(key, str) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"resources: {key!r}: {value!r} is not a positive amount of a named resource")

    def command(self, ports: list[int]) -> list[str]:
        node_manager, object_manager, metrics, agent, agent_grpc, runtime_env, low = ports
        # `python -m services.stack.container_node` is `ray start` that joins a loopback head (see join_on_loopback)
        return [sys.executable, "-m", "services.stack.container_node", "start", "--block", f"--address={self.ray_address}",
                f"--node-name={self.name}", "--node-ip-address=127.0.0.1",
                f"--num-cpus={self.num_cpus}", "--num-gpus=0", f"--resources={json.dumps(self.resources)}",
                f"--object-store-memory={self.object_store_mb * 2**20}",
                f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
                f"--metrics-export-port={metrics}", f"--dashboard-agent-listen-port={agent}",
                f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
                f"--min-worker-port={low}", f"--max-worker-port={low + 99}", "--disable-usage-stats"]


class ContainerNode:
    def __init__(self, client, name: str):
        self.client, self.name = client, name

    @classmethod
    def start(cls, client, spec: NodeSpec) -> ContainerNode:
        """Create and start the container (NodeError if one of that name exists already)."""
        import docker

        ensure_image(client)
        ports = free_ports(7)
        # Worker ports: a block of 100 above the others, checked free now (the kernel hands out ephemeral
        # ports high, so a block just above a bound one is rarely taken).
        ports[-1] = free_block(100)
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        volumes = {p: {"bind": p, "mode": "ro"} for p in HOST_MOUNTS if Path(p).exists()}
        volumes[str(REPO_ROOT)] = {"bind": str(REPO_ROOT), "mode": "ro"}
        auth = {}
        if spec.token_file:
            volumes[spec.token_file] = {"bind": spec.token_file, "mode": "ro"}
            auth = ray_token.server_env(spec.token_file)
        try:
            client.containers.run(
                IMAGE, spec.command(ports), name=spec.name, detach=True, network_mode="host",
                volumes=volumes, tmpfs={"/tmp": f"size={spec.tmp_mb}m"}, shm_size=f"{spec.object_store_mb + 64}m",
                working_dir=str(REPO_ROOT), labels={ROLE_LABEL: ROLE},
                environment={"HOME": "/root", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                             "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0",
                             **auth})
        except docker.errors.APIError as e:
            raise NodeError(f"container {spec.name} did not start: {e.explanation or e}") from e
        return cls(client, spec.name)

    def container(self):
        return self.client.containers.get(self.name)

    def status(self) -> str:
        """Docker's word for it: running, paused, exited, ... ("removed" when it is gone)."""
        import docker

        try:
            return self.container().status
        except docker.errors.NotFound:
            return "removed"

    def node_id(self, dashboard_url: str, token_file: str | None = None) -> str | None:
        """The id of the ALIVE Ray node this container runs, or None."""
        for node in alive_nodes(dashboard_url, token_file):
            if node.get("node_name") == self.name:
                return node["node_id"]
        return None

    def wait_joined(self, dashboard_url: str, timeout_s: float = 120.0, token_file: str | None = None) -> str:
        """Wait until the head lists this container's node alive; its Ray node id."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if status not in ("running", "created"):
                raise NodeError(f"container {self.name} is {status} before joining: {self.logs_tail()}")
            node_id = self.node_id(dashboard_url, token_file)
            if node_id:
                return node_id
            if time.monotonic() > deadline:
                raise NodeError(f"container {self.name} has not joined the Ray cluster after {timeout_s:.0f}s: "
                                f"{self.logs_tail()}")
            time.sleep(0.5)

    def logs_tail(self, lines: int = 5) -> str:
        try:
            return self.container().logs(tail=lines).decode(errors="replace").strip()
        except Exception:  # noqa: BLE001 - only for an error message
            return "(no logs)"

    def remove(self) -> bool:
        """Stop and remove the container (unpaused first); False when there was none."""
        return remove_container(self.client, self.name)


def remove_container(client, name: str) -> bool:
    import docker

    try:
        c = client.containers.get(name)
    except docker.errors.NotFound:
        return False
    c.remove(force=True)  # SIGKILL: the node's raylet leaves, the head marks it dead
    return True


def sandbox_containers(client) -> list:
    """Every container (running or not) the sandbox started."""
    return client.containers.list(all=True, filters={"label": f"{ROLE_LABEL}={ROLE}"})


def alive_nodes(dashboard_url: str, token_file: str | None = None) -> list[dict]:
    """Ray's ALIVE nodes as the state API lists them (node_id, node_name, is_head_node, resources_total, ...)."""
    r = httpx.get(f"{dashboard_url}/api/v0/nodes", params={"limit": 1000, "detail": "true"}, timeout=10,
                  headers=ray_token.headers(token_file))
    r.raise_for_status()
    rows = r.json()["data"]["result"]["result"]
    return [n for n in rows if n.get("state") == "ALIVE"]


def join_on_loopback(argv: list[str]) -> None:
    """`ray start ARGV` for a worker node that joins a head listening on loopback only.

    The head runs in Ray's single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, see
    services/stack/ray_cluster.py), which keeps 127.0.0.1 as every address; the same mode makes
    `ray start --address` refuse to start a second node. This node keeps the mode (and
    with it 127.0.0.1, in this process and in every process it starts) and only the CLI's
    refusal sees the multi-node switch on.
    """
    import types

    from ray._private import ray_constants
    from ray.scripts import scripts

    multi_node = types.ModuleType(ray_constants.__name__)
    multi_node.__dict__.update(vars(ray_constants))
    multi_node.ENABLE_RAY_CLUSTER = True
    scripts.ray_constants = multi_node
    sys.argv = ["ray", *argv]
    scripts.main()


if __name__ == "__main__":
    join_on_loopback(sys.argv[1:])
