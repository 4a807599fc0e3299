"""`sandbox interview` end to end: the page, `sandbox ask`, `sandbox diagnose --file`, and a clean end.

Runs after the session stack is down (see STACK_ORDER): the interview starts its own stack on the
test ports, with the short slow-replica incident from tests/drill/incidents.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml

from sandbox import ray_cluster
from test_drill_interrupt import SHORT_INCIDENTS, _cgroups, _reader, _wait_for
from test_teardown import RAY_PROCESS_MARKS, processes

pytestmark = [pytest.mark.stack, pytest.mark.teardown]


def test_an_interview_pages_logs_asks_grades_the_diagnosis_and_ends_cleanly(stack, tmp_path):
    stack.cli("down")
    runs, incidents = tmp_path / "runs", tmp_path / "incidents"
    incidents.mkdir()
    shutil.copy(SHORT_INCIDENTS / "slow-replica.yaml", incidents)
    env = dict(stack.env, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs))
    groups_before = _cgroups()
    proc = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "interview", "--seed", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = _reader(proc.stdout, lines)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sandbox.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)
    try:
        run_dir = _wait_for(lambda: next(runs.glob("*"), None) if runs.is_dir() else None, 180, "the run directory")
        _wait_for(lambda: json.loads((run_dir / "run.json").read_text()).get("page"), 240, "the page")
        _wait_for(lambda: any("sandbox ask" in line for line in lines), 10, "the interview page")
        assert not any("Prometheus UI" in line for line in lines)  # no dashboards in an interview
        asked = cli("ask", "latency-by-replica", "--json")
        assert asked.returncode == 0, asked.stderr
        series = json.loads(asked.stdout)["queries"][0]["series"]
        assert len(series) >= 2  # ITL p99 for each replica
        replica = max(series, key=lambda s: s["last"] or 0)["series"].split("=")[1]
        d = {"run": run_dir.name, "root_cause": "cpu-throttled-replica",
             "location": {"replica": replica, "version": None, "component": "node"},
             "evidence": [{"query": "max(rate(sandbox:replica_cpu_throttled_seconds_total[30s]))",
                           "observation": "one replica is throttled"}],
             "hypotheses": [], "remediation": "drain-replica", "summary": "one replica is CPU-throttled"}
        (tmp_path / "d.yaml").write_text(yaml.safe_dump(d))
        graded = cli("diagnose", "--file", str(tmp_path / "d.yaml"), "--json")
        assert graded.returncode == 0, graded.stderr
        report = json.loads(graded.stdout)
        proc.wait(timeout=180)  # the diagnosis ends the interview
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    assert proc.returncode == 0, "".join(lines)
    names = [c["name"] for c in report["criteria"]]
    assert {"decomposed_first", "asked_separating", "asks"} <= set(names)
    assert report["counted"] and report["score"] >= 60, report
    assert report["time_to_diagnosis_s"] is not None
    asks = [json.loads(line) for line in (run_dir / "asks.jsonl").read_text().splitlines()]
    assert [a["evidence"] for a in asks] == ["latency-by-replica"]
    assert (run_dir / "diagnoses" / "01.grade.json").is_file() and (run_dir / "debrief" / "debrief.md").is_file()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ended"
    assert _cgroups() == groups_before and not ray_cluster.head_running()
    marks = (*RAY_PROCESS_MARKS, str(stack.cfg.home), "sandbox.canary", "sandbox.cli")
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in marks)]
