"""Ctrl-C during a drill: faults reverted, everything the drill started stopped, the record kept.

Runs after the session stack is down (see STACK_ORDER): the drill starts its own
stack, on the test ports, with a short incident from tests/drill/incidents.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox import ray_cluster
from test_teardown import RAY_PROCESS_MARKS, processes

pytestmark = [pytest.mark.stack, pytest.mark.teardown]

SHORT_INCIDENTS = Path(__file__).resolve().parents[1] / "drill" / "incidents"


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _cgroups() -> set[str]:
    root = Path("/sys/fs/cgroup/cpu")
    return {p.name for p in root.glob("sandbox-*")} if root.is_dir() else set()


def test_ctrl_c_during_a_drill_reverts_the_fault_and_leaves_no_process(stack, tmp_path):
    stack.cli("down")  # the session stack goes first: the drill brings up its own
    assert not ray_cluster.head_running()
    runs = tmp_path / "runs"
    env = dict(stack.env, SANDBOX_INCIDENTS=str(SHORT_INCIDENTS), SANDBOX_RUNS=str(runs))
    groups_before = _cgroups()
    drill = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "drill", "slow-replica", "--seed", "1",
                              "--headless"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        run_dir = _wait_for(lambda: next(runs.glob("*"), None) if runs.is_dir() else None, 180, "the run directory")
        # The fault is in: its cgroup exists (the drill injects at 20 s of traffic).
        _wait_for(lambda: _cgroups() - groups_before, 120, "the CPU quota group")
        os.killpg(drill.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, _ = drill.communicate(timeout=180)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
    assert drill.returncode == 130, out
    public = json.loads((run_dir / "run.json").read_text())
    assert public["status"] == "interrupted"
    assert (run_dir / "sealed" / "answer.bin").is_file() and (run_dir / "prometheus").is_dir()
    assert _cgroups() == groups_before  # the quota group is gone: the replica's threads were moved back
    assert not ray_cluster.head_running()
    marks = (*RAY_PROCESS_MARKS, str(stack.cfg.home), "sandbox.canary", "sandbox.cli")
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in marks)]
