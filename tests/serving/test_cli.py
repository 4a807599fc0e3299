"""`sandbox status` and `sandbox query` against the running stack."""
import json

import pytest

pytestmark = pytest.mark.stack


def test_status_lists_the_replicas_and_healthy_targets(stack):
    result = stack.cli("status", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["application"] == "RUNNING"
    server = report["deployments"]["LLMServer"]
    assert server["status"] == "HEALTHY" and [r["state"] for r in server["replicas"]] == ["RUNNING"] * 2
    jobs = {t["job"] for t in report["targets"] if t["health"] == "up"}
    assert {"ray", "prometheus"} <= jobs
    assert report["urls"]["api"].endswith("/v1")


def test_query_prints_prometheus_rows_as_json(stack):
    result = stack.cli("query", "count by (replica) (vllm:num_requests_waiting)", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 2 and all(r["value"][1] == "1" for r in rows)


def test_a_bad_query_is_a_clear_error(stack):
    result = stack.cli("query", "sum(rate(vllm:prompt_tokens_total[5m]")
    assert result.returncode == 1 and "error" in result.stderr.lower()


def test_a_second_up_refuses_to_start(stack):
    result = stack.cli("up")
    assert result.returncode == 1 and "already up" in result.stderr
