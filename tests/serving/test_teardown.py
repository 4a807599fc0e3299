"""`sandbox down` leaves no Ray, Prometheus or sandbox process behind."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
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


def _killed_drill(stack, tmp_path) -> Path:
    """A drill on the session stack, SIGKILLed (no clean-up at all) once its traffic runs; its run directory.
    (Killed mid-injection and mid-rollout too: bench/churn.py; here the stack's alerts from test_calibrate's
    sweep hold the drill before it starts: about 90 s since a replica's TTFT p99 reads two minutes.)"""
    from test_drill_interrupt import SHORT_INCIDENT

    runs, incidents = tmp_path / "runs", tmp_path / "incidents"
    incidents.mkdir()
    shutil.copy(SHORT_INCIDENT, incidents)
    env = dict(stack.env, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs))
    drill = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "drill", "--random", "--seed", "3"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (run_dirs := list(runs.glob("*/events.jsonl"))) or "traffic started" not in run_dirs[0].read_text():
            assert drill.poll() is None and time.monotonic() < deadline, "the drill ended before its traffic"
            time.sleep(0.25)
    finally:  # the drill alone: its canary probers, its traffic exporter and its record are orphaned
        os.kill(drill.pid, signal.SIGKILL)
        drill.wait(timeout=10)
    return run_dirs[0].parent


def test_down_after_a_killed_drill_leaves_no_ray_prometheus_or_sandbox_process(stack, tmp_path):
    run_dir = _killed_drill(stack, tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # nothing closed it
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
    assert json.loads((run_dir / "run.json").read_text())["status"] == "killed"  # down said how it ended
    assert json.loads(result.stdout)["killed_drill"] == str(run_dir)
