"""Start, find and stop the local Ray head (`ray start` / `ray stop`), or describe a joined cluster."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from services.stack import ray_token
from services.stack.settings import REPO_ROOT, SandboxConfig

RAY_TEMP_DIR = Path("/tmp/ray")  # Ray's default; `ray stop` and address="auto" look here
SD_FILE_NAME = "prom_metrics_service_discovery.json"


class RayError(RuntimeError):
    """Ray could not be started or reached."""


def _ray_cli() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else "ray"


def head_running() -> bool:
    """True when a local Ray cluster answers (whoever started it)."""
    addr_file = RAY_TEMP_DIR / "ray_current_cluster"
    if not addr_file.is_file():
        return False
    host, _, port = addr_file.read_text().strip().rpartition(":")
    import socket

    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except (OSError, ValueError):
        return False


def start_head(cfg: SandboxConfig, log_file: Path, min_cpus: int = 1,
               resources: dict | None = None, token_file: str | None = None) -> tuple[str, list[int]]:
    """`ray start --head` on loopback with the sandbox's ports; the GCS address and the head's pids.
    `token_file`: Ray's token authentication on, with this token (services/stack/ray_token.py).

    `--num-cpus` is Ray's logical count (what replicas reserve), not the machine's cores.
    """
    # Ray's default worker niceness (+15) stays: under load the node's metrics agent must still
    # render its endpoint within a scrape timeout, so the infrastructure runs ahead of the replicas.
    system_config = {"metrics_report_interval_ms": cfg.metrics_report_interval_ms}
    cmd = [_ray_cli(), "start", "--head", f"--node-ip-address={cfg.host}", f"--port={cfg.ray_port}",
           f"--num-cpus={max(cfg.ray_num_cpus, min_cpus)}", "--num-gpus=0" if not _cuda() else "--num-gpus=1",
           "--include-dashboard=true", f"--dashboard-host={cfg.host}", f"--dashboard-port={cfg.dashboard_port}",
           f"--metrics-export-port={cfg.metrics_export_port}", "--include-log-monitor=false",
           # No autoscaler monitor: a fixed local cluster, and one Python process fewer at start.
           "--no-monitor",
           "--disable-usage-stats", f"--system-config={json.dumps(system_config)}"]
    if resources:  # custom Ray resources of the head (the replica slots of a stack with container nodes)
        cmd.append(f"--resources={json.dumps(resources)}")
    # Replicas import `services` from this checkout even where the project is not pip-installed.
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath)
    if token_file:  # every daemon, worker and replica the head starts inherits it
        env |= ray_token.server_env(token_file)
    if cfg.host in ("127.0.0.1", "localhost"):
        # Ray turns --node-ip-address=127.0.0.1 into the machine's interface address (so other nodes
        # could join). A loopback sandbox stays on loopback: this switch (Ray's single-node mode for
        # macOS/Windows) keeps every Ray address, metrics target included, on 127.0.0.1.
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    before = set(processes())
    with open(log_file, "ab") as log:
        # A session of its own: Ray's daemons inherit `ray start`'s process group, and a Ctrl-C in the
        # terminal of the drill that started them would reach every one (the dashboard then stops
        # answering, and a revert that asks Serve which replicas run fails). The drill stops them itself.
        result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                                check=False, start_new_session=True)
    if result.returncode != 0:
        raise RayError(f"`ray start --head` failed (exit {result.returncode}); see {log_file}")
    return f"{cfg.host}:{cfg.ray_port}", started_since(before)


def started_since(before: set[int]) -> list[int]:
    """Ray's daemons that appeared after `before` was taken (the head `ray start` just launched)."""
    ray_dir = str(Path(ray_package_dir()))
    return sorted(pid for pid, (_, cmd) in processes().items()
                  if pid not in before and (ray_dir in cmd or cmd.startswith("ray::")))


def ray_package_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("ray")
    return str(Path(spec.origin).parent) if spec and spec.origin else "/ray/"


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live, non-zombie process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if stat[0] != "Z":
            out[int(entry.name)] = (int(stat[1]), cmd)
    return out


def with_descendants(roots: set[int]) -> set[int]:
    procs = processes()
    found = {p for p in roots if p in procs}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in procs.items() if ppid in found and pid not in found}
        found |= children
        grew = bool(children)
    return found


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, no CUDA
        return False


def stop_local(head_pids: list[int], log_file: Path | None = None, grace_s: int = 5,
               timeout_s: float = 20) -> list[int]:
    """`ray stop`, then SIGKILL whatever is left of the processes this head started (by pid).

    `ray stop` is Ray's own teardown, but on a loaded machine it has hung for a minute
    scanning processes; the pids recorded at `up` (and their children, the workers)
    make the end certain. Returns the pids that had to be killed.
    """
    log = open(log_file, "ab") if log_file else None  # noqa: SIM115 - closed below, after the run
    try:
        subprocess.run([_ray_cli(), "stop", f"--grace-period={grace_s}"], stdout=log or subprocess.DEVNULL,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if log:
            log.close()
    left = with_descendants(set(head_pids))
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while with_descendants(left) and time.monotonic() < deadline:
        time.sleep(0.1)
    if with_descendants(left):
        raise RayError(f"Ray processes {sorted(with_descendants(left))} survived SIGKILL")
    return sorted(left)


def session_dir() -> Path:
    latest = RAY_TEMP_DIR / "session_latest"
    if not latest.exists():
        raise RayError(f"no Ray session under {RAY_TEMP_DIR}")
    return latest.resolve()


def wait_sd_file(timeout_s: float) -> Path:
    """Ray's dashboard writes the Prometheus service-discovery file every few seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path = session_dir() / SD_FILE_NAME
            if path.is_file() and json.loads(path.read_text() or "[]"):
                return path
        except (RayError, json.JSONDecodeError):
            pass
        if time.monotonic() > deadline:
            raise RayError(f"Ray wrote no {SD_FILE_NAME} within {timeout_s:.0f}s")
        time.sleep(0.2)


@contextlib.contextmanager
def python_signal_handlers():
    """Around `ray.init`: Ray's core worker installs C-level handlers over Python's (on SIGTERM it prints a
    stack trace and dies), so a driver ended by SIGTERM skipped its clean-up: a drill left its faults, its
    canary and its run marked "running". Python's handlers are put back once Ray has connected."""
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def describe_cluster(address: str) -> dict:
    """Join `address` as a short-lived driver: dashboard URL and each node's metrics address."""
    import ray

    with python_signal_handlers():
        ctx = ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = [f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes() if n["Alive"]]
        dashboard = ctx.dashboard_url or ""
    finally:
        ray.shutdown()
    if not dashboard:
        raise RayError(f"the Ray cluster at {address} runs no dashboard; the sandbox deploys through it")
    if not dashboard.startswith("http"):
        dashboard = f"http://{dashboard}"
    return {"dashboard_url": dashboard, "metrics_addresses": nodes}
