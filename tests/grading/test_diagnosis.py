"""The diagnosis format: what parses, and errors that name the file, line and field."""
import json

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.grading.diagnosis import DiagnosisError, json_schema, load_diagnosis, parse_diagnosis

GOOD = """\
run: 20261130-103425-quality-regression
root_cause: weight-quantization-too-coarse
location: {replica: null, version: v2, component: weights}
evidence:
  - query: min(sum by (task) (rate(sandbox_canary_checks_total{result="correct"}[1m])))
    observation: add accuracy fell from 1.0 to 0.77 after v2
hypotheses:
  - root_cause: kv-cache-quantization
    ruled_out_by: sum(rate(sandbox_canary_checks_total{length="long",result="wrong"}[1m]))
remediation: [rollback-deploy, requantize-finer]
summary: v2's weights are quantized too coarsely; roll back.
"""


def problems(text: str) -> list[tuple[int, str, str]]:
    with pytest.raises(DiagnosisError) as e:
        parse_diagnosis(text, "d.yaml")
    return [(p.line, p.field, p.message) for p in e.value.problems]


def test_a_complete_diagnosis_parses_into_its_fields():
    d = parse_diagnosis(GOOD)
    assert d.root_cause == "weight-quantization-too-coarse"
    assert (d.location.replica, d.location.version, d.location.component) == (None, "v2", "weights")
    assert d.evidence[0].observation.startswith("add accuracy")
    assert d.hypotheses[0].root_cause == "kv-cache-quantization"
    assert d.remediation == ("rollback-deploy", "requantize-finer")


def test_json_is_accepted_as_well_as_yaml(tmp_path):
    import yaml

    path = tmp_path / "d.json"
    path.write_text(json.dumps(yaml.safe_load(GOOD)))
    assert load_diagnosis(path) == parse_diagnosis(GOOD)


def test_a_single_remediation_id_is_a_list_of_one():
    assert parse_diagnosis(GOOD.replace("[rollback-deploy, requantize-finer]", "rollback-deploy")).remediation == (
        "rollback-deploy",)


def test_missing_fields_are_each_named():
    fields = {f for _, f, m in problems("run: r\nroot_cause: no-fault\n") if m == "missing (required)"}
    assert fields == {"location", "evidence", "hypotheses", "remediation", "summary"}


def test_an_unknown_root_cause_is_named_with_its_line_and_the_closest_id():
    (line, field, message), = problems(GOOD.replace("too-coarse", "too-corse"))
    assert (line, field) == (2, "root_cause")
    assert "'weight-quantization-too-coarse'" in message


def test_unknown_ids_inside_lists_name_their_index():
    bad = GOOD.replace("root_cause: kv-cache-quantization", "root_cause: kv-quant").replace(
        "[rollback-deploy, requantize-finer]", "[rollback-deploy, reboot]")
    assert {f for _, f, _ in problems(bad)} == {"hypotheses[0].root_cause", "remediation[1]"}


def test_a_query_that_does_not_parse_is_refused_with_the_parser_message():
    (line, field, message), = problems(GOOD.replace('[1m])))\n    observation', '[1m])\n    observation'))
    assert (line, field) == (5, "evidence[0].query")
    assert "PromQL does not parse" in message


def test_unknown_fields_are_refused_rather_than_ignored():
    found = problems(GOOD.replace("component: weights", "componnt: weights") + "confidence: high\n")
    assert {f for _, f, _ in found} == {"location.componnt", "confidence"}


def test_a_document_that_is_not_a_mapping_is_refused():
    (_, field, message), = problems("- just\n- a list\n")
    assert field == "" and "mapping" in message


def test_the_schema_accepts_the_example_and_lists_every_taxonomy_id():
    import yaml
    from incidents import taxonomy

    schema = json_schema()
    assert schema["properties"]["root_cause"]["enum"] == [t.id for t in taxonomy.ROOT_CAUSES]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(GOOD), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**yaml.safe_load(GOOD), "root_cause": "nope"}, schema)


def test_the_check_command_exits_2_and_names_the_field(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(GOOD.replace("rollback-deploy,", "rollback,"))
    result = CliRunner().invoke(app, ["diagnose", "--check", str(path), "--json"])
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out["valid"] is False and out["problems"][0]["field"] == "remediation[0]"
    path.write_text(GOOD)
    assert CliRunner().invoke(app, ["diagnose", "--check", str(path)]).exit_code == 0


def test_taxonomy_json_lists_root_causes_and_remediations():
    result = CliRunner().invoke(app, ["taxonomy", "--json"])
    data = json.loads(result.stdout)
    assert "no-fault" in [t["id"] for t in data["root_causes"]]
    assert "scale-out" in [t["id"] for t in data["remediations"]]


def test_a_component_is_an_id_from_the_closed_list_in_any_case_or_spacing():
    assert parse_diagnosis(GOOD.replace("component: weights", "component: Weights")).location.component == "weights"
    assert parse_diagnosis(GOOD.replace("component: weights", "component: KV cache")).location.component == "kv-cache"
    (line, field, message), = problems(GOOD.replace("component: weights", "component: the weight files"))
    assert (line, field) == (3, "location.component")
    assert message.startswith("unknown component 'the weight files'") and "the components are prefix-cache" in message


def test_the_schema_offers_the_components_and_null():
    from incidents import taxonomy

    enum = json_schema()["properties"]["location"]["properties"]["component"]["enum"]
    assert enum == [c.id for c in taxonomy.COMPONENTS] + [None]


def test_malformed_promql_is_refused_naming_the_query_with_exit_2(tmp_path):
    bad = GOOD.replace('rate(sandbox_canary_checks_total{result="correct"}[1m])', "rate(sandbox_canary_checks_total[1q])")
    path = tmp_path / "d.yaml"
    path.write_text(bad)
    result = CliRunner().invoke(app, ["diagnose", "--check", str(path)])
    assert result.exit_code == 2
    assert "evidence[0].query: PromQL does not parse" in result.output
    assert "rate(sandbox_canary_checks_total[1q])" in result.output
    graded = CliRunner().invoke(app, ["grade", str(tmp_path), "--diagnosis", str(path)])
    assert graded.exit_code == 2 and "rate(sandbox_canary_checks_total[1q])" in graded.output


def test_taxonomy_lists_the_components_and_the_quantities():
    listed = CliRunner().invoke(app, ["taxonomy"])
    assert "Components (location.component, or null)" in listed.output and "prefix-cache" in listed.output
    data = json.loads(CliRunner().invoke(app, ["taxonomy", "--json"]).stdout)
    assert {"id": "capacity", "description": data["components"][-1]["description"], "in_stack": False} == \
        data["components"][-1]
    quantities = json.loads(CliRunner().invoke(app, ["taxonomy", "--quantities", "--json"]).stdout)
    assert quantities[0]["id"] == "request-rate" and "prefix-cache-hit-rate" in [q["id"] for q in quantities]
