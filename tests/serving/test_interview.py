"""`sandbox interview` end to end: the page, `sandbox ask`, `sandbox diagnose --file`, and a clean end.

Runs after the session stack is down (see STACK_ORDER): the interview starts its own stack on the
test ports, with the short incident of tests/drill/incidents (one replica on other numerics).
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from test_drill_interrupt import SHORT_INCIDENT, _cgroups, _reader, _wait_for, wait_for_page
from test_teardown import RAY_PROCESS_MARKS, processes

from services.stack import ray_cluster

pytestmark = [pytest.mark.stack, pytest.mark.teardown]


def test_an_interview_pages_logs_asks_grades_the_diagnosis_and_ends_cleanly(stack, tmp_path):
    stack.cli("down")
    runs, incidents = tmp_path / "runs", tmp_path / "incidents"
    incidents.mkdir()
    shutil.copy(SHORT_INCIDENT, incidents)
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
        wait_for_page(run_dir, 240)
        _wait_for(lambda: any("sandbox ask" in line for line in lines), 10, "the interview page")
        assert not any("Prometheus UI" in line for line in lines)  # no dashboards in an interview
        asked = cli("ask", "canary", "--json")
        assert asked.returncode == 0, asked.stderr
        # The replica whose answers to repeated prompts changed (as a candidate reads this table).
        by_replica = next(q for q in json.loads(asked.stdout)["queries"] if q["label"] == "mismatch by replica")
        assert len(by_replica["series"]) >= 2, by_replica  # both replicas answered repeats
        worst = max(by_replica["series"], key=lambda s: s["max"] or 0)
        replica = worst["series"].split("=")[1]
        d = {"run": run_dir.name, "root_cause": "replica-numerics-mismatch",
             "location": {"replica": replica, "version": None, "component": "numerics"},
             "evidence": [{"query": 'sum(rate(sandbox_canary_consistency_checks_total{mode="greedy",result="mismatch"}[30s]))'
                                    ' / sum(rate(sandbox_canary_consistency_checks_total{mode="greedy"}[30s]))',
                           "observation": "repeated greedy prompts get other answers"}],
             "hypotheses": [], "remediation": "restart-replica", "summary": "one replica computes in float32"}
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
    assert [a["evidence"] for a in asks] == ["canary"]
    assert (run_dir / "diagnoses" / "01.grade.json").is_file() and (run_dir / "debrief" / "debrief.md").is_file()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ended"
    assert _cgroups() == groups_before and not ray_cluster.head_running()
    marks = (*RAY_PROCESS_MARKS, str(stack.cfg.home), "sandbox.canary", "sandbox.cli")
    assert not [(pid, cmd) for pid, cmd in processes() if any(m in cmd for m in marks)]
