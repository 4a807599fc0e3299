"""`sandbox drill --random` pages; Ctrl-C then reverts faults, stops everything the drill started, keeps the record.

Runs after the session stack is down (see STACK_ORDER): the drill starts its own
stack, on the test ports, with the short incident of tests/drill/incidents, chosen for a
page whose margin does not depend on this machine's speed (its file says why).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_teardown import RAY_PROCESS_MARKS, processes

from services.stack import ray_cluster
from services.stack.alerts import active_alerts, rule_files
from services.stack.prometheus import PrometheusClient, PrometheusError

pytestmark = [pytest.mark.stack, pytest.mark.teardown]

SHORT_INCIDENTS = Path(__file__).resolve().parents[1] / "drill" / "incidents"
SHORT_INCIDENT = SHORT_INCIDENTS / "flaky-outputs.yaml"
PAGE = "CanaryOutputsInconsistent"
INJECT_AT_S = 20


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def page_reading(prometheus_url: str, alert: str) -> str:
    """What the alert's expression (its left side, before the threshold) and its state read now."""
    rule = next(r for path in rule_files() for g in yaml.safe_load(path.read_text())["groups"]
                for r in g["rules"] if r.get("alert") == alert)
    lhs = re.split(r"\s[<>]\s+scalar\(", rule["expr"], maxsplit=1)[0].strip()
    prom = PrometheusClient(prometheus_url)
    try:
        rows = prom.query(lhs)
        states = [a.state for a in active_alerts(prom) if a.name == alert]
    except PrometheusError as e:
        return f"{alert}: Prometheus at {prometheus_url} did not answer ({e})"
    finally:
        prom.close()
    values = {json.dumps(r["metric"], sort_keys=True): r["value"][1] for r in rows}
    return f"{alert} read {values or 'no series'} ({' '.join(lhs.split())}); state {states or 'inactive'}"


def wait_for_page(run_dir: Path, timeout_s: float, alert: str = PAGE) -> dict:
    """The page from run.json; on a timeout, the failure says what the page expression read."""
    run_file = run_dir / "run.json"
    try:
        return _wait_for(lambda: run_file.is_file() and json.loads(run_file.read_text()).get("page"),
                         timeout_s, "the page")
    except AssertionError as e:
        url = json.loads(run_file.read_text()).get("prometheus_url") if run_file.is_file() else None
        raise AssertionError(f"{e}; {page_reading(url, alert) if url else 'no run.json'}") from None


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
    shutil.copy(SHORT_INCIDENT, incidents)  # --random has one incident to pick
    env = dict(stack.env, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs))
    groups_before = _cgroups()
    drill = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "drill", "--random", "--seed", "1"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)  # its own process group, as a terminal's foreground job
    lines: list[str] = []
    reader = _reader(drill.stdout, lines)
    try:
        run_dir = _wait_for(lambda: next(runs.glob("*"), None) if runs.is_dir() else None, 180, "the run directory")
        run_file = run_dir / "run.json"
        before_page = json.loads(_wait_for(lambda: run_file.is_file() and run_file.read_text(), 30, "run.json"))
        wait_for_page(run_dir, 240)
        _wait_for(lambda: any("PAGE" in line for line in lines), 10, "the page on the terminal")
        os.killpg(drill.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        drill.wait(timeout=180)
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
    reader.join(10)
    out = "".join(lines)
    # Paged, then ended by the candidate: the drill's normal end. A revert that failed would end it
    # with "drill clean-up incomplete" and a non-zero status.
    assert drill.returncode == 0, out
    assert "reverting the injected changes" in out and "clean-up incomplete" not in out, out
    public = json.loads((run_dir / "run.json").read_text())
    assert public["status"] == "ended", public
    # Nothing named the incident before the page: not the run's name, its record, or the terminal.
    until_page = out[:out.index("PAGE")]
    assert "flaky" not in run_dir.name and "incident" not in before_page and "flaky" not in until_page, until_page
    assert public["incident"] == "flaky-outputs"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # The short incident injects at 20 s of traffic; the page must come within the 120 s target.
    assert public["page"]["alert"] == PAGE
    assert public["page"]["at_s"] - INJECT_AT_S <= 120, events
    assert (run_dir / "sealed" / "answer.bin").is_file() and (run_dir / "prometheus").is_dir()
    assert _cgroups() == groups_before
    assert not ray_cluster.head_running()
    marks = (*RAY_PROCESS_MARKS, str(stack.cfg.home), "sandbox.canary", "sandbox.cli")
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in marks)]

