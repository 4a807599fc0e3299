"""The order a drill's SLO steps run in (sandbox/drill/slos.py): the latency thresholds are unset before the drill
measures anything of its own. The steps themselves run live in the suite's drills (tests/serving)."""
import io
import math

from rich.console import Console

from sandbox.calibration.baseline_slos import READINGS
from sandbox.drill import slos as slos_module
from sandbox.drill.slos import DrillSlos
from services.stack.progress import Steps
from services.stack.settings import SandboxConfig

TTFT = "sandbox:threshold:ttft_p99_seconds"


class _Plan:
    def unresolved_profiles(self):
        return ["default"]

    def resolved(self, knees, ceilings):
        return self

    def base_share(self, ceilings):
        return 0.3

    def quiet_until_s(self):
        return 165.0


class _Cal:
    profiles = {"default": None}

    def knees(self):
        return {"default": 4.0}

    def ceilings(self):
        return {"default": 8.0}


def test_the_capacity_check_runs_with_the_latency_thresholds_unset_and_a_restore_puts_the_calibrations_back(
        monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(slos_module, "calibrate_stack",
                        lambda cfg, state, profiles, steps, **kw: calls.append(("calibration", {TTFT: 1.5}))
                        or (_Cal(), {TTFT: 1.5}, False))
    monkeypatch.setattr(slos_module, "install_thresholds",
                        lambda state, cal, values, note=None: calls.append(("install", values[TTFT])))
    monkeypatch.setattr(slos_module.drift, "recheck",
                        lambda state, cal, sweep, steps: calls.append(("check", None)) or (cal, None))
    monkeypatch.setattr(slos_module, "load_catalogue", lambda path: {})
    slos = DrillSlos(SandboxConfig(home=tmp_path), Steps(Console(file=io.StringIO())))
    slos.calibrate(object(), _Plan())
    assert calls == [("calibration", {TTFT: 1.5}), ("install", math.inf), ("check", None)]
    assert TTFT in READINGS  # one the baseline sets, so one the check runs without
    slos.unset_until_baseline(object(), _Plan())  # still unset: nothing to install again
    assert calls[-1] == ("check", None)
    assert slos.restore("the drill ended first") == []
    assert calls[-1] == ("install", 1.5)  # the calibration's, as a kept stack must be left
    assert slos.restore("again") == [] and calls[-1] == ("install", 1.5) and len(calls) == 4  # once only
