"""A drill ended by a signal before its run began (while its stack starts) ends as interrupted, with no run to
name and nothing recorded, rather than failing on the record it never made (found by bench/churn.py: a SIGTERM
3 s after `sandbox drill --random` printed "drill failed: 'NoneType' object has no attribute 'dir'")."""
from __future__ import annotations

from pathlib import Path

import pytest

from incidents.promql import PromtoolNotFound
from incidents.schema import load_catalogue
from sandbox.drill.interrupts import DrillInterrupted
from sandbox.drill.runner import Drill
from services.stack.settings import SandboxConfig

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
