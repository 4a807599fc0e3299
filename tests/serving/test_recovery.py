"""A replica killed with SIGKILL is restarted by Serve, and requests succeed again within 30 s."""
import os
import signal
import time

import pytest

from services.stack.serve_control import ServeControl, running_replicas

pytestmark = pytest.mark.stack


def test_a_killed_replica_is_replaced_and_traffic_recovers_within_30s(stack):
    ctl = ServeControl(stack.state.dashboard_url, token_file=stack.state.ray_token_file)
    client = stack.openai(timeout=15)
    try:
        victim = running_replicas(ctl.application(stack.state.app_name), "LLMServer")[0]
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        recovered_at, failures = None, 0
        while time.monotonic() - killed_at < 45:
            try:
                client.completions.create(model=stack.model, prompt="copy: xyz -> ", max_tokens=3, temperature=0)
            except Exception:  # noqa: BLE001 - counting failures until recovery
                failures += 1
                recovered_at = None
            else:
                replicas = running_replicas(ctl.application(stack.state.app_name), "LLMServer")
                pids = {r["pid"] for r in replicas}
                if len(replicas) == 2 and victim["pid"] not in pids:
                    recovered_at = recovered_at or time.monotonic()
                    break
            time.sleep(0.5)
        assert recovered_at is not None, f"not recovered after 45s ({failures} failed requests)"
        assert recovered_at - killed_at <= 30
        for _ in range(4):  # and it stays recovered
            client.completions.create(model=stack.model, prompt="sort: zyx -> ", max_tokens=3, temperature=0)
    finally:
        ctl.close()
    # The new replica exports metrics under a new replica label.
    stack.wait_for("count(vllm:cache_config_info == 1)", lambda v: v >= 2, timeout_s=20)
