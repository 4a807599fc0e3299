"""One serving stack (Ray + Serve app + Prometheus) per test session, on ports of its own.

Tests that need it take the `stack` fixture; the rest of tests/serving runs
without Ray. The stack runs in a temporary SANDBOX_HOME, so a sandbox a
person left running is never touched (`up` refuses to start next to a foreign
local Ray cluster instead). Teardown runs `down` even when tests fail; the
test marked `teardown` runs last and checks that nothing is left behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from services.stack.prometheus import PrometheusClient
from services.stack.settings import SandboxConfig
from services.stack.stack import Stack
from services.stack.state import StackState

TEST_PORTS = {"ray_port": 6389, "dashboard_port": 8275, "metrics_export_port": 8089, "api_port": 8009,
              "prometheus_port": 9099, "traffic_port": 9409}


def pytest_configure(config):
    config.addinivalue_line("markers", "teardown: runs after every other test of the session (it stops the stack)")


# Stack tests run in this order: the API first, state-changing checks (a replica
# killed, a new version rolled out) late, and the teardown check last.
STACK_ORDER = ("test_openai_api", "test_api_errors", "test_drill_hangup", "test_metrics", "test_cli", "test_reconfigure",
               "test_recovery", "test_deploy", "test_dashboard_queries", "test_calibrate", "test_teardown",
               "test_drill_interrupt",
               "test_interview", "test_verify_subset")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        order = STACK_ORDER.index(module) if module in STACK_ORDER else -1
        return (item.get_closest_marker("teardown") is not None, order)

    items.sort(key=rank)


@dataclass
class StackHandle:
    cfg: SandboxConfig
    state: StackState
    env: dict
    cold_start_s: float
    prom: PrometheusClient

    @property
    def api_url(self) -> str:
        return self.state.api_url

    @property
    def model(self) -> str:
        return self.state.model_name

    def refresh(self) -> StackState:
        self.state = StackState.load(self.cfg.state_file)
        return self.state

    def openai(self, **kwargs):
        import openai

        return openai.OpenAI(base_url=f"{self.api_url}/v1", api_key="unused", max_retries=0, **kwargs)

    def value(self, promql: str) -> float:
        return self.prom.value(promql) or 0.0

    def wait_for(self, promql: str, predicate, timeout_s: float = 15.0) -> tuple[float, float]:
        """Poll an instant query until predicate(value); returns (value, seconds waited)."""
        t0 = time.monotonic()
        while True:
            value = self.prom.value(promql)
            if value is not None and predicate(value):
                return value, time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"{promql!r} = {value} did not satisfy the condition within {timeout_s}s")
            time.sleep(0.2)

    def scraped_after(self, lag_s: float = 3.0, timeout_s: float = 30.0) -> None:
        """Wait for a successful scrape of every Ray node that began lag_s after now.

        A replica's counters reach Prometheus through its publish interval (0.5 s), Ray's
        metrics report (1 s) and a scrape; Ray's exporter can be slow enough for a scrape
        to time out, so "the value stopped changing" alone does not mean "up to date".
        """
        since = time.time() + lag_s
        t0 = time.monotonic()
        while True:
            fresh = self.prom.value('min(timestamp(up{job="ray"} == 1))')
            if fresh is not None and fresh >= since and len(self.prom.query('up{job="ray"} == 0')) == 0:
                return
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"no successful scrape of Ray's metrics within {timeout_s}s")
            time.sleep(0.25)

    def settled(self, promql: str, quiet_s: float = 3.0, timeout_s: float = 20.0) -> float:
        """The value once it has stopped changing for quiet_s (earlier requests fully counted)."""
        self.scraped_after()
        t0 = time.monotonic()
        last, since = self.value(promql), time.monotonic()
        while time.monotonic() - since < quiet_s:
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"{promql!r} still changing after {timeout_s}s")
            time.sleep(0.25)
            value = self.value(promql)
            if value != last:
                last, since = value, time.monotonic()
        return last

    @staticmethod
    def cli_argv() -> list[str]:
        return [sys.executable, "-m", "sandbox.cli"]

    def cli(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*self.cli_argv(), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("sandbox-home")
    cfg = SandboxConfig(home=home, **TEST_PORTS)
    env = dict(os.environ, SANDBOX_HOME=str(home),
               **{f"SANDBOX_{k.upper()}": str(v) for k, v in TEST_PORTS.items()})
    stack = Stack(cfg)
    t0 = time.perf_counter()
    state = stack.up(replicas=2)
    handle = StackHandle(cfg, state, env, time.perf_counter() - t0, PrometheusClient(state.prometheus_url))
    try:
        yield handle
    finally:
        handle.prom.close()
        stack.down()
