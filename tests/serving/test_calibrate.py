"""`sandbox calibrate` on the session stack, on short sweeps: it measures, installs the thresholds it derives in
the stack's Prometheus (the defaults come back after), caches and reuses. A corrupt cache is redone: see
tests/calibration (the cache refuses it; a calibration that is not found is measured)."""
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from services.stack import alerts, threshold_rules
from services.stack.deployer import deploy_changes

pytestmark = pytest.mark.stack

# The catalogue's profiles at the verify subset's scale: its drill then finds this calibration cached
# (test_verify_subset runs later, on a stack of the same config) and spends no time measuring again.
PROFILES = ("--profile", "default", "--profile", "long-tail", "--profile", "shared-prefix")
SCALE = "0.3"


def _calibrate(stack, *args):
    env = dict(stack.env, SANDBOX_CALIBRATION_SCALE=SCALE)
    return subprocess.run([*stack.cli_argv(), "calibrate", *PROFILES, *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture
def calibrated_stack(stack):
    """The stack as `up` deployed it: test_deploy leaves the target as its own draft for the dashboard test's
    speculative-decoding panels, and on it 64 clients streamed 2 chunks in 5 s."""
    deployed = yaml.safe_load(Path(stack.refresh().deployed_config).read_text())
    if deployed["applications"][0]["args"].get("engine", {}).get("speculative_model"):
        deploy_changes(stack.cfg, stack.state, ["speculative_model=null", "num_speculative_tokens=0"], None, 240)
    assert not yaml.safe_load(Path(stack.refresh().deployed_config).read_text())["applications"][0]["args"].get(
        "engine", {}).get("speculative_model")
    try:
        yield stack
    finally:  # later tests read the default thresholds
        threshold_rules.install(f"{stack.state.run_dir}/rules", stack.state.prometheus_pid, stack.prom,
                                alerts.thresholds(), "the defaults, restored by tests/serving/test_calibrate.py")


def test_a_calibration_is_measured_installed_cached_and_reused(calibrated_stack, tmp_path):
    stack = calibrated_stack
    first = _calibrate(stack, "--json", "--plot", str(tmp_path / "curve.png"))
    assert first.returncode == 0, first.stderr[-3000:]
    cal = json.loads(first.stdout)
    assert cal["measured_now"] is True and set(cal["profiles"]) == {"default", "long-tail", "shared-prefix"}
    assert cal["reference"] == "default" and len(cal["curve"]) == 3
    for name, p in cal["profiles"].items():
        assert p["ceiling"]["requests"] > 0 and p["ceiling"]["errors"] == 0, name
        assert 0 < p["knee_rps"] <= p["ceiling"]["rate"], name
    assert cal["profiles"]["long-tail"]["knee_rps"] == pytest.approx(
        cal["knee_share"] * cal["profiles"]["long-tail"]["ceiling"]["rate"], rel=1e-3)
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the alerts now compare against the calibrated values
    loaded = threshold_rules.loaded(stack.prom)
    for name, value in cal["installed_thresholds"].items():
        assert loaded[name] == f"vector({value:g})", name
    assert set(cal["installed_thresholds"]) - set(cal["thresholds"]) <= {"sandbox:threshold:tpot_p50_seconds"}
    assert loaded["sandbox:threshold:replica_ttft_p99_ratio"] == "vector(2.5)"  # ratios are not the machine's

    t0 = time.monotonic()
    again = _calibrate(stack, "--json")
    assert again.returncode == 0 and time.monotonic() - t0 < 30
    reused = json.loads(again.stdout)
    assert reused["measured_now"] is False and reused["measured_at"] == cal["measured_at"]



def test_a_setup_configs_slos_are_measured_alone_at_the_machine_calibrations_loads(calibrated_stack):
    """What a drill whose setup deploys other settings does (tpot-regression's speculative baseline): the one at a
    time, drill-load and busy phases on the deployed config, at the ceilings of the machine's calibration (here:
    this config's own, cached by the test above)."""
    from sandbox.calibration.calibrator import Calibrator
    from sandbox.calibration.capacity import Calibration
    from sandbox.calibration import thresholds
    from sandbox.calibration.sweep_point import SweepConfig
    from services.serve.metric_names import TIME_PER_OUTPUT_TOKEN

    out = _calibrate(calibrated_stack, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    machine = Calibration.from_dict(json.loads(out.stdout))
    sweep = SweepConfig().scaled(float(SCALE))
    cal = Calibrator(calibrated_stack.refresh(), {"test": "slos"}, ["default", "long-tail"], sweep,
                     loads=machine, load_share=0.31).run()
    assert cal.curve == machine.curve and cal.knee_share == machine.knee_share
    for name, p in cal.profiles.items():
        assert p.ceiling == machine.profiles[name].ceiling and p.knee_rps == machine.profiles[name].knee_rps
        assert p.busy.phase == "busy" and p.busy.offered == pytest.approx(0.55 * p.ceiling.rate)
        assert p.busy.requests > 0 and p.busy.errors == 0, name
    assert cal.profiles["default"].single.requests > 0 and cal.profiles["long-tail"].single is None
    assert cal.thresholds["sandbox:threshold:ttft_p99_seconds"] > 0 and cal.tpot_line is not None
    # the TPOT line runs through the drill's own load: its SLO is 1.8x the median measured there, as the
    # histogram's buckets read it
    assert cal.tpot_line.busy_share == pytest.approx(0.31)
    assert cal.thresholds_for(0.31)["sandbox:threshold:tpot_p50_seconds"] == pytest.approx(1.8 * thresholds.read_ceiling(
        max(cal.tpot_line.idle_s, cal.tpot_line.busy_s), TIME_PER_OUTPUT_TOKEN.buckets), abs=1e-4)


def test_a_cached_calibration_is_checked_against_the_stack_and_scaled_only_past_the_tolerance(calibrated_stack):
    """What a drill does before it trusts a cached calibration (sandbox/calibration/drift.py): the reference
    profile's ceiling measured again, beside the unscraped canary, and the drill's capacities scaled by the ratio
    where it moved past 15 %."""
    import io

    from rich.console import Console

    from sandbox.calibration import drift
    from sandbox.calibration.capacity import Calibration
    from sandbox.calibration.sweep_point import SweepConfig
    from services.stack.progress import Steps

    out = _calibrate(calibrated_stack, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    machine = Calibration.from_dict(json.loads(out.stdout))
    printed = io.StringIO()
    cal, found = drift.recheck(calibrated_stack.refresh(), machine, SweepConfig().scaled(float(SCALE)),
                               Steps(Console(file=printed, width=200)))
    assert found is not None and found.profile == "default" and found.now_rps > 0
    assert found.cached_rps == machine.profiles["default"].ceiling.rate
    assert "the stack completes" in printed.getvalue()
    factor = found.factor if found.applied else 1.0
    for name, p in cal.profiles.items():
        assert p.ceiling.rate == pytest.approx(factor * machine.profiles[name].ceiling.rate), name
        assert p.knee_rps == pytest.approx(factor * machine.profiles[name].knee_rps), name
    assert cal.thresholds == machine.thresholds and cal.key == machine.key
