"""Incident scripts: a valid file loads into typed data; every malformed one is refused before anything
runs, naming FILE:LINE: field and reporting all its problems at once."""
from __future__ import annotations

import pytest

from incidents.schema import INJECTED, IncidentError, Rate, choose_variant, load_catalogue, load_incident
from tests.incidents.samples import VALID, edit, fake_faults, line_of, problem

pytestmark = pytest.mark.usefixtures("promtool")


def test_valid_incident_loads_into_typed_fields(write):
    incident = load_incident(write(VALID), fault_validator=fake_faults)
    assert incident.id == "ttft-after-deploy"
    assert incident.page.alert == "TimeToFirstTokenHigh" and incident.page.report is None
    assert incident.setup == {}
    assert (incident.traffic.profile, incident.traffic.rate) == ("shared-prefix", Rate(3.0))
    assert [(p.at_s, p.duration_s, p.rate) for p in incident.traffic.peaks] == [(150, 60, Rate(6.0))]
    tl = incident.timeline
    assert (tl.baseline_s, tl.inject_at_s, tl.jitter_s, tl.duration_s) == (90, 100, 15, 300)
    assert tl.events[0].at_s == 100 and tl.events[0].fault == {"type": "deploy", "set": {"default_max_tokens": 48}}
    assert list(incident.signals) == ["ttft_p99", "hit_rate", "prefill_p50"]
    assert incident.primary == "ttft_p99"
    assert list(incident.variants) == ["prefix-off", "prompts-grew"]
    prefix_off = incident.variants["prefix-off"]
    assert prefix_off.key == "prefix-off" and prefix_off.weight == 2
    assert prefix_off.faults == ({"type": "deploy", "set": {"engine.enable_prefix_caching": False}},)
    assert prefix_off.traffic is None
    assert prefix_off.signature == {"hit_rate": "down", "prefill_p50": "up"}
    answer = prefix_off.answer
    assert answer.root_cause == "prefix-caching-disabled"
    assert answer.remediation == ("rollback-deploy", "enable-prefix-caching")
    assert (answer.location.replica, answer.location.version, answer.location.component) == \
        (None, INJECTED, "prefix-cache")
    assert answer.evidence == ("hit_rate",)
    grew = incident.variants["prompts-grew"]
    assert (grew.traffic.profile, grew.traffic.rate_factor, grew.faults) == ("long-prompts", 1.0, ())


def test_minimal_incident_with_only_required_fields_loads(write):
    text = """\
id: quiet-shift
page: {alert: null, report: "responses feel slower"}
traffic: {profile: default, rate: 2}
timeline: {baseline_s: 60, inject_at_s: 60, duration_s: 120}
signals: {ttft_p99: 'histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))'}
primary: ttft_p99
variants:
  nothing:
    signature: {ttft_p99: flat}
    answer: {root_cause: no-fault, remediation: [no-action], evidence: [ttft_p99],
             location: {replica: null, version: null, component: null}}
"""
    incident = load_incident(write(text, "quiet-shift"), fault_validator=fake_faults)
    assert incident.page.alert is None and incident.page.report == "responses feel slower"
    assert incident.timeline.jitter_s == 0 and incident.timeline.events == ()
    assert incident.variants["nothing"].weight == 1 and incident.variants["nothing"].faults == ()


def test_missing_field_is_refused_at_its_parent(refused):
    text = edit(VALID, "  duration_s: 300\n", "")
    error, path = refused(text)
    p = problem(error, "timeline.duration_s")
    assert (p.file, p.line, p.message) == (str(path), line_of(text, "timeline:"), "missing required field")


def test_unknown_field_is_refused_with_a_close_match(refused):
    text = edit(VALID, "jitter_s: 15", "jitter: 15")
    error, _ = refused(text)
    p = problem(error, "timeline.jitter")
    assert p.line == line_of(text, "jitter: 15")
    assert p.message.startswith("unknown field 'jitter' (did you mean 'jitter_s'?)")


def test_unknown_fault_type_is_refused_through_the_fault_hook(refused):
    text = edit(VALID, "- type: deploy", "- type: foo")
    error, path = refused(text)
    assert f"{path}:{line_of(text, '- type: foo')}: variants.prefix-off.faults[0].type: unknown fault type 'foo'" \
        in str(error)


def test_bad_promql_signal_is_refused_with_the_parser_message(refused):
    text = edit(VALID, "prefix_cache_hits_total[30s]", "prefix_cache_hits_total[30x]")
    error, _ = refused(text)
    p = problem(error, "signals.hit_rate")
    assert p.line == line_of(text, "hit_rate: sum(")
    assert p.message.startswith("PromQL does not parse: ") and "bad duration syntax" in p.message


@pytest.mark.parametrize(("old", "new", "field"), [
    ("baseline_s: 90", "baseline_s: -5", "timeline.baseline_s"),
    ("{at_s: 150, duration_s: 60", "{at_s: -1, duration_s: 60", "traffic.peaks[0].at_s"),
    ("{at_s: 100, fault:", "{at_s: -3, fault:", "timeline.events[0].at_s"),
])
def test_negative_offset_is_refused(refused, old, new, field):
    text = edit(VALID, old, new)
    error, _ = refused(text)
    p = problem(error, field)
    assert p.line == line_of(text, new) and p.message.startswith("must be >= 0")


def test_injection_before_the_end_of_baseline_is_refused(refused):
    text = edit(VALID, "inject_at_s: 100", "inject_at_s: 60")
    error, _ = refused(text)
    p = problem(error, "timeline.inject_at_s")
    assert p.line == line_of(text, "inject_at_s: 60") and p.message.startswith("must be >= baseline_s (90), got 60")


def test_unknown_root_cause_is_refused_with_a_suggestion(refused):
    text = edit(VALID, "root_cause: prefix-caching-disabled", "root_cause: prefix-cache-off")
    error, path = refused(text)
    assert str(error) == (f"{path}:{line_of(text, 'prefix-cache-off')}: variants.prefix-off.answer.root_cause: "
                          "unknown root cause 'prefix-cache-off' (did you mean 'prefix-caching-disabled'?)")
    assert (error.file, error.line, error.field) == (str(path), line_of(text, "prefix-cache-off"),
                                                     "variants.prefix-off.answer.root_cause")


def test_unknown_remediation_is_refused_with_a_suggestion(refused):
    text = edit(VALID, "[rollback-deploy, enable-prefix-caching]", "[rollback, enable-prefix-caching]")
    error, _ = refused(text)
    p = problem(error, "variants.prefix-off.answer.remediation[0]")
    assert p.message == "unknown remediation 'rollback' (did you mean 'rollback-deploy'?)"


def test_signature_naming_an_undeclared_signal_is_refused(refused):
    text = edit(VALID, "      hit_rate: down\n", "      hit_rat: down\n")
    error, _ = refused(text)
    p = problem(error, "variants.prefix-off.signature.hit_rat")
    assert p.line == line_of(text, "hit_rat: down")
    assert p.message.startswith("'hit_rat' is not a declared signal (did you mean 'hit_rate'?)")


def test_evidence_must_be_a_declared_signal_with_an_expected_direction(refused):
    text = edit(VALID, "evidence: [hit_rate]", "evidence: [hit_rate, ttft_p99, nope]")
    error, _ = refused(text)
    assert "no expected direction in signature" in problem(error, "variants.prefix-off.answer.evidence[1]").message
    assert "is not a declared signal" in problem(error, "variants.prefix-off.answer.evidence[2]").message


def test_primary_must_be_a_declared_signal(refused):
    error, _ = refused(edit(VALID, "primary: ttft_p99", "primary: ttft_p98"))
    assert problem(error, "primary").message == "'ttft_p98' is not a declared signal (did you mean 'ttft_p99'?)"


def test_id_naming_a_root_cause_is_refused(refused):
    text = edit(VALID, "id: ttft-after-deploy", "id: kv-block-leak-at-peak")
    error, path = refused(text, "kv-block-leak-at-peak")
    assert str(error) == (f"{path}:2: id: 'kv-block-leak-at-peak' names the root cause 'kv-block-leak'; "
                          "incident ids name the symptom")


def test_id_must_equal_the_file_stem(refused):
    error, _ = refused(VALID, "ttft-regression")
    assert problem(error, "id").message == "'ttft-after-deploy' must equal the file name stem 'ttft-regression'"


@pytest.mark.parametrize(("old", "new", "field", "message"), [
    ("weight: 2", "weight: -1", "variants.prefix-off.weight", "must be >= 0, got -1"),
    ("profile: shared-prefix", "profile: shared-prefx", "traffic.profile", "unknown traffic profile 'shared-prefx'"),
    ("alert: TimeToFirstTokenHigh", "alert: Time To First", "page.alert", "'Time To First' is not an identifier"),
    ("{at_s: 150, duration_s: 60", "{at_s: 280, duration_s: 60", "traffic.peaks[0]",
     "peak ends at 340 s, after timeline.duration_s (300)"),
    ("version: injected", "version: v2", "variants.prefix-off.answer.location.version", "must be null"),
    ("replica: null, version: injected", "replica: injected, version: injected",
     "variants.prefix-off.answer.location.replica", "is 'injected' but no fault of this variant targets a replica"),
    ("hit_rate: down\n", "hit_rate: sideways\n", "variants.prefix-off.signature.hit_rate",
     "unknown direction 'sideways'; choose from up, down, flat"),
    ("traffic: {profile: long-prompts}", "traffic: {profile: long-prompts, rate: 2}",
     "variants.prompts-grew.traffic.rate", "unknown field 'rate'"),
    ("{at_s: 150, duration_s: 60, rate: 6.0}", "{at_s: 150, duration_s: 60, rate: 6.0, concurrency: 8}",
     "traffic.peaks[0]", "a peak needs exactly one of `rate` (requests/s) or `concurrency`"),
    ("{at_s: 150, duration_s: 60, rate: 6.0}", "{at_s: 150, duration_s: 60, concurrency: 2.5}",
     "traffic.peaks[0].concurrency", "must be a whole number of clients, got 2.5"),
    ("{at_s: 150, duration_s: 60, rate: 6.0}", "{at_s: 150, duration_s: 60, rate: 6.0, profile: docs}",
     "traffic.peaks[0].profile", "unknown traffic profile 'docs'"),
])
def test_malformed_value_is_refused_naming_line_and_field(refused, old, new, field, message):
    text = edit(VALID, old, new)
    error, _ = refused(text)
    p = problem(error, field)
    assert message in p.message
    assert p.line == line_of(text, new.strip().split("\n")[0].split(",")[0])


def test_page_without_an_alert_needs_a_report(refused):
    text = edit(VALID, "alert: TimeToFirstTokenHigh", "alert: null")
    error, _ = refused(text)
    p = problem(error, "page.report")
    assert p.line == line_of(text, "page:") and p.message.startswith("a page with no alert (alert: null) needs a report")


def test_setup_is_checked_as_the_settings_of_a_deploy(refused):
    text = edit(VALID, "traffic:\n  profile", "setup:\n  engine.bogus_knob: 3\ntraffic:\n  profile")
    error, _ = refused(text)
    p = problem(error, "setup.engine.bogus_knob")
    assert (p.line, p.message) == (line_of(text, "engine.bogus_knob"), "unknown setting")


def test_every_problem_is_reported_at_once_in_line_order(refused):
    text = edit(edit(VALID, "rate: 3.0", "rate: -3.0"), "root_cause: prompt-length-shift", "root_cause: nope")
    error, path = refused(text)
    lines = str(error).splitlines()
    assert lines == [f"{path}:{line_of(text, 'rate: -3.0')}: traffic.rate: must be > 0, got -3.0",
                     (f"{path}:{line_of(text, 'root_cause: nope')}: variants.prompts-grew.answer.root_cause: "
                      "unknown root cause 'nope'")]
    assert [p.field for p in error.problems] == ["traffic.rate", "variants.prompts-grew.answer.root_cause"]


@pytest.mark.parametrize(("text", "line", "message"), [
    ("id: x\npage: [\n", 3, "YAML syntax: "),
    ("id: a\nid: b\n", 2, "id: duplicate key"),
    ("- just a list\n", 1, "expected a mapping, got list"),
])
def test_broken_yaml_is_refused_with_its_line(refused, text, line, message):
    error, path = refused(text)
    assert str(error.problems[0]).startswith(f"{path}:{line}: {message}")


def test_catalogue_loads_every_file_by_id_and_reports_all_files_problems(tmp_path):
    (tmp_path / "ttft-after-deploy.yaml").write_text(VALID)
    assert list(load_catalogue(tmp_path, fault_validator=fake_faults)) == ["ttft-after-deploy"]
    (tmp_path / "a-broken.yaml").write_text(VALID)
    (tmp_path / "z-broken.yaml").write_text(VALID)
    with pytest.raises(IncidentError) as info:
        load_catalogue(tmp_path, fault_validator=fake_faults)
    assert [(p.file, p.field) for p in info.value.problems] == [(str(tmp_path / "a-broken.yaml"), "id"),
                                                                (str(tmp_path / "z-broken.yaml"), "id")]


def test_the_shipped_catalogue_loads():
    catalogue = load_catalogue("incidents")
    assert all(incident.id == key for key, incident in catalogue.items())


def test_choose_variant_is_deterministic_per_seed(write):
    first = load_incident(write(VALID), fault_validator=fake_faults)
    again = load_incident(write(VALID), fault_validator=fake_faults)
    assert [choose_variant(first, s).key for s in range(50)] == [choose_variant(again, s).key for s in range(50)]
    assert choose_variant(first, 7) is first.variants[choose_variant(first, 7).key]


def test_choose_variant_covers_every_variant_by_weight(write):
    incident = load_incident(write(VALID), fault_validator=fake_faults)
    keys = [choose_variant(incident, seed).key for seed in range(300)]
    assert set(keys) == {"prefix-off", "prompts-grew"}
    assert 0.55 < keys.count("prefix-off") / len(keys) < 0.78  # weights 2 : 1


def test_a_variant_of_weight_zero_is_never_drawn_but_loads_for_a_run_by_name(write):
    incident = load_incident(write(edit(VALID, "weight: 2", "weight: 0")), fault_validator=fake_faults)
    assert incident.variants["prefix-off"].weight == 0 and not incident.variants["prefix-off"].drawn
    assert {choose_variant(incident, seed).key for seed in range(300)} == {"prompts-grew"}


def test_an_incident_whose_every_variant_has_weight_zero_is_refused(write):
    text = edit(edit(VALID, "weight: 2", "weight: 0"), "weight: 1", "weight: 0")
    with pytest.raises(IncidentError) as error:
        load_incident(write(text), fault_validator=fake_faults)
    assert problem(error.value, "variants").message == \
        "every variant has weight 0: at least one must be drawn (weight > 0)"


def test_fault_errors_carrying_a_field_attribute_point_at_that_field(write):
    class InvalidFault(ValueError):
        def __init__(self, field: str, message: str):
            super().__init__(f"{field}: {message}")
            self.field = field

    def faults(spec):
        if "engine.enable_prefix_caching" in spec.get("set", {}):
            raise InvalidFault("set.engine.enable_prefix_caching", "unknown setting")

    path = write(VALID)
    with pytest.raises(IncidentError) as info:
        load_incident(path, fault_validator=faults)
    assert str(info.value) == (f"{path}:{line_of(VALID, 'engine.enable_prefix_caching')}: "
                               "variants.prefix-off.faults[0].set.engine.enable_prefix_caching: unknown setting")
