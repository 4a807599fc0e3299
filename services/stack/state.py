"""What a running sandbox is made of, saved as JSON so every `sandbox` command can find it.

`up` writes it step by step (so a failed `up` can still be torn down); `down`
reads it, stops what it names, and removes it.
"""
from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


class NoStackError(RuntimeError):
    """No sandbox is running (no state file)."""


@dataclass
class StackState:
    run_id: str
    run_dir: str
    ray_started: bool = False  # False when `up --address` joined someone else's cluster
    ray_address: str | None = None
    ray_pids: list[int] = field(default_factory=list)  # what `ray start --head` launched
    ray_session_dir: str | None = None
    ray_token_file: str | None = None  # the head's token auth (services/stack/ray_token.py); None: no token
    dashboard_url: str | None = None
    api_url: str | None = None
    prometheus_url: str | None = None
    prometheus_pid: int | None = None
    app_name: str = "llm"
    model_name: str | None = None
    deployed_config: str | None = None  # path of the Serve config as last deployed
    version: str | None = None
    replicas: int | None = None
    container_nodes: list[str] = field(default_factory=list)  # Ray worker nodes in containers (by name)
    created: float = field(default_factory=time.time)

    @property
    def targets_dir(self) -> Path:
        """file_sd target files that processes add and remove (the traffic generators)."""
        return Path(self.run_dir) / "targets"

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> StackState:
        if not path.is_file():
            raise NoStackError(f"no sandbox is running (no {path}); start one with `sandbox up`")
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pid(pid: int | None, timeout_s: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after timeout_s; True if the process is gone."""
    if not pid_alive(pid):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    time.sleep(0.2)
    return not pid_alive(pid)
