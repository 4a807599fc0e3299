"""Rates in capacity units: `rate: 0.6 knee` is a fraction of the profile's calibrated knee, a plain number
stays requests/s, anything else is refused naming FILE:LINE: field; knee_profiles lists the knees to measure."""
from __future__ import annotations

import pytest

from incidents.schema import KNEE, Rate, knee_profiles, load_incident
from tests.incidents.samples import VALID, edit, fake_faults, line_of

pytestmark = pytest.mark.usefixtures("promtool")

PEAK = "{at_s: 150, duration_s: 60, rate: 6.0}"
HOW = (": write requests/s as a plain number, or a fraction of the profile's knee as '<number> knee' "
       "(or of its ceiling as '<number> ceiling')")
NOT_A_RATE = "expected a number (requests/s) or '<number> knee' (a fraction of the profile's knee), got string "


@pytest.mark.parametrize("written", ["0.6 knee", "0.6knee", '"0.6 knee"'])
def test_a_knee_rate_loads_with_or_without_the_space(write, written):
    incident = load_incident(write(edit(VALID, "rate: 3.0", f"rate: {written}")), fault_validator=fake_faults)
    assert incident.traffic.rate == Rate(0.6, KNEE)
    assert str(incident.traffic.rate) == "0.6 knee"


def test_a_peak_rate_may_be_written_in_knee_units_beside_an_absolute_base(write):
    text = edit(VALID, PEAK, "{at_s: 150, duration_s: 60, rate: 1.5knee, profile: documents}")
    incident = load_incident(write(text), fault_validator=fake_faults)
    assert incident.traffic.rate == Rate(3.0) and str(incident.traffic.rate) == "3.0"
    assert [(p.rate, p.profile) for p in incident.traffic.peaks] == [(Rate(1.5, KNEE), "documents")]


@pytest.mark.parametrize(("old", "new", "field", "message"), [
    ("rate: 3.0", "rate: 0.6 kne", "traffic.rate", "unknown rate unit 'kne' (did you mean 'knee'?)" + HOW),
    ("rate: 3.0", "rate: 2 rps", "traffic.rate", "unknown rate unit 'rps'" + HOW),
    ("rate: 3.0", "rate: 0 knee", "traffic.rate", "must be > 0, got '0 knee'"),
    ("rate: 3.0", "rate: -0.5 knee", "traffic.rate", "must be > 0, got '-0.5 knee'"),
    ("rate: 3.0", "rate: knee", "traffic.rate", NOT_A_RATE + "'knee'"),
    ("rate: 3.0", 'rate: "3.0"', "traffic.rate", NOT_A_RATE + "'3.0'"),
    ("rate: 3.0", "rate: 0", "traffic.rate", "must be > 0, got 0"),
    (PEAK, "{at_s: 150, duration_s: 60, rate: 0.0knee}", "traffic.peaks[0].rate", "must be > 0, got '0.0knee'"),
    (PEAK, "{at_s: 150, duration_s: 60, rate: 2 knees}", "traffic.peaks[0].rate",
     "unknown rate unit 'knees' (did you mean 'knee'?)" + HOW),
])
def test_a_rate_that_is_neither_a_number_nor_a_knee_fraction_is_refused_naming_line_and_field(
        refused, old, new, field, message):
    text = edit(VALID, old, new)
    error, path = refused(text)
    assert str(error) == f"{path}:{line_of(text, new)}: {field}: {message}"


def test_a_rate_factor_stays_a_plain_factor(refused):
    text = edit(VALID, "traffic: {profile: long-prompts}", "traffic: {profile: long-prompts, rate_factor: 2 knee}")
    error, path = refused(text)
    assert str(error) == (f"{path}:{line_of(text, 'rate_factor')}: variants.prompts-grew.traffic.rate_factor: "
                          "expected a number, got string '2 knee'")


def test_knee_profiles_lists_the_profiles_whose_knee_a_catalogue_needs(write):
    absolute = load_incident(write(VALID), fault_validator=fake_faults)
    # a knee base rate takes the traffic's profile, never the decoy's (prompts-grew: long-prompts)
    base = load_incident(write(edit(VALID, "rate: 3.0", "rate: 0.5 knee")), fault_validator=fake_faults)
    # a knee peak with its own profile takes that profile's knee; one without, the traffic's
    peaks = edit(edit(edit(VALID, "profile: shared-prefix", "profile: default"), PEAK,
                      "{at_s: 150, duration_s: 20, rate: 2 knee, profile: documents}\n"
                      "    - {at_s: 200, duration_s: 20, rate: 1.5 knee}\n"
                      "    - {at_s: 240, duration_s: 20, rate: 9.0, profile: short}"), "rate: 3.0", "rate: 1.0")
    mixed = load_incident(write(peaks), fault_validator=fake_faults)
    assert knee_profiles([]) == [] and knee_profiles([absolute]) == []
    assert knee_profiles([base]) == ["shared-prefix"]
    assert knee_profiles([mixed]) == ["default", "documents"]
    assert knee_profiles({"a": absolute, "b": base, "c": mixed}.values()) == ["default", "documents", "shared-prefix"]


def test_a_rate_per_second_is_its_value_or_the_fraction_of_the_profiles_knee():
    knees = {"shared-prefix": 4.0}
    assert Rate(2.5).per_second({}, "default") == 2.5
    assert Rate(0.75, KNEE).per_second(knees, "shared-prefix") == 3.0
    with pytest.raises(ValueError, match="no calibrated knee for traffic profile 'documents'"):
        Rate(0.75, KNEE).per_second(knees, "documents")
    with pytest.raises(ValueError, match="the knee of traffic profile 'shared-prefix' must be .* > 0, got 0"):
        Rate(0.75, KNEE).per_second({"shared-prefix": 0}, "shared-prefix")


@pytest.mark.parametrize(("value", "unit", "message"), [
    (0, None, "value: must be a finite number > 0, got 0"),
    (-0.5, KNEE, "value: must be a finite number > 0, got -0.5"),
    (float("inf"), None, "value: must be a finite number > 0, got inf"),
    (True, None, "value: must be a finite number > 0, got True"),
    (0.5, "rps", "unit: must be None (requests/s), 'knee' or 'ceiling', got 'rps'"),
])
def test_a_rate_out_of_range_is_a_value_error(value, unit, message):
    with pytest.raises(ValueError) as info:
        Rate(value, unit)
    assert str(info.value) == message


def test_a_ceiling_rate_resolves_against_the_ceilings_and_is_its_own_unit(tmp_path):
    rate = Rate(1.3, "ceiling")
    assert str(rate) == "1.3 ceiling"
    assert rate.per_second({"default": 4.0}, "default", {"default": 5.0}) == pytest.approx(6.5)
    with pytest.raises(ValueError, match="no calibrated ceiling for traffic profile 'default'"):
        rate.per_second({"default": 4.0}, "default")
