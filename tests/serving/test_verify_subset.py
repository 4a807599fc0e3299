"""CI's share of `sandbox verify`: one variant of the real catalogue, end to end, on this machine.

`make verify-all` runs every variant (about 90 minutes); CI runs the one below, which
exercises every part of the check: a rolling deploy as the fault (one that then fails under
load), a page from a real Prometheus alert, signals that separate it from its two siblings,
the other incidents' primary signals, and the leak scan. Its page comes from the engine's
memory accounting, not from how fast this machine happens to be: a latency page depends on
the prefill capacity of the machine that runs it (ttft-after-deploy/prefix-off once missed its
page on an idle machine and needed more load to keep a margin). Runs after the session stack is down
(see STACK_ORDER): verify brings up a fresh stack of its own, on the test ports.
"""
import json
import subprocess
import time

import pytest

from incidents.schema import load_incident
from sandbox.calibration.baseline_slos import LEAD_S, READINGS
from sandbox.drill.plan import make_plan
from services.stack import ray_cluster
from services.stack.settings import REPO_ROOT

INCIDENTS = REPO_ROOT / "incidents"

pytestmark = [pytest.mark.stack, pytest.mark.teardown]

CI_SUBSET = [("oom-at-peak", "headroom")]


@pytest.mark.parametrize(("incident", "variant"), CI_SUBSET)
def test_a_catalogue_variant_passes_verify(stack, tmp_path, incident, variant):
    stack.cli("down")
    # The calibrated path, on a short sweep (this variant pages on memory, not on how fast the machine is),
    # at test_calibrate's scale: the calibration it left in the test home is found and reused.
    env = dict(stack.env, SANDBOX_RUNS=str(tmp_path / "runs"), SANDBOX_CALIBRATION_SCALE="0.3")
    began = time.time()
    result = subprocess.run([*stack.cli_argv(), "verify", incident, "--variant", variant, "--seed", "0",
                             "--duration", "210", "--json"], env=env, capture_output=True, text=True,
                            timeout=900, check=False)
    report = json.loads(result.stdout)
    checks = report["checks"]
    assert report["pass"] and result.returncode == 0, (json.dumps(checks, indent=1)[:4000] if checks else
                                                       json.dumps(report, indent=1)[:3000] + result.stderr[-3000:])
    assert checks["page"]["seconds_to_page"] <= 120 and not checks["page"]["baseline_alerts"]
    assert all(s["separated"] for s in checks["separation"]["siblings"].values())
    assert checks["no_leaks"]["hits"] == []
    assert not ray_cluster.head_running()  # verify stops the stack it started
    run = json.loads((tmp_path / "runs" / report["run_id"] / "run.json").read_text())
    assert set(run["calibration"]["knees_rps"]) == {"default", "long-tail", "shared-prefix"}
    assert run["calibration"]["measured_at"] < began  # test_calibrate's, found by its key
    # ... and the latency thresholds were set again from this drill's own baseline, before its first change
    assert set(run["baseline_thresholds"]) >= set(READINGS)
    events = [json.loads(line) for line in (tmp_path / "runs" / report["run_id"] / "events.jsonl").read_text().splitlines()]
    set_at = next(e["at_s"] for e in events if e["kind"] == "thresholds set from the baseline")
    plan = make_plan(load_incident(INCIDENTS / f"{incident}.yaml"), variant, 0)
    assert plan.quiet_until_s() - LEAD_S <= set_at < plan.quiet_until_s()
