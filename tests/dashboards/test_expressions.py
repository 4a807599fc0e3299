"""How dashboard and rule expressions are made concrete for the live check (tests/serving/test_dashboard_queries.py)."""
import math

import pytest

from incidents.promql import check_many
from sandbox.grafana.expressions import (
    Expression,
    concrete,
    dashboard_expressions,
    returns_data,
    rule_expressions,
    variable_query,
    with_bool,
)
from sandbox.grafana.push import board_files
from services.stack.alerts import alert_names, rule_files


def test_grafana_variables_become_match_all_and_a_one_minute_window():
    expr = 'rate(x{model_name=~"$model", replica=~"${replica}"}[$__rate_interval])'
    assert concrete(expr) == 'rate(x{model_name=~".*", replica=~".*"}[1m])'


def test_a_label_values_variable_becomes_the_series_query_grafana_runs():
    assert variable_query('label_values(vllm:num_requests_running{model_name=~"$model"}, replica)') == \
        'group by (replica) (vllm:num_requests_running{model_name=~".*"})'
    with pytest.raises(ValueError, match="label_values"):
        variable_query("query_result(up)")


def test_comparisons_get_bool_and_label_matchers_do_not():
    expr = 'sum(rate(r{status!~"200|499", a!="b", c="d>e"}[1m])) / sum(rate(r[1m])) > scalar(t) and x >= bool 2'
    assert with_bool(expr) == ('sum(rate(r{status!~"200|499", a!="b", c="d>e"}[1m])) / sum(rate(r[1m])) '
                               '> bool scalar(t) and x >= bool 2')
    assert with_bool("a == b or c != d or e <= f") == "a == bool b or c != bool d or e <= bool f"


def test_only_numbers_count_as_data():
    assert returns_data([{"metric": {}, "value": [1.0, "0"]}])
    assert not returns_data([])
    assert not returns_data([{"metric": {}, "value": [1.0, "NaN"]}, {"metric": {}, "value": [1.0, "+Inf"]}])
    assert math.isnan(float("NaN"))


def test_a_variable_left_in_an_expression_is_refused():
    with pytest.raises(ValueError, match="variable is left"):
        Expression("board: panel", "panel", "rate(x[$__range])")


def test_every_dashboard_and_rule_expression_parses_once_concrete():
    exprs = [e for p in board_files() for e in dashboard_expressions(p)] + \
            [e for p in rule_files() for e in rule_expressions(p)]
    kinds = {k: sum(e.kind == k for e in exprs) for k in ("panel", "variable", "rule")}
    assert kinds["panel"] >= 50 and kinds["variable"] == 3 * len(board_files()) and kinds["rule"] >= 20
    errors = {e.source: err for e, err in zip(exprs, check_many([e.promql for e in exprs])) if err}
    assert not errors


def test_every_alert_condition_is_checked_in_its_bool_form():
    checked = {e.source.split(": ", 1)[1] for p in rule_files() for e in rule_expressions(p) if " bool " in e.promql}
    assert checked == set(alert_names()) - {"ReplicaRestarted"}  # it compares nothing: `and` of two event rules
