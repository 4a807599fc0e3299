"""A rolling deploy to a new version under traffic: no failed request, and the version label moves."""
import asyncio
import threading
import time

import pytest

from incidents.profiles import PROFILES
from sandbox.traffic.generator import TrafficStats, run_traffic
from services.model.paths import target_path
from services.stack.deployer import deploy_changes

pytestmark = pytest.mark.stack


def test_a_rolling_deploy_changes_the_version_label_without_failed_requests(stack):
    old = stack.refresh().version
    stats, stop = TrafficStats(), threading.Event()
    # Speculative decoding with the target as its own draft: a real engine change, and the spec-decode
    # counter families appear once it is deployed.
    sets = [f"speculative_model={target_path()}", "num_speculative_tokens=2"]

    def traffic():
        asyncio.run(run_traffic(stack.api_url, stack.model, PROFILES["short"], rate=2.0, duration_s=240.0,
                                seed=11, stats=stats, stop=stop))

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        report = deploy_changes(stack.cfg, stack.refresh(), sets, None, 240)
        # Traffic goes on until four more requests than had been sent by the rollout's end are answered (the
        # new version's), then stops: a fixed 60 s of it outlasted the rollout by about 35 s.
        after = stats.sent
        deadline = time.monotonic() + 60
        while len(stats.results) < after + 4 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    new = report["version"]
    assert report["rolling"] and new != old
    summary = stats.summary()
    assert summary["sent"] >= after + 4
    assert summary["statuses"] == {"200": summary["sent"]}, [r.error for r in stats.results if r.status != "200"]
    # Every replica now reports the new version; the old version's series have ended.
    stack.wait_for(f'count(vllm:num_requests_running{{version="{new}"}})', lambda v: v == 2)
    # Ray's metrics agent keeps exporting a stopped replica's gauges for about 20 s (test_faults_deploy)
    stack.wait_for(f'count(vllm:num_requests_running{{version!="{new}"}}) or vector(0)', lambda v: v == 0,
                   timeout_s=60)
    served_by = stack.prom.query("sum by (version) (increase(vllm:request_success_total[2m]))")
    assert {r["metric"]["version"] for r in served_by if float(r["value"][1]) > 0} == {old, new}
    stack.openai().completions.create(model=stack.model, prompt="copy: spec -> ", max_tokens=8, temperature=0)
    stack.wait_for("sum(vllm:spec_decode_num_accepted_tokens_total)", lambda v: v > 0)
