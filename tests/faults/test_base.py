"""The fault life cycle: inject once, revert whatever happened (even after a failed inject), revert all."""
import random
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from faults.base import Fault, FaultContext, InjectionFailed, Location, revert_all
from services.stack.settings import SandboxConfig
from services.stack.state import StackState


@dataclass
class Recorder(Fault):
    """A fault that only writes down what it was asked to do (the life cycle, without a stack)."""
    type: ClassVar[str] = "recorder"
    name: str
    fail_inject: bool = False
    fail_revert: bool = False
    journal: list = field(default_factory=list)

    def _inject(self, ctx):
        self.journal.append(f"inject {self.name}")
        self._location = Location(replica=self.name)
        if self.fail_inject:
            raise OSError("refused halfway")

    def _revert(self, ctx):
        self.journal.append(f"revert {self.name}")
        if self.fail_revert:
            raise OSError("cannot undo")


@pytest.fixture
def ctx(tmp_path):
    logged = []
    ctx = FaultContext(SandboxConfig(home=tmp_path), StackState("run", str(tmp_path)), random.Random(3),
                       logged.append)
    ctx.logged = logged
    return ctx


def test_inject_twice_injects_once_and_returns_the_same_location(ctx):
    fault = Recorder("a")
    assert fault.inject(ctx) == Location(replica="a") == fault.inject(ctx) == fault.location()
    assert fault.journal == ["inject a"] and fault.injected


def test_revert_twice_reverts_once_and_revert_without_inject_does_nothing(ctx):
    fault = Recorder("a")
    fault.revert(ctx)
    fault.inject(ctx)
    fault.revert(ctx)
    fault.revert(ctx)
    assert fault.journal == ["inject a", "revert a"] and not fault.injected


def test_a_failed_inject_raises_injection_failed_and_is_still_reverted(ctx):
    fault = Recorder("a", fail_inject=True)
    with pytest.raises(InjectionFailed, match="recorder: OSError: refused halfway"):
        fault.inject(ctx)
    assert fault.injected
    fault.revert(ctx)
    assert fault.journal == ["inject a", "revert a"]


def test_revert_all_goes_newest_first_and_collects_every_error(ctx):
    journal = []
    a, b, c = (Recorder(n, fail_revert=n != "b", journal=journal) for n in "abc")
    for fault in (a, b, c):
        fault.inject(ctx)
    errors = revert_all([a, b, c], ctx)
    assert journal == ["inject a", "inject b", "inject c", "revert c", "revert b", "revert a"]
    assert errors == ["recorder: OSError: cannot undo"] * 2
    assert a.injected and not b.injected and c.injected  # a failed revert can be tried again
    assert len(ctx.logged) == 2


def test_location_to_dict_has_the_diagnosis_keys():
    assert Location("r1", "v2", "cpu").to_dict() == {"replica": "r1", "version": "v2", "component": "cpu"}
