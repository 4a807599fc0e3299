"""A run keeps its Prometheus data with the admin API off: a live copy of the TSDB opens as after a crash.

A real Prometheus scrapes itself every 0.5 s; its data directory is copied while it writes (blocks, head
chunks, then the WAL), and a second Prometheus on the copy (the replay's RecordedPrometheus) answers queries
over what the first had scraped. The admin endpoints of the first say they are off.
"""
import shutil
import time

import httpx
import pytest

from sandbox.grading.recorded import RecordedPrometheus, free_port
from services.stack.prometheus import PrometheusClient, copy_tsdb, find_binary, start_server

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus")


@pytest.fixture
def live(tmp_path):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global: {{scrape_interval: 500ms}}\nscrape_configs:\n"
                      f"  - {{job_name: self, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}\n")
    proc = start_server(find_binary("prometheus"), config, tmp_path / "data", f"127.0.0.1:{port}",
                        tmp_path / "prometheus.log")
    client = PrometheusClient(f"http://127.0.0.1:{port}")
    try:
        client.wait_ready(30)
        yield client, tmp_path / "data"
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def test_a_live_copy_of_the_tsdb_answers_what_the_live_server_had_scraped(live, tmp_path):
    client, data = live
    deadline = time.monotonic() + 30
    while (client.value("count_over_time(up[1m])") or 0) < 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    scraped = client.value("count_over_time(up[1m])")
    assert scraped >= 10
    kept = copy_tsdb(data, tmp_path / "kept")  # while the live server goes on writing
    assert (kept / "wal").is_dir() and not (kept / "lock").exists()
    with RecordedPrometheus(kept) as replay:
        end = time.time()
        rows = replay.query("count_over_time(up[5m])", at=end)
        assert rows and float(rows[0]["value"][1]) >= scraped  # nothing of what was scraped before the copy is lost


ADMIN_OFF = (500, "admin APIs disabled")  # Prometheus 2.x's answer: errorType "unavailable"
LIFECYCLE_OFF = (403, "Lifecycle API is not enabled.")


@pytest.mark.parametrize("path, refusal", [("/api/v1/admin/tsdb/snapshot", ADMIN_OFF),
                                           ("/api/v1/admin/tsdb/delete_series?match[]=up", ADMIN_OFF),
                                           ("/api/v1/admin/tsdb/clean_tombstones", ADMIN_OFF),
                                           ("/-/quit", LIFECYCLE_OFF), ("/-/reload", LIFECYCLE_OFF)])
def test_the_admin_and_lifecycle_endpoints_are_off(live, path, refusal):
    client, _ = live
    resp = httpx.post(f"{client.url}{path}", timeout=10)
    assert (resp.status_code, refusal[1] in resp.text) == (refusal[0], True), (resp.status_code, resp.text[:200])
    assert client.ready() and client.value("vector(1)") == 1  # and it still answers queries
