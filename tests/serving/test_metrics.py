"""Engine metrics reach a real Prometheus with vLLM's names, sane values and our labels."""
import json
import re
import shutil
import subprocess
import time

import httpx
import pytest

from services.serve import metric_names as names

pytestmark = pytest.mark.stack

SPEC_DECODE = {"spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
               "spec_decode_num_accepted_tokens_total"}


@pytest.fixture(scope="module")
def shared_prefix_traffic(stack):
    """6 s of shared-prefix traffic through `sandbox traffic --json`; the counters before and its summary."""
    # Earlier tests' requests (a probe, a request held through a replica's rebuild) must be done first.
    stack.wait_for("sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting)", lambda v: v == 0,
                   timeout_s=90)
    before = {"prompt": stack.settled("sum(vllm:prompt_tokens_total)"),
              "hits": stack.settled("sum(vllm:prefix_cache_hits_total)", quiet_s=0)}
    result = stack.cli("traffic", "--profile", "shared-prefix", "--rate", "4", "--duration", "6", "--seed", "3",
                       "--json")
    assert result.returncode == 0, result.stderr
    return before, json.loads(result.stdout)


def test_traffic_succeeds_end_to_end(shared_prefix_traffic):
    _, summary = shared_prefix_traffic
    assert summary["ok"] == summary["sent"] > 10 and summary["statuses"] == {"200": summary["ok"]}


def test_every_engine_metric_family_is_stored(stack, shared_prefix_traffic):
    missing = []
    for spec in names.SERVER_METRICS:
        if spec.name in SPEC_DECODE:  # exported once a speculative model is deployed (test_deploy)
            continue
        suffix = "_count" if spec.kind == "histogram" else ""
        if not stack.prom.query(f"{spec.query_name}{suffix}"):
            missing.append(spec.query_name)
    assert not missing


def test_spec_decode_counters_are_absent_without_a_draft_model(stack, shared_prefix_traffic):
    # As in vLLM: no speculative decoding, no spec-decode series.
    assert not stack.prom.query('{__name__=~"vllm:spec_decode.*"}')


def test_every_series_carries_model_replica_and_version(stack, shared_prefix_traffic):
    rows = stack.prom.query("vllm:num_requests_running")
    assert len(rows) == 2
    assert {r["metric"]["model_name"] for r in rows} == {stack.model}
    assert {r["metric"]["version"] for r in rows} == {stack.state.version}
    assert len({r["metric"]["replica"] for r in rows}) == 2
    finished = stack.prom.query("sum by (finished_reason) (vllm:request_success_total)")
    assert {r["metric"]["finished_reason"] for r in finished} >= {"length"}


def test_time_to_first_token_is_positive(stack, shared_prefix_traffic):
    assert stack.value("sum(vllm:time_to_first_token_seconds_count)") > 0
    assert stack.value("sum(vllm:time_to_first_token_seconds_sum)") > 0
    assert stack.value("sum(vllm:request_prefill_time_seconds_sum)") > 0


def test_prompt_token_counter_equals_the_prompt_tokens_sent(stack, shared_prefix_traffic):
    before, summary = shared_prefix_traffic
    sent = summary["prompt_tokens"]
    stack.wait_for("sum(vllm:prompt_tokens_total)", lambda v: v - before["prompt"] >= sent, timeout_s=10)
    stack.scraped_after()  # anything counted later than the traffic would show now
    assert stack.value("sum(vllm:prompt_tokens_total)") - before["prompt"] == sent


def test_a_shared_prefix_profile_hits_the_prefix_cache(stack, shared_prefix_traffic):
    before, _ = shared_prefix_traffic
    stack.wait_for("sum(vllm:prefix_cache_hits_total)", lambda v: v > before["hits"], timeout_s=10)


def test_client_side_metrics_are_scraped_from_the_traffic_generator(stack, shared_prefix_traffic):
    _, summary = shared_prefix_traffic
    # The generator has exited and its series have ended: read their last samples.
    ok = stack.value('sum(last_over_time(sandbox_traffic_requests_total{profile="shared-prefix", status="200"}[5m]))')
    assert ok == summary["ok"]
    ttft = 'sum(last_over_time(sandbox_traffic_time_to_first_token_seconds_count{profile="shared-prefix"}[5m]))'
    assert stack.value(ttft) == ok


def test_a_replica_side_change_shows_in_prometheus_within_5_seconds(stack):
    query = "sum(vllm:request_success_total)"
    before = stack.value(query)
    stack.openai().completions.create(model=stack.model, prompt="add: 1+1 -> ", max_tokens=2, temperature=0)
    _, waited = stack.wait_for(query, lambda v: v >= before + 1, timeout_s=10)
    assert waited <= 5.0


promtool = shutil.which("promtool")


@pytest.mark.skipif(promtool is None, reason="promtool not installed (scripts/setup.sh installs it)")
def test_every_scraped_endpoint_parses_and_ours_pass_lint(stack, tmp_path):
    # A traffic generator is scraped only while it runs: start one in the background for this check.
    log = tmp_path / "traffic.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*stack.cli_argv(), "traffic", "--profile", "short", "--rate", "1",
                                 "--duration", "15", "--json"], env=stack.env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 15
        while not [t for t in stack.prom.targets() if t["labels"]["job"] == "traffic" and t["health"] == "up"]:
            assert time.monotonic() < deadline, "the traffic generator never became a scraped target"
            time.sleep(0.5)
        problems = {}
        for target in stack.prom.targets():
            url = target["scrapeUrl"]
            text = httpx.get(url, timeout=10).content
            out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, check=False)
            report = (out.stdout + out.stderr).decode()
            if target["labels"]["job"] == "traffic":  # served by us: not even a lint remark
                if out.returncode != 0 or report.strip():
                    problems[url] = report
            elif re.search(r"error while linting|parsing error", report):
                problems[url] = report  # format errors, which Prometheus itself would reject
        assert not problems
    finally:
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"the traffic generator did not finish: {log.read_text()[-3000:]}") from None
