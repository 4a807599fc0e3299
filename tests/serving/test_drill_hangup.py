"""`sandbox drill | tee log`, then the terminal closes: the reader is gone (tee ended first) and the drill gets
SIGHUP. Its writes fail from then on; its clean-up must not. A drill ended by SIGTERM (a process manager, `kill`)
cleans up the same way.

Runs early on the session stack (see STACK_ORDER), which the drill reuses: what it started (the canary, the
traffic and its exporter, the record) must end; the stack it found stays up and serving.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from test_drill_interrupt import SHORT_INCIDENT
from test_teardown import processes

pytestmark = pytest.mark.stack


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.mark.parametrize("ending", ["closed output, then SIGHUP", "SIGTERM"])
def test_a_drill_whose_output_died_and_whose_terminal_hung_up_still_cleans_up(stack, tmp_path, ending):
    runs, incidents = tmp_path / "runs", tmp_path / "incidents"
    incidents.mkdir()
    shutil.copy(SHORT_INCIDENT, incidents)
    env = dict(stack.env, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs))
    hangup = ending.endswith("SIGHUP")
    log = open(tmp_path / "drill.log", "wb")  # noqa: SIM115 - the drill writes to it until it ends
    drill = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "drill", "--random", "--seed", "2"],
                             env=env, stdout=subprocess.PIPE if hangup else log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        run_dir = _wait_for(lambda: next(runs.glob("*"), None) if runs.is_dir() else None, 120, "the run directory")
        events = run_dir / "events.jsonl"
        _wait_for(lambda: events.is_file() and "traffic started" in events.read_text(), 60, "traffic")
        if hangup:
            drill.stdout.close()  # nobody reads the drill's output any more
        os.killpg(drill.pid, signal.SIGHUP if hangup else signal.SIGTERM)
        drill.wait(timeout=120)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
        log.close()
    public = json.loads((run_dir / "run.json").read_text())
    assert public["status"] == "interrupted" and public["ended"] >= public["stopped"], public
    assert drill.returncode == 130, (tmp_path / "drill.log").read_text()[-2000:]
    assert (run_dir / "prometheus").is_dir()  # the record kept the run's data
    started = ("sandbox.canary", "sandbox.cli", str(run_dir))
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in started)]
    assert not list(stack.state.targets_dir.glob("traffic-*.json"))  # its exporter is gone from the scrape
    assert stack.openai().models.list().data  # the stack it found still serves
