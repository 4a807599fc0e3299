"""Bring the whole serving stack up and down: Ray, the Serve app, Prometheus.

`up` records each started piece in the state file as soon as it exists, and
tears everything down again if any later step fails or is interrupted, so a
failed `up` leaves nothing behind; `down` stops whatever the state file names.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from services.stack import alerts, ports, prometheus, ray_cluster, ray_token
from services.stack.container_node import docker_engine, remove_container
from services.stack.deploy_config import INGRESS, SERVER, DeployConfig
from services.stack.node_pool import SLOT, begin
from services.stack.progress import Steps
from services.stack.prometheus_config import render, write_ray_sd_file
from services.stack.serve_control import ServeControl, running_replicas
from services.stack.settings import SandboxConfig
from services.stack.state import NoStackError, StackState, pid_alive, stop_pid


class StackRunningError(RuntimeError):
    """A sandbox (or a foreign local Ray cluster) is already running."""


class Stack:
    def __init__(self, cfg: SandboxConfig, steps: Steps | None = None):
        self.cfg = cfg
        self.steps = steps or Steps()

    # -- up -----------------------------------------------------------------
    def up(self, replicas: int | None = None, address: str | None = None, container_nodes: int = 0) -> StackState:
        """`container_nodes`: that many replicas run on Ray worker nodes in Docker containers, one each."""
        if container_nodes and address is not None:
            raise ValueError("container nodes join a head the sandbox starts, not a cluster joined with --address")
        self._refuse_if_running(address)
        run_id = time.strftime("%Y%m%d-%H%M%S")
        run_dir = self.cfg.home / run_id
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        state = StackState(run_id=run_id, run_dir=str(run_dir))
        state.targets_dir.mkdir(exist_ok=True)
        state.save(self.cfg.state_file)
        try:
            self._up(state, replicas, address, container_nodes)
        except BaseException:
            self.down()
            raise
        return state

    def _refuse_if_running(self, address: str | None) -> None:
        path = self.cfg.state_file
        if path.is_file():
            old = StackState.load(path)
            if pid_alive(old.prometheus_pid) or (old.ray_started and ray_cluster.head_running()):
                raise StackRunningError(f"a sandbox is already up (run {old.run_id}); `sandbox down` first")
            path.unlink()  # stale: everything it named is gone
        self._refuse_taken_ports(address)  # before Ray's check: it names the port and who holds it
        if address is None and ray_cluster.head_running():
            raise StackRunningError("a local Ray cluster is already running and the sandbox did not start it: "
                                    "stop it (`ray stop`) or join it with `sandbox up --address ADDR`")

    def _refuse_taken_ports(self, address: str | None) -> None:
        """Before anything starts: a port held by something else fails `up` now, naming its holder."""
        cfg = self.cfg
        wanted = {"Prometheus": cfg.prometheus_port, "API": cfg.api_port}
        if address is None:  # a local head: Ray's own ports too
            wanted |= {"Ray GCS": cfg.ray_port, "Ray dashboard": cfg.dashboard_port,
                       "Ray metrics": cfg.metrics_export_port}
        ports.check_free(cfg.host, wanted)

    def _up(self, state: StackState, replicas: int | None, address: str | None, container_nodes: int = 0) -> None:
        cfg, run_dir = self.cfg, Path(state.run_dir)
        logs = run_dir / "logs"
        deploy = DeployConfig.load(cfg.serve_config).for_run(cfg.host, cfg.api_port, replicas)
        head_resources = None
        if container_nodes:
            if not 0 < container_nodes < deploy.replicas:
                raise ValueError(f"container_nodes: 1 to {deploy.replicas - 1} of {deploy.replicas} replicas "
                                 f"can run in containers, got {container_nodes}")
            head_resources = {SLOT: deploy.replicas - container_nodes}
            _pin_to_slots(deploy)
        if address is None:
            deploy.check_engine()
            with self.steps.step("starting Ray (local head)"):
                state.ray_started = True
                state.ray_token_file = str(ray_token.ensure())  # the control plane is the sandbox's alone
                state.save(cfg.state_file)
                # Room for every replica plus one more during a rolling update.
                state.ray_address, state.ray_pids = ray_cluster.start_head(cfg, logs / "ray.log",
                                                                           min_cpus=deploy.replicas + 1,
                                                                           resources=head_resources,
                                                                           token_file=state.ray_token_file)
                state.ray_session_dir = str(ray_cluster.session_dir())
                state.dashboard_url = cfg.url(cfg.dashboard_port)
                state.save(cfg.state_file)
            if container_nodes:
                with self.steps.step(f"starting {container_nodes} Ray worker node(s) in Docker containers"):
                    self._start_container_nodes(state, container_nodes)
        else:
            with self.steps.step(f"joining the Ray cluster at {address}"):
                info = ray_cluster.describe_cluster(address)
                state.ray_address, state.dashboard_url = address, info["dashboard_url"]
                write_ray_sd_file(run_dir / ray_cluster.SD_FILE_NAME, info["metrics_addresses"])
                state.save(cfg.state_file)
        ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
        try:
            with self.steps.step("submitting the Serve application"):
                ctl.wait_dashboard(cfg.up_timeout_s)
                config_path = run_dir / "serve_config.yaml"
                deploy.save(config_path)
                ctl.deploy(deploy.data)
                state.app_name, state.deployed_config = deploy.app_name, str(config_path)
                state.version, state.replicas = deploy.version, deploy.replicas
                state.model_name = deploy.model_name
                state.api_url = cfg.url(cfg.api_port)
                state.save(cfg.state_file)
            with self.steps.step("starting Prometheus"):
                self._start_prometheus(state, address)
            with self.steps.step(f"waiting for {deploy.replicas} LLMServer replica(s) to load the model"):
                ctl.wait_running(deploy.app_name, cfg.up_timeout_s,
                                 settled=lambda d: len(running_replicas(d, SERVER)) == deploy.replicas)
        finally:
            ctl.close()
        with self.steps.step("waiting until Prometheus has scraped every target and replica"):
            wait_scraped(state, deploy.replicas, deploy.version, cfg.up_timeout_s)

    def _start_container_nodes(self, state: StackState, count: int) -> None:
        client = docker_engine()
        ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)  # nodes: the state API
        try:
            ctl.wait_dashboard(self.cfg.up_timeout_s)
        finally:
            ctl.close()
        nodes = [begin(self.cfg, state, client, f"sandbox-node-{i}") for i in range(1, count + 1)]
        for node in nodes:
            node.wait_joined(state.dashboard_url, self.cfg.up_timeout_s, state.ray_token_file)

    def _start_prometheus(self, state: StackState, address: str | None) -> None:
        cfg, run_dir = self.cfg, Path(state.run_dir)
        if address is None:
            sd_file = ray_cluster.wait_sd_file(cfg.up_timeout_s)
        else:
            sd_file = run_dir / ray_cluster.SD_FILE_NAME
        listen = f"{cfg.host}:{cfg.prometheus_port}"
        config_file = run_dir / "prometheus.yml"
        rule_files = alerts.install_rules(run_dir / "rules")  # the run keeps the rules it was judged by
        config_file.write_text(render(scrape_interval_s=cfg.scrape_interval_s, prometheus_address=listen,
                                      ray_sd_file=sd_file, targets_dir=state.targets_dir, rule_files=rule_files))
        proc = prometheus.start_server(prometheus.find_binary(cfg.prometheus_bin), config_file,
                                       run_dir / "prometheus-data", listen, run_dir / "logs" / "prometheus.log")
        self._prometheus = proc  # ours to reap at `down` when this process is still its parent
        state.prometheus_pid, state.prometheus_url = proc.pid, cfg.url(cfg.prometheus_port)
        state.save(cfg.state_file)
        client = prometheus.PrometheusClient(state.prometheus_url)
        try:
            deadline = time.monotonic() + 30
            while not client.ready():
                if proc.poll() is not None:
                    raise prometheus.PrometheusError(
                        f"Prometheus exited with {proc.returncode}; see {run_dir / 'logs' / 'prometheus.log'}")
                if time.monotonic() > deadline:
                    raise prometheus.PrometheusError("Prometheus not ready after 30s")
                time.sleep(0.1)
        finally:
            client.close()

    # -- down ---------------------------------------------------------------
    def down(self) -> dict:
        """Stop everything the state file names; idempotent. Returns what was stopped.

        Every step is tried even if an earlier one failed; the state file is kept
        (so `down` can be run again) only if something could not be stopped.
        """
        try:
            state = StackState.load(self.cfg.state_file)
        except NoStackError:
            return {"stopped": [], "note": "no sandbox was running"}
        stopped, errors = [], []
        logs = Path(state.run_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for title, step in self._teardown_steps(state, logs):
            try:
                with self.steps.step(title):
                    stopped += step()
            except Exception as e:  # noqa: BLE001 - carry on with the other steps
                errors.append(f"{title}: {type(e).__name__}: {e}")
        if errors:
            raise RuntimeError("sandbox down could not stop everything (run it again): " + "; ".join(errors))
        self.cfg.state_file.unlink(missing_ok=True)
        return {"stopped": stopped, "run_dir": state.run_dir}

    def _teardown_steps(self, state: StackState, logs: Path):
        def traffic():
            done = []
            for target in sorted(state.targets_dir.glob("*.json")) if state.targets_dir.is_dir() else []:
                pid = _target_pid(target)
                if pid and pid != os.getpid() and stop_pid(pid):
                    what = "canary prober" if target.name.startswith("canary-") else "traffic generator"
                    done.append(f"{what} (pid {pid})")
                target.unlink(missing_ok=True)
            return done

        def ray():
            killed = ray_cluster.stop_local(state.ray_pids, logs / "ray.log")
            return ["ray"] + [f"ray leftovers (SIGKILL: {killed})"] * bool(killed)

        def serve_app():
            ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
            try:
                ctl.delete_all()
            finally:
                ctl.close()
            return ["serve application"]

        def containers():
            client = docker_engine()
            return [f"container node {name}" for name in state.container_nodes if remove_container(client, name)]

        def prom():
            if not stop_pid(state.prometheus_pid):
                raise RuntimeError(f"Prometheus (pid {state.prometheus_pid}) did not stop")
            proc = getattr(self, "_prometheus", None)
            if proc is not None and proc.pid == state.prometheus_pid:
                proc.wait(timeout=5)
            return [f"prometheus (pid {state.prometheus_pid})"]

        yield "stopping traffic generators and canary probers", traffic
        if state.container_nodes:  # before Ray: a node whose head is gone only waits for it
            yield "removing the container nodes", containers
        if state.ray_started:
            yield "stopping Ray (ray stop)", ray
        elif state.dashboard_url:
            yield "deleting the Serve application from the joined cluster", serve_app
        if state.prometheus_pid:
            yield "stopping Prometheus", prom


def _pin_to_slots(deploy: DeployConfig) -> None:
    """Each replica takes a slot, so a container node (one slot) holds exactly one replica; the ingress
    stays on the head, so what happens to a container node happens to its replica alone."""
    server = deploy.deployment(SERVER).setdefault("ray_actor_options", {})
    server["resources"] = {**server.get("resources", {}), SLOT: 1}
    ingress = deploy.deployment(INGRESS).setdefault("ray_actor_options", {})
    ingress["resources"] = {**ingress.get("resources", {}), "node:__internal_head__": 0.001}


def _target_pid(path: Path) -> int | None:
    """traffic-<pid>.json / canary-<pid>.json: the process that announced this target."""
    _, _, pid = path.stem.rpartition("-")
    return int(pid) if pid.isdigit() else None


SCRAPED_JOBS = ("ray", "prometheus", "canary", "traffic")


def wait_scraped(state: StackState, replicas: int, version: str, timeout_s: float,
                 on_poll: Callable[[], None] | None = None) -> None:
    """Every active target up and scraped, and every replica's engine metrics (of `version`) stored."""
    client = prometheus.PrometheusClient(state.prometheus_url)
    query = f'count(vllm:cache_config_info{{version="{version}"}} == 1)'
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            # The sandbox's own jobs only: a deployment may scrape more (compose's container exporter),
            # and one of those being down says nothing about whether the replicas were seen.
            targets = [t for t in client.targets() if t["labels"].get("job") in SCRAPED_JOBS]
            jobs = {t["labels"].get("job") for t in targets}
            all_up = targets and all(t["health"] == "up" for t in targets) and {"ray", "prometheus"} <= jobs
            if all_up and (client.value(query) or 0) >= replicas:
                return
            if time.monotonic() > deadline:
                down = [t["scrapeUrl"] for t in targets if t["health"] != "up"]
                raise prometheus.PrometheusError(f"not every target scraped after {timeout_s:.0f}s (down: {down})")
            if on_poll:
                on_poll()
            time.sleep(0.25)
    finally:
        client.close()
