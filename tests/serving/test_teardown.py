"""`sandbox down` leaves no Ray, Prometheus or sandbox process behind."""
import json
import os
from pathlib import Path

import pytest

from services.stack import ray_cluster
from services.stack.state import pid_alive

pytestmark = [pytest.mark.stack, pytest.mark.teardown]

RAY_PROCESS_MARKS = ("raylet", "gcs_server", "ray::", "dashboard/dashboard.py", "dashboard/agent.py",
                     "ray/_private/", "default_worker.py")


def processes() -> list[tuple[int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if cmd and state != "Z":
                out.append((int(entry.name), cmd))
    return out


def test_down_leaves_no_ray_prometheus_or_sandbox_process(stack):
    prometheus_pid = stack.refresh().prometheus_pid
    result = stack.cli("down", "--json")
    assert result.returncode == 0, result.stderr
    assert "ray" in json.loads(result.stdout)["stopped"]
    assert not pid_alive(prometheus_pid)
    assert not ray_cluster.head_running()
    home = str(stack.cfg.home)
    left = [(pid, cmd) for pid, cmd in processes()
            if any(m in cmd for m in RAY_PROCESS_MARKS) or home in cmd or "sandbox.cli" in cmd]
    assert not left
    assert not stack.cfg.state_file.exists()
