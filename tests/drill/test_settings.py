"""A drill's settings are one validated dataclass: a bad value is refused before anything starts."""
import pytest

from sandbox.drill.settings import DrillSettings


def test_the_defaults_are_a_headless_drill_that_stops_its_own_stack():
    assert DrillSettings() == DrillSettings(duration_s=None, keep_up=False, poll_s=1.0, open_ended=False, mode="drill")


@pytest.mark.parametrize("kwargs, message", [({"mode": "exam"}, "mode must be drill or interview, got 'exam'"),
                                             ({"poll_s": 0}, "poll_s must be > 0, got 0")])
def test_a_bad_setting_is_refused_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        DrillSettings(**kwargs)
