"""A drill ended by a signal before its run began (while its stack starts) ends as interrupted, with no run to
name and nothing recorded, rather than failing on the record it never made (found by bench/churn.py: a SIGTERM
3 s after `sandbox drill --random` printed "drill failed: 'NoneType' object has no attribute 'dir'")."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from faults.base import Fault, FaultContext, Location

from incidents.promql import PromtoolNotFound
from incidents.schema import load_catalogue
from sandbox.drill.interrupts import DrillInterrupted
from sandbox.drill.runner import Drill
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quiet_shift():
    try:
        return load_catalogue(REPO / "incidents")["quiet-shift"]
    except PromtoolNotFound as e:
        pytest.skip(str(e))


def test_a_signal_while_the_stack_starts_ends_the_drill_interrupted_with_no_run_and_nothing_recorded(
        quiet_shift, tmp_path, monkeypatch):
    def signalled(self):  # what raise_interrupted does when SIGTERM comes during `sandbox up`
        raise DrillInterrupted("signal 15")

    monkeypatch.setattr(Drill, "_stack", signalled)
    cfg = SandboxConfig(home=tmp_path / "home", runs=tmp_path / "runs")
    result = Drill(cfg, quiet_shift, "nothing", 7).run()
    assert (result.status, result.run_id, result.run_dir, result.error) == ("interrupted", None, None, "interrupted")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@dataclass
class SignalledMidway(Fault):
    """A fault whose injection is cut by SIGTERM halfway (what raise_interrupted does during a deploy)."""
    type: ClassVar[str] = "signalled-midway"

    def _inject(self, ctx):
        self._location = Location(replica="0")
        raise DrillInterrupted("signal 15")

    def _revert(self, ctx):
        pass


def test_a_signal_mid_injection_reaches_the_drill_as_the_signal_not_as_a_failed_injection(tmp_path):
    ctx = FaultContext(SandboxConfig(home=tmp_path), StackState("run", str(tmp_path)), random.Random(1),
                       lambda line: None)
    fault = SignalledMidway()
    with pytest.raises(DrillInterrupted, match="signal 15"):
        fault.inject(ctx)
    assert fault.injected  # what it did before the signal is still reverted
