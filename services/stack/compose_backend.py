"""`--backend compose`: the serving stack as compose.yaml's containers instead of local processes.

`up` runs `docker compose up -d` (the v2 plugin, or v1's `docker-compose`, what
Debian ships), waits until the API answers and Prometheus has scraped every
replica, and writes the same state file the local stack writes, so `sandbox
drill`, `query`, `traffic`, `deploy` and `status` find the containers' addresses.
The compose directory (runs/sandbox/compose/) is shared with the containers:
Prometheus's data (a drill keeps its snapshot) and the file_sd targets of
traffic generators and canary probers running on the host.

Nothing is started before the engine and a compose binary are found; without
them the error names what is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from enum import Enum
from pathlib import Path
from urllib.parse import urlparse

import httpx

from services.stack import ray_token
from services.stack.compose_cluster import COMPOSE_FILE, serve_config, stack_state
from services.stack.progress import Steps
from services.stack.prometheus import PrometheusClient
from services.stack.settings import SandboxConfig
from services.stack.stack import wait_scraped
from services.stack.state import NoStackError, StackState, pid_alive

PROJECT = "sandbox"  # container names: sandbox-ray-head-1 (v2) / sandbox_ray-head_1 (v1)
MARKER = "compose.json"  # in the compose directory while the compose stack is up: how to bring it down
# Files merged over compose.yaml (os.pathsep between them): docker/compose.offline.yaml where no registry is
# reachable (scripts/compose_offline.sh). `down` takes them from the marker, so it needs no variable.
OVERRIDE_VAR = "SANDBOX_COMPOSE_OVERRIDE"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


class Backend(str, Enum):
    """Where `sandbox up` / `drill` run the stack."""
    local = "local"
    compose = "compose"


BACKEND_HELP = ("local: Ray, the Serve app and Prometheus as processes on this machine; compose: the containers "
                "of compose.yaml (`docker compose up -d`; needs a Docker engine and `docker compose` or "
                "`docker-compose`), reached at the same loopback addresses")


class ComposeUnavailable(RuntimeError):
    """No Docker engine answers, or neither `docker compose` nor `docker-compose` is installed."""


def compose_binary(env: dict[str, str] | None = None) -> list[str]:
    """argv prefix of the Compose CLI: the `docker compose` plugin if present, else `docker-compose`."""
    env = dict(os.environ if env is None else env)
    docker = shutil.which("docker", path=env.get("PATH"))
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, env=env, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose", path=env.get("PATH"))
    if legacy:
        return [legacy]
    raise ComposeUnavailable("no Docker Compose: neither the `docker compose` plugin nor `docker-compose` is on PATH "
                             "(install Docker's compose plugin, or Debian's docker-compose)")


def _engine_client(docker_host: str, timeout_s: float) -> httpx.Client:
    url = urlparse(docker_host)
    if url.scheme == "unix":
        return httpx.Client(transport=httpx.HTTPTransport(uds=url.path), base_url="http://docker", timeout=timeout_s)
    if url.scheme in ("tcp", "http", "https"):
        tls = url.scheme == "https" or os.environ.get("DOCKER_TLS_VERIFY")
        return httpx.Client(base_url=f"{'https' if tls else 'http'}://{url.netloc}", timeout=timeout_s)
    raise ComposeUnavailable(f"DOCKER_HOST={docker_host!r}: only unix:// and tcp:// engines are supported")


def engine_ping(docker_host: str | None = None, timeout_s: float = 3.0) -> str:
    """The engine's API version (GET /_ping); ComposeUnavailable naming DOCKER_HOST when nothing answers."""
    docker_host = docker_host or DEFAULT_DOCKER_HOST
    try:
        with _engine_client(docker_host, timeout_s) as client:
            resp = client.get("/_ping")
    except httpx.HTTPError as e:
        raise ComposeUnavailable(f"no Docker engine answers at {docker_host} ({type(e).__name__}: {e}); "
                                 "start dockerd, or point DOCKER_HOST at a running engine") from None
    if resp.status_code != 200:
        raise ComposeUnavailable(f"the Docker engine at {docker_host} answered /_ping with {resp.status_code}")
    return resp.headers.get("Api-Version", "?")


def container_pid(container_id: str, docker_host: str | None = None) -> int | None:
    """The host pid of a running container's main process (GET /containers/{id}/json), None if not running."""
    with _engine_client(docker_host or DEFAULT_DOCKER_HOST, 5.0) as client:
        resp = client.get(f"/containers/{container_id}/json")
    if resp.status_code != 200:
        return None
    pid = (resp.json().get("State") or {}).get("Pid")
    return pid or None


class ComposeBackend:
    def __init__(self, cfg: SandboxConfig, steps: Steps | None = None, compose_file: Path = COMPOSE_FILE,
                 env: dict[str, str] | None = None):
        self.cfg = cfg
        self.steps = steps or Steps()
        self.compose_file = Path(compose_file)
        self.env = dict(os.environ if env is None else env)
        self.overrides = [Path(p).resolve() for p in self.env.get(OVERRIDE_VAR, "").split(os.pathsep) if p]
        self.dir = cfg.home / "compose"  # shared with the containers (SANDBOX_COMPOSE_DIR)

    # -- the CLI ------------------------------------------------------------------
    def command(self, *args: str, binary: list[str] | None = None) -> list[str]:
        files = [a for f in (self.compose_file, *self.overrides) for a in ("-f", str(f))]
        return [*(binary or compose_binary(self.env)), *files, "-p", PROJECT, *args]

    def compose_env(self) -> dict[str, str]:
        """compose.yaml's variables: where the shared directory is, whose files the containers write, the file of
        the Ray token its nodes run with (made once per user, 0600: services/stack/ray_token.py)."""
        return {**self.env, "SANDBOX_COMPOSE_DIR": str(self.dir.resolve()),
                "SANDBOX_UID": str(os.getuid()), "SANDBOX_GID": str(os.getgid()),
                ray_token.FILE_VAR: str(self.token_file())}

    def token_file(self) -> Path:
        return ray_token.ensure(Path(self.env[ray_token.FILE_VAR]) if self.env.get(ray_token.FILE_VAR) else None)

    def check(self) -> list[str]:
        """Compose binary and engine, before anything starts; returns the compose argv prefix."""
        missing = [str(p) for p in self.overrides if not p.is_file()]
        if missing:
            raise ComposeUnavailable(f"{OVERRIDE_VAR}: no such compose file: {', '.join(missing)}")
        binary = compose_binary(self.env)
        engine_ping(self.env.get("DOCKER_HOST"))
        return binary

    def _run(self, args: list[str], log_name: str) -> None:
        log_file = self.dir / "logs" / log_name
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            result = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, env=self.compose_env(),
                                    stdin=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            what = " ".join(args[args.index(PROJECT) + 1:])
            raise RuntimeError(f"`compose {what}` failed (exit {result.returncode}); see {log_file}")

    # -- up / down ------------------------------------------------------------------
    def up(self, replicas: int | None = None) -> StackState:
        binary = self.check()
        self._refuse_if_running()
        for sub in ("targets", "prometheus-data", "logs", "rules"):  # rules: Prometheus copies them in at start
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        deploy = serve_config(self.cfg.serve_config, replicas)
        config_path = self.dir / "serve_config.yaml"
        deploy.save(config_path)
        (self.dir / MARKER).write_text(json.dumps({"project": PROJECT, "compose_file": str(self.compose_file),
                                                   "overrides": [str(p) for p in self.overrides],
                                                   "command": binary}) + "\n")
        try:
            with self.steps.step("docker compose up -d (builds the project image the first time)"):
                self._run(self.command("up", "-d", binary=binary), "compose.log")
            state = stack_state(self.cfg, deploy, self.dir, config_path, self.token_file())
            state.prometheus_pid = self._container_pid("prometheus")
            if not pid_alive(state.prometheus_pid):
                raise RuntimeError("the Prometheus container's process is not in this machine's process table "
                                   f"(pid {state.prometheus_pid}): --backend compose needs the Linux engine of "
                                   "this host (not a VM's, as Docker Desktop runs)")
            state.save(self.cfg.state_file)
            with self.steps.step(f"waiting for the API and {deploy.replicas} replica(s) in Prometheus"):
                self._wait_api(state.api_url)

                wait_scraped(state, deploy.replicas, deploy.version, self.cfg.up_timeout_s)
        except BaseException as e:
            try:
                self.down()
            except Exception as cleanup:  # noqa: BLE001 - say both: what failed, and what is left running
                raise RuntimeError(f"{e}; and `compose down` failed too: {cleanup}") from e
            raise
        return state

    def up_unless_running(self) -> bool:
        """For a drill: reuse the compose stack if it is up (False), else bring it up (True: ours to stop)."""
        if owns(self.cfg):
            state = StackState.load(self.cfg.state_file)
            client = PrometheusClient(state.prometheus_url, timeout_s=5)
            try:
                if pid_alive(state.prometheus_pid) and client.ready():
                    self.steps.note(f"reusing the running compose stack (run {state.run_id})")
                    return False
            finally:
                client.close()
        self.up()
        return True

    def down(self) -> dict:
        """`docker compose down` (containers, the project network, its volumes); the state file goes."""
        marker = self.dir / MARKER
        if not marker.is_file():
            return {"stopped": [], "note": "no compose stack was running"}
        engine_ping(self.env.get("DOCKER_HOST"))
        recorded = json.loads(marker.read_text())
        binary = recorded.get("command") or None
        self.overrides = [Path(p) for p in recorded.get("overrides", []) if Path(p).is_file()]
        with self.steps.step("docker compose down"):
            self._run(self.command("down", "--volumes", "--remove-orphans", binary=binary), "compose.log")
        if owns(self.cfg):
            self.cfg.state_file.unlink(missing_ok=True)
        marker.unlink()
        return {"stopped": [f"compose project {PROJECT}"], "run_dir": str(self.dir)}

    def _refuse_if_running(self) -> None:
        try:
            old = StackState.load(self.cfg.state_file)
        except NoStackError:
            return
        if pid_alive(old.prometheus_pid):
            raise RuntimeError(f"a sandbox is already up (run {old.run_id}); `sandbox down` first")

    def _container_pid(self, service: str) -> int | None:
        """The host pid of a service's main process (Prometheus: what `sandbox drill` checks is alive)."""
        out = subprocess.run(self.command("ps", "-q", service), capture_output=True, text=True,
                             env=self.compose_env(), check=False).stdout.split()
        if not out:
            return None
        return container_pid(out[0], self.env.get("DOCKER_HOST"))

    def _wait_api(self, api_url: str) -> None:
        deadline = time.monotonic() + self.cfg.up_timeout_s
        with httpx.Client(timeout=5) as client:
            while True:
                try:
                    if client.get(f"{api_url}/v1/models").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the compose stack's API at {api_url} did not answer within "
                                       f"{self.cfg.up_timeout_s:.0f}s; see `docker compose logs sandbox ray-head`")
                time.sleep(1.0)


def owns(cfg: SandboxConfig) -> bool:
    """True when the running sandbox (the state file) is the compose stack."""
    try:
        state = StackState.load(cfg.state_file)
    except NoStackError:
        return False
    return Path(state.run_dir) == cfg.home / "compose" and (cfg.home / "compose" / MARKER).is_file()
