"""`sandbox drill --random` pages; Ctrl-C then reverts faults, stops everything the drill started, keeps the record.

Runs after the session stack is down (see STACK_ORDER): the drill starts its own
stack, on the test ports, with a short incident from tests/drill/incidents.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
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


def _reader(stream, lines: list[str]) -> threading.Thread:
    def read():
        for line in stream:
            lines.append(line)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_random_drill_pages_and_ctrl_c_reverts_the_fault_and_leaves_no_process(stack, tmp_path):
    """The README's `sandbox drill --random`, interactive: it pages, goes on until Ctrl-C, then cleans up."""
    stack.cli("down")  # the session stack goes first: the drill brings up its own
    assert not ray_cluster.head_running()
    runs, incidents = tmp_path / "runs", tmp_path / "incidents"
    incidents.mkdir()
    shutil.copy(SHORT_INCIDENTS / "slow-replica.yaml", incidents)  # --random has one incident to pick
    env = dict(stack.env, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs))
    groups_before = _cgroups()
    drill = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "drill", "--random", "--seed", "1"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)  # its own process group, as a terminal's foreground job
    lines: list[str] = []
    reader = _reader(drill.stdout, lines)
    try:
        run_dir = _wait_for(lambda: next(runs.glob("*"), None) if runs.is_dir() else None, 180, "the run directory")
        _wait_for(lambda: _cgroups() - groups_before, 120, "the CPU quota group")  # the fault is in
        _wait_for(lambda: (run_dir / "run.json").is_file()
                  and json.loads((run_dir / "run.json").read_text()).get("page"), 240, "the page")
        _wait_for(lambda: any("PAGE" in line for line in lines), 10, "the page on the terminal")
        os.killpg(drill.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        drill.wait(timeout=180)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
    reader.join(10)
    out = "".join(lines)
    assert drill.returncode == 0, out  # paged, then ended by the candidate: the drill's normal end
    public = json.loads((run_dir / "run.json").read_text())
    assert public["status"] == "ended", public
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # The short incident injects at 20 s of traffic; the page must come within the 120 s target.
    assert public["page"]["alert"] == "ReplicaInterTokenLatencyHigh"
    assert public["page"]["at_s"] - 20 <= 120, events
    assert (run_dir / "sealed" / "answer.bin").is_file() and (run_dir / "prometheus").is_dir()
    assert _cgroups() == groups_before  # the quota group is gone: the replica's threads were moved back
    assert not ray_cluster.head_running()
    marks = (*RAY_PROCESS_MARKS, str(stack.cfg.home), "sandbox.canary", "sandbox.cli")
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in marks)]
