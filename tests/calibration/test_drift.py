"""A cached calibration against the stack's capacity now (sandbox/calibration/drift.py): when a move counts,
and what scaling keeps. The measurement itself runs on the suite's stack: tests/serving/test_calibrate.py."""
import pytest

from sandbox.calibration.capacity import Calibration, ProfileCapacity
from sandbox.calibration.drift import TOLERANCE, Drift, drifted, scaled
from sandbox.calibration.sweep import Sweeper
from sandbox.calibration.sweep_point import SweepConfig, SweepPoint


def _point(phase: str, rate: float) -> SweepPoint:
    return SweepPoint(phase, 64.0, 100, 0, rate, 0.5, 1.0, 0.02, 0.1, 400.0, 0.03)


def _calibration() -> Calibration:
    profiles = {"default": ProfileCapacity("default", _point("single", 2.0), _point("ceiling", 20.0), 10.0,
                                           _point("busy", 11.0)),
                "long-tail": ProfileCapacity("long-tail", None, _point("ceiling", 16.0), 8.0, _point("busy", 8.8))}
    return Calibration({"machine": "m"}, 1.0, 75.0, "default", 0.5, 10.0, profiles, (_point("busy", 11.0),),
                       {"sandbox:threshold:ttft_p99_seconds": 2.0})


def test_a_move_counts_only_past_the_tolerance_either_way():
    assert TOLERANCE == 0.15
    assert not drifted("default", 20.0, 22.9).applied  # 1.145: within
    assert not drifted("default", 20.0, 17.1).applied  # 0.855: within
    assert drifted("default", 20.0, 23.1).applied
    assert drifted("default", 20.0, 16.9).applied
    assert drifted("default", 20.0, 12.0).applied
    assert drifted("default", 20.0, 12.0).factor == pytest.approx(0.6)


def test_scaling_moves_every_ceiling_and_knee_and_keeps_the_shares_and_thresholds():
    cal = _calibration()
    slow = scaled(cal, 0.5)
    assert slow.ceilings() == {"default": 10.0, "long-tail": 8.0}
    assert slow.knees() == {"default": 5.0, "long-tail": 4.0}
    assert slow.knee_share == cal.knee_share and slow.thresholds == cal.thresholds and slow.key == cal.key
    assert slow.profiles["default"].single == cal.profiles["default"].single  # one at a time is not capacity
    assert cal.ceilings() == {"default": 20.0, "long-tail": 16.0}  # the cached one is untouched
    with pytest.raises(ValueError, match="scale factor"):
        scaled(cal, 0.0)


def test_a_drift_says_what_it_measured_and_what_the_drill_does_with_it():
    d = drifted("default", 24.4, 14.6, 14.8)
    assert d.to_dict() == {"profile": "default", "cached_ceiling_rps": 24.4, "ceiling_now_rps": 14.7,
                           "readings_rps": [14.6, 14.8], "factor": 0.602, "applied": True}
    assert d.describe() == ("the stack completes 0.60x the requests its calibration measured (14.6 and 14.8 "
                            "against 24.4 req/s): this drill's load is scaled to it")
    assert drifted("default", 20.0, 19.0).describe().endswith("within 15%, the calibration stands")
    assert drifted("default", 20.0, 13.0, 19.0).describe().endswith(
        "a second reading did not confirm the first, the calibration stands")
    with pytest.raises(ValueError, match="positive"):
        Drift("default", 20.0, (0.0,), False)
    with pytest.raises(ValueError, match="positive"):
        Drift("default", 20.0, (), False)


def test_a_move_is_applied_only_where_every_reading_moved_past_the_tolerance_the_same_way():
    assert drifted("default", 18.76, 13.0).applied  # one reading: what the check asks a second one about
    assert not drifted("default", 18.76, 13.0, 17.0).applied  # the second within: the host, not the stack
    assert not drifted("default", 20.0, 16.0, 24.0).applied  # past it both ways: nothing to scale to
    both = drifted("default", 20.0, 16.0, 16.4)
    assert both.applied and both.factor == pytest.approx(0.81)  # scaled to their mean


def test_a_ceiling_window_outside_one_second_to_two_minutes_is_refused_before_any_request():
    from incidents.profiles import get_profile

    sweeper = Sweeper("http://127.0.0.1:9", "m")  # nothing listens: a request would fail, not the check
    for bad in (0.5, 121.0):
        with pytest.raises(ValueError, match="ceiling window"):
            sweeper.ceiling(get_profile("default"), window_s=bad)


def test_the_check_asks_a_second_reading_before_it_moves_the_load(monkeypatch):
    """recheck's decisions, its readings given in turn (the readings themselves: tests/serving/test_calibrate.py)."""
    import io

    from rich.console import Console

    from sandbox.calibration import drift
    from services.stack.progress import Steps

    def run(*readings):
        given = list(readings)
        monkeypatch.setattr(drift, "measure_ceiling", lambda state, cal, sweep, seed=0: given.pop(0))
        printed = io.StringIO()
        cal, found = drift.recheck(None, _calibration(), SweepConfig(), Steps(Console(file=printed, width=300)))
        assert not given  # every reading asked for was taken, and no more
        return cal, found, printed.getvalue()

    cal, found, text = run(19.0)  # within: one reading
    assert found.readings == (19.0,) and not found.applied and cal.ceilings()["default"] == 20.0
    cal, found, text = run(13.0, 19.5)  # moved, then not: the calibration stands
    assert found.readings == (13.0, 19.5) and not found.applied and cal.ceilings()["default"] == 20.0
    assert "measuring once more" in text and "did not confirm" in text
    cal, found, text = run(13.0, 14.0)  # moved twice: scaled to their mean
    assert found.applied and cal.ceilings() == {"default": 13.5, "long-tail": 10.8}
