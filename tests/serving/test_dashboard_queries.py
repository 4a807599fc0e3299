"""Every PromQL expression of every dashboard panel, template variable and rule returns data from the real
Prometheus of a live stack under traffic (sandbox/grafana/expressions.py says how each is made concrete).

What the stack is made to do first, so that each signal exists as it would in production:
  - traffic through the API with the traffic generator's exporter scraped (client-side series),
  - the canary prober running (accuracy and consistency series),
  - speculative decoding deployed (test_deploy leaves it so; run alone, this module deploys it),
  - one replica killed with SIGKILL and replaced by Serve (health-check failures, replica starts:
    the restart rules and panels). This module runs last before the teardown for that reason.
The fixture takes about a minute; every expression is then queried, and a test lists the empty ones.
"""
import asyncio
import os
import signal
import threading
import time

import pytest

from incidents.profiles import PROFILES
from sandbox.canary import process
from sandbox.grafana.expressions import dashboard_expressions, returns_data, rule_expressions
from sandbox.grafana.push import board_files
from sandbox.traffic.exporter import TrafficExporter
from sandbox.traffic.generator import run_traffic
from services.model.paths import target_path
from services.stack.alerts import rule_files
from services.stack.deployer import deploy_changes
from services.stack.serve_control import ServeControl, running_replicas

pytestmark = pytest.mark.stack

CANARY_PORT = 19460  # away from test_canary's (19450) and a person's sandbox
TRAFFIC_S, RATE = 240.0, 3.0
EXPRESSIONS = [e for p in board_files() for e in dashboard_expressions(p)] + \
              [e for p in rule_files() for e in rule_expressions(p)]


def _ensure_speculative_decoding(stack) -> None:
    if (stack.prom.value('count(vllm:cache_config_info{num_speculative_tokens!="0"} == 1)') or 0) >= 2:
        return
    deploy_changes(stack.cfg, stack.refresh(), [f"speculative_model={target_path()}", "num_speculative_tokens=2"],
                   None, 240)


def _kill_a_replica(stack) -> int:
    ctl = ServeControl(stack.state.dashboard_url, token_file=stack.state.ray_token_file)
    try:
        victim = running_replicas(ctl.application(stack.state.app_name), "LLMServer")[0]
        os.kill(victim["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 45
        while True:  # Serve notices (health checks every 2 s) and starts a replacement
            replicas = running_replicas(ctl.application(stack.state.app_name), "LLMServer")
            if len(replicas) == 2 and victim["pid"] not in {r["pid"] for r in replicas}:
                return victim["pid"]
            assert time.monotonic() < deadline, "the killed replica was not replaced within 45 s"
            time.sleep(0.5)
    finally:
        ctl.close()


def _query_all(stack) -> dict[str, list]:
    return {e.promql: stack.prom.query(e.promql) for e in EXPRESSIONS}


@pytest.fixture(scope="module")
def answers(stack, tmp_path_factory):
    """{promql: rows} for every expression, queried while traffic and the canary still run."""
    stack.refresh()
    _ensure_speculative_decoding(stack)
    state = stack.refresh()
    exporter = TrafficExporter("default", stack.cfg.host, stack.cfg.traffic_port, state.targets_dir,
                               linger_s=2 * stack.cfg.scrape_interval_s + 0.5)
    box, stop = {}, threading.Event()

    def traffic():  # until every expression is queried (TRAFFIC_S at most)
        box["stats"] = asyncio.run(run_traffic(state.api_url, state.model_name, PROFILES["default"], RATE, TRAFFIC_S,
                                               seed=21, exporter=exporter, stop=stop))

    thread = threading.Thread(target=traffic, daemon=True)
    # Without the warm-up (the references asked one at a time, 10-15 s here): what is judged is that every
    # expression has data, and test_canary judges the canary's answers.
    canary = process.spawn(state.api_url, state.model_name, state.targets_dir,
                           tmp_path_factory.mktemp("canary") / "canary.log", first_port=CANARY_PORT, warm_up=False)
    started = time.monotonic()
    thread.start()
    try:
        stack.wait_for('count(up{job=~"traffic|canary"} == 1)', lambda v: v == 2, timeout_s=20)
        stack.wait_for('sum(sandbox_traffic_requests_total{status="200"})', lambda v: v >= 15, timeout_s=40)
        # A deadline, not a verdict: the canary learns each task's reference answer before it checks one
        # and bursts come in their turn, as fast as this machine answers beside the traffic (60 s was
        # not enough in one of four full runs here). What is judged is that every expression has data.
        stack.wait_for('min(sum by (task) (sandbox_canary_checks_total)) >= 2 and on() '
                       'sum(sandbox_canary_consistency_checks_total{load="burst"}) >= 4', lambda v: v >= 2,
                       timeout_s=180)
        # The kill comes last: the restart rules look back one minute from its replacement's start.
        _kill_a_replica(stack)
        stack.wait_for("count(ray_serve_health_check_failures_total)", lambda v: v >= 1, timeout_s=30)
        stack.wait_for("count(vllm:cache_config_info == 1)", lambda v: v >= 2, timeout_s=30)
        # A rate needs two samples of the new replica's series; a scrape after everything above settles it.
        stack.scraped_after(lag_s=2.0)
        rows = _query_all(stack)
        deadline = time.monotonic() + 15
        while [e for e in EXPRESSIONS if not returns_data(rows[e.promql])] and time.monotonic() < deadline:
            time.sleep(1.0)  # a series that appears at the next scrape or rule evaluation
            rows = _query_all(stack)
        rows["__seconds__"] = time.monotonic() - started
    finally:
        stop.set()
        thread.join(TRAFFIC_S + 60)
        exporter.close()
        process.stop(canary)
    return rows


def _report(answers, kind: str) -> tuple[list, list]:
    mine = [e for e in EXPRESSIONS if e.kind == kind]
    empty = [f"{e.source}: {e.promql}" for e in mine if not returns_data(answers[e.promql])]
    print(f"\n{kind}: {len(mine) - len(empty)} of {len(mine)} expressions returned data "
          f"(fixture {answers['__seconds__']:.0f} s)")
    return mine, empty


def test_every_panel_expression_returns_data(answers):
    mine, empty = _report(answers, "panel")
    assert len(mine) >= 50 and not empty, "\n".join(empty)


def test_every_template_variable_lists_values(answers):
    mine, empty = _report(answers, "variable")
    assert len(mine) == 3 * len(board_files()) and not empty, "\n".join(empty)


def test_every_rule_expression_returns_data(answers):
    mine, empty = _report(answers, "rule")
    assert len(mine) >= 20 and not empty, "\n".join(empty)
